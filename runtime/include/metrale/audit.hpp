// SPDX-License-Identifier: MIT OR Apache-2.0
// The boot audit: one row per kernel lookup — who asked, for what, what came back and why.
// Thread-safe: rows may be appended from several threads; snapshot() copies under the lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <vector>

namespace metrale {

enum class LookupKind { try_lookup, require };
enum class LookupOutcome { resolved, null_handle, refused, error };

const char* lookup_kind_name(LookupKind kind) noexcept;        // "try" / "require"
const char* lookup_outcome_name(LookupOutcome outcome) noexcept;  // "resolved" / "null" / ...

// Where a lookup was asked for: file:line:function of the caller.
struct Site {
  std::string file;
  uint32_t line = 0;
  std::string function;
  static Site from(const std::source_location& location);
  std::string to_string() const;  // "layers/selectors.cpp:42 tgemm_kernel"
};

struct AuditRow {
  uint64_t sequence = 0;
  Site site;
  std::string backend;
  std::string target;
  std::string module;
  std::string kernel;
  std::string substitute;   // "module/name" looked up instead (METRALE_KERNEL_SUBST), else ""
  LookupKind kind = LookupKind::try_lookup;
  LookupOutcome outcome = LookupOutcome::null_handle;
  std::string reason;       // why this outcome: "provided", "not in manifest", ...
  std::string lever;        // "METRALE_NO_TGEMM_PIPELINE3=0" when a lever steered it, else ""
  std::string tier;         // the quantization tier the asking site runs under ("w4a8: int8 activations
                            // (the checkpoint's)"), set by layer code after it resolved; else ""
  uint64_t handle = 0;
};

class AuditLog {
 public:
  // Appends a row, assigning its sequence number; returns that number.
  uint64_t append(AuditRow row);
  // The lookup hot path: `resolved` holds everything but the site, kind, outcome and lever, and
  // is shared by every row of the same resolution, so a warm lookup allocates nothing here.
  // The site is formatted when rows are read, not when they are written.
  uint64_t append(const std::source_location& site, std::shared_ptr<const AuditRow> resolved, LookupKind kind,
                  LookupOutcome outcome, std::string lever);
  // Attaches a lever note to an existing row (a site learns which lever steered it after lookup).
  void note_lever(uint64_t sequence, const std::string& lever);
  // Records the tier of every row after `after` (the rows a site's resolution appended).
  void note_tier(uint64_t after, const std::string& tier);
  // The sequence number of the last row appended (0 when none).
  uint64_t last_sequence() const;
  std::vector<AuditRow> snapshot() const;
  size_t size() const;
  void clear();

 private:
  struct Stored {
    uint64_t sequence;
    std::source_location site;     // used when has_site
    bool has_site;                 // false: the prototype carries its own Site
    std::shared_ptr<const AuditRow> prototype;
    LookupKind kind;
    LookupOutcome outcome;
    std::string lever;
    std::string tier;
  };
  mutable std::mutex mutex_;
  std::vector<Stored> rows_;
  uint64_t next_sequence_ = 1;
};

// Human table and JSON (an array of objects with the AuditRow field names).
std::string render_audit_table(const std::vector<AuditRow>& rows);
std::string render_audit_json(const std::vector<AuditRow>& rows);

}  // namespace metrale
