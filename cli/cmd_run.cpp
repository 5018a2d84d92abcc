// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale run`: build a model's FFN on the selected backend from synthetic or safetensors
// weights, run forward passes on synthetic or given (--input) activations, and report the audit
// rows of the build, the path each step takes, timing (median of repeats) with achieved weight
// bandwidth, and with --check the comparison against the double-precision reference (exit 1 when
// over budget); --output writes the output rows. docs/layers.md.
//
// The work is done once into a RunReport; the table and JSON renderers only print it.
#include "commands.hpp"
#include "tier_flags.hpp"

#include <layers/io/checkpoint.hpp>
#include <layers/io/activation_io.hpp>
#include <layers/ffn/ffn.hpp>
#include <cli/progress.hpp>
#include <layers/core/quant_synthetic.hpp>
#include <layers/reference/reference.hpp>
#include <layers/io/tensor_source.hpp>
#include <layers/linear/selectors.hpp>
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
namespace fs = std::filesystem;

constexpr const char* kDefaultModel = "small-dense";

struct RunOptions {
  std::string model;  // empty: the config.json beside --weights, else kDefaultModel
  std::string weights;
  std::optional<uint32_t> layer;
  std::string save_weights;
  std::string input;
  std::string output;
  std::optional<uint32_t> tokens;  // default 1; with --input, the tensor's rows
  std::string backend;
  uint32_t repeat = 5;
  uint32_t warmup = 1;
  uint64_t seed = 1;
  bool check = false;
  bool json = false;
  bool per_expert = false;
  bool quiet = false;
  TierFlags tiers;  // --activation-quantization, --weight-quantization, --expert-quantization, --group-size
};

struct Timing {
  std::vector<double> seconds;
  double median = 0, min = 0, max = 0;
  double pass_bytes = 0, gbps = 0, gflops = 0;
};

