// SPDX-License-Identifier: MIT OR Apache-2.0
// Targets: what a backend instance runs on (the string its plugin reports), and whether it meets a
// manifest kernel's requirement (min_target, cpu_features). The runtime knows no backend's targets:
// it reads tier ladders from the manifest (target_tiers) and compares versioned target names by
// their generic syntax. Pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale {

// One rung of a backend's target ladder (manifest "target_tiers", lowest first): a device of this
// target meets any min_target at or below it and offers its features and those of every rung below.
struct TargetTier {
  std::string target;
  std::vector<std::string> features;
};

// Does a device of target `device` satisfy a kernel's `min_target`?
// - Both among `tiers`: the device's rung is at or above the requirement's.
// - Versioned targets "<letters>_<number>" with the same letters compare by number. A requirement
//   suffixed "a" (arch-specific) is met only by that exact number; one suffixed "f" (family) by the
//   same number / 10 at that number or above.
// - Otherwise the two must be equal.
bool target_satisfies(std::string_view device, std::string_view min_target, std::span<const TargetTier> tiers = {});

// The features a device of `target` offers by `tiers`: those of its rung and every rung below;
// empty when the target is not among them.
std::vector<std::string> target_features(std::string_view target, std::span<const TargetTier> tiers);

}  // namespace metrale
