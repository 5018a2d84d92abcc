// SPDX-License-Identifier: MIT OR Apache-2.0
// What a layer site knows when it looks kernels up, carried into every lookup it makes so that
// each audit row is complete when written (the audit rows are never edited afterwards): the lever
// that steered the site and its annotations (the quantization tier it runs under, docs/quantization.md).
// Plain values: copy freely, no thread concerns.
#pragma once

#include <metrale/backend.hpp>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

struct LookupNotes {
  std::string lever;                         // "NAME=value" that steered the site, else ""
  std::vector<AuditAnnotation> annotations;  // stored on each row as given
};

// A lookup request of `kind` for `expected` carrying `notes`; `own_lever` (what steered this one
// lookup, else "") comes before the site's lever on the row.
inline Backend::LookupRequest noted_request(const LookupNotes& notes, LookupKind kind,
                                            std::span<const metrale_param_type> expected,
                                            std::string_view own_lever = {}) {
  std::string lever(own_lever);
  if (!notes.lever.empty()) lever += (lever.empty() ? "" : ", ") + notes.lever;
  return Backend::LookupRequest{.kind = kind, .expected = expected, .lever = std::move(lever), .refuse_because = {},
                                .annotations = notes.annotations};
}

// A lookup request of `kind` for `expected` that no lever steered and nothing annotates.
inline Backend::LookupRequest plain_request(LookupKind kind, std::span<const metrale_param_type> expected) {
  return noted_request(LookupNotes{}, kind, expected);
}

}  // namespace metrale::layers
