// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale list`: every manifest found, in discovery order, and what became of it.
#include "commands.hpp"

#include <layers/architectures/architecture.hpp>
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

std::string joined(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : separator) + i;
  return out.empty() ? "-" : out;
}

// `list --architectures`: the registry of architecture specs (docs/architectures.md).
void list_architectures(bool json) {
  using namespace metrale::layers;
  if (json) {
    std::cout << architectures_json().dump(2) << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const ArchitectureSpec* s : architectures()) {
    std::vector<std::string> mixers, ffns, keys;
    for (TokenMixer m : s->mixers) mixers.emplace_back(token_mixer_name(m));
    for (FfnKind f : s->ffns) ffns.emplace_back(ffn_kind_name(f));
    for (const auto& k : s->keys) keys.emplace_back(k.key);
    rows.push_back({std::string(s->model_type), s->decode_refusal.empty() ? "generate, run" : "run (FFN only)", joined(mixers),
                    joined(ffns), s->qk_norm ? "yes" : "no", joined(keys)});
  }
  std::cout << render_table({"model_type", "commands", "mixers", "FFNs", "q/k norm", "keys beyond the common ones"}, rows);
  std::vector<std::string> common, inert;
  for (const auto& k : common_keys()) common.emplace_back(k.key);
  for (const auto& k : inert_keys()) inert.emplace_back(k);
  std::cout << "common keys (every spec): " << joined(common) << '\n'
            << "inert keys (change nothing computed): " << inert.size() << ", e.g. " << joined({inert.begin(), inert.begin() + 6})
            << " (--json lists them all)\n"
            << "any other key: a warning naming it; a key that changes the math elsewhere (soft-capping, multipliers, ...) "
               "refused unless inert\n";
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
  auto architectures = std::make_shared<bool>(false);
  cmd->add_flag("--architectures", *architectures,
                "The model architectures metrale runs instead: model types, mixers, FFNs, the config keys each honours");
  cmd->callback([&ctx, architectures] {
    if (*architectures) list_architectures(ctx.json);
    else run_list(ctx);
  });
}

}  // namespace metrale::cli
