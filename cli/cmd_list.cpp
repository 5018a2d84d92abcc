// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale list`: every manifest found, in discovery order, and what became of it.
#include "commands.hpp"

#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <iostream>

namespace metrale::cli {

namespace {

struct KernelCounts {
  size_t listed = 0, provided = 0, gated = 0, usable = 0;
};

KernelCounts count_kernels(const Backend& backend) {
  KernelCounts counts;
  for (const auto& k : backend.kernel_availability()) {
    counts.listed += k.listed;
    counts.provided += k.provided;
    counts.gated += k.gated;
    counts.usable += k.listed && k.provided && !k.gated;
  }
  return counts;
}

void run_list(CliContext& ctx) {
  Registry& registry = ctx.registry();
  std::shared_ptr<Backend> selected;
  try {
    selected = registry.select();
  } catch (const Error&) {
    // `list` reports; selection problems show as entry states, not as a failure of the command.
  }
  if (ctx.json) {
    auto out = nlohmann::json::array();
    for (const auto& entry : registry.entries()) {
      nlohmann::json row{{"manifest", entry.manifest_path.string()},
                         {"origin", manifest_origin_name(entry.origin)},
                         {"backend", entry.backend.empty() ? nlohmann::json(nullptr) : nlohmann::json(entry.backend)},
                         {"priority", entry.priority},
                         {"state", entry_state_name(entry.state)},
                         {"reason", entry.reason},
                         {"cross_check", entry.cross_check},
                         {"selected", selected && entry.instance == selected}};
      if (entry.instance) {
        auto counts = count_kernels(*entry.instance);
        row["target"] = entry.instance->target();
        row["device"] = entry.instance->device_name();
        row["plugin_version"] = entry.instance->plugin_version();
        row["kernels"] = {{"listed", counts.listed}, {"provided", counts.provided},
                          {"gated", counts.gated}, {"usable", counts.usable}};
      }
      out.push_back(std::move(row));
    }
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& entry : registry.entries()) {
    std::string mark = selected && entry.instance == selected ? "*" : "";
    std::string target = "-", kernels = "-";
    if (entry.instance) {
      auto counts = count_kernels(*entry.instance);
      target = entry.instance->target();
      kernels = std::to_string(counts.usable) + " usable (" + std::to_string(counts.listed) + " listed, " +
                std::to_string(counts.provided) + " provided, " + std::to_string(counts.gated) + " gated)";
    }
    std::string detail = entry.reason;
    for (const auto& line : entry.cross_check) detail += (detail.empty() ? "" : "; ") + std::string("cross-check: ") + line;
    rows.push_back({mark + (entry.backend.empty() ? "?" : entry.backend), entry_state_name(entry.state), target,
                    kernels, std::to_string(entry.priority), manifest_origin_name(entry.origin),
                    entry.manifest_path.string(), detail});
  }
  std::cout << render_table({"backend", "state", "target", "kernels", "prio", "origin", "manifest", "detail"}, rows);
  if (registry.entries().empty()) std::cout << "(no manifests found; see `metrale levers` for METRALE_PLUGIN_PATH)\n";
  if (selected) std::cout << "* selected: " << selected->name() << " on " << selected->device_name() << '\n';
}

}  // namespace

void register_list(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("list", "Manifests found, backends loaded or skipped and why, targets, kernel counts");
  cmd->callback([&ctx] { run_list(ctx); });
}

}  // namespace metrale::cli
