// SPDX-License-Identifier: MIT OR Apache-2.0
// Typed errors inside the C++ runtime. The plugin ABI's metrale_status becomes a Status here;
// a Refusal is the runtime declining to start because an explicit request cannot be honoured
// (CLI exit code 3).
#pragma once

#include <metrale/plugin_abi.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace metrale {

enum class Status {
  ok = METRALE_STATUS_OK,
  not_found = METRALE_STATUS_NOT_FOUND,
  unavailable = METRALE_STATUS_UNAVAILABLE,
  incompatible = METRALE_STATUS_INCOMPATIBLE,
  invalid_argument = METRALE_STATUS_INVALID_ARGUMENT,
  out_of_memory = METRALE_STATUS_OUT_OF_MEMORY,
  unimplemented = METRALE_STATUS_UNIMPLEMENTED,
  internal = METRALE_STATUS_INTERNAL,
};

// "not-found", "unavailable"... for messages and JSON.
std::string_view status_name(Status status) noexcept;
// Maps a plugin's answer; values outside the enum become Status::internal.
Status status_from_abi(metrale_status status) noexcept;

// Any failure inside the runtime that has a precise kind.
class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

// The runtime refuses to start: an explicit request (a lever, --backend, a lock) cannot be met.
class Refusal : public Error {
 public:
  explicit Refusal(const std::string& message) : Error(Status::incompatible, message) {}
};

}  // namespace metrale
