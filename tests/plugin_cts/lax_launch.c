/* SPDX-License-Identifier: MIT OR Apache-2.0
 * The minimal plugin of docs/plugin-abi.md with one rule broken: launch() no longer refuses a zero
 * grid or block dimension. The suite's launch case must fail on it (meson: should_fail), which
 * shows that the case has teeth. Everything else is minimal.c unchanged. */
#include <metrale/plugin_glue.h>

/* plugin_glue.h's launch checks, on a config whose grid and block are forced to 1. */
static metrale_status lax_check_launch(const metrale_launch_config* config, void* const* args, size_t arg_count,
                                       uint32_t param_count, char* message, size_t size) {
  metrale_launch_config ones = {{1, 1, 1}, {1, 1, 1}, 0, 0};
  if (config) ones.stream = config->stream;
  return metrale_glue_check_launch(config ? &ones : NULL, args, arg_count, param_count, message, size);
}
#define metrale_glue_check_launch lax_check_launch

#include "minimal.c"
