// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale bench GLOB`: verify and time every w4a16 GEMM family variant of one or more backends
// whose name matches GLOB, on a model preset's projection shapes or an explicit --m/--n/--k
// (layers/bench/bench.hpp). One row per variant and shape with its disposition and the command
// that reruns just that row. Exit 1 when nothing matched, or a variant was incorrect or failed to
// launch.
#include "commands.hpp"

#include <layers/bench/bench.hpp>
#include <layers/model/progress.hpp>
#include <layers/model/reference.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>

namespace metrale::cli {

namespace {

struct BenchOptions {
  std::string glob;
  std::vector<std::string> backends;
  std::string model;
  std::vector<uint32_t> ms;
  uint32_t n = 0;
  uint32_t k = 0;
  std::string baseline;
  bench::Options run;
  bool json = false;
  bool csv = false;
  bool quiet = false;
};

constexpr const char* kDefaultModel = "qwen3-32b";
const std::vector<uint32_t> kDefaultMs{1, 8, 64};

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

std::string sci(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2e", v);
  return text;
}

std::string shape_text(const bench::Shape& s) {
  return (s.label == "custom" ? std::string() : s.label + " ") + "m" + std::to_string(s.m) + " n" + std::to_string(s.n) + " k" + std::to_string(s.k);
}

std::string rerun_command(const bench::Row& r, const BenchOptions& o) {
  std::string cmd = "metrale bench '" + r.variant.full_name() + "' --backend " + r.backend + " --m " + std::to_string(r.shape.m) +
                    " --n " + std::to_string(r.shape.n) + " --k " + std::to_string(r.shape.k) + " --warmup " +
                    std::to_string(o.run.warmup) + " --repeat " + std::to_string(o.run.repeat) + " --verify-cols " +
                    std::to_string(o.run.verify_columns);
  if (o.run.seed != 1) cmd += " --seed " + std::to_string(o.run.seed);
  return cmd;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

const std::string kBudget =
    "|y - r| <= 2^-7 |r| + 2^-12 sum|x*w| against the double-precision reference (layers/model/reference.hpp)";

void run_bench(CliContext& ctx, const BenchOptions& o) {
  const bool json = o.json || ctx.json;
  if (json && o.csv) throw Error(Status::invalid_argument, "--json and --csv exclude each other");
  if ((o.n == 0) != (o.k == 0)) throw Error(Status::invalid_argument, "--n and --k go together (got only one of them)");
  if (o.n && !o.model.empty()) throw Error(Status::invalid_argument, "--model and --n/--k exclude each other");
  const std::vector<uint32_t>& ms = o.ms.empty() ? kDefaultMs : o.ms;
  std::vector<bench::Shape> shapes;
  std::string shape_source;
  if (o.n) {
    for (uint32_t m : ms) shapes.push_back({"custom", m, o.n, o.k});
    shape_source = "--n " + std::to_string(o.n) + " --k " + std::to_string(o.k);
  } else {
    const std::string model = o.model.empty() ? kDefaultModel : o.model;
    shapes = bench::model_shapes(model, ms);
    shape_source = "model " + model;
  }

  // Backends: each --backend (a refusal when one is not loaded), else the selected one.
  std::vector<std::shared_ptr<Backend>> backends;
  if (o.backends.empty()) backends.push_back(ctx.registry().select());
  for (const auto& name : o.backends) backends.push_back(ctx.registry().select(name));

  layers::StderrProgress progress(!o.quiet);
  std::vector<bench::Row> rows;
  std::string unmatched;
  for (auto& backend : backends) {
    const auto variants = bench::matching_variants(*backend, o.glob);
    if (variants.empty()) {
      std::string family;
      for (const auto& v : bench::family_variants(*backend)) family += (family.empty() ? "" : ", ") + v.full_name();
      unmatched += "\n  backend '" + backend->name() + "': no w4a16-family kernel (x, qweight, scales, y, m, n, k) matches '" +
                   o.glob + "'; it has: " + (family.empty() ? "none" : family);
      continue;
    }
    const std::string stage = "bench on " + backend->name();
    progress.update(stage, 0.0);
    auto got = bench::run(*backend, variants, shapes, o.run, o.baseline);
    progress.finish(stage);
    rows.insert(rows.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
  }
  if (rows.empty()) throw Error(Status::not_found, "nothing to bench:" + unmatched);
  if (!unmatched.empty()) std::cerr << "metrale bench: skipped" << unmatched << '\n';

  size_t counts[4] = {0, 0, 0, 0};
  for (const auto& r : rows) ++counts[static_cast<int>(r.disposition)];
  const size_t incorrect = counts[static_cast<int>(bench::Disposition::incorrect)];
  const size_t not_run = counts[static_cast<int>(bench::Disposition::not_run)];
  if (incorrect || not_run) ctx.exit_code = kExitError;
  bool baseline_found = o.baseline.empty();
  for (const auto& r : rows) baseline_found = baseline_found || r.ratio.has_value();
  const std::string verify_text = o.run.verify_columns
                                      ? "up to " + std::to_string(o.run.verify_columns) +
                                            " evenly spaced output columns per shape (first and last included), every row"
                                      : "every output element";

  if (json) {
    nlohmann::json out_rows = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json j{{"backend", r.backend},
                       {"target", r.target},
                       {"module", r.variant.module},
                       {"kernel", r.variant.name},
                       {"shape", {{"label", r.shape.label}, {"m", r.shape.m}, {"n", r.shape.n}, {"k", r.shape.k}}},
                       {"disposition", bench::disposition_name(r.disposition)},
                       {"why", r.why},
                       {"weight_bytes", r.weight_bytes},
                       {"flops", r.flops},
                       {"rerun", rerun_command(r, o)}};
      if (!r.seconds.empty()) {
        j["timing"] = {{"warmup", o.run.warmup}, {"repeat", o.run.repeat}, {"seconds", r.seconds},
                       {"median_s", r.median_s}, {"min_s", r.min_s},        {"max_s", r.max_s}};
        j["gb_per_s"] = r.gb_per_s;
        j["gflop_per_s"] = r.gflop_per_s;
        j["ratio_to_baseline"] = r.ratio ? nlohmann::json(*r.ratio) : nlohmann::json(nullptr);
        j["error"] = {{"max_abs", r.max_abs},          {"max_rel", r.max_rel},       {"worst_budget_ratio", r.worst_ratio},
                      {"checked", r.checked},          {"violations", r.violations}, {"columns_checked", r.columns_checked},
                      {"summary", r.check_summary}};
      } else {
        j["timing"] = nullptr;
        j["error"] = nullptr;
        j["ratio_to_baseline"] = nullptr;
      }
      out_rows.push_back(j);
    }
    nlohmann::json out{{"glob", o.glob},
                       {"shapes_from", shape_source},
                       {"baseline", o.baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.baseline)},
                       {"verify", {{"columns", verify_text}, {"budget", kBudget}}},
                       {"rows", out_rows},
                       {"summary",
                        {{"passed", counts[0]}, {"incorrect", counts[1]}, {"not_supported", counts[2]}, {"not_run", counts[3]}}}};
    std::cout << out.dump(2) << '\n';
  } else if (o.csv) {
    std::cout << "backend,target,module,kernel,label,m,n,k,median_s,min_s,max_s,gb_per_s,gflop_per_s,ratio_to_baseline,"
                 "max_abs,max_rel,worst_budget_ratio,disposition,why,rerun\n";
    for (const auto& r : rows) {
      const bool ran = !r.seconds.empty();
      std::cout << csv_field(r.backend) << ',' << csv_field(r.target) << ',' << r.variant.module << ',' << r.variant.name << ','
                << csv_field(r.shape.label) << ',' << r.shape.m << ',' << r.shape.n << ',' << r.shape.k << ','
                << (ran ? sci(r.median_s) : "") << ',' << (ran ? sci(r.min_s) : "") << ',' << (ran ? sci(r.max_s) : "") << ','
                << (ran ? fixed(r.gb_per_s, 3) : "") << ',' << (ran ? fixed(r.gflop_per_s, 3) : "") << ','
                << (r.ratio ? fixed(*r.ratio, 3) : "") << ',' << (ran ? sci(r.max_abs) : "") << ','
                << (ran ? sci(r.max_rel) : "") << ',' << (ran ? fixed(r.worst_ratio, 3) : "") << ','
                << bench::disposition_name(r.disposition) << ',' << csv_field(r.why) << ',' << csv_field(rerun_command(r, o))
                << '\n';
    }
  } else {
    std::vector<std::vector<std::string>> table;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      const bool ran = !r.seconds.empty();
      table.push_back({std::to_string(i + 1), r.backend, r.target, r.variant.full_name(), shape_text(r.shape),
                       ran ? fixed(r.median_s * 1e3, 3) + " (" + fixed(r.min_s * 1e3, 3) + ".." + fixed(r.max_s * 1e3, 3) + ")" : "-",
                       ran ? fixed(r.gb_per_s, 2) : "-", ran ? fixed(r.gflop_per_s, 1) : "-",
                       r.ratio ? fixed(*r.ratio, 2) + "x" : "-", ran ? sci(r.max_abs) : "-", ran ? sci(r.max_rel) : "-",
                       ran ? fixed(r.worst_ratio, 3) : "-", bench::disposition_name(r.disposition)});
    }
    std::cout << "bench '" << o.glob << "' on " << shape_source << "; warm-up " << o.run.warmup << ", " << o.run.repeat
              << " timed launches (median (min..max) ms); GB/s counts the W4A16 weight bytes read once\n"
              << "verified on " << verify_text << "; budget " << kBudget << "; 'budget' = worst |y - r| / allowed\n"
              << (o.baseline.empty() ? "" : "'vs base' = median of " + o.baseline + " / median of the row (> 1: faster)\n")
              << render_table({"#", "backend", "target", "kernel", "shape", "ms", "GB/s", "GFLOP/s", "vs base", "max abs",
                               "max rel", "budget", "disposition"},
                              table);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::cout << "#" << i + 1 << ' ' << bench::disposition_name(rows[i].disposition);
      if (!rows[i].why.empty()) std::cout << ": " << rows[i].why;
      std::cout << "\n   rerun: " << rerun_command(rows[i], o) << '\n';
    }
    std::cout << counts[0] << " passed, " << incorrect << " incorrect, " << counts[2] << " not-supported, " << not_run
              << " not-run\n";
  }
  if (!baseline_found)
    std::cerr << "metrale bench: baseline '" << o.baseline << "' did not run on any shape; no ratios\n";
}

}  // namespace

