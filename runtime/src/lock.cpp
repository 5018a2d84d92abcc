// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/lock.hpp>
#include <metrale/status.hpp>

#include <fstream>
#include <map>
#include <unistd.h>

namespace fs = std::filesystem;

namespace metrale {

namespace {

std::string site_key(const nlohmann::json& row) {
  // The line is part of the key: two lookups of one kernel in one function are two sites.
  const auto& site = row.at("site");
  return site.at("file").get<std::string>() + ":" + std::to_string(site.at("line").get<uint32_t>()) + " " +
         site.at("function").get<std::string>() + " " + row.at("module").get<std::string>() + "/" +
         row.at("kernel").get<std::string>();
}

std::string resolved_name(const nlohmann::json& row) {
  if (row.at("outcome") != "resolved") return row.at("outcome").get<std::string>();
  if (row.contains("substitute") && row["substitute"].is_string()) return row["substitute"].get<std::string>();
  return row.at("module").get<std::string>() + "/" + row.at("kernel").get<std::string>();
}

// Site -> the facts a lock compares, from either a lock or an audit document.
std::map<std::string, nlohmann::json> index_rows(const nlohmann::json& document) {
  std::map<std::string, nlohmann::json> index;
  const nlohmann::json& rows = document.contains("rows") ? document.at("rows") : document;
  for (const auto& row : rows) {
    nlohmann::json facts{{"backend", row.at("backend")}, {"target", row.at("target")}, {"resolved", resolved_name(row)}};
    if (row.contains("plugin_version")) facts["plugin_version"] = row["plugin_version"];
    if (row.contains("library_checksum")) facts["library_checksum"] = row["library_checksum"];
    index[site_key(row)] = facts;  // repeated lookups from one site: the last one stands
  }
  return index;
}

std::vector<std::string> compare(const nlohmann::json& before, const nlohmann::json& after, const char* old_name,
                                 const char* new_name) {
  auto a = index_rows(before), b = index_rows(after);
  std::vector<std::string> lines;
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

nlohmann::json make_lock(const Backend& backend, const std::vector<AuditRow>& rows) {
  auto audit = nlohmann::json::parse(render_audit_json(rows));
  std::string checksum = backend.library_checksum();
  for (auto& row : audit) {
    row["plugin_version"] = backend.plugin_version();
    row["library_checksum"] = checksum;
    row.erase("sequence");
    row.erase("handle");  // handles are per process
  }
  return {{"lock_format", kLockFormatVersion}, {"backend", backend.name()}, {"target", backend.target()}, {"rows", audit}};
}

void write_lock(const fs::path& file, const Backend& backend, const std::vector<AuditRow>& rows) {
  fs::path temp = file;
  temp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp);
    out << make_lock(backend, rows).dump(2) << '\n';
    if (!out) throw Error(Status::internal, "cannot write lock file " + temp.string());
  }
  std::error_code error;
  fs::rename(temp, file, error);
  if (error) throw Error(Status::internal, "cannot move lock file into place at " + file.string() + ": " + error.message());
}

std::vector<std::string> lock_differences(const nlohmann::json& lock, const nlohmann::json& current) {
  return compare(lock, current, "lock", "current configuration");
}

void enforce_lock(const Backend& backend, const std::vector<AuditRow>& rows) {
  auto file = lever_raw("METRALE_LOCK");
  if (!file) return;
  nlohmann::json lock;
  try {
    std::ifstream in(*file);
    if (!in) throw Refusal("METRALE_LOCK=" + *file + ": cannot read the lock file");
    lock = nlohmann::json::parse(in);
    if (lock.value("lock_format", 0) != kLockFormatVersion)
      throw Refusal("METRALE_LOCK=" + *file + ": /lock_format is not " + std::to_string(kLockFormatVersion));
  } catch (const nlohmann::json::exception& e) {
    throw Refusal("METRALE_LOCK=" + *file + ": not a lock file: " + e.what());
  }
  auto differences = lock_differences(lock, make_lock(backend, rows));
  if (differences.empty()) return;
  std::string message = "METRALE_LOCK=" + *file + ": " + std::to_string(differences.size()) +
                        " resolution(s) differ from the lock:";
  for (const auto& line : differences) message += "\n  " + line;
  throw Refusal(message);
}

std::vector<std::string> diff_audits(const nlohmann::json& before, const nlohmann::json& after) {
  return compare(before, after, "first", "second");
}

}  // namespace metrale
