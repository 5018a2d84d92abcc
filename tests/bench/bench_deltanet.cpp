// SPDX-License-Identifier: MIT OR Apache-2.0
// The Gated DeltaNet rows of metrale-bench-layers (variants deltanet-prefill and deltanet-decode)
// on Qwen3.5 shapes (DeltaNetShape). Prefill: deltanet/delta_rule_chunked alone over one run of m
// tokens, in the FLOP its WY form does (chunked_flops) per second against the dot peak. Decode: the
// whole DeltaNetLayer (bf16 projections, conv, delta_rule_recurrent over every sequence, gated
// norm, out_proj) for one token of each of `seqs` sequences, in the bytes it reads (every weight
// once, each sequence's state once; the state is written back too, not counted) per second
// against the read bandwidth.
#include "bench_rows.hpp"

#include "deltanet/deltanet.hpp"
#include "reference/reference.hpp"
#include "state/sequence_batch.hpp"
#include "state/state_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

namespace metrale::bench {

using namespace metrale::layers;

std::vector<DeltaNetShape> default_deltanet_shapes() {
  // Qwen3.5-0.8B's DeltaNet (hidden 1024, 16 key and 16 value heads of 128) and a layer of
  // Qwen3.5-27B's (hidden 5120, 16 key heads, 48 value heads of 128); a convolution of 4.
  return {{"qwen3.5-0.8b", 1024, 16, 16, 128, 128}, {"qwen3.5-27b", 5120, 16, 48, 128, 128}};
}

double chunked_flops(const DeltaNetShape& s, uint32_t m) {
  // Per value head and chunk of c tokens: K Kᵀ and Q Kᵀ (lower halves, dk each), the two
  // substitutions T·(βV) and T·(βe^G K) (lower halves, dv and dk), the intra-chunk A·V' (dv), each
  // c²/2 multiply-adds per unit of width; W·S, (Q e^G)·S and Kᵀ·V' (c·dk·dv each); forward
  // substitution's c³/6. Two FLOP per multiply-add.
  const double dk = s.k_dim, dv = s.v_dim;
  double flops = 0;
  for (uint32_t start = 0; start < m; start += 64) {
    const double c = std::min<uint32_t>(64, m - start);
    flops += 2 * (c * c / 2 * (3 * dk + 2 * dv) + 3 * c * dk * dv + c * c * c / 6);
  }
  return flops * s.v_heads;
}

namespace {

DeltaNetConfig config_of(const DeltaNetShape& s) {
  DeltaNetConfig c;
  c.source = "metrale-bench-layers " + s.name;
  c.hidden_size = s.hidden;
  c.k_heads = s.k_heads;
  c.v_heads = s.v_heads;
  c.k_dim = s.k_dim;
  c.v_dim = s.v_dim;
  return c;
}

Rate deltanet_rate(const DeltaNetShape& s, const char* variant, const char* path, uint32_t m, uint32_t context,
                   unsigned threads, std::string kernels) {
  Rate r;
  r.preset = "deltanet-" + s.name;
  r.variant = variant;
  r.ffn = "deltanet";
  r.path = path;
  r.m = m;
  r.context = context;
  r.threads = threads;
  r.kernels = std::move(kernels);
  return r;
}

// The median of `repeat` passes, caches evicted before each, after a warm-up; `prepare` runs
// before each pass, untimed.
template <class P, class F>
double time_deltanet(Backend& b, uint32_t repeat, unsigned threads, CacheEvictor& evictor, const P& prepare, const F& pass) {
  prepare();
  pass();
  b.synchronize();
  PoolWaker waker(b);
  std::vector<double> times;
  for (uint32_t i = 0; i < repeat; ++i) {
    prepare();
    evictor.evict(threads);
    waker.wake();
    const double start = clock_now();
    pass();
    b.synchronize();
    times.push_back(seconds_since(start, threads));
  }
  return median(times);
}

Rate prefill_rate(Backend& b, const DeltaNetShape& s, uint32_t m, uint32_t repeat, unsigned threads, const Denominators& d,
                  CacheEvictor& evictor) {
  const DeltaNetConfig c = config_of(s);
  const DeviceBuffer qkv = device_copy(b, synthetic_activations(m, c.conv_channels(), 21));
  const DeviceBuffer a = device_copy(b, synthetic_activations(m, c.v_heads, 22));
  const DeviceBuffer beta = device_copy(b, synthetic_activations(m, c.v_heads, 23));
  const DeviceBuffer a_log = device_copy(b, std::vector<float>(c.v_heads, 0.5f));
  const DeviceBuffer dt_bias = device_copy(b, std::vector<float>(c.v_heads, 1.0f));
  const uint64_t state_floats = uint64_t{c.v_heads} * c.k_dim * c.v_dim;
  const DeviceBuffer states(b, state_floats * sizeof(float));
  const DeviceBuffer runs = device_copy(b, std::vector<int32_t>{0, static_cast<int32_t>(m), 0});
  const DeviceBuffer out(b, size_t{m} * c.value_width() * 2);
  const KernelHandle chunked = b.kernel("deltanet", "delta_rule_chunked");
  LaunchShape grid;
  grid.block = {128, 1, 1};
  grid.grid = {1, c.v_heads, 1};
  const auto stride = static_cast<uint32_t>(state_floats);
  const double seconds = time_deltanet(
      b, repeat, threads, evictor, [&] { b.memset(states.ptr(), 0, state_floats * sizeof(float)); },
      [&] {
        b.launch(chunked, grid, qkv.ptr(), a.ptr(), beta.ptr(), a_log.ptr(), dt_bias.ptr(), states.ptr(), runs.ptr(),
                 out.ptr(), 1u, c.k_heads, c.v_heads, c.k_dim, c.v_dim, stride);
      });
  Rate r = deltanet_rate(s, "deltanet-prefill", "prefill", m, m, threads, "delta_rule_chunked");
  const double bytes = double(m) * (c.conv_channels() + 2.0 * c.v_heads + c.value_width()) * 2;  // activations in and out
  finish(r, seconds, bytes, chunked_flops(s, m), d);
  return r;
}

Rate decode_rate(Backend& b, const DeltaNetShape& s, DeltaNetLayer& layer, uint32_t seqs, uint32_t repeat, unsigned threads,
                 const Denominators& d, CacheEvictor& evictor) {
  const DeltaNetConfig& c = layer.config();
  StatePoolShape shape{1, 64, 16, seqs * (repeat + 2)};  // a token's KV block per pass; only the slots are read
  shape.recurrent = RecurrentStateShape{1, c.state_bytes(), seqs};
  StatePool pool(b, shape);
  std::vector<SequenceRows> rows;
  for (uint32_t i = 0; i < seqs; ++i) rows.push_back({pool.add_sequence(), 1});
  const std::vector<int32_t> positions(seqs, 0);
  const DeviceBuffer x = device_copy(b, synthetic_activations(seqs, c.hidden_size, 24));
  const DeviceBuffer out(b, size_t{seqs} * c.hidden_size * 2);
  std::optional<SequenceBatch> batch;
  const double seconds = time_deltanet(
      b, repeat, threads, evictor, [&] { batch.emplace(b, pool, rows, positions); },
      [&] { layer.forward_into(*batch, x.ptr(), out.ptr()); });
  Rate r = deltanet_rate(s, "deltanet-decode", "decode", seqs, 0, threads,
                         "bf16 projections, conv_silu, delta_rule_recurrent, gated_norm");
  const double params = double(c.conv_channels() + c.value_width() + 2 * c.v_heads) * c.hidden_size +
                        double(c.hidden_size) * c.value_width();
  const double bytes = static_cast<double>(layer.weight_bytes()) + double(seqs) * c.state_bytes();
  const double flops = seqs * (2 * params + 8.0 * c.v_heads * c.k_dim * c.v_dim);  // the rule: decay, Sᵀk, update, Sᵀq
  finish(r, seconds, bytes, flops, d);
  return r;
}

}  // namespace

std::vector<Rate> measure_deltanet_rates(Backend& b, const DeltaNetRequest& request, unsigned threads, const Denominators& d,
                                         CacheEvictor& evictor) {
  std::vector<Rate> rates;
  const std::string on = threads_label(threads);
  for (const DeltaNetShape& s : request.shapes) {
    if (request.prefill) {
      for (uint32_t m : request.prefill_m) {
        std::fprintf(stderr, "deltanet-%s deltanet-prefill (%s): m = %u...\n", s.name.c_str(), on.c_str(), m);
        rates.push_back(prefill_rate(b, s, m, request.repeat, threads, d, evictor));
      }
    }
    if (!request.decode) continue;
    std::fprintf(stderr, "deltanet-%s deltanet-decode (%s): generating and uploading synthetic bf16 weights...\n",
                 s.name.c_str(), on.c_str());
    DeltaNetLayer layer = DeltaNetLayer::build(b, config_of(s), synthetic_deltanet_weights(config_of(s), 1, WeightFormat::bf16), 0);
    for (uint32_t seqs : request.seqs) {
      std::fprintf(stderr, "deltanet-%s deltanet-decode (%s): %u sequence(s)...\n", s.name.c_str(), on.c_str(), seqs);
      rates.push_back(decode_rate(b, s, layer, seqs, request.repeat, threads, d, evictor));
    }
  }
  return rates;
}

}  // namespace metrale::bench
