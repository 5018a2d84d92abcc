// SPDX-License-Identifier: MIT OR Apache-2.0
// Reading and comparing locks and audits. Nothing here needs a backend, so the parser can be
// tested and fuzzed alone; every document is validated before a comparison reads it.
#include <metrale/json_file.hpp>
#include <metrale/lock.hpp>
#include <metrale/status.hpp>

#include <algorithm>
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
  if (const auto annotations = row.find("annotations"); annotations != row.end()) {
    if (!annotations->is_object()) {
      malformed(source, pointer + "/annotations", "expected an object {key: value}, found " + describe_json(*annotations));
    }
    for (const auto& [key, value] : annotations->items()) need_string(*annotations, source, pointer + "/annotations", key.c_str());
  }
  if (const auto pinned = row.find("pinned"); pinned != row.end()) {
    if (!pinned->is_array()) malformed(source, pointer + "/pinned", "expected an array of keys, found " + describe_json(*pinned));
    for (size_t i = 0; i < pinned->size(); ++i) {
      if (!(*pinned)[i].is_string()) {
        malformed(source, pointer + "/pinned/" + std::to_string(i), "expected a key (a string), found " + describe_json((*pinned)[i]));
      }
    }
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

// What a document says about annotations: its lock_format_minor (docs/quantization.md, "Audit and locks").
int annotations_minor(const nlohmann::json& document) {
  if (!document.is_object() || !document.contains("lock_format")) return kLockFormatMinor;  // an audit
  const auto minor = document.find("lock_format_minor");
  return minor == document.end() ? 0 : static_cast<int>(std::min<uint64_t>(minor->get<uint64_t>(), kLockFormatMinor));
}

using Pins = std::map<std::string, std::string>;  // key -> value

// A row's pinned annotations as its document's minor spells them: minor 1, its "tier"; later, the
// "annotations" named in "pinned", or all of them in a lock (which holds pinned ones only).
Pins pinned_of(const nlohmann::json& row, int minor) {
  Pins pins;
  if (minor == 1) {
    if (const auto tier = row.find("tier"); tier != row.end() && tier->is_string()) pins["tier"] = tier->get<std::string>();
    return pins;
  }
  const auto annotations = row.find("annotations");
  if (annotations == row.end()) return pins;
  const auto pinned = row.find("pinned");
  for (const auto& [key, value] : annotations->items()) {
    const bool is_pinned = pinned == row.end() || std::find(pinned->begin(), pinned->end(), key) != pinned->end();
    if (is_pinned) pins[key] = value.get<std::string>();
  }
  return pins;
}

// Location -> its pinned annotations (for each key, the last row of the location carrying it stands).
std::map<std::string, Pins> index_pins(const nlohmann::json& document, int minor) {
  std::map<std::string, Pins> index;
  for (const auto& row : rows_of(document)) {
    Pins& pins = index[site_location(row)];
    for (auto& [key, value] : pinned_of(row, minor)) pins[key] = std::move(value);
  }
  return index;
}

// "<location>: annotation <key> <before> in the <old>, <after> in the <new>" for each pinned
// annotation of a location both documents have that differs. Minor 0 compares none; minor 1 only
// keys both sides carry (its rows all carry a tier, unannotated lookups' too).
void compare_pins(const nlohmann::json& before, const nlohmann::json& after, const std::string& old_name,
                  const std::string& new_name, std::vector<std::string>& lines) {
  const int minor = std::min(annotations_minor(before), annotations_minor(after));
  if (minor == 0) return;
  const auto a = index_pins(before, annotations_minor(before)), b = index_pins(after, annotations_minor(after));
  for (const auto& [location, pins_a] : a) {
    const auto it = b.find(location);
    if (it == b.end()) continue;  // the resolutions say "in the ... only"
    const Pins& pins_b = it->second;
    std::map<std::string, std::pair<const std::string*, const std::string*>> keys;
    for (const auto& [key, value] : pins_a) keys[key].first = &value;
    for (const auto& [key, value] : pins_b) keys[key].second = &value;
    for (const auto& [key, values] : keys) {
      const auto [va, vb] = values;
      if ((va && vb && *va == *vb) || (minor == 1 && (!va || !vb))) continue;
      lines.push_back(location + ": annotation " + key + " " + (va ? *va : "none") + " in the " + old_name + ", " +
                      (vb ? *vb : "none") + " in the " + new_name);
    }
  }
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
  // A location's pinned annotations first: a changed tier also changes the kernels it looks up.
  compare_pins(before, after, old_name, new_name, lines);
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
    const auto minor = document.find("lock_format_minor");
    // Unsigned as parsed from text; a document built in memory holds a signed integer.
    if (minor != document.end() && !minor->is_number_unsigned() &&
        !(minor->is_number_integer() && minor->get<int64_t>() >= 0)) {
      malformed(source, "/lock_format_minor", "expected a non-negative integer (the compatible additions), found " + describe_json(*minor));
    }
    if (!document.contains("rows")) malformed(source, "/rows", "missing: expected an array of resolutions");
    base = "/rows";
  }
  const nlohmann::json& rows = document.is_object() ? document.at("rows") : document;
  if (!rows.is_array()) malformed(source, base, "expected an array of resolutions, found " + describe_json(rows));
  for (size_t i = 0; i < rows.size(); ++i) validate_row(rows[i], source, base + "/" + std::to_string(i));
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
