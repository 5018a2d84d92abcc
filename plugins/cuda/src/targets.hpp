// SPDX-License-Identifier: MIT OR Apache-2.0
// CUDA targets: "sm_80", "sm_90a" (arch-specific), "sm_100f" (family). Parsing, the device's
// own target from its compute capability, and the gating rule for a kernel's min_target.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace metrale::cuda {

struct Target {
  int number = 0;       // 10 * major + minor: sm_90 -> 90, sm_120 -> 120
  char suffix = '\0';   // '\0', 'a' (arch-specific) or 'f' (family)
  int major() const { return number / 10; }
  friend bool operator==(const Target&, const Target&) = default;
};

std::optional<Target> parse_target(std::string_view text);
std::string target_name(const Target& target);

// What a device of this compute capability is called: the arch-specific variant ("sm_90a")
// where the architecture has one, so Hopper-only instructions are usable on that device.
Target target_for_compute_capability(int major, int minor);

// Whether code requiring `required` may run on `device`:
//   sm_XY  — any device of number >= XY;
//   sm_XYa — exactly that architecture, and the device must be addressed as arch-specific;
//   sm_XYf — the same major, minor >= Y.
bool target_satisfies(const Target& device, const Target& required);

}  // namespace metrale::cuda
