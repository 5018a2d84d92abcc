// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/target.hpp>

#include <algorithm>
#include <array>
#include <charconv>

namespace metrale {

namespace {

struct SmTarget {
  int number = 0;
  bool arch_specific = false;  // the "a" suffix: exactly this architecture
  bool family = false;         // the "f" suffix: this major version, this minor or later
};

std::optional<SmTarget> parse_sm(std::string_view text) {
  if (!text.starts_with("sm_")) return std::nullopt;
  text.remove_prefix(3);
  SmTarget target;
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

constexpr std::string_view kCpuPrefix = "cpu-x86_64-";
constexpr std::array<std::string_view, 4> kCpuTiers{"baseline", "avx2", "avx512", "avx512bf16"};

std::optional<size_t> cpu_tier(std::string_view text) {
  if (!text.starts_with(kCpuPrefix)) return std::nullopt;
  text.remove_prefix(kCpuPrefix.size());
  auto it = std::find(kCpuTiers.begin(), kCpuTiers.end(), text);
  if (it == kCpuTiers.end()) return std::nullopt;
  return static_cast<size_t>(it - kCpuTiers.begin());
}

}  // namespace

bool target_satisfies(std::string_view device, std::string_view min_target) {
  auto have = parse_sm(device);
  auto need = parse_sm(min_target);
  if (have && need) {
    if (need->arch_specific) return have->arch_specific && have->number == need->number;
    if (need->family) return have->number / 10 == need->number / 10 && have->number >= need->number;
    return have->number >= need->number;
  }
  auto have_tier = cpu_tier(device);
  auto need_tier = cpu_tier(min_target);
  if (have_tier && need_tier) return *have_tier >= *need_tier;
  return device == min_target;
}

std::vector<std::string> target_cpu_features(std::string_view target) {
  auto tier = cpu_tier(target);
  if (!tier) return {};
  std::vector<std::string> features{"sse2"};
  if (*tier >= 1) features.insert(features.end(), {"avx", "avx2", "fma", "f16c"});
  if (*tier >= 2) features.insert(features.end(), {"avx512f", "avx512bw", "avx512vl"});
  if (*tier >= 3) features.insert(features.end(), {"avx512bf16"});
  return features;
}

}  // namespace metrale
