// SPDX-License-Identifier: MIT OR Apache-2.0
#include "targets.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace metrale::cuda {

std::optional<Target> parse_target(std::string_view text) {
  if (!text.starts_with("sm_")) return std::nullopt;
  text.remove_prefix(3);
  Target target;
  if (!text.empty() && (text.back() == 'a' || text.back() == 'f')) {
    target.suffix = text.back();
    text.remove_suffix(1);
  }
  if (text.size() < 2 || text.size() > 3) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), target.number);
  if (ec != std::errc{} || end != text.data() + text.size() || target.number < 10) return std::nullopt;
  return target;
}

std::string target_name(const Target& target) {
  std::string name = "sm_" + std::to_string(target.number);
  if (target.suffix != '\0') name += target.suffix;
  return name;
}

Target target_for_compute_capability(int major, int minor) {
  // Architectures with arch-specific ("a") feature sets as of CUDA 13.
  static constexpr std::array<int, 6> kArchSpecific{90, 100, 103, 110, 120, 121};
  Target target{major * 10 + minor, '\0'};
  if (std::find(kArchSpecific.begin(), kArchSpecific.end(), target.number) != kArchSpecific.end()) {
    target.suffix = 'a';
  }
  return target;
}

bool target_satisfies(const Target& device, const Target& required) {
  switch (required.suffix) {
    case 'a':
      return device.number == required.number && device.suffix == 'a';
    case 'f':
      return device.major() == required.major() && device.number >= required.number;
    default:
      return device.number >= required.number;
  }
}

}  // namespace metrale::cuda
