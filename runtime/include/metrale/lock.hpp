// SPDX-License-Identifier: MIT OR Apache-2.0
// Locks and diffs of kernel resolutions. A lock records, per lookup (site + requested kernel),
// what it resolved to: backend, target, kernel (or null), plugin version and library checksum.
// With METRALE_LOCK=FILE the runtime refuses to start when any resolution differs from the lock.
#pragma once

#include <metrale/audit.hpp>
#include <metrale/backend.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace metrale {

inline constexpr int kLockFormatVersion = 1;

// The lock document for these rows, all taken on `backend`.
nlohmann::json make_lock(const Backend& backend, const std::vector<AuditRow>& rows);
// Writes make_lock() atomically (temp file + rename). Throws Error on I/O failure.
void write_lock(const std::filesystem::path& file, const Backend& backend, const std::vector<AuditRow>& rows);
// Each difference between a lock and the current resolutions, one line each ("" when equal).
std::vector<std::string> lock_differences(const nlohmann::json& lock, const nlohmann::json& current);
// When METRALE_LOCK is set: compares and throws Refusal listing every difference. A lock file
// that cannot be read or parsed is a Refusal too (the user asked for it).
void enforce_lock(const Backend& backend, const std::vector<AuditRow>& rows);
// Differences between two audits (the JSON of `metrale audit --json`, or two locks).
std::vector<std::string> diff_audits(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace metrale
