// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale levers`: every lever, who declares it (the runtime, the layers, a backend's manifest),
// its value, where the value came from, and what it means. main() has declared the layers' levers
// and scanned the manifests before this runs, so their levers are listed too.
#include "commands.hpp"

#include <metrale/levers.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <iostream>

namespace metrale::cli {

namespace {

const char* type_name(LeverType type) {
  switch (type) {
    case LeverType::presence: return "presence";
    case LeverType::flag: return "flag";
    case LeverType::u32: return "u32";
    case LeverType::string: return "string";
    case LeverType::choice: return "choice";
    case LeverType::path_list: return "paths";
    case LeverType::glob_list: return "globs";
    case LeverType::path: return "path";
    case LeverType::kernel_map: return "kernel map";
  }
  return "?";
}

void run_levers(CliContext& ctx) {
  auto json = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (const auto& spec : lever_specs()) {
    std::string name(spec.name);
    auto value = lever_raw(spec.name);
    std::string source = value ? "environment" : "default";
    // An elevated process ignores a path lever that is set: say so rather than "default".
    if (!value && spec.path_like && std::getenv(name.c_str()) && process_is_elevated())
      source = "ignored (elevated privileges)";
    std::string meaning(spec.meaning);
    if (spec.type == LeverType::choice) {
      std::string choices;
      for (auto c : spec.choices) choices += (choices.empty() ? "" : "|") + std::string(c);
      meaning += " [" + choices + "]";
    }
    if (ctx.json) {
      json.push_back({{"name", name}, {"type", type_name(spec.type)},
                      {"value", value ? nlohmann::json(*value) : nlohmann::json(nullptr)},
                      {"source", source}, {"default", spec.default_text}, {"meaning", meaning},
                      {"declared_by", spec.declared_by},
                      {"manifest", spec.declared_in.empty() ? nlohmann::json(nullptr) : nlohmann::json(spec.declared_in)}});
    } else {
      rows.push_back({name, std::string(spec.declared_by), type_name(spec.type), value ? *value : "(unset)", source,
                      std::string(spec.default_text), meaning});
    }
  }
  if (ctx.json) {
    auto unknown = nlohmann::json::array();
    for (const auto& u : unknown_levers()) unknown.push_back({{"name", u.name}, {"nearest", u.nearest}});
    std::cout << nlohmann::json{{"levers", json}, {"unknown", unknown}}.dump(2) << '\n';
    return;
  }
  std::cout << render_table({"lever", "declared by", "type", "value", "source", "default", "meaning"}, rows);
}

}  // namespace

void register_levers(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("levers", "Each METRALE_* lever: value, where it came from, meaning");
  cmd->callback([&ctx] { run_levers(ctx); });
}

}  // namespace metrale::cli
