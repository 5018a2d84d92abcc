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

#include "progress.hpp"

#include <layers/compose.hpp>
#include <layers/io/activation_io.hpp>
#include <metrale/status.hpp>
#include <layers/reference/reference.hpp>
#include <layers/linear/selectors.hpp>
#include <metrale/levers.hpp>
#include <metrale/log.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace metrale::cli {

namespace {

using namespace metrale::layers;

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
  std::string block = "ffn";  // ffn, attention, decoder
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

// The layer `run` asks for: the weights, model and tiers of the flags.
LayerRequest layer_request(const RunOptions& o, StderrProgress& progress) {
  LayerRequest request;
  request.model = o.model;
  request.weights = o.weights;
  request.layer = o.layer;
  request.seed = o.seed;
  apply_tier_flags(o.tiers, request);
  request.per_expert = o.per_expert;
  request.progress = [&progress](const std::string& stage, double fraction) { progress.report(stage, fraction); };
  return request;
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
  auto backend = ctx.registry().select(o.backend.empty() ? std::nullopt : std::optional(o.backend));
  Backend& b = *backend;
  r.backend = b.name();
  r.target = b.target();
  r.device = b.device_name();
  const LayerRequest request = layer_request(o, progress);
  LayerSource source = read_layer_source(request);
  r.config = source.config;
  r.weight_source = source.weights_source;
  r.quantization = source.quantization;
  r.weight_bytes = static_cast<double>(source.weights.bytes());
  if (!o.save_weights.empty()) {
    save_ffn_weights(source.weights, source.config, o.save_weights);
    logger()->info("wrote {} ({}) to {}", r.weight_source, format_bytes(r.weight_bytes), o.save_weights);
  }
  const std::vector<uint16_t> x = obtain_input(o, r.config, r.m, r.input_source);
  OpenedLayer layer = open_layer(b, std::move(source), request);
  r.audit = layer.audit;
  r.tiers = layer.tiers();
  const std::vector<uint16_t> got = run_passes(o, b, layer.ffn, x, r, progress);
  if (o.check) r.comparison = check_against_reference(layer.source.weights, r.config, layer.ffn, x, r.m, got, progress);
  r.plan = layer.ffn.plan(r.m);
  r.min_k = w4a16_k64_min_k();
  if (auto* moe = layer.ffn.moe()) r.expert_rows = moe->last_expert_rows();
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

// --block attention|decoder: the rows of --input as a schedule of batches over a KV cache
// (docs/layers.md, "Running one decoder layer"). Tensors beside 'x': 'positions', 'sequence',
// 'step' (I32/I64 [m], all optional).
struct BlockSchedule {
  std::vector<int32_t> positions;
  std::vector<uint32_t> sequence;  // 0..S-1, in order of first appearance
  std::vector<int64_t> step;
  uint32_t sequences = 0;
};

BlockSchedule read_schedule(const std::string& path, uint32_t m) {
  BlockSchedule s;
  const auto one = [&](const char* name) -> std::optional<std::vector<int64_t>> {
    if (path.empty()) return std::nullopt;
    auto t = read_int_tensor(path, name, 1);
    if (!t) return std::nullopt;
    if (t->shape[0] != m) {
      throw Error(Status::invalid_argument, path + ": tensor '" + name + "' has " + std::to_string(t->shape[0]) + " entries for " +
                                                std::to_string(m) + " rows of 'x'");
    }
    return std::move(t->values);
  };
  const auto seq = one("sequence");
  std::map<int64_t, uint32_t> ids;
  for (uint32_t r = 0; r < m; ++r) {
    const int64_t v = seq ? (*seq)[r] : 0;
    if (v < 0) throw Error(Status::invalid_argument, path + ": sequence[" + std::to_string(r) + "] = " + std::to_string(v) + " is negative");
    auto it = ids.try_emplace(v, static_cast<uint32_t>(ids.size())).first;
    s.sequence.push_back(it->second);
  }
  s.sequences = static_cast<uint32_t>(ids.size());
  s.step = one("step").value_or(std::vector<int64_t>(m, 0));
  for (uint32_t r = 1; r < m; ++r) {
    if (s.step[r] < s.step[r - 1]) {
      throw Error(Status::invalid_argument, path + ": tensor 'step' must not decrease (step[" + std::to_string(r) + "] = " +
                                                std::to_string(s.step[r]) + " after " + std::to_string(s.step[r - 1]) + ")");
    }
  }
  std::vector<int32_t> next(s.sequences, 0);
  const auto pos = one("positions");
  for (uint32_t r = 0; r < m; ++r) {
    const int64_t p = pos ? (*pos)[r] : next[s.sequence[r]]++;
    if (p < 0 || p > INT32_MAX) throw Error(Status::invalid_argument, path + ": positions[" + std::to_string(r) + "] = " + std::to_string(p));
    s.positions.push_back(static_cast<int32_t>(p));
  }
  return s;
}

// The schedule's steps as batches through the block, over a cache that holds every sequence's
// rows; y in the rows' order. Returns the batches run.
uint32_t run_schedule(Backend& b, OpenedBlock& opened, const BlockSchedule& s, const std::vector<uint16_t>& x,
                      std::vector<uint16_t>& y) {
  const auto m = static_cast<uint32_t>(s.positions.size());
  std::vector<uint64_t> lengths(s.sequences, 0);
  for (uint32_t r = 0; r < m; ++r) ++lengths[s.sequence[r]];
  constexpr uint32_t kBlockSize = 16;
  uint64_t blocks = 0;
  for (uint64_t l : lengths) blocks += (l + kBlockSize - 1) / kBlockSize;
  StatePoolShape shape{opened.config.attention.kv_heads, opened.config.attention.head_dim, kBlockSize,
                       static_cast<uint32_t>(std::max<uint64_t>(blocks, 1)), 1};
  if (opened.decoder && opened.decoder->deltanet())  // a DeltaNet layer: one recurrent slot per sequence
    shape.recurrent = RecurrentStateShape{1, opened.config.deltanet.state_bytes(), s.sequences};
  StatePool cache(b, shape);
  for (uint32_t i = 0; i < s.sequences; ++i) cache.add_sequence();
  const size_t row = opened.config.attention.hidden_size;
  DeviceBuffer dx;
  uint32_t batches = 0;
  for (uint32_t first = 0; first < m; ++batches) {
    uint32_t end = first;
    while (end < m && s.step[end] == s.step[first]) ++end;
    std::vector<SequenceRows> runs;
    for (uint32_t r = first; r < end; ++r) {
      if (!runs.empty() && runs.back().sequence == s.sequence[r]) ++runs.back().rows;
      else runs.push_back(SequenceRows{s.sequence[r], 1});
    }
    const uint32_t rows = end - first;
    SequenceBatch kv(b, cache, runs, std::span(s.positions).subspan(first, rows));
    dx.ensure(b, rows * row * 2);
    dx.upload(std::span<const uint16_t>(x).subspan(first * row, rows * row));
    const DevicePtr out = opened.block().forward(LayerBatch{dx.ptr(), rows, &kv});
    b.copy_to_host(y.data() + first * row, out, rows * row * 2);
    b.synchronize();
    first = end;
  }
  return batches;
}

void run_block(CliContext& ctx, const RunOptions& o) {
  if (o.check) {
    throw Error(Status::invalid_argument, "--check compares the FFN with the double-precision reference; for --block " + o.block +
                                              " the float64 decoder reference of tests/checkpoints (run_decoder_tests.py) checks it");
  }
  StderrProgress progress(!o.quiet);
  auto backend = ctx.registry().select(o.backend.empty() ? std::nullopt : std::optional(o.backend));
  Backend& b = *backend;
  LayerRequest request = layer_request(o, progress);
  request.block = o.block == "decoder" ? LayerBlock::decoder : LayerBlock::attention;
  OpenedBlock opened = open_block(b, request);
  const uint32_t hidden = opened.config.attention.hidden_size;
  uint32_t m = 0;
  std::string input_source;
  const std::vector<uint16_t> x = obtain_input(o, opened.config.ffn, m, input_source);
  const BlockSchedule s = read_schedule(o.input, m);
  std::vector<uint16_t> y(x.size());
  const auto start = std::chrono::steady_clock::now();
  const uint32_t batches = run_schedule(b, opened, s, x, y);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.output.empty()) {
    write_activations(o.output, "y", y, m, hidden,
                      {{"producer", "metrale run --block " + o.block}, {"backend", b.name()}, {"weights", opened.weights_source},
                       {"input", input_source}});
  }
  const std::vector<PlanStep> plan = opened.block().plan(m);
  if (o.json || ctx.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& p : plan) steps.push_back({{"step", p.step}, {"kernel", p.kernel}, {"why", p.why}, {"grid", p.grid}});
    const nlohmann::json out{{"block", o.block},
                             {"layer", opened.layer},
                             {"backend", b.name()},
                             {"target", b.target()},
                             {"weights", {{"source", opened.weights_source}, {"quantization", opened.quantization}}},
                             {"tiers", opened.tiers()},
                             {"input", input_source},
                             {"output", o.output.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.output)},
                             {"tokens", m},
                             {"sequences", s.sequences},
                             {"batches", batches},
                             {"seconds", seconds},
                             {"output_fnv1a64", fnv1a64_hex(y)},
                             {"audit", nlohmann::json::parse(render_audit_json(opened.audit))},
                             {"plan", steps}};
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << "block    " << o.block << " of layer " << opened.layer << " (" << opened.config.source << ")\n"
            << "backend  " << b.name() << " (" << b.target() << ", " << b.device_name() << ")\n"
            << "weights  " << opened.weights_source << ", " << opened.quantization << '\n'
            << "input    " << input_source << ", " << s.sequences << " sequence(s) in " << batches << " batch(es)\n";
  for (const auto& tier : opened.tiers()) std::cout << "tier     " << tier << '\n';
  std::cout << "\naudit: the lookups made building the block\n" << render_audit_table(opened.audit) << "\nplan for m = " << m << " rows\n";
  std::vector<std::vector<std::string>> table;
  for (const auto& p : plan) {
    table.push_back({p.step, p.kernel, "[" + std::to_string(p.grid[0]) + ", " + std::to_string(p.grid[1]) + ", " +
                                           std::to_string(p.grid[2]) + "]", p.why});
  }
  std::cout << render_table({"step", "kernel", "grid", "why"}, table) << "\ntiming   " << batches << " batches of " << m
            << " rows: " << fixed(seconds * 1e3, 3) << " ms\noutput   fnv1a64 " << fnv1a64_hex(y);
  if (!o.output.empty()) std::cout << ", written to " << o.output << " (tensor 'y', BF16)";
  std::cout << '\n';
}

void run(CliContext& ctx, const RunOptions& o) {
  if (o.block != "ffn") return run_block(ctx, o);
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
  cmd->add_option("--layer", o->layer, "Checkpoints: the decoder layer to load (default: the lowest with an FFN; 0 for --block "
                  "attention|decoder)");
  cmd->add_option("--block", o->block,
                  "The block of the layer to run: ffn (default), attention (self_attn alone, on normalised rows) or decoder (the "
                  "whole layer: norms, attention, FFN, residuals); attention and decoder need --weights and take from --input "
                  "optional 'positions', 'sequence' and 'step' I32/I64 [m] beside 'x'")
      ->check(CLI::IsMember({"ffn", "attention", "decoder"}));
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
