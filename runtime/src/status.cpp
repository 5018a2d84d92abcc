// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/status.hpp>

namespace metrale {

std::string_view status_name(Status status) noexcept {
  switch (status) {
    case Status::ok: return "ok";
    case Status::not_found: return "not-found";
    case Status::unavailable: return "unavailable";
    case Status::incompatible: return "incompatible";
    case Status::invalid_argument: return "invalid-argument";
    case Status::out_of_memory: return "out-of-memory";
    case Status::unimplemented: return "unimplemented";
    case Status::internal: return "internal";
  }
  return "internal";
}

Status status_from_abi(metrale_status status) noexcept {
  switch (status) {
    case METRALE_STATUS_OK:
    case METRALE_STATUS_NOT_FOUND:
    case METRALE_STATUS_UNAVAILABLE:
    case METRALE_STATUS_INCOMPATIBLE:
    case METRALE_STATUS_INVALID_ARGUMENT:
    case METRALE_STATUS_OUT_OF_MEMORY:
    case METRALE_STATUS_UNIMPLEMENTED:
    case METRALE_STATUS_INTERNAL:
      return static_cast<Status>(status);
  }
  return Status::internal;
}

}  // namespace metrale
