// SPDX-License-Identifier: MIT OR Apache-2.0
// The `metrale` CLI: each subcommand lives in its own cmd_*.cpp and registers itself on the app.
// A command's callback stores its exit code in CliContext::exit_code; exceptions are mapped in
// main(): metrale::Refusal -> 3, CLI11 parse errors -> 2, anything else -> 1.
#pragma once

#include <metrale/registry.hpp>

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace metrale::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitRefusal = 3;

struct CliContext {
  bool json = false;      // --json: JSON alone on stdout
  int exit_code = kExitOk;
  // Finds the manifests and declares their levers, loading nothing; main() calls it at start-up.
  void scan();
  // The registry as scanned, loading nothing.
  const Registry& registry_scan();
  // The registry, its plugins loaded on first call; kept for the rest of the process. Throws
  // Refusal when METRALE_BACKEND names a backend that did not load.
  Registry& registry();

 private:
  std::unique_ptr<Registry> registry_;
  bool loaded_ = false;
};

void register_list(CLI::App& app, CliContext& ctx);
void register_kernels(CLI::App& app, CliContext& ctx);
void register_levers(CLI::App& app, CliContext& ctx);
void register_audit(CLI::App& app, CliContext& ctx);
void register_check_manifest(CLI::App& app, CliContext& ctx);
void register_run(CLI::App& app, CliContext& ctx);      // layers issue (cmd_run.cpp)
void register_compile(CLI::App& app, CliContext& ctx);  // CUDA issue (cmd_compile.cpp)
void register_conformance(CLI::App& app, CliContext& ctx);  // cmd_conformance.cpp
void register_bench(CLI::App& app, CliContext& ctx);        // cmd_bench.cpp
void register_generate(CLI::App& app, CliContext& ctx);     // cmd_generate.cpp

}  // namespace metrale::cli
