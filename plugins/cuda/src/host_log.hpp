// SPDX-License-Identifier: MIT OR Apache-2.0
// Logging into the host's callback (the runtime's spdlog). Without a callback, messages are
// dropped: a plugin never writes to stdout/stderr behind the host's back.
#pragma once

#include <metrale/plugin_abi.h>

#include <string>

namespace metrale::cuda {

class HostLog {
 public:
  HostLog() = default;
  HostLog(void (*log)(void*, metrale_log_level, const char*), void* user) : log_(log), user_(user) {}
  void operator()(metrale_log_level level, const std::string& message) const noexcept {
    if (log_ != nullptr) log_(user_, level, message.c_str());
  }
  void debug(const std::string& message) const noexcept { (*this)(METRALE_LOG_DEBUG, message); }
  void info(const std::string& message) const noexcept { (*this)(METRALE_LOG_INFO, message); }
  void warn(const std::string& message) const noexcept { (*this)(METRALE_LOG_WARN, message); }

 private:
  void (*log_)(void*, metrale_log_level, const char*) = nullptr;
  void* user_ = nullptr;
};

}  // namespace metrale::cuda
