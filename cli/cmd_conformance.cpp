// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale conformance`: certify one backend (tools/conformance/certify.hpp) so a vendor can check
// a drop-in plugin before shipping it: manifest against plugin and docs/kernels.md, the layer
// paths it claims, then the conformance cases against the reference, reported per case, and the
// table of paths it serves. Exit 1 on any failure, and when the backend lists documented kernels
// but ran no case: a plugin that skips everything has certified nothing.
#include "commands.hpp"

#include <metrale/names.hpp>

#include <tools/conformance/certify.hpp>
#include <cli/progress.hpp>

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

nlohmann::json coverage_json(const std::vector<conformance::CoverageRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    out.push_back({{"path", r.path}, {"what", r.what}, {"status", conformance::path_status_name(r.status)},
                   {"kernels", r.kernels}, {"detail", r.detail}});
  }
  return out;
}

std::vector<conformance::Case> chosen_cases(const ConformanceOptions& o) {
  std::vector<conformance::Case> chosen;
  for (auto& c : conformance::cases())
    if (o.case_globs.empty() || glob_match_any(o.case_globs, c.name)) chosen.push_back(std::move(c));
  if (chosen.empty()) {
    std::string globs;
    for (const auto& g : o.case_globs) globs += (globs.empty() ? "'" : ", '") + g + "'";
    throw Error(Status::invalid_argument,
                "--cases " + globs + " matches no conformance case (see `metrale conformance --list`)");
  }
  return chosen;
}

void print_list(const std::vector<conformance::Case>& chosen, bool json) {
  if (json) {
    nlohmann::json names = nlohmann::json::array();
    for (const auto& c : chosen) names.push_back(c.name);
    std::cout << names.dump(2) << '\n';
  } else {
    for (const auto& c : chosen) std::cout << c.name << '\n';
  }
}

void run_conformance(CliContext& ctx, const ConformanceOptions& o) {
  const bool json = o.json || ctx.json;
  const std::vector<conformance::Case> chosen = chosen_cases(o);
  if (o.list) return print_list(chosen, json);
  auto backend = ctx.registry().select(o.backend.empty() ? std::nullopt : std::optional(o.backend));
  // Consistency first (manifest against plugin and docs/kernels.md, the paths it claims), then
  // the cases: every failure is a named result.
  std::vector<conformance::CaseResult> results = conformance::manifest_checks(*backend);
  const std::vector<conformance::CoverageRow> coverage = conformance::coverage(*backend);
  for (auto& r : conformance::path_failures(coverage)) results.push_back(std::move(r));
  // Progress on stderr: the qwen3-30b-a3b case alone takes a while on a small CPU.
  StderrProgress progress(!o.quiet);
  const std::string stage = "conformance on " + backend->name();
  for (size_t i = 0; i < chosen.size(); ++i) {
    progress.update(stage, static_cast<double>(i) / static_cast<double>(chosen.size()));
    results.push_back(conformance::run_case(*backend, chosen[i]));
  }
  progress.finish(stage);
  const auto summary = conformance::summarize(results);
  const conformance::Verdict verdict = conformance::verdict(*backend, results);
  if (!verdict.certified) ctx.exit_code = kExitError;

  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) rows.push_back(result_json(r));
    nlohmann::json out{{"backend", backend->name()},
                       {"target", backend->target()},
                       {"plugin_version", backend->plugin_version()},
                       {"cases", rows},
                       {"coverage", coverage_json(coverage)},
                       {"summary", {{"passed", summary.passed}, {"failed", summary.failed}, {"skipped", summary.skipped}}},
                       {"certified", verdict.certified},
                       {"verdict", verdict.text}};
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << "backend " << backend->name() << " (" << backend->target() << ", plugin " << backend->plugin_version()
            << ")\n";
  std::string listing = conformance::render_results(results);
  const size_t last_line = listing.rfind('\n', listing.size() - 2);  // the summary line goes after the coverage
  std::cout << listing.substr(0, last_line + 1) << "coverage of the layer paths:\n"
            << conformance::render_coverage(coverage) << listing.substr(last_line + 1) << verdict.text << '\n';
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
