// SPDX-License-Identifier: MIT OR Apache-2.0
// Reading and comparing locks and audits. Nothing here needs a backend, so the parser can be
// tested and fuzzed alone; every document is validated before a comparison reads it.
#include <metrale/json_file.hpp>
#include <metrale/lock.hpp>
#include <metrale/status.hpp>

#include <limits>
#include <map>

namespace metrale {

namespace {

[[noreturn]] void malformed(std::string_view source, const std::string& pointer, const std::string& what) {
  throw Error(Status::invalid_argument,
              std::string(source) + ": " + (pointer.empty() ? std::string("(document)") : pointer) + ": " + what);
}

void need_string(const nlohmann::json& object, std::string_view source, const std::string& pointer, const char* key,
                 bool nullable = false) {
  const auto it = object.find(key);
  const std::string where = pointer + "/" + key;
  if (it == object.end()) {
    if (nullable) return;
    malformed(source, where, "missing: expected a string");
  }
  if (it->is_string() || (nullable && it->is_null())) return;
  malformed(source, where, std::string("expected a string") + (nullable ? " or null" : "") + ", found " + describe_json(*it));
}

void validate_row(const nlohmann::json& row, std::string_view source, const std::string& pointer) {
  if (!row.is_object()) malformed(source, pointer, "expected an object (one resolution), found " + describe_json(row));
  const auto site = row.find("site");
  if (site == row.end() || !site->is_object()) {
    malformed(source, pointer + "/site",
              "expected an object {file, line, function}" + (site == row.end() ? std::string() : ", found " + describe_json(*site)));
  }
  need_string(*site, source, pointer + "/site", "file");
  need_string(*site, source, pointer + "/site", "function");
  const auto line = site->find("line");
  const auto number = line == site->end() ? std::nullopt : json_unsigned(*line);
  if (!number || *number > std::numeric_limits<uint32_t>::max()) {
    malformed(source, pointer + "/site/line",
              "expected a line number (an integer from 0 to 2^32-1)" +
                  (line == site->end() ? std::string() : ", found " + describe_json(*line)));
  }
  for (const char* key : {"backend", "target", "module", "kernel", "outcome"}) need_string(row, source, pointer, key);
  for (const char* key : {"substitute", "plugin_version", "library_checksum", "tier"}) {
    need_string(row, source, pointer, key, true);
  }
}

const nlohmann::json& rows_of(const nlohmann::json& document) {
  return document.is_object() ? document.at("rows") : document;
}

// file:line function: where a lookup was asked for.
std::string site_location(const nlohmann::json& row) {
  const auto& site = row.at("site");
  return site.at("file").get<std::string>() + ":" + std::to_string(site.at("line").get<uint32_t>()) + " " +
         site.at("function").get<std::string>();
}

std::string site_key(const nlohmann::json& row) {
  // The line is part of the key: two lookups of one kernel in one function are two sites.
  return site_location(row) + " " + row.at("module").get<std::string>() + "/" + row.at("kernel").get<std::string>();
}

std::string row_tier(const nlohmann::json& row) {
  const auto it = row.find("tier");
  return tier_pin(it != row.end() && it->is_string() ? it->get<std::string>() : std::string());
}

// Location -> tier (the last row of a location stands, as for resolutions).
std::map<std::string, std::string> index_tiers(const nlohmann::json& document) {
  std::map<std::string, std::string> index;
  for (const auto& row : rows_of(document)) index[site_location(row)] = row_tier(row);
  return index;
}

std::string resolved_name(const nlohmann::json& row) {
  if (row.at("outcome") != "resolved") return row.at("outcome").get<std::string>();
  if (row.contains("substitute") && row["substitute"].is_string()) return row["substitute"].get<std::string>();
  return row.at("module").get<std::string>() + "/" + row.at("kernel").get<std::string>();
}

// Site -> the facts a lock compares, from a validated lock or audit document.
std::map<std::string, nlohmann::json> index_rows(const nlohmann::json& document) {
  std::map<std::string, nlohmann::json> index;
  for (const auto& row : rows_of(document)) {
    nlohmann::json facts{{"backend", row.at("backend")}, {"target", row.at("target")}, {"resolved", resolved_name(row)}};
    if (row.contains("plugin_version")) facts["plugin_version"] = row["plugin_version"];
    if (row.contains("library_checksum")) facts["library_checksum"] = row["library_checksum"];
    index[site_key(row)] = facts;  // repeated lookups from one site: the last one stands
  }
  return index;
}

std::vector<std::string> compare(const nlohmann::json& before, const nlohmann::json& after, const char* old_name,
                                 const char* new_name) {
  validate_resolutions(before, std::string(old_name) + " document");
  validate_resolutions(after, std::string(new_name) + " document");
  auto a = index_rows(before), b = index_rows(after);
  std::vector<std::string> lines;
  // A site's tier first: a changed tier also changes the kernels the site looks up.
  const auto tiers_b = index_tiers(after);
  for (const auto& [location, tier] : index_tiers(before)) {
    const auto it = tiers_b.find(location);
    if (it != tiers_b.end() && it->second != tier) {
      lines.push_back(location + ": tier " + tier + " in the " + old_name + ", " + it->second + " in the " + new_name);
    }
  }
  for (const auto& [site, facts] : a) {
    auto it = b.find(site);
    if (it == b.end()) {
      lines.push_back(site + ": in the " + std::string(old_name) + " only (resolved: " + facts["resolved"].get<std::string>() + ")");
      continue;
    }
    for (const auto& [field, value] : facts.items()) {
      if (!it->second.contains(field) || it->second[field] == value) continue;
      lines.push_back(site + ": " + field + " " + value.dump() + " -> " + it->second[field].dump());
    }
  }
  for (const auto& [site, facts] : b)
    if (!a.count(site)) lines.push_back(site + ": in the " + std::string(new_name) + " only (resolved: " + facts["resolved"].get<std::string>() + ")");
  return lines;
}

}  // namespace

void validate_resolutions(const nlohmann::json& document, std::string_view source) {
  std::string base;
  if (document.is_object()) {
    if (!document.contains("rows")) malformed(source, "/rows", "missing: expected an array of resolutions");
    base = "/rows";
  }
  const nlohmann::json& rows = document.is_object() ? document.at("rows") : document;
  if (!rows.is_array()) malformed(source, base, "expected an array of resolutions, found " + describe_json(rows));
  for (size_t i = 0; i < rows.size(); ++i) validate_row(rows[i], source, base + "/" + std::to_string(i));
}

std::string tier_pin(std::string_view audit_tier) {
  if (audit_tier.empty()) return std::string(kDefaultTierPin);
  const size_t colon = audit_tier.find(": ");
  const size_t act = audit_tier.find(" activations");
  if (colon == std::string_view::npos || act == std::string_view::npos || act < colon) return std::string(audit_tier);
  return std::string(audit_tier.substr(colon + 2, act - colon - 2)) + "/" + std::string(audit_tier.substr(0, colon));
}

nlohmann::json parse_lock(std::string_view text, std::string_view source) {
  nlohmann::json lock = parse_json(text, source);
  if (!lock.is_object()) malformed(source, "", "expected a lock (an object with lock_format and rows), found " + describe_json(lock));
  const auto format = lock.find("lock_format");
  // Exactly the integer: 1.9 or "1" is not format 1, and no float is ever converted to an int.
  if (format == lock.end() || !format->is_number_integer() || *format != kLockFormatVersion) {
    malformed(source, "/lock_format",
              "expected the integer " + std::to_string(kLockFormatVersion) + " (the lock format this runtime reads)" +
                  (format == lock.end() ? std::string(", but it is missing") : ", found " + describe_json(*format)));
  }
  const auto minor = lock.find("lock_format_minor");
  if (minor != lock.end() && !minor->is_number_unsigned()) {
    malformed(source, "/lock_format_minor", "expected a non-negative integer (the compatible additions), found " + describe_json(*minor));
  }
  validate_resolutions(lock, source);
  return lock;
}

std::vector<std::string> lock_differences(const nlohmann::json& lock, const nlohmann::json& current) {
  return compare(lock, current, "lock", "current configuration");
}

std::vector<std::string> diff_audits(const nlohmann::json& before, const nlohmann::json& after) {
  return compare(before, after, "first", "second");
}

}  // namespace metrale
