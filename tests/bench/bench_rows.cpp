// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench_rows.hpp"

#include "state/state_pool.hpp"
#include "ffn/ffn.hpp"
#include "reference/reference.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace metrale::bench {

using namespace metrale::layers;

PoolWaker::PoolWaker(Backend& b)
    : b_(b), blocks_(std::max(1u, b.compute_units())), act_(b.kernel("act", "silu_mul")),
      gate_up_(b, size_t{blocks_} * 2 * kCols * 2), out_(b, size_t{blocks_} * kCols * 2) {
  b.memset(gate_up_.ptr(), 0, size_t{blocks_} * 2 * kCols * 2);
}

void PoolWaker::wake() {
  LaunchShape wide;
  wide.block = {256, 1, 1};
  wide.grid = {1, blocks_, 1};
  const double start = clock_now();
  while (clock_now() - start < 200e-6) b_.launch(act_, wide, gate_up_.ptr(), out_.ptr(), blocks_, kCols);
  b_.synchronize();
}

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

Variant attention_variant(std::string name, AttentionRows rows) {
  Variant v;
  v.name = std::move(name);
  v.dense = false;  // no FFN preset covers it
  v.attention = rows;
  return v;
}

Variant deltanet_variant(std::string name, DeltaNetRows rows) {
  Variant v;
  v.name = std::move(name);
  v.dense = false;  // no FFN preset covers it
  v.deltanet = rows;
  return v;
}

