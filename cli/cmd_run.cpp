// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale run`: build a model's FFN on the selected backend from synthetic or safetensors
// weights, run forward passes, print the audit rows of the build, the path each step takes,
// timing (median of repeats) with achieved weight bandwidth, and with --check the comparison
// against the double-precision reference (exit 1 when over budget). docs/layers.md.
#include "commands.hpp"

#include <layers/model/ffn.hpp>
#include <layers/model/progress.hpp>
#include <layers/model/reference.hpp>
#include <layers/selectors.hpp>
#include <metrale/levers.hpp>
#include <metrale/log.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace metrale::cli {

namespace {

using namespace metrale::layers;

struct RunOptions {
  std::string model = "small-dense";
  std::string weights;
  std::optional<uint32_t> layer;
  std::string save_weights;
  uint32_t tokens = 1;
  std::string backend;
  uint32_t repeat = 5;
  uint32_t warmup = 1;
  uint64_t seed = 1;
  bool check = false;
  bool json = false;
  bool per_expert = false;
  bool quiet = false;
};

std::string format_bytes(double bytes) {
  char text[64];
  if (bytes >= 1e9) std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6) std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  else std::snprintf(text, sizeof text, "%.1f kB", bytes / 1e3);
  return text;
}

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

std::string describe(const ModelConfig& c) {
  std::ostringstream out;
  out << c.source << ": " << ffn_kind_name(c.ffn_kind()) << " FFN, hidden " << c.hidden_size;
  if (c.ffn_kind() == FfnKind::dense) out << ", intermediate " << c.intermediate_size;
  if (c.ffn_kind() == FfnKind::moe) {
    out << ", " << c.num_experts << " experts, " << c.num_experts_per_tok << " active, expert intermediate "
        << c.moe_intermediate_size << (c.norm_topk_prob ? ", renormalised" : "");
    if (c.shared_expert_intermediate_size) out << ", shared expert " << c.shared_expert_intermediate_size;
  }
  out << ", " << c.hidden_act;
  if (!c.model_type.empty()) out << " (model_type " << c.model_type << ")";
  return out.str();
}

// Multiply-adds of one pass, counted on the rows each GEMM actually runs.
double pass_flops(const ModelConfig& c, uint32_t m) {
  const double M = m, H = c.hidden_size;
  switch (c.ffn_kind()) {
    case FfnKind::none: return 0;
    case FfnKind::dense: return 2 * M * 3 * H * c.intermediate_size;
    case FfnKind::moe: {
      const double T = M * c.num_experts_per_tok;
      double f = 2 * M * c.num_experts * H + 2 * T * 3 * H * c.moe_intermediate_size;
      if (c.shared_expert_intermediate_size) f += 2 * M * 3 * H * c.shared_expert_intermediate_size + 2 * M * H;
      return f;
    }
  }
  return 0;
}

