// SPDX-License-Identifier: MIT OR Apache-2.0
// The contract between the launch path and the kernel bodies of the CPU backend.
//
// A launch decodes the cuLaunchKernel-style argument array into KernelArgs (one 64-bit slot per
// parameter), validates it once, then runs one BlockFn call per grid block on the thread pool.
// Each pool slot owns kScratchBytes of 64-byte aligned scratch, so kernels never allocate.
//
// Kernel bodies exist per instruction-set tier: baseline (portable scalar, every kernel) and,
// on x86-64, AVX2+FMA, AVX-512 and AVX-512 BF16 variants of the weight-quantized GEMM families
// and the activations, each compiled in its own translation unit with the matching -m flags
// (the BF16 tier's int8 dot products and FP8 decoder in units of their own, with AVX-512 VNNI
// and VBMI). Like
// numeric.hpp, the helpers below have internal linkage so no code compiled for a higher tier
// can leak into a lower one.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace metrale::cpu {

inline constexpr unsigned kMaxParams = 16;  // attn/attn_decode takes 14
inline constexpr size_t kScratchBytes = size_t{512} * 1024;
inline constexpr size_t kScratchAlign = 64;

// Raw parameter values: pointers and 64-bit types as is, 32-bit types zero-extended.
struct KernelArgs {
  uint64_t v[kMaxParams];
};

using BlockFn = void (*)(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch);

// Tile shapes of docs/kernels.md.
inline constexpr uint32_t kGemvRows = 64;      // w4a16_gemv, w4a16_gemv_b8: N64 per block
inline constexpr uint32_t kTileN = 128;        // gemm_t, gemm_t_k64, grouped gemm: N128
inline constexpr uint32_t kTileM = 64;         // gemm_t, gemm_t_k64: M64
inline constexpr uint32_t kGroup = 128;        // W4A16 quantisation group along K; K's multiple
inline constexpr uint32_t kGemvMaxRows = 8;    // w4a16_gemv_b8
inline constexpr uint32_t kActColumns = 1024;  // silu_mul / gelu_mul block width
inline constexpr uint32_t kRouterExperts = 64; // router_gemm block width
inline constexpr uint32_t kRepackRows = 64;    // w4a16_repack: N64 of one matrix per block
inline constexpr uint32_t kAttnPartition = 512; // attn_decode: context tokens per split
inline constexpr uint32_t kAttnPrefillRows = 64; // attn_prefill: query rows per block
inline constexpr uint32_t kMaxHeadDim = 1024;  // rope, qk_norm_rope: cos/sin of one token fit the scratch

// The kernels a SIMD tier may replace (KernelSpec::simd_slot); a null body runs the baseline's.
enum class Simd : uint8_t {
  w4a16_gemv, w4a16_gemv_b8, w4a16_gemm_t, w4a16_gemm_t_k64, w4a16_grouped_gemm,
  // w4a16_repack into the layout this tier's W4A16 bodies read (manifest layout "cpu-native").
  // Null: the tier keeps the canonical layout and the repack is a copy (the baseline body). The
  // other families' repacks follow the same rule for their own layouts.
  w4a16_repack,
  silu_mul, gelu_mul,
  w4a16_zp_gemv, w4a16_zp_gemm, w4a16_zp_grouped_gemm, w4a16_zp_repack,
  w8a16_gemv, w8a16_gemm, w8a16_grouped_gemm, w8a16_repack,
  fp8_gemv, fp8_gemm, fp8_grouped_gemm, fp8_grouped_gemv, fp8_repack,
  // E4M3 activations on the FP8 family's panels (its repack's layout).
  fp8_gemv_a8, fp8_gemm_a8, fp8_grouped_gemm_a8, fp8_gemv_a8_group128, fp8_gemm_a8_group128,
  fp8_grouped_gemm_a8_group128,
  // 4-bit codes with zero points under E4M3 activations (w4-zp panels).
  w4afp8_gemm, w4afp8_grouped_gemm, w4afp8_repack,
  // Plain bf16 and f16 weights (16-bit panels). f16 has no exact bf16 pairs: on the BF16 tier
  // it runs the avx512 tier's FMA bodies (f16_slot).
  bf16_gemv, bf16_gemm, bf16_grouped_gemm, bf16_repack,
  f16_gemv, f16_gemm, f16_grouped_gemm, f16_repack,
  // The int8-activation families: a tier's integer dot products (see int8_tier in target.hpp).
  w4a8_gemv, w4a8_gemm, w4a8_grouped_gemm, w4a8_repack,
  w8a8_gemv, w8a8_gemm, w8a8_grouped_gemm, w8a8_repack,
  quantize_int8, quantize_int8_bf16, quantize_fp8, quantize_fp8_bf16, quantize_fp8_group128, quantize_fp8_group128_bf16,
  attn_decode, attn_prefill,
  qk_norm_rope,
  delta_rule_chunked, delta_rule_recurrent,
  count
};
inline constexpr bool int8_dot_slot(Simd slot) { return slot >= Simd::w4a8_gemv && slot <= Simd::w8a8_repack; }
inline constexpr bool fp8_slot(Simd slot) { return slot >= Simd::fp8_gemv && slot <= Simd::fp8_grouped_gemm_a8_group128; }
inline constexpr bool f16_slot(Simd slot) { return slot >= Simd::f16_gemv && slot <= Simd::f16_repack; }

