// SPDX-License-Identifier: MIT OR Apache-2.0
// PluginGuard: the one way the runtime calls into a plugin (internal to the runtime). A C entry
// point must not throw, but a plugin written in C++ may let an exception escape anyway; the guard
// catches it at the boundary. Every failure becomes a metrale::Error naming the plugin, the entry
// point and what the plugin said: its status (mapped, never guessed) and its last_error() message.
// PluginInstance (backend.hpp) owns an instance and destroys it through the same guard.
#pragma once

#include <metrale/backend.hpp>
#include <metrale/plugin_abi.h>
#include <metrale/status.hpp>

#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace metrale {

// Names the entry point of a call in messages: "mem_alloc(4096)", or "launch(act/silu_mul)" from
// its parts. Holds views that the caller keeps alive; the text is joined only when a message is
// made, so a call that succeeds builds no string.
class EntryName {
 public:
  EntryName(std::string_view text) noexcept : call_(text) {}
  EntryName(const char* text) noexcept : call_(text) {}
  EntryName(const std::string& text) noexcept : call_(text) {}
  // "call(module/name)"
  EntryName(std::string_view call, std::string_view module, std::string_view name) noexcept
      : call_(call), module_(module), name_(name), kernel_(true) {}

  std::string text() const;

 private:
  std::string_view call_, module_, name_;
  bool kernel_ = false;
};

class PluginGuard {
 public:
  // `plugin` opens every message ("backend cpu (plugin /usr/lib/.../libmetrale_cpu.so)"); the
  // caller keeps it alive. `instance` may be null: calls before create() (handshake, describe,
  // create itself).
  PluginGuard(std::string_view plugin, const metrale_plugin_table* table, metrale_backend* instance = nullptr)
      : plugin_(plugin), table_(table), instance_(instance) {}

  std::string_view plugin() const noexcept { return plugin_; }

  // Runs `call`, one call of the entry point `entry`. An exception escaping it becomes
  // Error(internal) naming the plugin, the entry point and the exception's message. Allocates
  // nothing unless it fails.
  template <class Call>
  auto invoke(EntryName entry, Call&& call) const -> std::invoke_result_t<Call> {
    try {
      return std::forward<Call>(call)();
    } catch (const std::exception& e) {
      throw escaped(entry, e.what());
    } catch (...) {
      throw escaped(entry, nullptr);
    }
  }

  // invoke() for an entry point that answers a status: anything but OK throws failed().
  template <class Call>
  void require(EntryName entry, Call&& call) const {
    const metrale_status status = invoke(entry, std::forward<Call>(call));
    if (status != METRALE_STATUS_OK) throw failed(entry, status);
  }

  // For an entry point that must not fail the caller (destroy() in a destructor): an escaping
  // exception is logged, never thrown.
  template <class Call>
  void invoke_quietly(EntryName entry, Call&& call) const noexcept {
    try {
      invoke(entry, std::forward<Call>(call));
    } catch (const std::exception& e) {
      log_swallowed(e.what());
    }
  }

  // The error for `entry` answering `status`: Error(status as mapped) with the instance's
  // last_error() (or `detail` when given: calls without an instance report through a buffer).
  Error failed(EntryName entry, metrale_status status, std::string_view detail = {}) const;
  // The instance's last_error(), itself guarded; a note when there is none to read.
  std::string last_error() const noexcept;

 private:
  Error escaped(EntryName entry, const char* what) const;
  static void log_swallowed(const char* what) noexcept;

  std::string_view plugin_;
  const metrale_plugin_table* table_;
  metrale_backend* instance_;
};

}  // namespace metrale
