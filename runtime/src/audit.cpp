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

const std::string* AuditRow::annotation(std::string_view key) const noexcept {
  for (const auto& a : annotations)
    if (a.key == key) return &a.value;
  return nullptr;
}

std::string Site::to_string() const {
  std::string out = file + ":" + std::to_string(line);
  if (!function.empty()) out += " " + function;
  return out;
}

namespace {

bool same_resolution(const AuditRow& a, const AuditRow& b, bool compare_site) noexcept {
  return a.backend == b.backend && a.target == b.target && a.module == b.module && a.kernel == b.kernel &&
         a.substitute == b.substitute &&
         (!compare_site || (a.site.file == b.site.file && a.site.line == b.site.line &&
                            a.site.function == b.site.function));
}

}  // namespace

size_t AuditLog::KeyHash::operator()(const Key& key) const noexcept {
  // Sites hash by the addresses of their literals (one site, one address); the resolution by
  // content. Equal keys hash equally; collisions only cost a comparison.
  size_t h = std::hash<std::string_view>()(key.prototype->kernel);
  const auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(std::hash<std::string_view>()(key.prototype->module));
  mix(std::hash<const void*>()(key.file));
  mix(key.line);
  mix(key.column);
  mix(static_cast<size_t>(key.kind) * 8 + static_cast<size_t>(key.outcome));
  return h;
}

bool AuditLog::KeyEqual::operator()(const Key& a, const Key& b) const noexcept {
  return a.file == b.file && a.function == b.function && a.line == b.line && a.column == b.column &&
         a.kind == b.kind && a.outcome == b.outcome &&
         (a.prototype == b.prototype || same_resolution(*a.prototype, *b.prototype, a.file == nullptr));
}

uint64_t AuditLog::append_locked(Stored stored) {
  stored.sequence = next_sequence_++;
  const uint64_t sequence = stored.sequence;
  const Key key{stored.has_site ? stored.site.file_name() : nullptr,
                stored.has_site ? stored.site.function_name() : nullptr,
                stored.has_site ? stored.site.line() : 0,
                stored.has_site ? stored.site.column() : 0,
                stored.prototype.get(), stored.kind, stored.outcome};
  auto it = tallies_.find(key);
  if (it == tallies_.end()) {
    if (rows_.size() >= kMaxRows) {
      ++dropped_;
      return sequence;
    }
    it = tallies_.emplace(key, Tally{}).first;  // key.prototype lives in the row stored below
  }
  Tally& tally = it->second;
  ++tally.seen;
  if (tally.latest != SIZE_MAX) {
    rows_[tally.latest] = std::move(stored);  // the previous most-recent row is the one dropped
    ++dropped_;
  } else if (rows_.size() >= kMaxRows) {
    ++dropped_;
  } else {
    if (tally.seen > kRowsPerKey) tally.latest = rows_.size();
    rows_.push_back(std::move(stored));
  }
  return sequence;
}

uint64_t AuditLog::append(AuditRow row) {
  auto prototype = std::make_shared<const AuditRow>(std::move(row));
  std::lock_guard lock(mutex_);
  return append_locked(Stored{0, std::source_location(), false, prototype, prototype->kind, prototype->outcome,
                              prototype->lever, prototype->annotations});
}

uint64_t AuditLog::append(const std::source_location& site, std::shared_ptr<const AuditRow> resolved, LookupKind kind,
                          LookupOutcome outcome, std::string lever, const std::vector<AuditAnnotation>& annotations) {
  std::lock_guard lock(mutex_);
  // Copied only when there are any: the warm path has none.
  return append_locked(Stored{0, site, true, std::move(resolved), kind, outcome, std::move(lever),
                              annotations.empty() ? std::vector<AuditAnnotation>() : annotations});
}

uint64_t AuditLog::last_sequence() const {
  std::lock_guard lock(mutex_);
  return next_sequence_ - 1;
}

std::vector<AuditRow> AuditLog::snapshot() const {
  std::vector<Stored> stored;
  {
    std::lock_guard lock(mutex_);
    stored = rows_;
  }
  std::sort(stored.begin(), stored.end(), [](const Stored& a, const Stored& b) { return a.sequence < b.sequence; });
  std::vector<AuditRow> rows;
  rows.reserve(stored.size());
  for (const auto& s : stored) {
    AuditRow row = *s.prototype;
    row.sequence = s.sequence;
    if (s.has_site) row.site = Site::from(s.site);
    row.kind = s.kind;
    row.outcome = s.outcome;
    row.lever = s.lever;
    row.annotations = s.annotations;
    rows.push_back(std::move(row));
  }
  return rows;
}

size_t AuditLog::size() const {
  std::lock_guard lock(mutex_);
  return rows_.size();
}

uint64_t AuditLog::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

void AuditLog::clear() {
  std::lock_guard lock(mutex_);
  tallies_.clear();
  rows_.clear();
  next_sequence_ = 1;
  dropped_ = 0;
}

namespace {

std::string annotations_text(const std::vector<AuditAnnotation>& annotations) {
  std::string out;
  for (const auto& a : annotations) out += (out.empty() ? "" : "; ") + a.key + "=" + a.value;
  return out.empty() ? "-" : out;
}

}  // namespace

std::string render_audit_table(const std::vector<AuditRow>& rows) {
  // The column appears when some site annotated its lookups (layer code does; bare lookups do not).
  const bool annotated = std::any_of(rows.begin(), rows.end(), [](const AuditRow& r) { return !r.annotations.empty(); });
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const auto& row : rows) {
    std::ostringstream handle;
    handle << "0x" << std::hex << row.handle;
    cells.push_back({std::to_string(row.sequence), row.site.to_string(), row.backend, row.target,
                     row.module + "/" + row.kernel + (row.substitute.empty() ? "" : " -> " + row.substitute),
                     lookup_kind_name(row.kind), lookup_outcome_name(row.outcome),
                     handle.str(), row.lever.empty() ? "-" : row.lever, row.reason});
    if (annotated) cells.back().insert(cells.back().end() - 1, annotations_text(row.annotations));
  }
  std::vector<std::string> header{"#", "site", "backend", "target", "kernel", "kind", "outcome", "handle", "lever", "reason"};
  if (annotated) header.insert(header.end() - 1, "annotations");
  return render_table(header, cells);
}

std::string render_audit_json(const std::vector<AuditRow>& rows) {
  auto array = nlohmann::json::array();
  for (const auto& row : rows) {
    auto annotations = nlohmann::json::object();
    auto pinned = nlohmann::json::array();
    for (const auto& a : row.annotations) {
      annotations[a.key] = a.value;
      if (a.pinned) pinned.push_back(a.key);
    }
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
                     {"annotations", std::move(annotations)},
                     {"pinned", std::move(pinned)},
                     {"handle", row.handle}});
  }
  return array.dump(2);
}

}  // namespace metrale
