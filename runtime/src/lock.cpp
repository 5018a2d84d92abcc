// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/lock.hpp>
#include <metrale/regular_file.hpp>
#include <metrale/status.hpp>

#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace metrale {

nlohmann::json make_lock(const Backend& backend, const std::vector<AuditRow>& rows) {
  auto audit = nlohmann::json::parse(render_audit_json(rows));
  std::string checksum = backend.library_checksum();
  for (auto& row : audit) {
    row["plugin_version"] = backend.plugin_version();
    row["library_checksum"] = checksum;
    row.erase("sequence");
    row.erase("handle");  // handles are per process
    // A lock holds the pinned annotations only: they are what it pins.
    auto pinned = nlohmann::json::object();
    for (const auto& key : row["pinned"]) pinned[key.get<std::string>()] = row["annotations"][key.get<std::string>()];
    row["annotations"] = std::move(pinned);
    row.erase("pinned");
  }
  return {{"lock_format", kLockFormatVersion}, {"lock_format_minor", kLockFormatMinor}, {"backend", backend.name()},
          {"target", backend.target()},        {"rows", audit}};
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

void enforce_lock(const Backend& backend, const std::vector<AuditRow>& rows) {
  auto file = lever_raw("METRALE_LOCK");
  if (!file) return;
  nlohmann::json lock;
  try {
    lock = parse_lock(read_regular_file(*file, "lock file", kMaxLockBytes), *file);
  } catch (const Error& e) {
    std::string_view reason = e.what();  // "<file>: <what is wrong>": the file is named once, here
    if (reason.starts_with(*file + ": ")) reason.remove_prefix(file->size() + 2);
    throw Refusal("METRALE_LOCK=" + *file + ": not a lock file: " + std::string(reason));
  }
  auto differences = lock_differences(lock, make_lock(backend, rows));
  if (differences.empty()) return;
  std::string message = "METRALE_LOCK=" + *file + ": " + std::to_string(differences.size()) +
                        " resolution(s) differ from the lock:";
  for (const auto& line : differences) message += "\n  " + line;
  throw Refusal(message);
}

}  // namespace metrale
