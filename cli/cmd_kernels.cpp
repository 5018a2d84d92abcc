// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale kernels`: per loaded backend, each kernel listed / provided / gated by target.
#include "commands.hpp"

#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <iostream>

namespace metrale::cli {

namespace {

void run_kernels(CliContext& ctx, const std::string& only) {
  Registry& registry = ctx.registry();
  std::vector<std::shared_ptr<Backend>> backends;
  if (!only.empty()) {
    backends.push_back(registry.select(only));
  } else {
    for (const auto& entry : registry.entries())
      if (entry.instance) backends.push_back(entry.instance);
  }
  auto json = nlohmann::json::array();
  for (const auto& backend : backends) {
    auto kernels = backend->kernel_availability();
    if (ctx.json) {
      auto list = nlohmann::json::array();
      for (const auto& k : kernels)
        list.push_back({{"module", k.module}, {"name", k.name}, {"listed", k.listed}, {"provided", k.provided},
                        {"gated", k.gated}, {"note", k.note}});
      json.push_back({{"backend", backend->name()}, {"target", backend->target()}, {"kernels", list}});
      continue;
    }
    std::cout << backend->name() << " (" << backend->target() << ")\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& k : kernels)
      rows.push_back({"  " + k.module + "/" + k.name, k.listed ? "yes" : "no", k.provided ? "yes" : "no",
                      k.gated ? "yes" : "no", k.note});
    std::cout << render_table({"  kernel", "listed", "provided", "gated", "note"}, rows) << '\n';
  }
  if (ctx.json) std::cout << json.dump(2) << '\n';
}

}  // namespace

void register_kernels(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("kernels", "Per backend: kernels listed in the manifest, provided, gated by target");
  auto only = std::make_shared<std::string>();
  cmd->add_option("--backend", *only, "Only this backend (refuses if it is not loaded)");
  cmd->callback([&ctx, only] { run_kernels(ctx, *only); });
}

}  // namespace metrale::cli
