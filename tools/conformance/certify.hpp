// SPDX-License-Identifier: MIT OR Apache-2.0
// Certification of one backend, as `metrale conformance` runs it: before any case, the backend
// must be consistent, and each inconsistency is a failure with a case name of its own:
//   manifest/agreement/<module>/<kernel>  the manifest and the plugin disagree: listed but not
//                                         provided, provided but not listed, parameter lists differ
//   manifest/catalogue/<module>/<kernel>  the manifest departs from docs/kernels.md (the kernel
//                                         catalogue: module, kernel name, parameter names and types)
//   path/<path>                           a layer path it claims cannot be built (coverage.hpp)
// then the cases of conformance.hpp (only what the manifest does not list is skipped), then the
// coverage table. A backend is certified when nothing failed and some case ran; one whose
// manifest lists no documented kernel has nothing for the cases to check and is certified on its
// consistency alone (a copy of plugins/skeleton, say).
#pragma once

#include "conformance/conformance.hpp"
#include "conformance/coverage.hpp"

#include <metrale/backend.hpp>

#include <string>
#include <vector>

namespace metrale::conformance {

// One failed result per disagreement between manifest and plugin, and per departure from the
// kernel catalogue; empty for a consistent backend.
std::vector<CaseResult> manifest_checks(Backend& backend);

// One failed result "path/<path>" per FAILS row.
std::vector<CaseResult> path_failures(const std::vector<CoverageRow>& coverage);

// How many kernels of the catalogue the backend's manifest lists.
size_t documented_kernels_listed(const Backend& backend);

struct Verdict {
  bool certified = false;
  std::string text;  // "backend 'cpu' passed every case it ran", ...
};

// The verdict on every result (checks, path failures and cases) of `backend`.
Verdict verdict(const Backend& backend, const std::vector<CaseResult>& results);

}  // namespace metrale::conformance
