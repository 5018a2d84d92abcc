// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale bench GLOB`: verify and time every GEMV/GEMM variant of a documented family (w4a16 and
// the quantized families of docs/kernels.md) of one or more backends whose name matches GLOB, on
// a model preset's projection shapes or an explicit --m/--n/--k (tools/bench/bench.hpp). One row
// per variant and shape with its tier, its disposition and the command that reruns just that row.
// Exit 1 when nothing matched, or a variant was incorrect or failed to launch.
//
// The work is done once into a bench::Report (tools/bench/report.hpp); the text, JSON and CSV
// renderers only print it.
#include "commands.hpp"

#include <tools/bench/report.hpp>
#include <cli/progress.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>

namespace metrale::cli {

namespace {

// The command line: the report's request, and how to print it.
struct BenchOptions {
  bench::ReportRequest request;
  bool json = false;
  bool csv = false;
  bool quiet = false;
};

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

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void render_csv(const bench::Report& report, const BenchOptions& o) {
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
              << bench::disposition_name(r.disposition) << ',' << csv_field(r.why) << ',' << csv_field(bench::rerun_command(r, o.request.run))
              << ',' << r.variant.tier() << '\n';
  }
}

void render_text(const bench::Report& report, const BenchOptions& o) {
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
  const bench::ReportRequest& q = o.request;
  std::cout << "bench '" << q.glob << "' on " << report.shape_source << "; warm-up " << q.run.warmup << ", " << q.run.repeat
            << " timed launches (median (min..max) ms); GB/s counts the weight bytes (codes, scales, zero points) read once\n"
            << "verified on " << report.verify_text << "; budget " << bench::kBudget << "; 'budget' = worst |y - r| / allowed\n"
            << (q.baseline.empty() ? "" : "'vs base' = median of " + q.baseline + " / median of the row (> 1: faster)\n")
            << render_table({"#", "backend", "target", "kernel", "tier", "shape", "ms", "GB/s", "GFLOP/s", "vs base", "max abs",
                             "max rel", "budget", "disposition"},
                            table);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::cout << "#" << i + 1 << ' ' << bench::disposition_name(rows[i].disposition);
    if (!rows[i].why.empty()) std::cout << ": " << rows[i].why;
    std::cout << "\n   rerun: " << bench::rerun_command(rows[i], o.request.run) << '\n';
  }
  using D = bench::Disposition;
  std::cout << report.count(D::passed) << " passed, " << report.count(D::incorrect) << " incorrect, "
            << report.count(D::not_supported) << " not-supported, " << report.count(D::not_run) << " not-run\n";
}

void run_bench(CliContext& ctx, BenchOptions& o) {
  const bool json = o.json || ctx.json;
  if (json && o.csv) throw Error(Status::invalid_argument, "--json and --csv exclude each other");
  StderrProgress progress(!o.quiet);
  o.request.progress = [&progress](const std::string& stage, double fraction) {
    if (fraction < 1.0) progress.update(stage, fraction);
    else progress.finish(stage);
  };
  const bench::Report report = bench::run_report(ctx.registry(), o.request);
  if (!report.unmatched.empty()) std::cerr << "metrale bench: skipped" << report.unmatched << '\n';
  if (report.count(bench::Disposition::incorrect) || report.count(bench::Disposition::not_run)) ctx.exit_code = kExitError;
  if (json) std::cout << bench::report_json(report, o.request).dump(2) << '\n';
  else if (o.csv) render_csv(report, o);
  else render_text(report, o);
  if (!report.baseline_found)
    std::cerr << "metrale bench: baseline '" << o.request.baseline << "' did not run on any shape; no ratios\n";
}

}  // namespace

void register_bench(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Verify and time the GEMV/GEMM variants (w4a16 and the quantized families) matching GLOB on each backend and "
      "shape; exit 1 when nothing matched or a variant was incorrect");
  cmd->add_option("glob", o->request.glob, "Kernel name or module/name glob ('*', '?'), e.g. 'w4a16_gemm_t*'")->required();
  cmd->add_option("--backend", o->request.backends, "Backend to bench; repeat for several (default: METRALE_BACKEND or the highest priority)");
  cmd->add_option("--model", o->request.model,
                  std::string("Preset or config.json whose FFN projection shapes to bench (default: ") + bench::kDefaultBenchModel + ")");
  cmd->add_option("--m", o->request.ms, "Rows; repeat or comma-separate for several (default: 1,8,64)")->delimiter(',');
  cmd->add_option("--n", o->request.n, "Output columns of an explicit shape (with --k)");
  cmd->add_option("--k", o->request.k, "Depth of an explicit shape, a multiple of 128 (with --n)");
  cmd->add_option("--baseline", o->request.baseline, "Variant (name or module/name) whose median the other rows are compared to");
  cmd->add_option("--warmup", o->request.run.warmup, "Untimed launches before timing")->capture_default_str();
  cmd->add_option("--repeat", o->request.run.repeat, "Timed launches (median, min, max)")->capture_default_str();
  cmd->add_option("--verify-cols", o->request.run.verify_columns,
                  "Output columns verified per shape, evenly spaced (0: all); keeps the double reference cheap on big shapes")
      ->capture_default_str();
  cmd->add_option("--seed", o->request.run.seed, "Seed of the synthetic weights and inputs")->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable JSON on stdout");
  cmd->add_flag("--csv", o->csv, "CSV on stdout");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([&ctx, o] { run_bench(ctx, *o); });
}

}  // namespace metrale::cli
