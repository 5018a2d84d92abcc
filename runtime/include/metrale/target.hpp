// SPDX-License-Identifier: MIT OR Apache-2.0
// Targets: what a backend instance runs on ("sm_90", "sm_90a", "cpu-x86_64-avx2"), and whether
// it meets a manifest entry's requirement (min_target, cpu_features).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metrale {

// Does a device of `device` target satisfy a kernel's `min_target`?
// CUDA: sm_XY compares numerically; an "a" (arch-specific) requirement such as sm_90a is met only
// by exactly that architecture; an "f" (family) requirement such as sm_100f by the same major
// version at that minor or later (sm_103 meets it, sm_120 does not). CPU: tiers order baseline < avx2 < avx512 < avx512bf16.
// Targets of different families, or unknown spellings, must be equal.
bool target_satisfies(std::string_view device, std::string_view min_target);

// The CPU features a CPU target tier guarantees ("avx2", "fma", "f16c", "avx512f", ...);
// empty for non-CPU targets.
std::vector<std::string> target_cpu_features(std::string_view target);

}  // namespace metrale
