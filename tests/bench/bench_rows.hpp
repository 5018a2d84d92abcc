// SPDX-License-Identifier: MIT OR Apache-2.0
// The rows metrale-bench-layers measures: each preset's FFN, per weight tier (a variant: the
// synthetic weights' format and the activations' tier) at each m the variant covers, and the
// attention kernels (the variants attn-decode and attn-prefill), timed on one backend, with their
// figures against the denominators of that backend's thread count.
#pragma once

#include "bench_machine.hpp"

#include "core/tiers.hpp"
#include "io/weights.hpp"
#include "core/device_buffer.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace metrale::bench {

// Wakes the CPU backend's pool before a timed pass. Its workers sleep after about 100 us idle and
// the evictor's read before each pass lasts milliseconds, so the pass's first launches would run
// on the calling thread alone while the workers wake (a futex wake; on a virtual machine a halted
// vCPU's, tens of microseconds to milliseconds), which a model's back-to-back decode launches never
// see. One-block-per-thread launches for about 200 us keep them spinning into the pass (the
// eviction runs on the pass's threads, so that no vCPU halts through it: CacheEvictor::evict).
class PoolWaker {
 public:
  explicit PoolWaker(Backend& b);
  void wake();

 private:
  static constexpr uint32_t kCols = 64;
  Backend& b_;
  uint32_t blocks_;
  KernelHandle act_;
  layers::DeviceBuffer gate_up_, out_;
};

// Which m of --m a variant is measured at.
enum class VariantPaths { all, decode_and_prefill, decode, prefill };

// The attention variants' rows (measure_attention_rates), not an FFN's.
enum class AttentionRows { none, decode, prefill };
// The Gated DeltaNet variants' rows (measure_deltanet_rates, bench_deltanet.cpp).
enum class DeltaNetRows { none, decode, prefill };

// One weight tier of the rows: synthetic weights in `formats`, activations entering the
// projections as `activations`.
struct Variant {
  std::string name;  // "w4a16", "w4-zp", "w4-zp-act", "ct-act-order", "w8a16", "fp8", "fp8-block", "w4a8", "w8a8"
  layers::SyntheticFormats formats;
  layers::ActivationQuant activations = layers::ActivationQuant::bf16;
  layers::ActivationScaling scaling;  // how the int8/fp8 activations are scaled
  VariantPaths paths = VariantPaths::all;
  bool dense = true;  // measured on dense presets
  bool moe = false;   // measured on MoE presets
  AttentionRows attention = AttentionRows::none;  // an attention row set: no preset, no weights
  DeltaNetRows deltanet = DeltaNetRows::none;     // a DeltaNet row set, on its own shapes
  bool whole_model = false;  // the `model` variant: a decoder preset end to end (measure_model_rates)
  bool covers(uint32_t m, bool moe_preset) const;
};

// Every variant the bench knows, in the order the rows are printed.
const std::vector<Variant>& all_variants();
// The variants named (comma list of all_variants() names); throws naming an unknown one.
std::vector<Variant> select_variants(const std::vector<std::string>& names);
std::vector<std::string> variant_names();

struct Rate {
  std::string preset;
  std::string variant;  // Variant::name
  std::string ffn;      // dense / moe
  std::string path;     // decode / batched / prefill
  uint32_t m = 0;         // FFN: rows per pass; attention decode: sequences; prefill: chunk rows
  uint32_t context = 0;   // attention rows: tokens in each sequence's cache (0: an FFN row)
  unsigned threads = 0;  // the backend's compute units (CPU: threads of its pool)
  bool int8_dot = false; // int8 activations: the FLOP rate is held to the int8 dot peak
  std::string kernels;
  double median_s = 0;
  double weight_bytes = 0;  // attention rows: the K and V cache bytes the pass reads
  double flops = 0;
  double gb_per_s = 0;
  double gflop_per_s = 0;
  double of_bandwidth = 0;  // weight rate / read bandwidth on the backend's thread count
  double of_bf16_peak = 0;  // FLOP rate / bf16 dot peak on the backend's thread count
  double of_tier_peak = 0;  // FLOP rate / the dot peak of the backend's tier (Denominators::tier_dot)
  double of_int8_peak = 0;  // FLOP rate / int8 dot peak (2 ops per multiply-add)
  // Roofline on the same thread count: the shortest time the machine allows for the pass.
  double memory_s = 0;    // weight_bytes / read bandwidth
  double dot_s = 0;       // flops / the dot peak of its activations (0: none measured)
  double roofline_s = 0;  // max(memory_s, dot_s)
  double of_roofline = 0; // roofline_s / median_s
  std::string bound;      // memory / dot: which term sets roofline_s
};

// The denominators of one thread count.
struct Denominators {
  double read_bw = 0;    // GB/s
  double bf16_dot = 0;   // GFLOP/s; 0: no AVX512_BF16
  double int8_dot = 0;   // GOP/s; 0: no AVX512_VNNI
  // GFLOP/s: the float dot peak of the tier the CPU backend runs (vdpbf16ps on
  // cpu-x86_64-avx512bf16, f32 FMA at the widest width the CPU has on the others); 0: not the CPU
  // backend.
  double tier_dot = 0;
};
// The tier_dot of `target` (a backend's target string) from the peaks measured on its threads.
double tier_dot_of(const std::string& target, double bf16_dot, double fma);

std::string path_of(uint32_t m);
void set_ratios(Rate& r, const Denominators& d);
// A row's median time, bytes and FLOPs, and the rates and ratios that follow from them.
void finish(Rate& r, double seconds, double bytes, double flops, const Denominators& d);

