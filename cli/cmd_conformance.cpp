// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale conformance`: run the project's conformance cases (layers/conformance/) on one backend
// and report per case, so a vendor can certify a drop-in plugin before shipping it. Exit 1 when a
// case failed, and also when the backend ran no case at all: a plugin that skips everything has
// certified nothing.
#include "commands.hpp"

#include <metrale/names.hpp>

#include <layers/conformance/conformance.hpp>
#include <layers/model/progress.hpp>

#include <nlohmann/json.hpp>

#include <iostream>
#include <sstream>

namespace metrale::cli {

namespace {

struct ConformanceOptions {
  std::string backend;
  std::vector<std::string> case_globs;  // any of them matches; empty: every case
  bool json = false;
  bool list = false;
  bool quiet = false;
};

bool selected(const std::vector<std::string>& globs, const std::string& name) {
  if (globs.empty()) return true;
  for (const auto& g : globs)
    if (glob_match(g, name)) return true;
  return false;
}

nlohmann::json result_json(const conformance::CaseResult& r) {
  nlohmann::json out{{"name", r.name},
                     {"outcome", conformance::outcome_name(r.outcome)},
                     {"detail", r.detail},
                     {"kernels", r.kernels}};
  if (r.comparison) {
    const auto& c = *r.comparison;
    out["comparison"] = {{"checked", c.checked},          {"violations", c.violations},
                         {"max_abs_error", c.max_abs},    {"max_rel_error", c.max_rel},
                         {"worst_budget_ratio", c.worst_ratio}, {"excluded_rows", c.excluded_rows}};
  }
  return out;
}

void run_conformance(CliContext& ctx, const ConformanceOptions& o) {
  const bool json = o.json || ctx.json;
  std::vector<conformance::Case> chosen;
  for (auto& c : conformance::cases())
    if (selected(o.case_globs, c.name)) chosen.push_back(std::move(c));
  if (chosen.empty()) {
    std::string globs;
    for (const auto& g : o.case_globs) globs += (globs.empty() ? "'" : ", '") + g + "'";
    throw Error(Status::invalid_argument,
                "--cases " + globs + " matches no conformance case (see `metrale conformance --list`)");
  }
  if (o.list) {
    if (json) {
      nlohmann::json names = nlohmann::json::array();
      for (const auto& c : chosen) names.push_back(c.name);
      std::cout << names.dump(2) << '\n';
    } else {
      for (const auto& c : chosen) std::cout << c.name << '\n';
    }
    return;
  }
  auto backend = ctx.registry().select(o.backend.empty() ? std::nullopt : std::optional(o.backend));
  std::vector<conformance::CaseResult> results;
  results.reserve(chosen.size());
  // Progress on stderr: the qwen3-30b-a3b case alone takes a while on a small CPU.
  layers::StderrProgress progress(!o.quiet);
  const std::string stage = "conformance on " + backend->name();
  for (size_t i = 0; i < chosen.size(); ++i) {
    progress.update(stage, static_cast<double>(i) / static_cast<double>(chosen.size()));
    results.push_back(conformance::run_case(*backend, chosen[i]));
  }
  progress.finish(stage);
  const auto summary = conformance::summarize(results);
  const bool ran_nothing = summary.passed + summary.failed == 0;
  std::string verdict;
  if (summary.failed) {
    verdict = "backend '" + backend->name() + "' FAILED " + std::to_string(summary.failed) + " conformance case(s)";
  } else if (ran_nothing) {
    verdict = "backend '" + backend->name() + "' ran no conformance case (all " + std::to_string(summary.skipped) +
              " skipped): nothing is certified";
  } else {
    verdict = "backend '" + backend->name() + "' passed every case it ran";
  }
  if (summary.failed || ran_nothing) ctx.exit_code = kExitError;

  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) rows.push_back(result_json(r));
    nlohmann::json out{{"backend", backend->name()},
                       {"target", backend->target()},
                       {"plugin_version", backend->plugin_version()},
                       {"cases", rows},
                       {"summary", {{"passed", summary.passed}, {"failed", summary.failed}, {"skipped", summary.skipped}}},
                       {"certified", ctx.exit_code == kExitOk},
                       {"verdict", verdict}};
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << "backend " << backend->name() << " (" << backend->target() << ", plugin " << backend->plugin_version()
            << ")\n"
            << conformance::render_results(results) << verdict << '\n';
}

}  // namespace

void register_conformance(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<ConformanceOptions>();
  auto* cmd = app.add_subcommand("conformance",
                                 "Run the conformance cases on a backend against the double-precision reference; "
                                 "exit 1 when a case fails or none ran");
  cmd->add_option("--backend", o->backend, "Backend to certify (default: METRALE_BACKEND or the highest priority)");
  cmd->add_option("--cases", o->case_globs,
                  "Only cases whose name matches one of these globs ('*', '?'), e.g. 'kernel/w4a16_gemv/*'");
  cmd->add_flag("--list", o->list, "Print the names of the selected cases and run nothing");
  cmd->add_flag("--json", o->json, "Machine-readable JSON on stdout");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([&ctx, o] { run_conformance(ctx, *o); });
}

}  // namespace metrale::cli