void run(CliContext& ctx, const RunOptions& o) {
  const bool json = o.json || ctx.json;
  if (o.tokens == 0) throw Error(Status::invalid_argument, "--tokens must be at least 1");
  if (o.repeat == 0) throw Error(Status::invalid_argument, "--repeat must be at least 1");
  StderrProgress progress(!o.quiet);

  ModelConfig config = resolve_model(o.model);
  auto backend = ctx.registry().select(o.backend.empty() ? std::nullopt : std::optional(o.backend));
  Backend& b = *backend;

  // Weights: a checkpoint, else synthetic from the seed.
  FfnWeights weights;
  std::string weight_source;
  if (!o.weights.empty()) {
    progress.update("loading " + o.weights, 0.0);
    weights = load_ffn_weights(o.weights, config, WeightLoadOptions{o.layer});
    progress.finish("loading " + o.weights);
    weight_source = o.weights;
  } else {
    progress.update("generating synthetic weights", 0.0);
    weights = synthetic_ffn_weights(config, o.seed);
    progress.finish("generating synthetic weights");
    weight_source = "synthetic (seed " + std::to_string(o.seed) + ")";
  }
  if (!o.save_weights.empty()) {
    save_ffn_weights(weights, config, o.save_weights);
    logger()->info("wrote {} ({}) to {}", weight_source, format_bytes(static_cast<double>(weights.bytes())), o.save_weights);
  }
  const double host_weight_bytes = static_cast<double>(weights.bytes());

  // Build: every lookup it makes lands in the audit after `before`.
  uint64_t before = 0;
  for (const auto& row : b.audit().snapshot()) before = std::max(before, row.sequence);
  progress.update("building the layers on " + b.name(), 0.0);
  FfnComponent ffn = FfnComponent::build(b, config, weights, FfnBuildOptions{MoeBuildOptions{.use_grouped_kernel = !o.per_expert}});
  progress.finish("building the layers on " + b.name());
  std::vector<AuditRow> rows;
  for (const auto& row : b.audit().snapshot())
    if (row.sequence > before && row.backend == b.name()) rows.push_back(row);

  // Input and passes.
  const uint32_t m = o.tokens;
  std::vector<uint16_t> x = synthetic_activations(m, config.hidden_size, o.seed + 1);
  DeviceBuffer dx(b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  DevicePtr y{};
  for (uint32_t i = 0; i < o.warmup; ++i) {
    y = ffn.forward(dx.ptr(), m);
    b.synchronize();
  }
  std::vector<double> seconds;
  for (uint32_t i = 0; i < o.repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    y = ffn.forward(dx.ptr(), m);
    b.synchronize();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    progress.update("timing " + std::to_string(o.repeat) + " passes", static_cast<double>(i + 1) / o.repeat);
  }
  progress.finish("timing " + std::to_string(o.repeat) + " passes");
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                          : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  const double pass_bytes = static_cast<double>(ffn.last_weight_bytes());
  const double gbps = median > 0 ? pass_bytes / median / 1e9 : 0;
  const double gflops = median > 0 ? pass_flops(config, m) / median / 1e9 : 0;

  std::vector<uint16_t> got(x.size());
  b.copy_to_host(got.data(), y, got.size() * 2);
  b.synchronize();

  // FNV-1a of the output bytes: equal outputs across runs (or backends) are easy to spot.
  uint64_t checksum = 0xcbf29ce484222325ull;
  for (uint16_t v : got) {
    for (int shift : {0, 8}) {
      checksum ^= (v >> shift) & 0xffu;
      checksum *= 0x100000001b3ull;
    }
  }
  char checksum_hex[17];
  std::snprintf(checksum_hex, sizeof checksum_hex, "%016llx", static_cast<unsigned long long>(checksum));

  std::optional<Comparison> comparison;
  if (o.check) {
    ReferenceOptions ro;
    std::string stage = "reference";
    ro.progress = [&](std::string_view part, double f) {
      stage = "reference " + std::string(part);
      progress.update(stage, f);
    };
    ReferenceOutput ref = reference_ffn(weights, config, x, m, ro);
    progress.finish(stage);
    comparison = compare_to_reference(got, ref);
    if (!comparison->passed()) ctx.exit_code = kExitError;
  }

  const auto plan = ffn.plan(m);
  const uint32_t min_k = w4a16_k64_min_k();
  // The section-7 levers and their values: a selector that decided "null" without a lookup
  // leaves no audit row, so this is where "m128 v2 not requested" shows.
  static constexpr const char* kSelectorLevers[] = {"METRALE_W4A16_K64_MIN_K", "METRALE_NO_W4A16_K64",
                                                    "METRALE_W4A16_VARIANT",   "METRALE_NO_TGEMM_PIPELINE3",
                                                    "METRALE_NO_K64_PIPELINE3", "METRALE_NO_K64_N64"};
  std::string lever_line;
  nlohmann::json lever_json = nlohmann::json::object();
  for (const char* name : kSelectorLevers) {
    const auto value = lever_raw(name);
    lever_json[name] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
    lever_line += std::string(lever_line.empty() ? "" : ", ") + name + (value ? "=" + *value : " unset");
  }
  if (json) {
    nlohmann::json out{{"model", config.to_json()},
                       {"backend", b.name()},
                       {"target", b.target()},
                       {"w4a16_k64_min_k", min_k},
                       {"weights", {{"source", weight_source}, {"bytes", host_weight_bytes}}},
                       {"levers", lever_json},
                       {"tokens", m},
                       {"output_fnv1a64", checksum_hex},
                       {"audit", nlohmann::json::parse(render_audit_json(rows))}};
    auto steps = nlohmann::json::array();
    for (const auto& s : plan) steps.push_back({{"step", s.step}, {"kernel", s.kernel}, {"why", s.why}, {"grid", s.grid}});
    out["plan"] = steps;
    out["timing"] = {{"repeat", o.repeat},    {"seconds", seconds},     {"median_s", median},
                     {"weight_bytes_per_pass", pass_bytes}, {"weight_gb_per_s", gbps}, {"gflop_per_s", gflops}};
    if (auto* moe = ffn.moe()) out["expert_rows"] = moe->last_expert_rows();
    if (comparison) {
      out["check"] = {{"passed", comparison->passed()},       {"checked", comparison->checked},
                      {"violations", comparison->violations}, {"excluded_rows", comparison->excluded_rows},
                      {"max_abs_error", comparison->max_abs}, {"max_rel_error", comparison->max_rel},
                      {"worst_budget_ratio", comparison->worst_ratio},
                      {"tolerance", {{"relative", kRefRelTolerance}, {"scale", kRefScaleTolerance}}}};
    }
    std::cout << out.dump(2) << '\n';
    return;
  }

  std::cout << "model    " << describe(config) << '\n'
            << "backend  " << b.name() << " (" << b.target() << ", " << b.device_name() << "), w4a16_k64_min_k = " << min_k
            << '\n'
            << "weights  " << weight_source << ", " << format_bytes(host_weight_bytes) << '\n'
            << "levers   " << lever_line << '\n'
            << "\naudit: the lookups made building the layers\n"
            << render_audit_table(rows) << "\nplan for m = " << m << " rows\n";
  std::vector<std::vector<std::string>> table;
  for (const auto& s : plan) {
    table.push_back({s.step, s.kernel,
                     "[" + std::to_string(s.grid[0]) + ", " + std::to_string(s.grid[1]) + ", " + std::to_string(s.grid[2]) + "]",
                     s.why});
  }
  std::cout << render_table({"step", "kernel", "grid", "why"}, table);
  if (auto* moe = ffn.moe()) {
    const auto& counts = moe->last_expert_rows();
    const auto idle = std::count(counts.begin(), counts.end(), 0u);
    std::cout << "routing: " << m * config.num_experts_per_tok << " rows over " << counts.size() - static_cast<size_t>(idle)
              << " experts (" << idle << " idle), max " << *std::max_element(counts.begin(), counts.end())
              << " rows on one expert\n";
  }
  std::cout << "\ntiming   " << o.repeat << " passes of " << m << " rows: median " << fixed(median * 1e3, 3) << " ms (min "
            << fixed(sorted.front() * 1e3, 3) << ", max " << fixed(sorted.back() * 1e3, 3) << "); "
            << format_bytes(pass_bytes) << " of weights per pass = " << fixed(gbps, 2) << " GB/s, " << fixed(gflops, 2)
            << " GFLOP/s\noutput   fnv1a64 " << checksum_hex << '\n';
  if (comparison) {
    std::cout << "check    " << comparison->summary() << '\n'
              << "         budget per element: 2^-7 |ref| + 2^-12 sum|x*w| + 4 max|w|*ulp(x) for bf16 intermediates x "
                 "(MoE: per expert row; docs/layers.md)\n";
  }
}

}  // namespace

