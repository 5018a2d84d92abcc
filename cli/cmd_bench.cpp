// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale bench GLOB`: verify and time every GEMV/GEMM variant of a documented family (w4a16 and
// the quantized families of docs/kernels.md) of one or more backends whose name matches GLOB, on
// a model preset's projection shapes or an explicit --m/--n/--k (tools/bench/bench.hpp). One row
// per variant and shape with its tier, its disposition and the command that reruns just that row.
// Exit 1 when nothing matched, or a variant was incorrect or failed to launch.
//
// The work is done once into a BenchReport; the text, JSON and CSV renderers only print it.
#include "commands.hpp"

#include <tools/bench/bench.hpp>
#include <cli/progress.hpp>
#include <layers/reference/reference.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <array>
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
    "|y - r| <= 2^-7 |r| + 2^-12 sum|x*w| against the double-precision reference of the variant's tier "
    "(layers/reference/reference.hpp; int8/fp8 inputs quantized as the tier defines, docs/quantization.md)";

// Everything `metrale bench` prints, computed before anything is printed.
struct BenchReport {
  std::string shape_source;
  std::vector<bench::Row> rows;
  std::array<size_t, 4> counts{};  // by bench::Disposition
  bool baseline_found = true;
  std::string verify_text;
  size_t count(bench::Disposition d) const { return counts[static_cast<size_t>(d)]; }
};

std::vector<bench::Shape> bench_shapes(const BenchOptions& o, std::string& source) {
  if ((o.n == 0) != (o.k == 0)) throw Error(Status::invalid_argument, "--n and --k go together (got only one of them)");
  if (o.n && !o.model.empty()) throw Error(Status::invalid_argument, "--model and --n/--k exclude each other");
  const std::vector<uint32_t>& ms = o.ms.empty() ? kDefaultMs : o.ms;
  if (o.n) {
    std::vector<bench::Shape> shapes;
    for (uint32_t m : ms) shapes.push_back({"custom", m, o.n, o.k});
    source = "--n " + std::to_string(o.n) + " --k " + std::to_string(o.k);
    return shapes;
  }
  const std::string model = o.model.empty() ? kDefaultModel : o.model;
  source = "model " + model;
  return bench::model_shapes(model, ms);
}

BenchReport compute_bench(CliContext& ctx, const BenchOptions& o) {
  BenchReport report;
  const std::vector<bench::Shape> shapes = bench_shapes(o, report.shape_source);
  // Backends: each --backend (a refusal when one is not loaded), else the selected one.
  std::vector<std::shared_ptr<Backend>> backends;
  if (o.backends.empty()) backends.push_back(ctx.registry().select());
  for (const auto& name : o.backends) backends.push_back(ctx.registry().select(name));
  StderrProgress progress(!o.quiet);
  std::string unmatched;
  for (auto& backend : backends) {
    const auto variants = bench::matching_variants(*backend, o.glob);
    if (variants.empty()) {
      std::string family;
      for (const auto& v : bench::family_variants(*backend)) family += (family.empty() ? "" : ", ") + v.full_name();
      unmatched += "\n  backend '" + backend->name() + "': no GEMV/GEMM variant of a documented family matches '" + o.glob +
                   "'; it has: " + (family.empty() ? "none" : family);
      continue;
    }
    const std::string stage = "bench on " + backend->name();
    progress.update(stage, 0.0);
    auto got = bench::run(*backend, variants, shapes, o.run, o.baseline);
    progress.finish(stage);
    report.rows.insert(report.rows.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
  }
  if (report.rows.empty()) throw Error(Status::not_found, "nothing to bench:" + unmatched);
  if (!unmatched.empty()) std::cerr << "metrale bench: skipped" << unmatched << '\n';
  report.baseline_found = o.baseline.empty();
  for (const auto& r : report.rows) {
    ++report.counts[static_cast<size_t>(r.disposition)];
    report.baseline_found = report.baseline_found || r.ratio.has_value();
  }
  report.verify_text = o.run.verify_columns ? "up to " + std::to_string(o.run.verify_columns) +
                                                  " evenly spaced output columns per shape (first and last included), every row"
                                            : "every output element";
  return report;
}

nlohmann::json row_json(const bench::Row& r, const BenchOptions& o) {
  nlohmann::json j{{"backend", r.backend},
                   {"target", r.target},
                   {"module", r.variant.module},
                   {"kernel", r.variant.name},
                   {"tier", r.variant.tier()},
                   {"shape", {{"label", r.shape.label}, {"m", r.shape.m}, {"n", r.shape.n}, {"k", r.shape.k}}},
                   {"disposition", bench::disposition_name(r.disposition)},
                   {"why", r.why},
                   {"weight_bytes", r.weight_bytes},
                   {"flops", r.flops},
                   {"rerun", rerun_command(r, o)},
                   {"timing", nullptr},
                   {"error", nullptr},
                   {"ratio_to_baseline", nullptr}};
  if (r.seconds.empty()) return j;
  j["timing"] = {{"warmup", o.run.warmup}, {"repeat", o.run.repeat}, {"seconds", r.seconds},
                 {"median_s", r.median_s}, {"min_s", r.min_s},        {"max_s", r.max_s}};
  j["gb_per_s"] = r.gb_per_s;
  j["gflop_per_s"] = r.gflop_per_s;
  j["ratio_to_baseline"] = r.ratio ? nlohmann::json(*r.ratio) : nlohmann::json(nullptr);
  j["error"] = {{"max_abs", r.max_abs},          {"max_rel", r.max_rel},       {"worst_budget_ratio", r.worst_ratio},
                {"checked", r.checked},          {"violations", r.violations}, {"columns_checked", r.columns_checked},
                {"summary", r.check_summary}};
  return j;
}

void render_json(const BenchReport& report, const BenchOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : report.rows) rows.push_back(row_json(r, o));
  using D = bench::Disposition;
  nlohmann::json out{{"glob", o.glob},
                     {"shapes_from", report.shape_source},
                     {"baseline", o.baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.baseline)},
                     {"verify", {{"columns", report.verify_text}, {"budget", kBudget}}},
                     {"rows", rows},
                     {"summary",
                      {{"passed", report.count(D::passed)}, {"incorrect", report.count(D::incorrect)},
                       {"not_supported", report.count(D::not_supported)}, {"not_run", report.count(D::not_run)}}}};
  std::cout << out.dump(2) << '\n';
}

