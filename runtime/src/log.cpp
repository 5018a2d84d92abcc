// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/log.hpp>
#include <metrale/status.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace metrale {

namespace {

spdlog::level::level_enum level_from_lever() {
  std::optional<std::string> value;
  try {
    value = lever_choice("METRALE_LOG");
  } catch (const Refusal&) {
    // A bad METRALE_LOG is refused by validate_levers(); logging itself must not throw.
    value.reset();
  }
  if (!value) return spdlog::level::warn;
  return spdlog::level::from_str(*value);
}

}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto made = spdlog::stderr_color_mt("metrale");
    made->set_pattern("metrale: %^%l%$: %v");
    made->set_level(level_from_lever());
    return made;
  }();
  return instance;
}

void configure_logging() { logger()->set_level(level_from_lever()); }

void plugin_log_callback(void* user, metrale_log_level level, const char* message) {
  // Called from plugin code: nothing may escape.
  try {
    const char* backend = user ? static_cast<const char*>(user) : "plugin";
    auto spd = spdlog::level::err;
    switch (level) {
      case METRALE_LOG_TRACE: spd = spdlog::level::trace; break;
      case METRALE_LOG_DEBUG: spd = spdlog::level::debug; break;
      case METRALE_LOG_INFO: spd = spdlog::level::info; break;
      case METRALE_LOG_WARN: spd = spdlog::level::warn; break;
      case METRALE_LOG_ERROR: spd = spdlog::level::err; break;
    }
    logger()->log(spd, "[{}] {}", backend, message ? message : "");
  } catch (...) {
  }
}

}  // namespace metrale
