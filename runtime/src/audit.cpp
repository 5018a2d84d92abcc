// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/audit.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>

#include <sstream>
#include <string_view>

namespace metrale {

const char* lookup_kind_name(LookupKind kind) noexcept {
  return kind == LookupKind::require ? "require" : "try";
}

const char* lookup_outcome_name(LookupOutcome outcome) noexcept {
  switch (outcome) {
    case LookupOutcome::resolved: return "resolved";
    case LookupOutcome::null_handle: return "null";
    case LookupOutcome::refused: return "refused";
    case LookupOutcome::error: return "error";
  }
  return "error";
}

Site Site::from(const std::source_location& location) {
  // Paths relative to the source root read better and do not leak the build machine's layout:
  // Meson compiles with paths relative to the build dir ("../layers/x.cpp"), and the build maps
  // the source root away (-fmacro-prefix-map) where a path is absolute.
  std::string_view file = location.file_name();
  while (file.starts_with("../") || file.starts_with("./")) file.remove_prefix(file.find('/') + 1);
  // "metrale::KernelHandle metrale::layers::tgemm_kernel(Backend&, ...)" -> "layers::tgemm_kernel".
  std::string_view function = location.function_name();
  if (auto paren = function.find('('); paren != std::string_view::npos) function = function.substr(0, paren);
  if (auto space = function.rfind(' '); space != std::string_view::npos) function = function.substr(space + 1);
  std::string name(function);
  for (std::string_view noise : {"metrale::", "{anonymous}::"})
    for (auto at = name.find(noise); at != std::string::npos; at = name.find(noise)) name.erase(at, noise.size());
  return Site{std::string(file), location.line(), name};
}

std::string Site::to_string() const {
  std::string out = file + ":" + std::to_string(line);
  if (!function.empty()) out += " " + function;
  return out;
}

uint64_t AuditLog::append(AuditRow row) {
  auto prototype = std::make_shared<const AuditRow>(std::move(row));
  std::lock_guard lock(mutex_);
  uint64_t sequence = next_sequence_++;
  rows_.push_back(Stored{sequence, std::source_location(), false, prototype, prototype->kind, prototype->outcome,
                         prototype->lever, prototype->tier});
  return sequence;
}

uint64_t AuditLog::append(const std::source_location& site, std::shared_ptr<const AuditRow> resolved, LookupKind kind,
                          LookupOutcome outcome, std::string lever) {
  std::lock_guard lock(mutex_);
  uint64_t sequence = next_sequence_++;
  rows_.push_back(Stored{sequence, site, true, std::move(resolved), kind, outcome, std::move(lever), {}});
  return sequence;
}

void AuditLog::note_lever(uint64_t sequence, const std::string& lever) {
  std::lock_guard lock(mutex_);
  // Sequences are assigned in order and rows are only appended (or all cleared): binary search.
  auto it = std::lower_bound(rows_.begin(), rows_.end(), sequence,
                             [](const Stored& s, uint64_t seq) { return s.sequence < seq; });
  if (it == rows_.end() || it->sequence != sequence) return;
  it->lever = it->lever.empty() ? lever : it->lever + ", " + lever;
}

void AuditLog::note_tier(uint64_t after, const std::string& tier) {
  std::lock_guard lock(mutex_);
  auto it = std::upper_bound(rows_.begin(), rows_.end(), after,
                             [](uint64_t seq, const Stored& s) { return seq < s.sequence; });
  for (; it != rows_.end(); ++it) it->tier = tier;
}

uint64_t AuditLog::last_sequence() const {
  std::lock_guard lock(mutex_);
  return rows_.empty() ? 0 : rows_.back().sequence;
}

std::vector<AuditRow> AuditLog::snapshot() const {
  std::vector<Stored> stored;
  {
    std::lock_guard lock(mutex_);
    stored = rows_;
  }
  std::vector<AuditRow> rows;
  rows.reserve(stored.size());
  for (const auto& s : stored) {
    AuditRow row = *s.prototype;
    row.sequence = s.sequence;
    if (s.has_site) row.site = Site::from(s.site);
    row.kind = s.kind;
    row.outcome = s.outcome;
    row.lever = s.lever;
    row.tier = s.tier;
    rows.push_back(std::move(row));
  }
  return rows;
}

size_t AuditLog::size() const {
  std::lock_guard lock(mutex_);
  return rows_.size();
}

void AuditLog::clear() {
  std::lock_guard lock(mutex_);
  rows_.clear();
  next_sequence_ = 1;
}

std::string render_audit_table(const std::vector<AuditRow>& rows) {
  // The tier column appears when some site recorded one (layer code does; bare lookups do not).
  const bool tiers = std::any_of(rows.begin(), rows.end(), [](const AuditRow& r) { return !r.tier.empty(); });
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const auto& row : rows) {
    std::ostringstream handle;
    handle << "0x" << std::hex << row.handle;
    cells.push_back({std::to_string(row.sequence), row.site.to_string(), row.backend, row.target,
                     row.module + "/" + row.kernel + (row.substitute.empty() ? "" : " -> " + row.substitute),
                     lookup_kind_name(row.kind), lookup_outcome_name(row.outcome),
                     handle.str(), row.lever.empty() ? "-" : row.lever, row.reason});
    if (tiers) cells.back().insert(cells.back().end() - 1, row.tier.empty() ? "-" : row.tier);
  }
  std::vector<std::string> header{"#", "site", "backend", "target", "kernel", "kind", "outcome", "handle", "lever", "reason"};
  if (tiers) header.insert(header.end() - 1, "tier");
  return render_table(header, cells);
}

std::string render_audit_json(const std::vector<AuditRow>& rows) {
  auto array = nlohmann::json::array();
  for (const auto& row : rows) {
    array.push_back({{"sequence", row.sequence},
                     {"site", {{"file", row.site.file}, {"line", row.site.line}, {"function", row.site.function}}},
                     {"backend", row.backend},
                     {"target", row.target},
                     {"module", row.module},
                     {"kernel", row.kernel},
                     {"substitute", row.substitute.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.substitute)},
                     {"kind", lookup_kind_name(row.kind)},
                     {"outcome", lookup_outcome_name(row.outcome)},
                     {"reason", row.reason},
                     {"lever", row.lever.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.lever)},
                     {"tier", row.tier.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.tier)},
                     {"handle", row.handle}});
  }
  return array.dump(2);
}

}  // namespace metrale
