// SPDX-License-Identifier: MIT OR Apache-2.0
// The audit log's bound: repeated lookups of one site do not grow it, the rows it keeps still
// tell the first lookups and the last one, and what it dropped is counted.
#include <doctest/doctest.h>

#include <metrale/audit.hpp>

#include <memory>
#include <source_location>

using namespace metrale;

namespace {

std::shared_ptr<const AuditRow> resolution(const std::string& kernel) {
  auto row = std::make_shared<AuditRow>();
  row->backend = "cpu";
  row->target = "avx2";
  row->module = "w4a16";
  row->kernel = kernel;
  row->reason = "provided";
  row->handle = 7;
  return row;
}

}  // namespace

TEST_CASE("a warm lookup site repeated many times keeps a bounded number of rows") {
  AuditLog log;
  const auto site = std::source_location::current();
  const auto gemv = resolution("w4a16_gemv");
  constexpr uint64_t kLookups = 200000;
  for (uint64_t i = 0; i < kLookups; ++i) {
    // A fresh but equal resolution each time (as substitutions make them) must not count as new.
    log.append(site, i % 2 ? gemv : resolution("w4a16_gemv"), LookupKind::try_lookup, LookupOutcome::resolved, "");
  }
  CHECK(log.size() == AuditLog::kRowsPerKey + 1);
  CHECK(log.dropped() == kLookups - log.size());
  const auto rows = log.snapshot();
  REQUIRE(rows.size() == log.size());
  CHECK(rows.front().sequence == 1);
  CHECK(rows[AuditLog::kRowsPerKey - 1].sequence == AuditLog::kRowsPerKey);
  CHECK(rows.back().sequence == kLookups);  // the most recent lookup is always kept
  CHECK(rows.back().kernel == "w4a16_gemv");
}

TEST_CASE("bounded rows keep the last outcome of a site last, for locks") {
  AuditLog log;
  const auto site = std::source_location::current();
  const auto gemv = resolution("w4a16_gemv");
  for (int i = 0; i < 100; ++i) log.append(site, gemv, LookupKind::try_lookup, LookupOutcome::resolved, "");
  for (int i = 0; i < 100; ++i) log.append(site, gemv, LookupKind::try_lookup, LookupOutcome::null_handle, "");
  log.append(site, gemv, LookupKind::try_lookup, LookupOutcome::resolved, "");
  const auto rows = log.snapshot();
  CHECK(rows.size() == 2 * (AuditLog::kRowsPerKey + 1));
  CHECK(rows.back().sequence == 201);
  CHECK(rows.back().outcome == LookupOutcome::resolved);
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].sequence < rows[i].sequence);
  // The newest row, replacing the most-recent slot, keeps its own lever and annotations.
  const std::vector<AuditAnnotation> tier{{"tier", "int8/w4a8", true}};
  CHECK(log.append(site, gemv, LookupKind::try_lookup, LookupOutcome::resolved, "METRALE_X=1", tier) == 202);
  CHECK(log.snapshot().back().lever == "METRALE_X=1");
  CHECK(log.snapshot().back().annotations == tier);
  CHECK(log.snapshot()[rows.size() - 2].annotations.empty());
  log.clear();
  CHECK(log.size() == 0);
  CHECK(log.dropped() == 0);
}

TEST_CASE("distinct sites and kernels each keep their own rows") {
  AuditLog log;
  const auto a = std::source_location::current();
  const auto b = std::source_location::current();
  for (int i = 0; i < 3; ++i) {
    log.append(a, resolution("w4a16_gemv"), LookupKind::try_lookup, LookupOutcome::resolved, "");
    log.append(b, resolution("w4a16_gemv"), LookupKind::try_lookup, LookupOutcome::resolved, "");
    log.append(a, resolution("w4a16_gemv_b8"), LookupKind::require, LookupOutcome::resolved, "");
  }
  CHECK(log.size() == 9);
  CHECK(log.dropped() == 0);
}