Variant model_variant() {
  Variant v;
  v.name = "model";
  v.dense = false;  // no FFN preset covers it
  v.whole_model = true;
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
  PoolWaker waker(b);
  std::vector<double> times;
  for (uint32_t i = 0; i < repeat; ++i) {
    evictor.evict(threads);
    waker.wake();
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
      attention_variant("attn-decode", AttentionRows::decode),
      attention_variant("attn-prefill", AttentionRows::prefill),
      deltanet_variant("deltanet-prefill", DeltaNetRows::prefill),
      deltanet_variant("deltanet-decode", DeltaNetRows::decode),
      model_variant(),
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

double tier_dot_of(const std::string& target, double bf16_dot, double fma) {
  if (target.rfind("cpu-", 0) != 0) return 0;
  return target.find("avx512bf16") != std::string::npos ? bf16_dot : fma;
}

void set_ratios(Rate& r, const Denominators& d) {
  const double dot = r.int8_dot ? d.int8_dot : d.tier_dot > 0 ? d.tier_dot : d.bf16_dot;
  r.of_bandwidth = r.gb_per_s / d.read_bw;
  r.of_bf16_peak = d.bf16_dot > 0 ? r.gflop_per_s / d.bf16_dot : 0;
  r.of_tier_peak = d.tier_dot > 0 ? r.gflop_per_s / d.tier_dot : 0;
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

std::string AttentionShape::name() const {
  return "attn-" + std::to_string(q_heads) + "q" + std::to_string(kv_heads) + "kv-d" + std::to_string(head_dim) +
         "-b" + std::to_string(block_size);
}

std::vector<AttentionRows> attention_rows(const std::vector<Variant>& variants) {
  std::vector<AttentionRows> out;
  for (const auto& v : variants)
    if (v.attention != AttentionRows::none) out.push_back(v.attention);
  return out;
}

double prefill_flops(const AttentionShape& s, uint32_t m) {
  const double pairs = double(m) * (double(m) + 1) / 2;  // row i attends to positions 0..i
  return 4.0 * s.head_dim * s.q_heads * pairs;
}

double decode_cache_bytes(const AttentionShape& s, uint32_t seqs, uint32_t context) {
  return 2.0 * seqs * context * s.kv_heads * s.head_dim * 2;  // K and V, bf16
}

namespace {

// A StatePool holding `seqs` sequences of `context` tokens, its pools filled with one random bf16
// pattern (the values do not change the time).
struct FilledCache {
  StatePool cache;
  std::vector<uint32_t> ids;

  FilledCache(Backend& b, const AttentionShape& s, uint32_t seqs, uint32_t context)
      : cache(b, {s.kv_heads, s.head_dim, s.block_size, seqs * ((context + s.block_size - 1) / s.block_size)}) {
    for (uint32_t i = 0; i < seqs; ++i) {
      ids.push_back(cache.add_sequence());
      cache.append(ids.back(), context);
    }
    const size_t pool = size_t{cache.shape().num_blocks} * s.kv_heads * s.block_size * s.head_dim * 2;
    const auto pattern = synthetic_activations(256, 4096, 7);  // 2 MiB
    const size_t piece = pattern.size() * 2;
    for (const DevicePtr p : {cache.k_cache(), cache.v_cache()})
      for (size_t at = 0; at < pool; at += piece) b.copy_to_device(p.offset(at), pattern.data(), std::min(piece, pool - at));
  }
};


// The median of `repeat` passes of `pass`, caches evicted before each, after a warm-up.
template <class F>
double time_attention(Backend& b, uint32_t repeat, unsigned threads, CacheEvictor& evictor, const F& pass) {
  pass();
  b.synchronize();
  PoolWaker waker(b);
  std::vector<double> times;
  for (uint32_t i = 0; i < repeat; ++i) {
    evictor.evict(threads);
    waker.wake();
    const double start = clock_now();
    pass();
    b.synchronize();
    times.push_back(seconds_since(start, threads));
  }
  return median(times);
}

Rate attention_rate(const AttentionShape& s, const char* variant, const char* path, uint32_t m, uint32_t context,
                    unsigned threads, const char* kernels) {
  Rate r;
  r.preset = s.name();
  r.variant = variant;
  r.ffn = "attention";
  r.path = path;
  r.m = m;
  r.context = context;
  r.threads = threads;
  r.kernels = kernels;
  return r;
}

Rate decode_rate(Backend& b, const AttentionShape& s, uint32_t seqs, uint32_t context, uint32_t repeat,
                 unsigned threads, const Denominators& d, CacheEvictor& evictor) {
  FilledCache filled(b, s, seqs, context);
  const StatePool::DecodeTables tables = filled.cache.decode_tables(filled.ids);
  const uint32_t partitions = (tables.max_blocks * s.block_size + 511) / 512;  // attn_decode's 512-token splits
  const DeviceBuffer q = device_copy(b, synthetic_activations(seqs * s.q_heads, s.head_dim, 3));
  const DeviceBuffer block_tables = device_copy(b, tables.block_tables), context_lens = device_copy(b, tables.context_lens);
  const DeviceBuffer partials(b, size_t{seqs} * s.q_heads * partitions * (s.head_dim + 2) * 4);
  const DeviceBuffer out(b, size_t{seqs} * s.q_heads * s.head_dim * 2);
  const KernelHandle decode = b.kernel("attn", "attn_decode"), combine = b.kernel("attn", "attn_decode_combine");
  LaunchShape split_grid, head_grid;
  split_grid.block = head_grid.block = {128, 1, 1};
  split_grid.grid = {partitions, seqs * s.kv_heads, 1};
  head_grid.grid = {s.q_heads, seqs, 1};
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const uint32_t num_blocks = filled.cache.shape().num_blocks;
  const double seconds = time_attention(b, repeat, threads, evictor, [&] {
    b.launch(decode, split_grid, q.ptr(), filled.cache.k_cache(), filled.cache.v_cache(), block_tables.ptr(),
             context_lens.ptr(), partials.ptr(), seqs, s.q_heads, s.kv_heads, s.head_dim, s.block_size,
             tables.max_blocks, num_blocks, scale);
    b.launch(combine, head_grid, partials.ptr(), context_lens.ptr(), out.ptr(), seqs, s.q_heads, s.head_dim,
             partitions);
  });
  Rate r = attention_rate(s, "attn-decode", "decode", seqs, context, threads, "attn_decode, attn_decode_combine");
  finish(r, seconds, decode_cache_bytes(s, seqs, context), 4.0 * s.head_dim * s.q_heads * seqs * context, d);
  return r;
}

Rate prefill_rate(Backend& b, const AttentionShape& s, uint32_t m, uint32_t repeat, unsigned threads,
                  const Denominators& d, CacheEvictor& evictor) {
  FilledCache filled(b, s, 1, m);
  const auto table = filled.cache.block_table(filled.ids[0]);
  const DeviceBuffer q = device_copy(b, synthetic_activations(m * s.q_heads, s.head_dim, 5));
  const DeviceBuffer block_table = device_copy(b, std::vector<int32_t>(table.begin(), table.end()));
  const DeviceBuffer out(b, size_t{m} * s.q_heads * s.head_dim * 2);
  const KernelHandle prefill = b.kernel("attn", "attn_prefill");
  LaunchShape grid;
  grid.block = {128, 1, 1};
  grid.grid = {(m + 63) / 64, s.kv_heads, 1};  // 64 query rows per block
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const uint32_t past = 0, num_blocks = filled.cache.shape().num_blocks;
  const double seconds = time_attention(b, repeat, threads, evictor, [&] {
    b.launch(prefill, grid, q.ptr(), filled.cache.k_cache(), filled.cache.v_cache(), block_table.ptr(), out.ptr(), m,
             past, s.q_heads, s.kv_heads, s.head_dim, s.block_size, num_blocks, scale);
  });
  Rate r = attention_rate(s, "attn-prefill", "prefill", m, m, threads, "attn_prefill");
  finish(r, seconds, decode_cache_bytes(s, 1, m), prefill_flops(s, m), d);
  return r;
}

}  // namespace

std::vector<Rate> measure_attention_rates(Backend& b, const AttentionRequest& request, unsigned threads,
                                          const Denominators& d, CacheEvictor& evictor) {
  std::vector<Rate> rates;
  const std::string on = threads_label(threads), shape = request.shape.name();
  for (const AttentionRows rows : request.rows) {
    if (rows == AttentionRows::decode) {
      for (uint32_t seqs : request.seqs)
        for (uint32_t context : request.contexts) {
          std::fprintf(stderr, "%s attn-decode (%s): %u sequence(s) of %u tokens...\n", shape.c_str(), on.c_str(),
                       seqs, context);
          rates.push_back(decode_rate(b, request.shape, seqs, context, request.repeat, threads, d, evictor));
        }
    } else if (rows == AttentionRows::prefill) {
      for (uint32_t m : request.prefill_m) {
        std::fprintf(stderr, "%s attn-prefill (%s): m = %u...\n", shape.c_str(), on.c_str(), m);
        rates.push_back(prefill_rate(b, request.shape, m, request.repeat, threads, d, evictor));
      }
    }
  }
  return rates;
}

void finish(Rate& r, double seconds, double bytes, double flops, const Denominators& d) {
  r.median_s = seconds;
  r.weight_bytes = bytes;
  r.flops = flops;
  r.gb_per_s = bytes / seconds / 1e9;
  r.gflop_per_s = flops / seconds / 1e9;
  set_ratios(r, d);
}

}  // namespace metrale::bench
