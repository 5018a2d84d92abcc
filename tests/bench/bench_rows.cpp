// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench_rows.hpp"

#include "ffn/ffn.hpp"
#include "reference/reference.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace metrale::bench {

using namespace metrale::layers;

namespace {

Variant variant(std::string name, WeightFormat format, ActivationQuant act, VariantPaths paths, bool moe,
                bool act_order = false, bool symmetric = false, ActivationScaling scaling = {}) {
  Variant v;
  v.name = std::move(name);
  v.formats.weights = format;
  v.formats.group = kW4a16GroupSize;
  v.formats.symmetric = symmetric;  // zero-point formats: asymmetric unless asked, zero points anywhere
  v.formats.act_order = act_order;
  v.scaling = scaling;
  v.activations = act;
  v.paths = paths;
  v.moe = moe;
  return v;
}

double pass_flops(const ModelConfig& c, uint32_t m) {
  const double M = m, H = c.hidden_size;
  if (c.ffn_kind() == FfnKind::dense) return 2 * M * 3 * H * c.intermediate_size;
  if (c.ffn_kind() == FfnKind::moe) {
    double f = 2 * M * c.num_experts * H + 2 * M * c.num_experts_per_tok * 3 * H * c.moe_intermediate_size;
    if (c.shared_expert_intermediate_size) f += 2 * M * 3 * H * c.shared_expert_intermediate_size;
    return f;
  }
  return 0;
}

FfnComponent build_ffn(Backend& b, const ModelConfig& c, const Variant& v) {
  FfnBuildOptions options;
  options.activations.tier = v.activations;
  options.activations.is_explicit = v.activations != ActivationQuant::bf16;
  options.activations.source = "metrale-bench-layers variant " + v.name;
  options.activations.scaling = v.scaling;
  FfnWeights w = synthetic_ffn_weights(c, 1, v.formats);
  return FfnComponent::build(b, c, w, options);  // host weights freed on return
}

std::string kernels_of(const FfnComponent& ffn, uint32_t m) {
  std::vector<std::string> seen;
  for (const auto& step : ffn.plan(m)) {
    if (step.step.find("gate_up") == std::string::npos && step.step.find("down") == std::string::npos) continue;
    if (std::find(seen.begin(), seen.end(), step.kernel) == seen.end()) seen.push_back(step.kernel);
  }
  std::string out;
  for (const auto& k : seen) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// The median of `repeat` passes of m rows, caches evicted before each.
double time_passes(Backend& b, FfnComponent& ffn, const ModelConfig& c, uint32_t m, uint32_t repeat, unsigned threads,
                   CacheEvictor& evictor) {
  auto x = synthetic_activations(m, c.hidden_size, 2);
  DeviceBuffer dx(b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  ffn.forward(dx.ptr(), m);  // warm-up
  b.synchronize();
  std::vector<double> times;
  for (uint32_t i = 0; i < repeat; ++i) {
    evictor.evict();
    const double start = clock_now();
    ffn.forward(dx.ptr(), m);
    b.synchronize();
    times.push_back(seconds_since(start, threads));
  }
  return median(times);
}

}  // namespace

bool Variant::covers(uint32_t m, bool moe_preset) const {
  if (moe_preset ? !moe : !dense) return false;
  switch (paths) {
    case VariantPaths::all: return true;
    case VariantPaths::decode_and_prefill: return m == 1 || m >= 64;
    case VariantPaths::decode: return m == 1;
    case VariantPaths::prefill: return m >= 64;
  }
  return false;
}

const std::vector<Variant>& all_variants() {
  using A = ActivationQuant;
  using F = WeightFormat;
  using P = VariantPaths;
  static const std::vector<Variant> variants{
      variant("w4a16", F::w4a16, A::bf16, P::all, true),
      variant("w4-zp", F::w4_zp, A::bf16, P::decode_and_prefill, false),
      variant("w4-zp-act", F::w4_zp, A::bf16, P::decode_and_prefill, false, true),
      // compressed-tensors' GPTQModifier act-order (actorder "group", symmetric by default): w4-zp
      // with the permutation of its weight_g_idx and every zero point 8.
      variant("ct-act-order", F::w4_zp, A::bf16, P::decode_and_prefill, false, true, true),
      variant("w8a16", F::w8_zp, A::bf16, P::decode, false),
      variant("fp8", F::fp8, A::bf16, P::decode, true),
      // Block FP8 as its checkpoints declare it: E4M3 activations with a scale per 128 columns.
      variant("fp8-block", F::fp8, A::fp8, P::decode, true, false, false, ActivationScaling{.group128 = true}),
      variant("w4a8", F::w4a16, A::int8, P::prefill, false),
      variant("w8a8", F::w8_zp, A::int8, P::prefill, false),
      // Unquantized checkpoints' weights: the bytes a bf16 model reads, decode and prefill.
      variant("bf16", F::bf16, A::bf16, P::decode_and_prefill, true),
  };
  return variants;
}

std::vector<std::string> variant_names() {
  std::vector<std::string> out;
  for (const auto& v : all_variants()) out.push_back(v.name);
  return out;
}

std::vector<Variant> select_variants(const std::vector<std::string>& names) {
  std::vector<Variant> out;
  for (const auto& v : all_variants())
    if (std::find(names.begin(), names.end(), v.name) != names.end()) out.push_back(v);
  const auto known = variant_names();
  for (const auto& n : names) {
    if (std::find(known.begin(), known.end(), n) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error(Status::invalid_argument, "--variants: unknown variant '" + n + "' (known: " + list + ")");
  }
  return out;
}

std::string path_of(uint32_t m) { return m == 1 ? "decode" : m <= 8 ? "batched" : "prefill"; }

void set_ratios(Rate& r, const Denominators& d) {
  const double dot = r.int8_dot ? d.int8_dot : d.bf16_dot;
  r.of_bandwidth = r.gb_per_s / d.read_bw;
  r.of_bf16_peak = d.bf16_dot > 0 ? r.gflop_per_s / d.bf16_dot : 0;
  r.of_int8_peak = d.int8_dot > 0 ? r.gflop_per_s / d.int8_dot : 0;
  r.memory_s = r.weight_bytes / (d.read_bw * 1e9);
  r.dot_s = dot > 0 ? r.flops / (dot * 1e9) : 0;
  r.roofline_s = std::max(r.memory_s, r.dot_s);
  r.bound = r.dot_s > r.memory_s ? "dot" : "memory";
  r.of_roofline = r.roofline_s / r.median_s;
}

std::vector<Rate> measure_rates(Backend& b, const RateRequest& request, unsigned threads, const Denominators& d,
                                CacheEvictor& evictor) {
  std::vector<Rate> rates;
  const std::string on = threads_label(threads);
  for (const auto& name : request.presets) {
    const ModelConfig c = resolve_model(name);
    const bool moe = c.ffn_kind() == FfnKind::moe;
    for (const auto& v : request.variants) {
      std::vector<uint32_t> ms;
      for (uint32_t m : request.m_list)
        if (v.covers(m, moe)) ms.push_back(m);
      if (ms.empty()) continue;
      std::fprintf(stderr, "%s %s (%s): generating and uploading synthetic weights...\n", name.c_str(), v.name.c_str(),
                   on.c_str());
      FfnComponent ffn = build_ffn(b, c, v);
      for (uint32_t m : ms) {
        std::fprintf(stderr, "%s %s (%s): %s, m = %u...\n", name.c_str(), v.name.c_str(), on.c_str(),
                     path_of(m).c_str(), m);
        Rate r;
        r.preset = name;
        r.variant = v.name;
        r.ffn = ffn_kind_name(c.ffn_kind());
        r.path = path_of(m);
        r.m = m;
        r.threads = threads;
        r.int8_dot = v.activations == ActivationQuant::int8;
        r.median_s = time_passes(b, ffn, c, m, request.repeat, threads, evictor);
        r.kernels = kernels_of(ffn, m);
        r.weight_bytes = static_cast<double>(ffn.last_weight_bytes());
        r.flops = pass_flops(c, m);
        r.gb_per_s = r.weight_bytes / r.median_s / 1e9;
        r.gflop_per_s = r.flops / r.median_s / 1e9;
        set_ratios(r, d);
        rates.push_back(r);
      }
    }
  }
  return rates;
}

}  // namespace metrale::bench
