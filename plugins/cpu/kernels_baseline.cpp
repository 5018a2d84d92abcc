// SPDX-License-Identifier: MIT OR Apache-2.0
// Baseline (portable scalar) bodies of every kernel in docs/kernels.md. They run on any CPU and
// are the bodies the SIMD tiers are checked against. Arguments were validated by the launch
// path (kernel_table.cpp): sizes fit their allocations, K is a multiple of 128, offsets, rows
// and slots are in range.
#include "kernels.hpp"
#include "numeric.hpp"

#include <cmath>
#include <cstring>

namespace metrale::cpu::baseline {
namespace {

constexpr uint32_t kHalfGroup = kGroup / 2;

// One W4A16 tile: rows [0, mt) of x (row stride k) times weight rows [n0, n0 + nt) into y
// (row stride n). A group's codes are dequantised once per tile and reused by all mt rows.
// Scratch: x group as f32 [kTileM][kGroup], accumulators [kTileM][kTileN].
void w4a16_tile(const uint16_t* x, uint32_t mt, const uint32_t* qweight, const uint16_t* scales,
                uint16_t* y, uint32_t n, uint32_t k, uint32_t n0, uint32_t nt,
                unsigned char* scratch) {
  float* xg = scratch_at<float>(scratch, 0);
  float* acc = scratch_at<float>(scratch, sizeof(float) * kTileM * kGroup);
  const uint32_t groups = k / kGroup;
  const auto* codes = reinterpret_cast<const uint8_t*>(qweight);
  for (uint32_t i = 0; i < mt * kTileN; ++i) acc[i] = 0.0f;
  float w[kGroup];
  for (uint32_t g = 0; g < groups; ++g) {
    for (uint32_t i = 0; i < mt; ++i)
      for (uint32_t t = 0; t < kGroup; ++t)
        xg[i * kGroup + t] = bf16_to_f32(x[static_cast<size_t>(i) * k + g * kGroup + t]);
    for (uint32_t c = 0; c < nt; ++c) {
      const size_t row = n0 + c;
      const float scale = f16_to_f32(scales[row * groups + g]);
      const uint8_t* bytes = codes + row * (k / 2) + g * (kGroup / 2);
      // (q - 8) * scale is exact in f32: a 4-bit integer times an 11-bit mantissa.
      for (uint32_t t = 0; t < kGroup / 2; ++t) {
        w[2 * t] = static_cast<float>(static_cast<int>(bytes[t] & 0x0f) - 8) * scale;
        w[2 * t + 1] = static_cast<float>(static_cast<int>(bytes[t] >> 4) - 8) * scale;
      }
      for (uint32_t i = 0; i < mt; ++i) {
        const float* xr = xg + i * kGroup;
        float dot = 0.0f;
        for (uint32_t t = 0; t < kGroup; ++t) dot += w[t] * xr[t];
        acc[i * kTileN + c] += dot;
      }
    }
  }
  for (uint32_t i = 0; i < mt; ++i)
    for (uint32_t c = 0; c < nt; ++c)
      y[static_cast<size_t>(i) * n + n0 + c] = f32_to_bf16(acc[i * kTileN + c]);
}

// The deep-K tile: K in 64-wide steps (half a group), the half-group's dot taken on the raw
// codes and scaled once, accumulated in a [kTileM][kTileN] f32 block. Same sums, another order.
void w4a16_tile_k64(const uint16_t* x, uint32_t mt, const uint32_t* qweight,
                    const uint16_t* scales, uint16_t* y, uint32_t n, uint32_t k, uint32_t n0,
                    uint32_t nt, unsigned char* scratch) {
  float* xh = scratch_at<float>(scratch, 0);
  float* acc = scratch_at<float>(scratch, sizeof(float) * kTileM * kHalfGroup);
  const uint32_t groups = k / kGroup;
  const auto* codes = reinterpret_cast<const uint8_t*>(qweight);
  for (uint32_t i = 0; i < mt * kTileN; ++i) acc[i] = 0.0f;
  float w[kHalfGroup];
  for (uint32_t h = 0; h < k / kHalfGroup; ++h) {
    for (uint32_t i = 0; i < mt; ++i)
      for (uint32_t t = 0; t < kHalfGroup; ++t)
        xh[i * kHalfGroup + t] = bf16_to_f32(x[static_cast<size_t>(i) * k + h * kHalfGroup + t]);
    for (uint32_t c = 0; c < nt; ++c) {
      const size_t row = n0 + c;
      const float scale = f16_to_f32(scales[row * groups + h / 2]);
      const uint8_t* bytes = codes + row * (k / 2) + h * (kHalfGroup / 2);
      for (uint32_t t = 0; t < kHalfGroup / 2; ++t) {
        w[2 * t] = static_cast<float>(static_cast<int>(bytes[t] & 0x0f) - 8);
        w[2 * t + 1] = static_cast<float>(static_cast<int>(bytes[t] >> 4) - 8);
      }
      for (uint32_t i = 0; i < mt; ++i) {
        const float* xr = xh + i * kHalfGroup;
        float dot = 0.0f;
        for (uint32_t t = 0; t < kHalfGroup; ++t) dot += w[t] * xr[t];
        acc[i * kTileN + c] += dot * scale;
      }
    }
  }
  for (uint32_t i = 0; i < mt; ++i)
    for (uint32_t c = 0; c < nt; ++c)
      y[static_cast<size_t>(i) * n + n0 + c] = f32_to_bf16(acc[i * kTileN + c]);
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

float gelu_tanh(float g) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
}

template <float (*Act)(float)>
void gated(const KernelArgs& args, uint32_t bx, uint32_t by) {
  const ActBlock b = act_block(args, bx, by);
  for (uint32_t j = b.begin; j < b.end; ++j)
    b.out[j] = f32_to_bf16(Act(bf16_to_f32(b.gate[j])) * bf16_to_f32(b.up[j]));
}

}  // namespace

void w4a16_gemv(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
  const W4a16Call c = w4a16_call(args);
  const uint32_t n0 = bx * kGemvRows;
  if (n0 >= c.n) return;
  w4a16_tile(c.x, c.m, c.qweight, c.scales, c.y, c.n, c.k, n0, min_u32(kGemvRows, c.n - n0),
             scratch);
}

void w4a16_gemv_b8(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  w4a16_gemv(args, bx, by, scratch);
}

void w4a16_gemm_t(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const W4a16Call c = w4a16_call(args);
  const uint32_t n0 = bx * kTileN;
  const uint32_t m0 = by * kTileM;
  if (n0 >= c.n || m0 >= c.m) return;
  w4a16_tile(c.x + static_cast<size_t>(m0) * c.k, min_u32(kTileM, c.m - m0), c.qweight, c.scales,
             c.y + static_cast<size_t>(m0) * c.n, c.n, c.k, n0, min_u32(kTileN, c.n - n0),
             scratch);
}

void w4a16_gemm_t_k64(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char* scratch) {
  const W4a16Call c = w4a16_call(args);
  const uint32_t n0 = bx * kTileN;
  const uint32_t m0 = by * kTileM;
  if (n0 >= c.n || m0 >= c.m) return;
  w4a16_tile_k64(c.x + static_cast<size_t>(m0) * c.k, min_u32(kTileM, c.m - m0), c.qweight,
                 c.scales, c.y + static_cast<size_t>(m0) * c.n, c.n, c.k, n0,
                 min_u32(kTileN, c.n - n0), scratch);
}

void w4a16_grouped_gemm(const KernelArgs& args, uint32_t bx, uint32_t by,
                        unsigned char* scratch) {
  const GroupedCall c = grouped_call(args);
  const uint32_t n0 = bx * kTileN;
  if (n0 >= c.n || by >= c.experts) return;
  const uint32_t nt = min_u32(kTileN, c.n - n0);
  const auto first = static_cast<uint32_t>(c.offsets[by]);
  const auto last = static_cast<uint32_t>(c.offsets[by + 1]);
  const size_t expert_words = static_cast<size_t>(c.n) * (c.k / 8);
  const size_t expert_scales = static_cast<size_t>(c.n) * (c.k / kGroup);
  // Rows in chunks of one tile height; the expert's weight tile stays in cache between chunks.
  for (uint32_t r = first; r < last; r += kTileM) {
    w4a16_tile(c.x + static_cast<size_t>(r) * c.k, min_u32(kTileM, last - r),
               c.qweight + by * expert_words, c.scales + by * expert_scales,
               c.y + static_cast<size_t>(r) * c.n, c.n, c.k, n0, nt, scratch);
  }
}

// The canonical layout is the baseline's own: block (bx, by) copies rows [64 bx, 64 bx + 64) of
// matrix `by`, codes and scales, unchanged.
void w4a16_repack(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
  const RepackCall c = repack_call(args);
  const uint32_t n0 = bx * kRepackRows;
  if (n0 >= c.n || by >= c.count) return;
  const uint32_t rows = min_u32(kRepackRows, c.n - n0);
  const size_t words = c.k / 8, groups = c.k / kGroup;
  const size_t first = static_cast<size_t>(by) * c.n + n0;  // row index within the stack
  std::memcpy(c.qweight_out + first * words, c.qweight_in + first * words, sizeof(uint32_t) * rows * words);
  std::memcpy(c.scales_out + first * groups, c.scales_in + first * groups, sizeof(uint16_t) * rows * groups);
}

void silu_mul(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
  gated<silu>(args, bx, by);
}

void gelu_mul(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
  gated<gelu_tanh>(args, bx, by);
}

void router_gemm(const KernelArgs& args, uint32_t bx, uint32_t by, unsigned char*) {
  const auto* x = arg_ptr<const uint16_t>(args, 0);
  const auto* w = arg_ptr<const float>(args, 1);
  auto* logits = arg_ptr<float>(args, 2);
  const uint32_t experts = arg_u32(args, 4);
  const uint32_t hidden = arg_u32(args, 5);
  const size_t row = by;
  const uint32_t begin = bx * kRouterExperts;
  const uint32_t end = min_u32(experts, begin + kRouterExperts);
  const uint16_t* xr = x + row * hidden;
  // 16 independent partial sums: the compiler keeps them in vector registers of whatever width
  // the baseline target has, instead of one serial chain of adds (a MoE decode step's router
  // reads E x H f32 of weights and must stream them, not wait on add latency).
  constexpr uint32_t kLanes = 16;
  for (uint32_t e = begin; e < end; ++e) {
    const float* we = w + static_cast<size_t>(e) * hidden;
    float part[kLanes] = {};
    uint32_t t = 0;
    for (; t + kLanes <= hidden; t += kLanes)
      for (uint32_t j = 0; j < kLanes; ++j) part[j] += bf16_to_f32(xr[t + j]) * we[t + j];
    for (; t < hidden; ++t) part[t % kLanes] += bf16_to_f32(xr[t]) * we[t];
    for (uint32_t width = kLanes / 2; width > 0; width /= 2)
      for (uint32_t j = 0; j < width; ++j) part[j] += part[j + width];
    logits[row * experts + e] = part[0];
  }
}

void topk_softmax(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const auto* logits = arg_ptr<const float>(args, 0);
  auto* ids = arg_ptr<int32_t>(args, 1);
  auto* weights = arg_ptr<float>(args, 2);
  const uint32_t experts = arg_u32(args, 4);
  const uint32_t top = arg_u32(args, 5);
  const bool renormalize = arg_u32(args, 6) != 0;
  const size_t row = bx;
  const float* l = logits + row * experts;
  float peak = l[0];
  for (uint32_t e = 1; e < experts; ++e) peak = l[e] > peak ? l[e] : peak;
  float sum = 0.0f;
  for (uint32_t e = 0; e < experts; ++e) sum += std::exp(l[e] - peak);
  // Selection by repeated scans: each pick is the best (probability desc, id asc) strictly after
  // the previous pick in that order, so no marker array is needed.
  float previous_p = 0.0f;
  int64_t previous_id = -1;
  float picked = 0.0f;
  for (uint32_t j = 0; j < top; ++j) {
    int64_t best = -1;
    float best_p = 0.0f;
    for (uint32_t e = 0; e < experts; ++e) {
      const float p = std::exp(l[e] - peak) / sum;
      if (previous_id >= 0 && !(p < previous_p || (p == previous_p && e > previous_id))) continue;
      if (best < 0 || p > best_p) {
        best = e;
        best_p = p;
      }
    }
    ids[row * top + j] = static_cast<int32_t>(best);
    weights[row * top + j] = best_p;
    picked += best_p;
    previous_p = best_p;
    previous_id = best;
  }
  if (renormalize && picked > 0.0f)
    for (uint32_t j = 0; j < top; ++j) weights[row * top + j] /= picked;
}

void moe_gather(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char*) {
  const auto* x = arg_ptr<const uint16_t>(args, 0);
  const auto* rows = arg_ptr<const int32_t>(args, 1);
  auto* out = arg_ptr<uint16_t>(args, 2);
  const uint32_t hidden = arg_u32(args, 4);
  const size_t source = static_cast<uint32_t>(rows[bx]);
  std::memcpy(out + static_cast<size_t>(bx) * hidden, x + source * hidden,
              sizeof(uint16_t) * hidden);
}

void moe_combine(const KernelArgs& args, uint32_t bx, uint32_t, unsigned char* scratch) {
  const auto* expert_out = arg_ptr<const uint16_t>(args, 0);
  const auto* slots = arg_ptr<const int32_t>(args, 1);
  const auto* weights = arg_ptr<const float>(args, 2);
  auto* out = arg_ptr<uint16_t>(args, 3);
  const uint32_t top = arg_u32(args, 5);
  const uint32_t hidden = arg_u32(args, 6);
  const size_t row = bx;
  constexpr uint32_t kChunk = 1024;
  float* acc = scratch_at<float>(scratch, 0);
  for (uint32_t c0 = 0; c0 < hidden; c0 += kChunk) {
    const uint32_t width = min_u32(kChunk, hidden - c0);
    for (uint32_t c = 0; c < width; ++c) acc[c] = 0.0f;
    for (uint32_t j = 0; j < top; ++j) {
      const float weight = weights[row * top + j];
      const uint16_t* source =
          expert_out + static_cast<size_t>(static_cast<uint32_t>(slots[row * top + j])) * hidden + c0;
      for (uint32_t c = 0; c < width; ++c) acc[c] += weight * bf16_to_f32(source[c]);
    }
    for (uint32_t c = 0; c < width; ++c) out[row * hidden + c0 + c] = f32_to_bf16(acc[c]);
  }
}

// The routing of one MoE step on one block: a counting sort of the (token, choice) pairs by
// expert, stable in (token, choice) order. ids were checked to lie in [0, e) at launch.
void moe_align(const KernelArgs& args, uint32_t, uint32_t, unsigned char*) {
  const auto* ids = arg_ptr<const int32_t>(args, 0);
  const auto* topk_weights = arg_ptr<const float>(args, 1);
  const auto* shared_logits = arg_ptr<const float>(args, 2);
  auto* offsets = arg_ptr<int32_t>(args, 3);
  auto* rows = arg_ptr<int32_t>(args, 4);
  auto* slots = arg_ptr<int32_t>(args, 5);
  auto* combine = arg_ptr<float>(args, 6);
  auto* active = arg_ptr<int32_t>(args, 7);
  const uint32_t m = arg_u32(args, 8), experts = arg_u32(args, 9), top = arg_u32(args, 10);
  const uint32_t shared = arg_u32(args, 11);
  const uint32_t width = top + (shared != 0 ? 1 : 0);
  const size_t pairs = size_t{m} * top;
  for (uint32_t e = 0; e <= experts; ++e) offsets[e] = 0;
  for (size_t i = 0; i < pairs; ++i) ++offsets[ids[i] + 1];
  active[0] = 0;
  for (uint32_t e = 0; e < experts; ++e) {
    if (offsets[e + 1] != 0) {
      active[1 + active[0]] = static_cast<int32_t>(e);
      ++active[0];
    }
    offsets[e + 1] += offsets[e];
  }
  // offsets[e] is expert e's next free row while filling; it ends at offsets[e + 1], so the
  // pass below shifts the array by one expert, which the last loop undoes.
  for (size_t r = 0; r < m; ++r)
    for (uint32_t j = 0; j < top; ++j) {
      const int32_t row = offsets[ids[r * top + j]]++;
      rows[row] = static_cast<int32_t>(r);
      slots[r * width + j] = row;
      combine[r * width + j] = topk_weights[r * top + j];
    }
  for (uint32_t e = experts; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
  if (shared == 0) return;
  for (size_t r = 0; r < m; ++r) {
    slots[r * width + top] = static_cast<int32_t>(pairs + r);
    combine[r * width + top] = shared == 1 ? 1.0f : 1.0f / (1.0f + std::exp(-shared_logits[r]));
  }
}

}  // namespace metrale::cpu::baseline
