// SPDX-License-Identifier: MIT OR Apache-2.0
// The plugin's typed error: a metrale_status and a message. Thrown inside, caught at every C
// entry point and turned into the status plus last_error.
#pragma once

#include <metrale/plugin_abi.h>

#include <stdexcept>
#include <string>

namespace metrale::cuda {

class PluginError : public std::runtime_error {
 public:
  PluginError(metrale_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  metrale_status status() const noexcept { return status_; }

 private:
  metrale_status status_;
};

}  // namespace metrale::cuda
