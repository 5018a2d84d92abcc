// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/names.hpp>

#include <fnmatch.h>

#include <algorithm>
#include <vector>

namespace metrale {

bool glob_match(std::string_view pattern, std::string_view text) {
  return fnmatch(std::string(pattern).c_str(), std::string(text).c_str(), 0) == 0;
}

bool glob_match_any(std::span<const std::string> patterns, std::string_view text) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return glob_match(p, text); });
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> nearest_name(std::string_view name, std::span<const std::string_view> candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (std::string_view c : candidates) {
    const std::size_t d = edit_distance(name, c);
    if (!best || d < best_distance) {
      best = std::string(c);
      best_distance = d;
    }
  }
  return best;
}

std::optional<std::string> likely_typo_of(std::string_view name, std::span<const std::string_view> candidates) {
  auto best = nearest_name(name, candidates);
  if (!best || edit_distance(name, *best) > std::max<std::size_t>(2, best->size() / 3)) return std::nullopt;
  return best;
}

}  // namespace metrale
