// SPDX-License-Identifier: MIT OR Apache-2.0
// Locks and diffs of kernel resolutions. A lock records, per lookup (site + requested kernel),
// what it resolved to: backend, target, kernel (or null), plugin version, library checksum, and
// the row's pinned annotations (audit.hpp; a layer's quantization tier, say), which are compared
// as opaque key/value pairs. With METRALE_LOCK=FILE the runtime refuses to start when any
// resolution or pinned annotation differs.
// Reading a lock (lock_reader.cpp) needs no backend: documents are validated field by field
// before anything compares them, and every error names the source and the JSON pointer.
#pragma once

#include <metrale/audit.hpp>
#include <metrale/backend.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace metrale {

// lock_format is the major version: a reader refuses any other. lock_format_minor counts
// compatible additions; a lock without it is minor 0. What each minor says about annotations:
//   0: none; its rows' annotations are not compared.
//   1: a row's "tier" string is its one pinned annotation, `tier`. Every row of such a lock has
//      one, rows no site annotated included, so it is compared only where the other document's
//      location carries a `tier` too.
//   2: a row's "annotations" object holds its pinned annotations; all are compared.
// An audit document (not a lock) reads as the current minor (docs/quantization.md, "Audit and locks").
inline constexpr int kLockFormatVersion = 1;
inline constexpr int kLockFormatMinor = 2;
// A lock holds a few hundred rows; the cap keeps a wrong path from eating memory.
inline constexpr std::size_t kMaxLockBytes = std::size_t{16} << 20;

// Checks that a lock, an audit (`metrale audit --json`) or a bare array of audit rows holds what
// a comparison reads: rows with a site {file, line, function}, backend, target, module, kernel
// and outcome strings, substitute a string or null, annotations an object of strings, pinned
// an array of strings. Throws Error(invalid_argument) "<source>: <pointer>: expected ..., found ...".
void validate_resolutions(const nlohmann::json& document, std::string_view source);
// Parses a lock's text (bounded JSON, metrale/json_file.hpp), checks lock_format is exactly the
// integer kLockFormatVersion and validates the rows. Throws Error naming `source` and the field.
nlohmann::json parse_lock(std::string_view text, std::string_view source);

// The lock document for these rows, all taken on `backend`.
nlohmann::json make_lock(const Backend& backend, const std::vector<AuditRow>& rows);
// Writes make_lock() atomically (temp file + rename). Throws Error on I/O failure.
void write_lock(const std::filesystem::path& file, const Backend& backend, const std::vector<AuditRow>& rows);
// Each difference between a lock and the current resolutions, one line each (none when equal):
// per location (file:line function; its last row carrying a key stands), each pinned annotation
// that differs ("<location>: annotation tier int8/w4a8 in the lock, bf16/w4a16 in the current
// configuration"; "none" for a side without it), then per site and kernel each resolution fact.
// Both documents are validated first (Error naming the one that is malformed).
std::vector<std::string> lock_differences(const nlohmann::json& lock, const nlohmann::json& current);
// When METRALE_LOCK is set: compares and throws Refusal listing every difference. A lock file
// that cannot be read (not a regular file, over kMaxLockBytes) or parsed is a Refusal too (the
// user asked for it), naming the file and the field.
void enforce_lock(const Backend& backend, const std::vector<AuditRow>& rows);
// Differences between two audits (the JSON of `metrale audit --json`, or two locks).
std::vector<std::string> diff_audits(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace metrale
