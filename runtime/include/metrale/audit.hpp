// SPDX-License-Identifier: MIT OR Apache-2.0
// The boot audit: one row per kernel lookup — who asked, for what, what came back and why.
// Rows are written once, when the lookup is made, and never edited: what the asking site knows
// (the lever that steered it, its annotations) comes in with the lookup.
// Thread-safe: rows may be appended from several threads; snapshot() copies under the lock.
// Bounded: a lookup repeated from one site (a warm path asking again and again) keeps its first
// kRowsPerKey rows plus its most recent one; the rest are only counted (docs/architecture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <string_view>
#include <unordered_map>
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
  std::string to_string() const;  // "layers/linear/selectors.cpp:42 tgemm_kernel"
};

// What a site knows about its lookup beyond the kernel (a layer's quantization tier, where that
// tier came from), as the site spells it. The runtime stores, renders and compares annotations
// without interpreting them: a pinned one is written into locks and must match when a lock is
// enforced (metrale/lock.hpp); an unpinned one only explains the row.
struct AuditAnnotation {
  std::string key;
  std::string value;
  bool pinned = false;
  friend bool operator==(const AuditAnnotation&, const AuditAnnotation&) = default;
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
  std::vector<AuditAnnotation> annotations;  // the asking site's, in its order
  uint64_t handle = 0;

  // The value of annotation `key`, or nullptr when the row has none of that key.
  const std::string* annotation(std::string_view key) const noexcept;
};

class AuditLog {
 public:
  // Rows kept per distinct lookup — the same site, resolution (backend, target, module, kernel,
  // substitute), kind and outcome: the first kRowsPerKey, plus one slot that always holds the
  // most recent, so the last row of every site is its last lookup (locks compare those).
  static constexpr size_t kRowsPerKey = 8;
  // Rows kept in all; a new distinct lookup beyond them is only counted.
  static constexpr size_t kMaxRows = size_t{1} << 16;

  // Appends a row, assigning its sequence number; returns that number.
  uint64_t append(AuditRow row);
  // The lookup hot path: `resolved` holds everything but the site, kind, outcome, lever and
  // annotations, and is shared by every row of the same resolution, so a warm lookup without a
  // lever or annotations allocates nothing here. The site is formatted when rows are read.
  uint64_t append(const std::source_location& site, std::shared_ptr<const AuditRow> resolved, LookupKind kind,
                  LookupOutcome outcome, std::string lever, const std::vector<AuditAnnotation>& annotations = {});
  // The sequence number of the last row appended (0 when none).
  uint64_t last_sequence() const;
  // The rows kept, in sequence order.
  std::vector<AuditRow> snapshot() const;
  size_t size() const;
  // Lookups whose rows were not kept (see kRowsPerKey and kMaxRows).
  uint64_t dropped() const;
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
    std::vector<AuditAnnotation> annotations;
  };
  // A distinct lookup. The prototype is one kept in rows_ (alive until clear()); prototypes are
  // compared by content, since a substitution makes a new one per lookup.
  struct Key {
    const char* file;
    const char* function;
    uint32_t line;
    uint32_t column;
    const AuditRow* prototype;
    LookupKind kind;
    LookupOutcome outcome;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const noexcept;
  };
  struct KeyEqual {
    bool operator()(const Key& a, const Key& b) const noexcept;
  };
  struct Tally {
    uint64_t seen = 0;
    size_t latest = SIZE_MAX;  // index in rows_ of the most-recent slot, once it exists
  };
  uint64_t append_locked(Stored stored);

  mutable std::mutex mutex_;
  std::vector<Stored> rows_;  // not in sequence order: a most-recent slot is rewritten in place
  std::unordered_map<Key, Tally, KeyHash, KeyEqual> tallies_;
  uint64_t next_sequence_ = 1;
  uint64_t dropped_ = 0;
};

// Human table and JSON (an array of objects with the AuditRow field names). The table has an
// `annotations` column ("key=value; ...") when some row has annotations; in JSON a row's
// `annotations` is an object {key: value} and `pinned` lists the keys that are pinned.
std::string render_audit_table(const std::vector<AuditRow>& rows);
std::string render_audit_json(const std::vector<AuditRow>& rows);

}  // namespace metrale