struct SimdBodies {
  BlockFn body[static_cast<size_t>(Simd::count)] = {};
  BlockFn& operator[](Simd slot) { return body[static_cast<size_t>(slot)]; }
  BlockFn operator[](Simd slot) const { return body[static_cast<size_t>(slot)]; }
};

namespace baseline {
void w4a16_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a16_gemv_b8(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a16_gemm_t(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a16_gemm_t_k64(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a16_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a16_repack(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void silu_mul(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void gelu_mul(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void router_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void topk_softmax(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void moe_gather(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void moe_combine(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void moe_align(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// The quantized weight families (baseline_quant.cpp), canonical layouts.
void w4a16_zp_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a16_zp_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a16_zp_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w8a16_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w8a16_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w8a16_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_grouped_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_gemv_a8(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_gemm_a8(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_gemv_a8_group128(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_grouped_gemm_a8(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_gemm_a8_group128(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_grouped_gemm_a8_group128(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a8_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4afp8_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4afp8_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a8_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w4a8_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w8a8_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w8a8_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w8a8_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// The repacks: 4-bit codes with zero points (w4a16_zp, w4a8), 8-bit (w8a16, w8a8), fp8.
void w4zp_repack(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void w8zp_repack(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void fp8_repack(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// Plain bf16 / f16 weights.
void bf16_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void bf16_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void bf16_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void bf16_repack(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void f16_gemv(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void f16_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void f16_grouped_gemm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void f16_repack(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_int8(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_int8_bf16(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_fp8(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_fp8_bf16(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_fp8_group128(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_fp8_group128_bf16(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_int8_static_bf16(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void quantize_fp8_static_bf16(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void gather_k(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// Attention over the paged bf16 KV cache (attn_baseline.cpp).
void kv_append(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void attn_decode(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void attn_decode_combine(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void attn_prefill(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// The decoder's small kernels (baseline_decoder.cpp): modules norm, rope; embed/embedding is
// moe_gather's body (same first five parameters).
void rms_norm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void rms_norm_residual(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void add(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void bias_add(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void rope(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void qk_norm_rope(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// norm/rms_norm_zero_centred and attn/output_gate (baseline_decoder.cpp).
void rms_norm_zero_centred(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void output_gate(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// sample/argmax (baseline_decoder.cpp): greedy choice per row.
void argmax(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
// The deltanet module (deltanet_baseline.cpp; the chunked delta rule in deltanet_chunked.cpp).
void conv_silu(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void delta_rule_recurrent(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void delta_rule_chunked(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
void gated_norm(const KernelArgs&, uint32_t, uint32_t, unsigned char*);
}  // namespace baseline

#if defined(METRALE_CPU_X86_SIMD)
namespace avx2 {
SimdBodies bodies();
}
namespace avx512 {
SimdBodies bodies();
}
namespace avx512bf16 {
SimdBodies bodies();
}
namespace avx512vnni {  // the int8-activation families only
SimdBodies bodies();
}
namespace avx512vbmi {  // the FP8 family only
SimdBodies bodies();
}
#endif

namespace {

template <class T>
inline T* arg_ptr(const KernelArgs& args, unsigned index) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(args.v[index]));
}
inline uint32_t arg_u32(const KernelArgs& args, unsigned index) {
  return static_cast<uint32_t>(args.v[index]);
}
inline float arg_f32(const KernelArgs& args, unsigned index) {
  return std::bit_cast<float>(static_cast<uint32_t>(args.v[index]));
}

// The one W4A16 signature: (x, qweight, scales, y, m, n, k).
struct W4a16Call {
  const uint16_t* x;
  const uint32_t* qweight;
  const uint16_t* scales;
  uint16_t* y;
  uint32_t m, n, k;
};
inline W4a16Call w4a16_call(const KernelArgs& args) {
  return {arg_ptr<const uint16_t>(args, 0), arg_ptr<const uint32_t>(args, 1),
          arg_ptr<const uint16_t>(args, 2), arg_ptr<uint16_t>(args, 3),
          arg_u32(args, 4), arg_u32(args, 5), arg_u32(args, 6)};
}

// w4a16_grouped_gemm: (x, qweight, scales, offsets, y, n, k, experts).
struct GroupedCall {
  const uint16_t* x;
  const uint32_t* qweight;
  const uint16_t* scales;
  const int32_t* offsets;
  uint16_t* y;
  uint32_t n, k, experts;
};
inline GroupedCall grouped_call(const KernelArgs& args) {
  return {arg_ptr<const uint16_t>(args, 0), arg_ptr<const uint32_t>(args, 1),
          arg_ptr<const uint16_t>(args, 2), arg_ptr<const int32_t>(args, 3),
          arg_ptr<uint16_t>(args, 4),       arg_u32(args, 5),
          arg_u32(args, 6),                 arg_u32(args, 7)};
}

// silu_mul / gelu_mul (gate_up, out, m, i), block (bx, by): columns [begin, end) of row by.
struct ActBlock {
  const uint16_t* gate;  // row by's gate half; its up half starts `inter` further
  const uint16_t* up;
  uint16_t* out;         // row by of out
  uint32_t begin, end;
};
inline ActBlock act_block(const KernelArgs& args, uint32_t bx, uint32_t by) {
  const uint32_t inter = arg_u32(args, 3);
  const uint16_t* gate = arg_ptr<const uint16_t>(args, 0) + size_t{by} * 2 * inter;
  const uint32_t begin = bx * kActColumns;
  return {gate, gate + inter, arg_ptr<uint16_t>(args, 1) + size_t{by} * inter, begin,
          begin + kActColumns < inter ? begin + kActColumns : inter};
}

// w4a16_repack: (qweight_in, scales_in, qweight_out, scales_out, n, k, count).
struct RepackCall {
  const uint32_t* qweight_in;
  const uint16_t* scales_in;
  uint32_t* qweight_out;
  uint16_t* scales_out;
  uint32_t n, k, count;
};
inline RepackCall repack_call(const KernelArgs& args) {
  return {arg_ptr<const uint32_t>(args, 0), arg_ptr<const uint16_t>(args, 1),
          arg_ptr<uint32_t>(args, 2),       arg_ptr<uint16_t>(args, 3),
          arg_u32(args, 4),                 arg_u32(args, 5),
          arg_u32(args, 6)};
}

// 64-byte aligned sub-buffer `offset` bytes into a scratch area.
template <class T>
inline T* scratch_at(unsigned char* scratch, size_t offset) {
  return reinterpret_cast<T*>(scratch + offset);
}

}  // namespace
}  // namespace metrale::cpu
