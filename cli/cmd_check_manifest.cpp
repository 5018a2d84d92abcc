// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale check-manifest FILE...`: validate manifests without loading anything; one line per
// problem (file, JSON pointer, expectation). Beyond validation, a valid manifest is held to what
// this runtime speaks (abi_version) and to docs/kernels.md (the kernel catalogue: documented
// kernels in their modules with their parameters), the same checks `metrale conformance` makes.
// Exit 1 when any file has a problem.
#include "commands.hpp"

#include <metrale/catalogue.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

namespace metrale::cli {

namespace {

void run_check(CliContext& ctx, const std::vector<std::string>& files) {
  auto json = nlohmann::json::array();
  bool all_ok = true;
  for (const auto& file : files) {
    ManifestResult result = load_manifest(file);
    std::vector<std::string> notes;
    if (result.manifest) {
      for (auto& problem : contract_problems(*result.manifest, file)) result.problems.push_back(std::move(problem));
      std::error_code error;
      if (!std::filesystem::exists(result.manifest->library, error))
        notes.push_back("library " + result.manifest->library.string() + " does not exist (yet)");
    }
    bool ok = result.problems.empty() && result.manifest.has_value();
    all_ok = all_ok && ok;
    if (ctx.json) {
      auto problems = nlohmann::json::array();
      for (const auto& p : result.problems)
        problems.push_back({{"file", p.file.string()}, {"pointer", p.pointer}, {"message", p.message}});
      nlohmann::json row{{"file", file}, {"valid", ok}, {"skipped_format", result.skipped_format},
                         {"problems", problems}, {"notes", notes}};
      if (result.manifest) {
        row["backend"] = result.manifest->backend;
        row["kernels"] = result.manifest->kernel_count();
      }
      json.push_back(std::move(row));
      continue;
    }
    if (ok) {
      std::cout << file << ": ok (backend " << result.manifest->backend << ", " << result.manifest->modules.size()
                << " modules, " << result.manifest->kernel_count() << " kernels)\n";
    }
    for (const auto& p : result.problems) std::cout << p.to_string() << '\n';
    for (const auto& n : notes) std::cout << file << ": note: " << n << '\n';
  }
  if (ctx.json) std::cout << json.dump(2) << '\n';
  if (!all_ok) ctx.exit_code = kExitError;
}

}  // namespace

void register_check_manifest(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("check-manifest", "Validate manifest files (no plugin is loaded)");
  auto files = std::make_shared<std::vector<std::string>>();
  cmd->add_option("files", *files, "Manifest files")->required();
  cmd->callback([&ctx, files] { run_check(ctx, *files); });
}

}  // namespace metrale::cli
