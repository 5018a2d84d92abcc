// SPDX-License-Identifier: MIT OR Apache-2.0
#include "plugin_guard.hpp"

#include <metrale/log.hpp>

namespace metrale {

std::string EntryName::text() const {
  std::string out(call_);
  if (kernel_) {
    out += '(';
    out += module_;
    out += '/';
    out += name_;
    out += ')';
  }
  return out;
}

Error PluginGuard::escaped(EntryName entry, const char* what) const {
  std::string message = std::string(plugin_) + ": " + entry.text() + " let an exception escape the C ABI";
  message += what ? ": " + std::string(what) : std::string(" (not a std::exception)");
  return Error(Status::internal, message);
}

Error PluginGuard::failed(EntryName entry, metrale_status status, std::string_view detail) const {
  const Status mapped = status_from_abi(status);
  std::string said = detail.empty() ? last_error() : std::string(detail);
  std::string message = std::string(plugin_) + ": " + entry.text() + " failed (" + std::string(status_name(mapped));
  if (mapped == Status::internal && status != METRALE_STATUS_INTERNAL) {
    message += ", status " + std::to_string(static_cast<long long>(status)) + " is not a metrale_status";
  }
  return Error(mapped, message + "): " + said);
}

std::string PluginGuard::last_error() const noexcept {
  try {
    if (table_ == nullptr || instance_ == nullptr) return "(no instance to ask for a message)";
    const char* message = invoke("last_error()", [&] { return table_->last_error(instance_); });
    if (message == nullptr) return "(last_error() returned NULL)";
    return *message ? std::string(message) : std::string("(the plugin left no message)");
  } catch (const std::exception& e) {
    try {
      return e.what();
    } catch (...) {
      return {};
    }
  }
}

void PluginGuard::log_swallowed(const char* what) noexcept {
  try {
    logger()->error("{}", what);
  } catch (...) {
    // Logging failed too; nothing else can report it.
  }
}

void PluginInstanceDeleter::operator()(metrale_backend* instance) const noexcept {
  if (instance == nullptr || table == nullptr) return;
  PluginGuard(plugin, table, instance).invoke_quietly("destroy()", [&] { table->destroy(instance); });
}

}  // namespace metrale
