// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/target.hpp>

#include <algorithm>
#include <charconv>
#include <optional>

namespace metrale {

namespace {

struct VersionedTarget {
  std::string_view prefix;     // the letters before '_'
  int number = 0;
  bool arch_specific = false;  // the "a" suffix: exactly this number
  bool family = false;         // the "f" suffix: this number / 10, this number or later
};

std::optional<VersionedTarget> parse_versioned(std::string_view text) {
  const size_t underscore = text.find('_');
  if (underscore == 0 || underscore == std::string_view::npos) return std::nullopt;
  VersionedTarget target;
  target.prefix = text.substr(0, underscore);
  if (!std::all_of(target.prefix.begin(), target.prefix.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
    return std::nullopt;
  text.remove_prefix(underscore + 1);
  if (text.ends_with('a')) {
    target.arch_specific = true;
    text.remove_suffix(1);
  } else if (text.ends_with('f')) {
    target.family = true;
    text.remove_suffix(1);
  }
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), target.number);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return target;
}

std::optional<size_t> rung(std::string_view target, std::span<const TargetTier> tiers) {
  for (size_t i = 0; i < tiers.size(); ++i)
    if (tiers[i].target == target) return i;
  return std::nullopt;
}

}  // namespace

bool target_satisfies(std::string_view device, std::string_view min_target, std::span<const TargetTier> tiers) {
  auto have_rung = rung(device, tiers);
  auto need_rung = rung(min_target, tiers);
  if (have_rung && need_rung) return *have_rung >= *need_rung;
  auto have = parse_versioned(device);
  auto need = parse_versioned(min_target);
  if (have && need && have->prefix == need->prefix) {
    if (need->arch_specific) return have->arch_specific && have->number == need->number;
    if (need->family) return have->number / 10 == need->number / 10 && have->number >= need->number;
    return have->number >= need->number;
  }
  return device == min_target;
}

std::vector<std::string> target_features(std::string_view target, std::span<const TargetTier> tiers) {
  auto top = rung(target, tiers);
  if (!top) return {};
  std::vector<std::string> features;
  for (size_t i = 0; i <= *top; ++i) features.insert(features.end(), tiers[i].features.begin(), tiers[i].features.end());
  return features;
}

}  // namespace metrale
