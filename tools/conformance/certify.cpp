// SPDX-License-Identifier: MIT OR Apache-2.0
#include "conformance/certify.hpp"

#include <metrale/catalogue.hpp>

namespace metrale::conformance {

namespace {

CaseResult failure(std::string name, std::string detail, std::vector<std::string> kernels = {}) {
  CaseResult r;
  r.name = std::move(name);
  r.outcome = Outcome::failed;
  r.detail = std::move(detail);
  r.kernels = std::move(kernels);
  return r;
}

}  // namespace

std::vector<CaseResult> manifest_checks(Backend& backend) {
  std::vector<CaseResult> out;
  for (const auto& row : backend.kernel_availability()) {
    // A gated kernel is the manifest's own choice; any other note is a disagreement.
    if (row.gated || row.note.empty()) continue;
    const std::string kernel = row.module + "/" + row.name;
    out.push_back(failure("manifest/agreement/" + kernel, "manifest and plugin disagree on " + kernel + ": " + row.note,
                          {kernel}));
  }
  for (const auto& finding : KernelCatalogue::documented().check(backend.manifest())) {
    const std::string kernel = finding.module + "/" + finding.kernel;
    out.push_back(failure("manifest/catalogue/" + kernel,
                          backend.manifest().path.string() + ": " + finding.pointer + ": " + finding.message, {kernel}));
  }
  return out;
}

std::vector<CaseResult> path_failures(const std::vector<CoverageRow>& coverage) {
  std::vector<CaseResult> out;
  for (const auto& row : coverage) {
    if (row.status == PathStatus::fails) out.push_back(failure("path/" + row.path, row.what + ": " + row.detail, row.kernels));
  }
  return out;
}

size_t documented_kernels_listed(const Backend& backend) {
  size_t count = 0;
  for (const auto& module : backend.manifest().modules)
    for (const auto& kernel : module.kernels)
      count += KernelCatalogue::documented().find(module.name, kernel.name) != nullptr;
  return count;
}

Verdict verdict(const Backend& backend, const std::vector<CaseResult>& results) {
  const SuiteSummary s = summarize(results);
  const std::string who = "backend '" + backend.name() + "'";
  if (s.failed) return {false, who + " FAILED " + std::to_string(s.failed) + " conformance case(s)"};
  if (s.passed > 0) return {true, who + " passed every case it ran"};
  if (documented_kernels_listed(backend) == 0) {
    return {true, who + " lists no kernel of docs/kernels.md: manifest and plugin agree, and no case applies "
                        "(certified for consistency only)"};
  }
  return {false, who + " ran no conformance case (all " + std::to_string(s.skipped) + " skipped): nothing is certified"};
}

}  // namespace metrale::conformance
