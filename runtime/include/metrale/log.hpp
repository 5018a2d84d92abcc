// SPDX-License-Identifier: MIT OR Apache-2.0
// Logging through spdlog to stderr; level from METRALE_LOG (trace, debug, info, warn, error, off).
// stdout is kept for command output (JSON alone on stdout).
#pragma once

#include <metrale/plugin_abi.h>

#include <spdlog/spdlog.h>

#include <memory>

namespace metrale {

// The runtime's logger ("metrale"); created on first use, level from METRALE_LOG.
std::shared_ptr<spdlog::logger> logger();
// Re-reads METRALE_LOG (after levers are validated).
void configure_logging();
// metrale_host_callbacks.log for plugins: forwards into logger() with a "[backend]" prefix.
void plugin_log_callback(void* user, metrale_log_level level, const char* message);

}  // namespace metrale
