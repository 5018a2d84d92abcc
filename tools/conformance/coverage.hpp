// SPDX-License-Identifier: MIT OR Apache-2.0
// Which layer paths a backend serves: dense decode / batched / prefill, MoE with grouped experts
// and per expert, routing on the device, each activation, and each quantized family. A path is
// probed by resolving its kernels as the layers do (no memory, no launches) and is:
//   serves      the path runs on the kernels made for it;
//   falls back  it runs on others, because the manifest does not list (or the device's target
//               gates) a kernel it would use; the row names what it runs on and what is missing;
//   cannot run  a kernel it cannot do without is not listed (or gated);
//   FAILS       the manifest lists (ungated) every kernel the path needs, but it cannot be built,
//               or the layers fell back anyway: the backend claims what it does not deliver.
// Each FAILS row is a conformance failure named "path/<path>".
#pragma once

#include <metrale/backend.hpp>

#include <string>
#include <vector>

namespace metrale::conformance {

enum class PathStatus { serves, falls_back, cannot_run, fails };
const char* path_status_name(PathStatus status) noexcept;  // "serves", "falls back", "cannot run", "FAILS"

struct CoverageRow {
  std::string path;                  // "dense/decode"
  std::string what;                  // "dense FFN, 1 row (W4A16)"
  PathStatus status = PathStatus::cannot_run;
  std::vector<std::string> kernels;  // "module/name" the path runs on (serves, falls back)
  std::string detail;                // what is missing, or why it fails
};

// Every path, in a fixed order, probed on `backend`. Never throws for a backend's failure.
std::vector<CoverageRow> coverage(Backend& backend);

// The table `metrale conformance` prints: one line per path.
std::string render_coverage(const std::vector<CoverageRow>& rows);

}  // namespace metrale::conformance
