// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale: the command-line face of the runtime. Exit codes: 0 ok, 1 other errors, 2 usage,
// 3 refusal (an explicit request that cannot be honoured). Command output goes to stdout (JSON
// alone with --json); logs, warnings and errors go to stderr. With --json an error or refusal is
// also one JSON object on stdout: {"error": message, "status": kind, "exit": code}.
#include "commands.hpp"
#include "metrale_config.h"

#include <layers/core/levers.hpp>
#include <metrale/levers.hpp>
#include <metrale/log.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <string_view>

namespace metrale::cli {

namespace {

// --json given to the program, or to the subcommand that ran (a subcommand's own --json flag
// takes the option before the program's does), or — for a failure before the command line is
// parsed (a lever refused at start-up) — anywhere among the arguments.
bool json_requested(const CLI::App& app, const CliContext& ctx, bool json_argument) {
  if (ctx.json || json_argument) return true;
  for (const CLI::App* sub : app.get_subcommands()) {
    if (const CLI::Option* opt = sub->get_option_no_throw("--json"); opt != nullptr && opt->count() > 0) return true;
  }
  return false;
}

// With --json, an error or refusal is also a JSON object on stdout (the log line stays on stderr).
int failed(const CLI::App& app, const CliContext& ctx, bool json_argument, std::string_view message, std::string_view status,
           int code) {
  if (json_requested(app, ctx, json_argument)) {
    const nlohmann::json out{{"error", std::string(message)}, {"status", std::string(status)}, {"exit", code}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  }
  return code;
}

}  // namespace

void CliContext::scan() {
  if (!registry_) registry_ = std::make_unique<Registry>(Registry::scan());
}

const Registry& CliContext::registry_scan() {
  scan();
  return *registry_;
}

Registry& CliContext::registry() {
  scan();
  if (!loaded_) {
    registry_->load();
    loaded_ = true;
    // METRALE_BACKEND names the backend of every command: one that did not load is a refusal
    // whatever the command asked for (`list` included), never a silent fall back.
    if (auto lever = lever_raw("METRALE_BACKEND"); lever && !lever->empty()) registry_->select();
  }
  return *registry_;
}

}  // namespace metrale::cli

int main(int argc, char** argv) {
  using namespace metrale;
  using namespace metrale::cli;
  CLI::App app{"metrale: a kernel runtime whose backends are plugins.\n"
               "Without a subcommand it runs the default job: `metrale run --check` on the small preset."};
  app.set_version_flag("--version", METRALE_VERSION);
  CliContext ctx;
  // Set before the subcommands exist: they inherit it, so `metrale list --json` works too.
  app.fallthrough();
  app.add_flag("--json", ctx.json, "Machine-readable JSON on stdout (logs stay on stderr)");
  register_list(app, ctx);
  register_kernels(app, ctx);
  register_levers(app, ctx);
  register_audit(app, ctx);
  register_check_manifest(app, ctx);
  register_run(app, ctx);
  register_compile(app, ctx);
  register_conformance(app, ctx);
  register_bench(app, ctx);
  register_generate(app, ctx);
  app.require_subcommand(0, 1);
  // Before any command runs (and after --help): METRALE_BACKEND naming a backend that cannot load
  // (unknown, invalid, disabled) is a refusal for every command, even those that load nothing.
  app.parse_complete_callback([&ctx] { ctx.registry_scan().require_loadable(); });
  app.footer("Exit codes: 0 ok, 1 error, 2 usage, 3 refusal. Levers: `metrale levers`.");

  // Before the command line is parsed (start-up) and when it cannot be parsed, "--json" anywhere
  // among the arguments asks for the JSON error; once a command runs, only the flag CLI11 took.
  bool started = false;
  const bool json_argument_seen = std::find(argv + 1, argv + argc, std::string_view("--json")) != argv + argc;
  const auto json_argument = [&] { return !started && json_argument_seen; };
  try {
    // Bad lever values are refusals before anything else runs; unknown METRALE_* are warnings.
    // Levers are declared by the runtime, the layers and the manifests: the manifests are scanned
    // (not loaded) first, so their levers are validated and known here too.
    layers::register_levers();
    validate_levers();
    configure_logging();
    ctx.scan();
    validate_levers();
    for (const auto& unknown : unknown_levers())
      logger()->warn("unknown lever {} (did you mean {}?)", unknown.name, unknown.nearest);
    started = true;
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      // The default job: the run command on its default model with --check.
      std::vector<std::string> args{"run", "--check"};
      if (ctx.json) args.insert(args.begin(), "--json");
      std::reverse(args.begin(), args.end());  // CLI11 consumes vectors from the back
      app.parse(args);
    }
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : failed(app, ctx, json_argument_seen, e.what(), "usage", kExitUsage);
  } catch (const Refusal& e) {
    logger()->error("refusing to start: {}", e.what());
    return failed(app, ctx, json_argument(), e.what(), status_name(e.status()), kExitRefusal);
  } catch (const Error& e) {
    logger()->error("{} ({})", e.what(), status_name(e.status()));
    return failed(app, ctx, json_argument(), e.what(), status_name(e.status()), kExitError);
  } catch (const std::exception& e) {
    logger()->error("{}", e.what());
    return failed(app, ctx, json_argument(), e.what(), "internal", kExitError);
  }
  return ctx.exit_code;
}