void register_run(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Build a model's FFN on a backend, run it, time it, and check it against the reference");
  std::string preset_names;
  for (const auto& p : presets()) preset_names += "\n  " + std::string(p.name) + ": " + std::string(p.description);
  cmd->add_option("--model", o->model, "A config.json path (or its directory) or a preset:" + preset_names)
      ->capture_default_str();
  cmd->add_option("--weights", o->weights,
                  "Weights: a .safetensors file, a *.safetensors.index.json, or a directory; the project's tensor names "
                  "or a symmetric group-128 GPTQ checkpoint (default: synthetic from --seed)");
  cmd->add_option("--layer", o->layer, "GPTQ checkpoints: the decoder layer whose FFN to load (default: the lowest)");
  cmd->add_option("--save-weights", o->save_weights, "Write the weights used (project tensor names) to this file");
  cmd->add_option("--tokens", o->tokens, "Rows per pass: 1 decode, 2..8 batched decode, more prefill")
      ->capture_default_str();
  cmd->add_option("--backend", o->backend, "Backend (default: METRALE_BACKEND or the highest priority)");
  cmd->add_option("--repeat", o->repeat, "Timed passes (the median is reported)")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed passes first")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of synthetic weights and inputs")->capture_default_str();
  cmd->add_flag("--check", o->check, "Compare with the double-precision reference; exit 1 when over budget");
  cmd->add_flag("--per-expert", o->per_expert, "MoE: skip the grouped-expert kernel and launch per expert");
  cmd->add_flag("--json", o->json, "Machine-readable JSON on stdout");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([&ctx, o] { run(ctx, *o); });
}

}  // namespace metrale::cli
