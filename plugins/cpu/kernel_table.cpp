// SPDX-License-Identifier: MIT OR Apache-2.0
#include "kernel_table.hpp"

#include "attn_table.hpp"
#include "decoder_table.hpp"
#include "deltanet_table.hpp"
#include "launch_checks.hpp"
#include "quant_table.hpp"

#include <array>
#include <vector>

namespace metrale::cpu {

namespace {

// The W4A16 family; `max_m` 0 means unbounded, `tile_m` 0 means all rows in one block.
metrale_status check_w4a16(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                           std::string& error, uint32_t max_m, uint32_t tile_n, uint32_t tile_m) {
  const uint32_t m = arg_u32(a, 4), n = arg_u32(a, 5), k = arg_u32(a, 6);
  if (!at_least_one({{"m", m}, {"n", n}}, error) || !k_ok(k, error)) return kInvalid;
  if (max_m != 0 && m > max_m) {
    error = max_m == 1 ? "m must be 1 for this kernel (got m=" + std::to_string(m) +
                             "); use w4a16_gemv_b8 or a tile GEMM for more rows"
                       : "m must be 1.." + std::to_string(max_m) + " for this kernel (got m=" +
                             std::to_string(m) + ")";
    return kInvalid;
  }
  if (!buffer(a, mem, 0, "x", product({m, k, 2}), "m*k bf16", error) ||
      !buffer(a, mem, 1, "qweight", product({n, k / 2}), "n*k/8 u32", error) ||
      !buffer(a, mem, 2, "scales", product({n, k / kGroup, 2}), "n*k/128 f16", error) ||
      !buffer(a, mem, 3, "y", product({m, n, 2}), "m*n bf16", error))
    return kInvalid;
  needed = {ceil_div(n, tile_n), tile_m == 0 ? 1 : ceil_div(m, tile_m)};
  return kOk;
}

metrale_status check_gemv(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                          std::string& error) {
  return check_w4a16(a, mem, needed, error, 1, kGemvRows, 0);
}
metrale_status check_gemv_b8(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                             std::string& error) {
  return check_w4a16(a, mem, needed, error, kGemvMaxRows, kGemvRows, 0);
}
metrale_status check_tile(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                          std::string& error) {
  return check_w4a16(a, mem, needed, error, 0, kTileN, kTileM);
}

// w4a16_repack: `count` stacked canonical [n, k] matrices in, the same byte sizes out; outputs
// overlap neither the inputs nor each other (a block reads rows another block may be writing).
metrale_status check_repack(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                            std::string& error) {
  const uint32_t n = arg_u32(a, 4), k = arg_u32(a, 5), count = arg_u32(a, 6);
  if (!at_least_one({{"n", n}, {"count", count}}, error) || !k_ok(k, error)) return kInvalid;
  const uint64_t code_bytes = product({count, n, k / 2});
  const uint64_t scale_bytes = product({count, n, k / kGroup, 2});
  if (!buffer(a, mem, 0, "qweight_in", code_bytes, "count*n*k/8 u32", error) ||
      !buffer(a, mem, 1, "scales_in", scale_bytes, "count*n*k/128 f16", error) ||
      !buffer(a, mem, 2, "qweight_out", code_bytes, "count*n*k/8 u32", error) ||
      !buffer(a, mem, 3, "scales_out", scale_bytes, "count*n*k/128 f16", error))
    return kInvalid;
  const Span spans[] = {{a.v[0], code_bytes, "qweight_in"}, {a.v[1], scale_bytes, "scales_in"},
                         {a.v[2], code_bytes, "qweight_out"}, {a.v[3], scale_bytes, "scales_out"}};
  if (!apart(spans, 4, 2, error)) return kInvalid;
  needed = {ceil_div(n, kRepackRows), count};
  return kOk;
}

metrale_status check_act(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                         std::string& error) {
  const uint32_t m = arg_u32(a, 2), i = arg_u32(a, 3);
  if (!at_least_one({{"m", m}, {"i", i}}, error)) return kInvalid;
  if (!buffer(a, mem, 0, "gate_up", product({m, 2, i, 2}), "m*2i bf16", error) ||
      !buffer(a, mem, 1, "out", product({m, i, 2}), "m*i bf16", error))
    return kInvalid;
  needed = {ceil_div(i, kActColumns), m};
  return kOk;
}

metrale_status check_router(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                            std::string& error) {
  const uint32_t m = arg_u32(a, 3), e = arg_u32(a, 4), h = arg_u32(a, 5);
  if (!at_least_one({{"m", m}, {"e", e}, {"h", h}}, error)) return kInvalid;
  if (!buffer(a, mem, 0, "x", product({m, h, 2}), "m*h bf16", error) ||
      !buffer(a, mem, 1, "w", product({e, h, 4}), "e*h f32", error) ||
      !buffer(a, mem, 2, "logits", product({m, e, 4}), "m*e f32", error))
    return kInvalid;
  needed = {ceil_div(e, kRouterExperts), m};
  return kOk;
}

metrale_status check_topk(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                          std::string& error) {
  const uint32_t m = arg_u32(a, 3), e = arg_u32(a, 4), k = arg_u32(a, 5);
  if (!at_least_one({{"m", m}, {"e", e}, {"k", k}}, error)) return kInvalid;
  if (k > e) {
    error = "k must not exceed e (got k=" + std::to_string(k) + ", e=" + std::to_string(e) + ")";
    return kInvalid;
  }
  if (!buffer(a, mem, 0, "logits", product({m, e, 4}), "m*e f32", error) ||
      !buffer(a, mem, 1, "ids", product({m, k, 4}), "m*k i32", error) ||
      !buffer(a, mem, 2, "weights", product({m, k, 4}), "m*k f32", error))
    return kInvalid;
  needed = {m, 1};
  return kOk;
}

metrale_status check_gather(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                            std::string& error) {
  const uint32_t t = arg_u32(a, 3), h = arg_u32(a, 4);
  if (!at_least_one({{"t", t}, {"h", h}}, error)) return kInvalid;
  if (!buffer(a, mem, 0, "x", product({h, 2}), "at least one row of h bf16", error) ||
      !buffer(a, mem, 1, "rows", product({t, 4}), "t i32", error) ||
      !buffer(a, mem, 2, "out", product({t, h, 2}), "t*h bf16", error) ||
      !rows_in_range(a, mem, 0, "x", "rows", arg_ptr<const int32_t>(a, 1), t, h, error))
    return kInvalid;
  needed = {t, 1};
  return kOk;
}

metrale_status check_grouped(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                             std::string& error) {
  const uint32_t n = arg_u32(a, 5), k = arg_u32(a, 6), experts = arg_u32(a, 7);
  if (!at_least_one({{"n", n}, {"experts", experts}}, error) || !k_ok(k, error)) return kInvalid;
  if (!buffer(a, mem, 3, "offsets", product({uint64_t{experts} + 1, 4}), "(experts+1) i32",
              error))
    return kInvalid;
  if (!offsets_ok(a, 3, experts, error)) return kInvalid;
  const auto* offsets = arg_ptr<const int32_t>(a, 3);
  const auto rows = static_cast<uint64_t>(offsets[experts]);
  if (!buffer(a, mem, 0, "x", product({rows, k, 2}), "offsets[experts]*k bf16", error) ||
      !buffer(a, mem, 1, "qweight", product({experts, n, k / 2}), "experts*n*k/8 u32", error) ||
      !buffer(a, mem, 2, "scales", product({experts, n, k / kGroup, 2}), "experts*n*k/128 f16",
              error) ||
      !buffer(a, mem, 4, "y", product({rows, n, 2}), "offsets[experts]*n bf16", error))
    return kInvalid;
  needed = {ceil_div(n, kTileN), experts, offsets};
  return kOk;
}

metrale_status check_combine(const KernelArgs& a, const MemoryView& mem, BlockRange& needed,
                             std::string& error) {
  const uint32_t m = arg_u32(a, 4), k = arg_u32(a, 5), h = arg_u32(a, 6);
  if (!at_least_one({{"m", m}, {"k", k}, {"h", h}}, error)) return kInvalid;
  if (!buffer(a, mem, 0, "expert_out", product({h, 2}), "at least one row of h bf16", error) ||
      !buffer(a, mem, 1, "slots", product({m, k, 4}), "m*k i32", error) ||
      !buffer(a, mem, 2, "weights", product({m, k, 4}), "m*k f32", error) ||
      !buffer(a, mem, 3, "out", product({m, h, 2}), "m*h bf16", error) ||
      !rows_in_range(a, mem, 0, "expert_out", "slots", arg_ptr<const int32_t>(a, 1),
                     uint64_t{m} * k, h, error))
    return kInvalid;
  needed = {m, 1};
  return kOk;
}

constexpr int slot(Simd s) { return static_cast<int>(s); }

const std::array<KernelSpec, 12> kBaseSpecs{{
    {METRALE_CPU_KERNEL(w4a16, w4a16_gemv), check_gemv, baseline::w4a16_gemv, slot(Simd::w4a16_gemv),
     "(ceil(n/64), 1)"},
    {METRALE_CPU_KERNEL(w4a16, w4a16_gemv_b8), check_gemv_b8, baseline::w4a16_gemv_b8,
     slot(Simd::w4a16_gemv_b8),
     "(ceil(n/64), 1)"},
    {METRALE_CPU_KERNEL(w4a16, w4a16_gemm_t), check_tile, baseline::w4a16_gemm_t, slot(Simd::w4a16_gemm_t),
     "(ceil(n/128), ceil(m/64))"},
    {METRALE_CPU_KERNEL(w4a16, w4a16_gemm_t_k64), check_tile, baseline::w4a16_gemm_t_k64,
     slot(Simd::w4a16_gemm_t_k64), "(ceil(n/128), ceil(m/64))"},
    {METRALE_CPU_KERNEL(w4a16, w4a16_repack), check_repack, baseline::w4a16_repack,
     slot(Simd::w4a16_repack),
     "(ceil(n/64), count)"},
    {METRALE_CPU_KERNEL(act, silu_mul), check_act, baseline::silu_mul, slot(Simd::silu_mul),
     "(ceil(i/1024), m)"},
    {METRALE_CPU_KERNEL(act, gelu_mul), check_act, baseline::gelu_mul, slot(Simd::gelu_mul),
     "(ceil(i/1024), m)"},
    {METRALE_CPU_KERNEL(moe, router_gemm), check_router, baseline::router_gemm, -1,
     "(ceil(e/64), m)"},
    {METRALE_CPU_KERNEL(moe, topk_softmax), check_topk, baseline::topk_softmax, -1,
     "(m, 1)"},
    {METRALE_CPU_KERNEL(moe, moe_gather), check_gather, baseline::moe_gather, -1,
     "(t, 1)"},
    {METRALE_CPU_KERNEL(moe, w4a16_grouped_gemm), check_grouped,
     baseline::w4a16_grouped_gemm, slot(Simd::w4a16_grouped_gemm), "(ceil(n/128), experts)"},
    {METRALE_CPU_KERNEL(moe, moe_combine), check_combine, baseline::moe_combine, -1,
     "(m, 1)"},
}};

// The W4A16, act and moe kernels, then the quantized families' (quant_table.cpp), then attn's
// (attn_table.cpp), then the decoder's small kernels (decoder_table.cpp), then deltanet's
// (deltanet_table.cpp).
const std::vector<KernelSpec>& all_specs() {
  static const std::vector<KernelSpec> specs = [] {
    std::vector<KernelSpec> all(kBaseSpecs.begin(), kBaseSpecs.end());
    const auto more = quant_kernel_specs();
    all.insert(all.end(), more.begin(), more.end());
    const auto attn = attn_kernel_specs();
    all.insert(all.end(), attn.begin(), attn.end());
    const auto decoder = decoder_kernel_specs();
    all.insert(all.end(), decoder.begin(), decoder.end());
    const auto deltanet = deltanet_kernel_specs();
    all.insert(all.end(), deltanet.begin(), deltanet.end());
    return all;
  }();
  return specs;
}

const std::vector<metrale_kernel_desc>& all_descs() {
  static const std::vector<metrale_kernel_desc> descs = [] {
    std::vector<metrale_kernel_desc> out;
    for (const KernelSpec& spec : all_specs())
      out.push_back({spec.module, spec.name, spec.param_types, spec.param_count});
    return out;
  }();
  return descs;
}

}  // namespace

std::span<const KernelSpec> kernel_specs() { return all_specs(); }

std::span<const metrale_kernel_desc> kernel_descs() { return all_descs(); }

BlockFn kernel_body(size_t index, Tier tier, const CpuFeatures& features) {
  const KernelSpec& spec = all_specs().at(index);
  if (spec.simd_slot < 0 || tier == Tier::baseline) return spec.baseline;
#if defined(METRALE_CPU_X86_SIMD)
  // Each tier's table is fetched only once that tier was chosen: even bodies() of a higher tier
  // is compiled with its -m flags and may not run on a lesser CPU. A tier leaves a body null
  // when the baseline's serves it (the repack of a tier that keeps the canonical layout). The
  // BF16 tier's int8 dot products are VNNI's and its FP8 decoder VBMI's, each the avx512 tier's
  // without that feature; its f16 weights run the avx512 tier's FMA bodies.
  const auto slot = static_cast<Simd>(spec.simd_slot);
  const Tier from = int8_dot_slot(slot)                          ? int8_tier(tier, features)
                    : fp8_slot(slot)                             ? fp8_tier(tier, features)
                    : f16_slot(slot) && tier == Tier::avx512bf16 ? Tier::avx512  // no exact bf16 pairs of f16
                                                                 : tier;
  BlockFn body = nullptr;
  if (from == Tier::avx512bf16 && int8_dot_slot(slot)) {
    static const SimdBodies bodies = avx512vnni::bodies();
    body = bodies[slot];
  } else if (from == Tier::avx512bf16 && fp8_slot(slot)) {
    static const SimdBodies bodies = avx512vbmi::bodies();
    body = bodies[slot];
  } else {
    switch (from) {
      case Tier::avx2: {
        static const SimdBodies bodies = avx2::bodies();
        body = bodies[slot];
        break;
      }
      case Tier::avx512: {
        static const SimdBodies bodies = avx512::bodies();
        body = bodies[slot];
        break;
      }
      case Tier::avx512bf16: {
        static const SimdBodies bodies = avx512bf16::bodies();
        body = bodies[slot];
        break;
      }
      case Tier::baseline: break;
    }
  }
  if (body != nullptr) return body;
#else
  (void)features;
#endif
  return spec.baseline;
}

}  // namespace metrale::cpu