void register_bench(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Verify and time the w4a16 GEMM family variants matching GLOB on each backend and shape; exit 1 when nothing "
      "matched or a variant was incorrect");
  cmd->add_option("glob", o->glob, "Kernel name or module/name glob ('*', '?'), e.g. 'w4a16_gemm_t*'")->required();
  cmd->add_option("--backend", o->backends, "Backend to bench; repeat for several (default: METRALE_BACKEND or the highest priority)");
  cmd->add_option("--model", o->model,
                  std::string("Preset or config.json whose FFN projection shapes to bench (default: ") + kDefaultModel + ")");
  cmd->add_option("--m", o->ms, "Rows; repeat or comma-separate for several (default: 1,8,64)")->delimiter(',');
  cmd->add_option("--n", o->n, "Output columns of an explicit shape (with --k)");
  cmd->add_option("--k", o->k, "Depth of an explicit shape, a multiple of 128 (with --n)");
  cmd->add_option("--baseline", o->baseline, "Variant (name or module/name) whose median the other rows are compared to");
  cmd->add_option("--warmup", o->run.warmup, "Untimed launches before timing")->capture_default_str();
  cmd->add_option("--repeat", o->run.repeat, "Timed launches (median, min, max)")->capture_default_str();
  cmd->add_option("--verify-cols", o->run.verify_columns,
                  "Output columns verified per shape, evenly spaced (0: all); keeps the double reference cheap on big shapes")
      ->capture_default_str();
  cmd->add_option("--seed", o->run.seed, "Seed of the synthetic weights and inputs")->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable JSON on stdout");
  cmd->add_flag("--csv", o->csv, "CSV on stdout");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([&ctx, o] { run_bench(ctx, *o); });
}

}  // namespace metrale::cli