void render_csv(const BenchReport& report, const BenchOptions& o) {
  std::cout << "backend,target,module,kernel,label,m,n,k,median_s,min_s,max_s,gb_per_s,gflop_per_s,ratio_to_baseline,"
               "max_abs,max_rel,worst_budget_ratio,disposition,why,rerun,tier\n";
  for (const auto& r : report.rows) {
    const bool ran = !r.seconds.empty();
    std::cout << csv_field(r.backend) << ',' << csv_field(r.target) << ',' << r.variant.module << ',' << r.variant.name << ','
              << csv_field(r.shape.label) << ',' << r.shape.m << ',' << r.shape.n << ',' << r.shape.k << ','
              << (ran ? sci(r.median_s) : "") << ',' << (ran ? sci(r.min_s) : "") << ',' << (ran ? sci(r.max_s) : "") << ','
              << (ran ? fixed(r.gb_per_s, 3) : "") << ',' << (ran ? fixed(r.gflop_per_s, 3) : "") << ','
              << (r.ratio ? fixed(*r.ratio, 3) : "") << ',' << (ran ? sci(r.max_abs) : "") << ','
              << (ran ? sci(r.max_rel) : "") << ',' << (ran ? fixed(r.worst_ratio, 3) : "") << ','
              << bench::disposition_name(r.disposition) << ',' << csv_field(r.why) << ',' << csv_field(rerun_command(r, o))
              << ',' << r.variant.tier() << '\n';
  }
}

void render_text(const BenchReport& report, const BenchOptions& o) {
  std::vector<std::vector<std::string>> table;
  const auto& rows = report.rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const bool ran = !r.seconds.empty();
    table.push_back({std::to_string(i + 1), r.backend, r.target, r.variant.full_name(), r.variant.tier(), shape_text(r.shape),
                     ran ? fixed(r.median_s * 1e3, 3) + " (" + fixed(r.min_s * 1e3, 3) + ".." + fixed(r.max_s * 1e3, 3) + ")" : "-",
                     ran ? fixed(r.gb_per_s, 2) : "-", ran ? fixed(r.gflop_per_s, 1) : "-",
                     r.ratio ? fixed(*r.ratio, 2) + "x" : "-", ran ? sci(r.max_abs) : "-", ran ? sci(r.max_rel) : "-",
                     ran ? fixed(r.worst_ratio, 3) : "-", bench::disposition_name(r.disposition)});
  }
  std::cout << "bench '" << o.glob << "' on " << report.shape_source << "; warm-up " << o.run.warmup << ", " << o.run.repeat
            << " timed launches (median (min..max) ms); GB/s counts the weight bytes (codes, scales, zero points) read once\n"
            << "verified on " << report.verify_text << "; budget " << kBudget << "; 'budget' = worst |y - r| / allowed\n"
            << (o.baseline.empty() ? "" : "'vs base' = median of " + o.baseline + " / median of the row (> 1: faster)\n")
            << render_table({"#", "backend", "target", "kernel", "tier", "shape", "ms", "GB/s", "GFLOP/s", "vs base", "max abs",
                             "max rel", "budget", "disposition"},
                            table);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::cout << "#" << i + 1 << ' ' << bench::disposition_name(rows[i].disposition);
    if (!rows[i].why.empty()) std::cout << ": " << rows[i].why;
    std::cout << "\n   rerun: " << rerun_command(rows[i], o) << '\n';
  }
  using D = bench::Disposition;
  std::cout << report.count(D::passed) << " passed, " << report.count(D::incorrect) << " incorrect, "
            << report.count(D::not_supported) << " not-supported, " << report.count(D::not_run) << " not-run\n";
}

void run_bench(CliContext& ctx, const BenchOptions& o) {
  const bool json = o.json || ctx.json;
  if (json && o.csv) throw Error(Status::invalid_argument, "--json and --csv exclude each other");
  const BenchReport report = compute_bench(ctx, o);
  if (report.count(bench::Disposition::incorrect) || report.count(bench::Disposition::not_run)) ctx.exit_code = kExitError;
  if (json) render_json(report, o);
  else if (o.csv) render_csv(report, o);
  else render_text(report, o);
  if (!report.baseline_found)
    std::cerr << "metrale bench: baseline '" << o.baseline << "' did not run on any shape; no ratios\n";
}

}  // namespace

void register_bench(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Verify and time the GEMV/GEMM variants (w4a16 and the quantized families) matching GLOB on each backend and "
      "shape; exit 1 when nothing matched or a variant was incorrect");
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