struct LaunchCost {
  double runtime_ns = 0;
  double raw_ns = 0;
  double try_kernel_ns = 0;
  uint32_t pool_blocks = 0;  // blocks of the hand-off launch: one per backend thread
  double pool_ns = 0;        // that launch through the runtime: wakes the pool's workers and joins them
};

// One selection of the backend: the thread count asked for, the one it runs, the denominators
// measured on that count, and what was measured on it.
struct ThreadRun {
  unsigned requested = 0;  // 0: not the cpu backend (METRALE_CPU_THREADS ignored), measured once
  unsigned threads = 0;    // backend.compute_units()
  Denominators d;          // on `threads`
  std::vector<Rate> rates;
  LaunchCost launch;
};

// Every preset x variant x m (the m the variant covers) on one backend.
struct RateRequest {
  std::vector<std::string> presets;
  std::vector<Variant> variants;
  std::vector<uint32_t> m_list;
  uint32_t repeat = 3;
};
std::vector<Rate> measure_rates(Backend& b, const RateRequest& request, unsigned threads, const Denominators& d,
                                CacheEvictor& evictor);

// The attention rows: the attn kernels launched through the runtime on Qwen3-8B's attention
// (32 q heads, 8 kv heads, head_dim 128) over a paged cache of 16-token blocks (a StatePool, its
// pools filled with random bf16), caches evicted before each pass. Decode (attn_decode +
// attn_decode_combine, one query per sequence) at each context for each number of sequences,
// in cache bytes read per second against the read bandwidth; prefill (attn_prefill of m rows
// after no past) in causal FLOP per second (4 * head_dim * q_heads per query-position pair)
// against the bf16 dot peak.
struct AttentionShape {
  uint32_t q_heads = 32, kv_heads = 8, head_dim = 128, block_size = 16;
  std::string name() const;  // the rows' preset column: "attn-32q8kv-d128-b16"
};
struct AttentionRequest {
  AttentionShape shape;
  std::vector<AttentionRows> rows;                                // from the selected variants
  std::vector<uint32_t> contexts{512, 4096, 8192, 16384, 32768};  // decode: tokens per sequence
  std::vector<uint32_t> seqs{1, 4};                               // decode: sequences per step
  std::vector<uint32_t> prefill_m{512};  // 4096 on the 27B shape: about 2 minutes a thread count                     // prefill: rows, past 0
  uint32_t repeat = 3;
};
// The attention row sets among `variants`, in order.
std::vector<AttentionRows> attention_rows(const std::vector<Variant>& variants);
double prefill_flops(const AttentionShape& s, uint32_t m);
double decode_cache_bytes(const AttentionShape& s, uint32_t seqs, uint32_t context);
std::vector<Rate> measure_attention_rates(Backend& b, const AttentionRequest& request, unsigned threads,
                                          const Denominators& d, CacheEvictor& evictor);

// The whole-model rows (variant `model`, bench_model.cpp): a decoder preset (qwen3-0.6b by
// default: Qwen3-0.6B's shapes, 1.2 GB of bf16 weights) on synthetic bf16 weights, run by
// generate_tokens as `metrale generate` runs it. Prefill of each prompt length: tokens per second
// (the rows' kernels column), FLOP per second against the bf16 dot peak (2 per weight per token
// and the causal attention). Decode of each count of sequences after such prompts: tokens per
// second, and the bytes one step reads (every weight once, each sequence's KV cache at the
// middle of the decode) per second against the read bandwidth.
struct ModelRowsRequest {
  bool enabled = false;                  // `model` among the selected variants
  std::string preset = "qwen3-0.6b";
  std::vector<uint32_t> prompts{512};
  std::vector<uint32_t> seqs{1, 8};
  uint32_t new_tokens = 17;
};
std::vector<Rate> measure_model_rates(Backend& b, const ModelRowsRequest& request, unsigned threads, const Denominators& d);

// The Gated DeltaNet rows (variants deltanet-prefill and deltanet-decode, bench_deltanet.cpp), on
// Qwen3.5 shapes. Prefill: delta_rule_chunked alone over one sequence of m tokens from a zero
// state, in chunked_flops per second against the dot peak. Decode: the whole DeltaNetLayer on
// synthetic bf16 weights for one token of each of `seqs` sequences, in the bytes a step reads
// (every weight once, each sequence's state [v_heads][k_dim][v_dim] f32 and conv window once) per
// second against the read bandwidth.
struct DeltaNetShape {
  std::string name;  // the rows' preset column: "deltanet-" + name
  uint32_t hidden = 0, k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0;
};
std::vector<DeltaNetShape> default_deltanet_shapes();
struct DeltaNetRequest {
  std::vector<DeltaNetShape> shapes = default_deltanet_shapes();
  bool prefill = false, decode = false;  // from the selected variants
  std::vector<uint32_t> prefill_m{512};  // 4096 on the 27B shape: about 2 minutes a thread count
  std::vector<uint32_t> seqs{1, 16};
  uint32_t repeat = 3;
};
// The FLOP of the chunked (WY) form over m tokens, every value head.
double chunked_flops(const DeltaNetShape& s, uint32_t m);
std::vector<Rate> measure_deltanet_rates(Backend& b, const DeltaNetRequest& request, unsigned threads,
                                         const Denominators& d, CacheEvictor& evictor);

}  // namespace metrale::bench