// Everything `metrale run` prints, computed before anything is printed.
struct RunReport {
  ModelConfig config;
  std::string backend, target, device;
  uint32_t min_k = 0;
  std::string weight_source;
  double weight_bytes = 0;
  std::string input_source;
  std::string output_path;  // empty: not written
  uint32_t m = 0;
  std::vector<AuditRow> audit;
  std::vector<PlanStep> plan;
  Timing timing;
  std::string checksum_hex;
  std::optional<std::vector<uint32_t>> expert_rows;
  std::optional<Comparison> comparison;
  std::vector<std::pair<std::string, std::optional<std::string>>> levers;
  std::string quantization;            // what the checkpoint declares, or the synthetic formats
  std::vector<std::string> tiers;      // one line per projection set: family, activations, why
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

// --model, else the config.json that belongs to --weights (never a preset in its place: weights
// run against the wrong shapes would fail later with a less clear message, or not at all).
ModelConfig resolve_run_config(const RunOptions& o) {
  if (!o.model.empty()) return resolve_model(o.model);
  if (o.weights.empty()) return resolve_model(kDefaultModel);
  const fs::path weights(o.weights);
  const fs::path dir = fs::is_directory(weights) ? weights : weights.parent_path();
  const fs::path config = (dir.empty() ? fs::path(".") : dir) / "config.json";
  if (!fs::is_regular_file(config)) {
    throw Error(Status::not_found, o.weights + ": no model config: expected " + config.string() +
                                       " beside the weights; pass --model PRESET|config.json to say which model they belong to");
  }
  return load_model_config(config);
}

// The weights to run and what they are: a checkpoint (its layer's config replaces the model's,
// its declared activations become the default tier), else synthetic in the formats asked for.
struct RunWeights {
  FfnWeights weights;
  std::string source;
  std::string quantization;
  std::optional<ActivationQuant> declared_activations;
  std::string declared_source;
};

// Synthetic formats from --weight-quantization / --expert-quantization (or their levers); with a
// checkpoint those may only repeat what it declares.
SyntheticFormats synthetic_formats(const RunOptions& o, const RunWeights* loaded) {
  const WeightTierRequest request = weight_tier_request(o.tiers.weight_quantization, o.tiers.expert_quantization);
  SyntheticFormats f = cli::synthetic_formats(o.tiers);
  if (loaded) {
    const FfnWeights& w = loaded->weights;
    const WeightFormat have = w.dense ? w.dense->format() : w.moe ? w.moe->gate_up.format : WeightFormat::w4a16;
    for (const auto& [asked, source] : {std::pair{request.weights, request.weights_source}, std::pair{request.experts, request.experts_source}}) {
      if (asked && *asked != have) {
        throw Refusal(source + " asks for " + weight_tier_name(*asked) + " weights, but " + loaded->source +
                      " holds " + weight_tier_name(have) + " weights (" + loaded->quantization + "): a checkpoint's format is what it declares");
      }
    }
  }
  return f;
}

RunWeights obtain_weights(const RunOptions& o, ModelConfig& config, StderrProgress& progress) {
  RunWeights r;
  if (!o.weights.empty()) {
    progress.update("loading " + o.weights, 0.0);
    const bool project = has_project_names(TensorSource(o.weights));
    if (project) {
      r.weights = load_ffn_weights(o.weights, config, WeightLoadOptions{o.layer});
      r.quantization = "metrale W4A16 (symmetric, group 128)";
    } else {
      LoadedCheckpoint c = load_checkpoint(o.weights, o.layer, o.model.empty() ? std::nullopt : std::optional(config));
      config = c.config;
      r.weights = std::move(c.weights);
      r.quantization = c.quant.summary() + " (" + c.quant.source + "), layer " + std::to_string(c.layer);
      r.declared_activations = declared_activation_tier(c.quant);
      r.declared_source = c.quant.source;
    }
    progress.finish("loading " + o.weights);
    r.source = o.weights;
    synthetic_formats(o, &r);  // a format asked for must agree with the checkpoint's
  } else {
    progress.update("generating synthetic weights", 0.0);
    const SyntheticFormats f = synthetic_formats(o, nullptr);
    r.weights = synthetic_ffn_weights(config, o.seed, f);
    progress.finish("generating synthetic weights");
    r.source = "synthetic (seed " + std::to_string(o.seed) + ")";
    r.quantization = std::string(weight_tier_name(f.weights)) +
                     (f.experts && *f.experts != f.weights ? std::string(", experts ") + weight_tier_name(*f.experts) : "") +
                     (f.weights == WeightFormat::w4_zp || f.weights == WeightFormat::w8_zp ? ", group " + std::to_string(f.group) : "");
  }
  if (!o.save_weights.empty()) {
    save_ffn_weights(r.weights, config, o.save_weights);
    logger()->info("wrote {} ({}) to {}", r.source, format_bytes(static_cast<double>(r.weights.bytes())), o.save_weights);
  }
  return r;
}

// The rows to run: tensor `x` of --input (its rows set m), else synthetic rows from --seed.
std::vector<uint16_t> obtain_input(const RunOptions& o, const ModelConfig& config, uint32_t& m, std::string& source) {
  if (o.input.empty()) {
    m = o.tokens.value_or(1);
    if (m == 0) throw Error(Status::invalid_argument, "--tokens must be at least 1");
    source = "synthetic (seed " + std::to_string(o.seed + 1) + ")";
    return synthetic_activations(m, config.hidden_size, o.seed + 1);
  }
  Activations x = read_activations(o.input, "x", config.hidden_size);
  if (o.tokens && *o.tokens != x.rows) {
    throw Error(Status::invalid_argument, "--tokens " + std::to_string(*o.tokens) + " conflicts with --input " + o.input +
                                              ": tensor 'x' has " + std::to_string(x.rows) +
                                              " rows (leave --tokens out: the rows of 'x' are the tokens)");
  }
  m = x.rows;
  source = o.input + " (tensor 'x', " + std::string(dtype_name(x.source_dtype)) +
           (x.source_dtype == Dtype::bf16 ? ")" : ", rounded to bf16)");
  return std::move(x.bf16);
}

// Warmup, then timed passes; y is the output of the last pass.
Timing time_passes(const RunOptions& o, Backend& b, FfnComponent& ffn, DevicePtr x, uint32_t m, DevicePtr& y,
                   StderrProgress& progress) {
  for (uint32_t i = 0; i < o.warmup; ++i) {
    y = ffn.forward(x, m);
    b.synchronize();
  }
  Timing t;
  const std::string stage = "timing " + std::to_string(o.repeat) + " passes";
  for (uint32_t i = 0; i < o.repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    y = ffn.forward(x, m);
    b.synchronize();
    t.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    progress.update(stage, static_cast<double>(i + 1) / o.repeat);
  }
  progress.finish(stage);
  std::vector<double> sorted = t.seconds;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  t.median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  t.min = sorted.front();
  t.max = sorted.back();
  return t;
}

// FNV-1a of the output bytes: equal outputs across runs (or backends) are easy to spot.
std::string fnv1a64_hex(std::span<const uint16_t> values) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint16_t v : values) {
    for (int shift : {0, 8}) {
      h ^= (v >> shift) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

Comparison check_against_reference(const FfnWeights& weights, const ModelConfig& config, const FfnComponent& ffn,
                                   std::span<const uint16_t> x, uint32_t m, std::span<const uint16_t> got,
                                   StderrProgress& progress) {
  ReferenceOptions ro;
  ffn.reference_tiers(ro);  // the tiers the layers ended at: the reference computes their math
  std::string stage = "reference";
  ro.progress = [&](std::string_view part, double f) {
    stage = "reference " + std::string(part);
    progress.update(stage, f);
  };
  ReferenceOutput ref = reference_ffn(weights, config, x, m, ro);
  progress.finish(stage);
  return compare_to_reference(got, ref);
}

// The levers that steer the selectors: a selector that decided "null" without a lookup leaves
// no audit row, so this is where "m128 v2 not requested" shows.
std::vector<std::pair<std::string, std::optional<std::string>>> selector_levers() {
  static constexpr const char* kSelectorLevers[] = {"METRALE_W4A16_K64_MIN_K", "METRALE_NO_W4A16_K64",
                                                    "METRALE_W4A16_VARIANT",   "METRALE_NO_TGEMM_PIPELINE3",
                                                    "METRALE_NO_K64_PIPELINE3", "METRALE_NO_K64_N64"};
  std::vector<std::pair<std::string, std::optional<std::string>>> out;
  for (const char* name : kSelectorLevers) out.emplace_back(name, lever_raw(name));
  return out;
}

// Builds the layers: every lookup lands in the audit after `before`; each distinct tier the
// projection sets ended at is reported.
FfnComponent build_layers(Backend& b, const RunOptions& o, const RunWeights& w, RunReport& r, StderrProgress& progress) {
  const uint64_t before = b.audit().last_sequence();
  progress.update("building the layers on " + b.name(), 0.0);
  FfnBuildOptions options{MoeBuildOptions{.use_grouped_kernel = !o.per_expert},
                          activation_tier(o.tiers, w.declared_activations, w.declared_source)};
  FfnComponent ffn = FfnComponent::build(b, r.config, w.weights, options);
  progress.finish("building the layers on " + b.name());
  for (const auto& row : b.audit().snapshot()) {
    if (row.sequence <= before || row.backend != b.name()) continue;
    r.audit.push_back(row);
    if (const auto* tier = row.annotation("tier_note"); tier && std::find(r.tiers.begin(), r.tiers.end(), *tier) == r.tiers.end()) r.tiers.push_back(*tier);
  }
  return ffn;
}

// Timed passes, the output read back (checksum, --output).
std::vector<uint16_t> run_passes(const RunOptions& o, Backend& b, FfnComponent& ffn, const std::vector<uint16_t>& x,
                                 RunReport& r, StderrProgress& progress) {
  DeviceBuffer dx(b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  DevicePtr y{};
  r.timing = time_passes(o, b, ffn, dx.ptr(), r.m, y, progress);
  r.timing.pass_bytes = static_cast<double>(ffn.last_weight_bytes());
  r.timing.gbps = r.timing.median > 0 ? r.timing.pass_bytes / r.timing.median / 1e9 : 0;
  r.timing.gflops = r.timing.median > 0 ? pass_flops(r.config, r.m) / r.timing.median / 1e9 : 0;
  std::vector<uint16_t> got(x.size());
  b.copy_to_host(got.data(), y, got.size() * 2);
  b.synchronize();
  r.checksum_hex = fnv1a64_hex(got);
  if (!o.output.empty()) {
    write_activations(o.output, "y", got, r.m, r.config.hidden_size,
                      {{"producer", "metrale run"}, {"model", r.config.source}, {"backend", r.backend},
                       {"weights", r.weight_source}, {"input", r.input_source}});
    r.output_path = o.output;
  }
  return got;
}

RunReport compute_report(CliContext& ctx, const RunOptions& o) {
  if (o.repeat == 0) throw Error(Status::invalid_argument, "--repeat must be at least 1");
  StderrProgress progress(!o.quiet);
  RunReport r;
  r.config = resolve_run_config(o);
  auto backend = ctx.registry().select(o.backend.empty() ? std::nullopt : std::optional(o.backend));
  Backend& b = *backend;
  r.backend = b.name();
  r.target = b.target();
  r.device = b.device_name();
  // Read the input before the weights: a wrong --input fails fast.
  const std::vector<uint16_t> x = obtain_input(o, r.config, r.m, r.input_source);
  const RunWeights w = obtain_weights(o, r.config, progress);
  r.weight_source = w.source;
  r.quantization = w.quantization;
  r.weight_bytes = static_cast<double>(w.weights.bytes());
  FfnComponent ffn = build_layers(b, o, w, r, progress);
  const std::vector<uint16_t> got = run_passes(o, b, ffn, x, r, progress);
  if (o.check) r.comparison = check_against_reference(w.weights, r.config, ffn, x, r.m, got, progress);
  r.plan = ffn.plan(r.m);
  r.min_k = w4a16_k64_min_k();
  if (auto* moe = ffn.moe()) r.expert_rows = moe->last_expert_rows();
  r.levers = selector_levers();
  return r;
}

void render_json(const RunReport& r, const RunOptions& o) {
  nlohmann::json levers = nlohmann::json::object();
  for (const auto& [name, value] : r.levers) levers[name] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  nlohmann::json out{{"model", r.config.to_json()},
                     {"backend", r.backend},
                     {"target", r.target},
                     {"w4a16_k64_min_k", r.min_k},
                     {"weights", {{"source", r.weight_source}, {"bytes", r.weight_bytes}, {"quantization", r.quantization}}},
                     {"tiers", r.tiers},
                     {"input", r.input_source},
                     {"output", r.output_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.output_path)},
                     {"levers", levers},
                     {"tokens", r.m},
                     {"output_fnv1a64", r.checksum_hex},
                     {"audit", nlohmann::json::parse(render_audit_json(r.audit))}};
  auto steps = nlohmann::json::array();
  for (const auto& s : r.plan) steps.push_back({{"step", s.step}, {"kernel", s.kernel}, {"why", s.why}, {"grid", s.grid}});
  out["plan"] = steps;
  const Timing& t = r.timing;
  out["timing"] = {{"repeat", o.repeat},  {"seconds", t.seconds}, {"median_s", t.median}, {"weight_bytes_per_pass", t.pass_bytes},
                   {"weight_gb_per_s", t.gbps}, {"gflop_per_s", t.gflops}};
  if (r.expert_rows) out["expert_rows"] = *r.expert_rows;
  if (const auto& c = r.comparison) {
    out["check"] = {{"passed", c->passed()},       {"checked", c->checked},
                    {"violations", c->violations}, {"excluded_rows", c->excluded_rows},
                    {"max_abs_error", c->max_abs}, {"max_rel_error", c->max_rel},
                    {"worst_budget_ratio", c->worst_ratio},
                    {"tolerance", {{"relative", kRefRelTolerance}, {"scale", kRefScaleTolerance}}}};
  }
  std::cout << out.dump(2) << '\n';
}

void render_text(const RunReport& r, const RunOptions& o) {
  std::string lever_line;
  for (const auto& [name, value] : r.levers)
    lever_line += (lever_line.empty() ? "" : ", ") + name + (value ? "=" + *value : " unset");
  std::cout << "model    " << describe(r.config) << '\n'
            << "backend  " << r.backend << " (" << r.target << ", " << r.device << "), w4a16_k64_min_k = " << r.min_k << '\n'
            << "weights  " << r.weight_source << ", " << format_bytes(r.weight_bytes) << ", " << r.quantization << '\n'
            << "input    " << r.input_source << '\n';
  for (const auto& tier : r.tiers) std::cout << "tier     " << tier << '\n';
  std::cout << "levers   " << lever_line << '\n'
            << "\naudit: the lookups made building the layers\n"
            << render_audit_table(r.audit) << "\nplan for m = " << r.m << " rows\n";
  std::vector<std::vector<std::string>> table;
  for (const auto& s : r.plan) {
    table.push_back({s.step, s.kernel,
                     "[" + std::to_string(s.grid[0]) + ", " + std::to_string(s.grid[1]) + ", " + std::to_string(s.grid[2]) + "]",
                     s.why});
  }
  std::cout << render_table({"step", "kernel", "grid", "why"}, table);
  if (r.expert_rows) {
    const auto& counts = *r.expert_rows;
    const auto idle = std::count(counts.begin(), counts.end(), 0u);
    std::cout << "routing: " << r.m * r.config.num_experts_per_tok << " rows over " << counts.size() - static_cast<size_t>(idle)
              << " experts (" << idle << " idle), max " << *std::max_element(counts.begin(), counts.end())
              << " rows on one expert\n";
  }
  const Timing& t = r.timing;
  std::cout << "\ntiming   " << o.repeat << " passes of " << r.m << " rows: median " << fixed(t.median * 1e3, 3) << " ms (min "
            << fixed(t.min * 1e3, 3) << ", max " << fixed(t.max * 1e3, 3) << "); " << format_bytes(t.pass_bytes)
            << " of weights per pass = " << fixed(t.gbps, 2) << " GB/s, " << fixed(t.gflops, 2)
            << " GFLOP/s\noutput   fnv1a64 " << r.checksum_hex;
  if (!r.output_path.empty()) std::cout << ", written to " << r.output_path << " (tensor 'y', BF16)";
  std::cout << '\n';
  if (r.comparison) {
    std::cout << "check    " << r.comparison->summary() << '\n'
              << "         budget per element: 2^-7 |ref| + 2^-12 sum|x*w| + 4 max|w|*ulp(x) for bf16 intermediates x "
                 "(MoE: per expert row; docs/layers.md)\n";
  }
}

void run(CliContext& ctx, const RunOptions& o) {
  const RunReport report = compute_report(ctx, o);
  if (o.json || ctx.json) render_json(report, o);
  else render_text(report, o);
  if (report.comparison && !report.comparison->passed()) ctx.exit_code = kExitError;
}

}  // namespace

void register_run(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Build a model's FFN on a backend, run it, time it, and check it against the reference");
  std::string preset_names;
  for (const auto& p : presets()) preset_names += "\n  " + std::string(p.name) + ": " + std::string(p.description);
  cmd->add_option("--model", o->model,
                  "A config.json path (or its directory) or a preset (default: the config.json beside --weights; "
                  "without --weights, " + std::string(kDefaultModel) + "):" + preset_names);
  cmd->add_option("--weights", o->weights,
                  "Weights: a .safetensors file, a *.safetensors.index.json, or a directory; the project's tensor names "
                  "or a symmetric group-128 GPTQ checkpoint (default: synthetic from --seed)");
  cmd->add_option("--layer", o->layer, "GPTQ checkpoints: the decoder layer whose FFN to load (default: the lowest)");
  cmd->add_option("--save-weights", o->save_weights, "Write the weights used (project tensor names) to this file");
  cmd->add_option("--input", o->input,
                  "Activations: a .safetensors file with tensor 'x' [m, hidden] (BF16, F16 or F32; rounded to bf16); "
                  "m comes from the tensor (default: synthetic rows from --seed)");
  cmd->add_option("--output", o->output, "Write the output rows to this .safetensors file (tensor 'y', BF16 [m, hidden])");
  cmd->add_option("--tokens", o->tokens, "Rows per pass: 1 decode, 2..8 batched decode, more prefill (default 1)");
  cmd->add_option("--backend", o->backend, "Backend (default: METRALE_BACKEND or the highest priority)");
  cmd->add_option("--repeat", o->repeat, "Timed passes (the median is reported)")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed passes first")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of synthetic weights and inputs")->capture_default_str();
  cmd->add_flag("--check", o->check, "Compare with the double-precision reference; exit 1 when over budget");
  cmd->add_flag("--per-expert", o->per_expert, "MoE: skip the grouped-expert kernel and launch per expert");
  add_tier_flags(*cmd, o->tiers);
  cmd->add_flag("--json", o->json, "Machine-readable JSON on stdout");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([&ctx, o] { run(ctx, *o); });
}

}  // namespace metrale::cli
