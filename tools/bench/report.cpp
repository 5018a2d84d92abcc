// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench/report.hpp"

#include <metrale/status.hpp>

#include <iterator>

namespace metrale::bench {

const std::string kBudget =
    "|y - r| <= 2^-7 |r| + 2^-12 sum|x*w| against the double-precision reference of the variant's tier "
    "(layers/reference/reference.hpp; int8/fp8 inputs quantized as the tier defines, docs/quantization.md)";

namespace {

std::vector<Shape> report_shapes(const ReportRequest& r, std::string& source) {
  if ((r.n == 0) != (r.k == 0)) throw Error(Status::invalid_argument, "--n and --k go together (got only one of them)");
  if (r.n && !r.model.empty()) throw Error(Status::invalid_argument, "--model and --n/--k exclude each other");
  const std::vector<uint32_t>& ms = r.ms.empty() ? kDefaultBenchMs : r.ms;
  if (r.n) {
    std::vector<Shape> shapes;
    for (uint32_t m : ms) shapes.push_back({"custom", m, r.n, r.k});
    source = "--n " + std::to_string(r.n) + " --k " + std::to_string(r.k);
    return shapes;
  }
  const std::string model = r.model.empty() ? kDefaultBenchModel : r.model;
  source = "model " + model;
  return model_shapes(model, ms);
}

}  // namespace

Report run_report(const Registry& registry, const ReportRequest& request) {
  Report report;
  const std::vector<Shape> shapes = report_shapes(request, report.shape_source);
  // Backends: each one named (a refusal when one is not loaded), else the selected one.
  std::vector<std::shared_ptr<Backend>> backends;
  if (request.backends.empty()) backends.push_back(registry.select());
  for (const auto& name : request.backends) backends.push_back(registry.select(name));
  for (auto& backend : backends) {
    const auto variants = matching_variants(*backend, request.glob);
    if (variants.empty()) {
      std::string family;
      for (const auto& v : family_variants(*backend)) family += (family.empty() ? "" : ", ") + v.full_name();
      report.unmatched += "\n  backend '" + backend->name() + "': no GEMV/GEMM variant of a documented family matches '" +
                          request.glob + "'; it has: " + (family.empty() ? "none" : family);
      continue;
    }
    const std::string stage = "bench on " + backend->name();
    if (request.progress) request.progress(stage, 0.0);
    auto got = run(*backend, variants, shapes, request.run, request.baseline);
    if (request.progress) request.progress(stage, 1.0);
    report.rows.insert(report.rows.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
  }
  if (report.rows.empty()) throw Error(Status::not_found, "nothing to bench:" + report.unmatched);
  report.baseline_found = request.baseline.empty();
  for (const auto& r : report.rows) {
    ++report.counts[static_cast<size_t>(r.disposition)];
    report.baseline_found = report.baseline_found || r.ratio.has_value();
  }
  report.verify_text = request.run.verify_columns
                           ? "up to " + std::to_string(request.run.verify_columns) +
                                 " evenly spaced output columns per shape (first and last included), every row"
                           : "every output element";
  return report;
}

std::string rerun_command(const Row& r, const Options& run) {
  std::string cmd = "metrale bench '" + r.variant.full_name() + "' --backend " + r.backend + " --m " + std::to_string(r.shape.m) +
                    " --n " + std::to_string(r.shape.n) + " --k " + std::to_string(r.shape.k) + " --warmup " +
                    std::to_string(run.warmup) + " --repeat " + std::to_string(run.repeat) + " --verify-cols " +
                    std::to_string(run.verify_columns);
  if (run.seed != 1) cmd += " --seed " + std::to_string(run.seed);
  return cmd;
}

namespace {

nlohmann::json row_json(const Row& r, const Options& run) {
  nlohmann::json j{{"backend", r.backend},
                   {"target", r.target},
                   {"module", r.variant.module},
                   {"kernel", r.variant.name},
                   {"tier", r.variant.tier()},
                   {"shape", {{"label", r.shape.label}, {"m", r.shape.m}, {"n", r.shape.n}, {"k", r.shape.k}}},
                   {"disposition", disposition_name(r.disposition)},
                   {"why", r.why},
                   {"weight_bytes", r.weight_bytes},
                   {"flops", r.flops},
                   {"rerun", rerun_command(r, run)},
                   {"timing", nullptr},
                   {"error", nullptr},
                   {"ratio_to_baseline", nullptr}};
  if (r.seconds.empty()) return j;
  j["timing"] = {{"warmup", run.warmup}, {"repeat", run.repeat}, {"seconds", r.seconds},
                 {"median_s", r.median_s}, {"min_s", r.min_s},   {"max_s", r.max_s}};
  j["gb_per_s"] = r.gb_per_s;
  j["gflop_per_s"] = r.gflop_per_s;
  j["ratio_to_baseline"] = r.ratio ? nlohmann::json(*r.ratio) : nlohmann::json(nullptr);
  j["error"] = {{"max_abs", r.max_abs},          {"max_rel", r.max_rel},       {"worst_budget_ratio", r.worst_ratio},
                {"checked", r.checked},          {"violations", r.violations}, {"columns_checked", r.columns_checked},
                {"summary", r.check_summary}};
  return j;
}

}  // namespace

nlohmann::json report_json(const Report& report, const ReportRequest& request) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : report.rows) rows.push_back(row_json(r, request.run));
  using D = Disposition;
  return {{"glob", request.glob},
          {"shapes_from", report.shape_source},
          {"baseline", request.baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(request.baseline)},
          {"verify", {{"columns", report.verify_text}, {"budget", kBudget}}},
          {"rows", rows},
          {"summary",
           {{"passed", report.count(D::passed)}, {"incorrect", report.count(D::incorrect)},
            {"not_supported", report.count(D::not_supported)}, {"not_run", report.count(D::not_run)}}}};
}

}  // namespace metrale::bench
