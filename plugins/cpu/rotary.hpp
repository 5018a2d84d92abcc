// SPDX-License-Identifier: MIT OR Apache-2.0
// The per-token frame of rope/rope and rope/qk_norm_rope (docs/kernels.md): the token's bf16 cos
// and sin, and the walk over its heads of q and of k. Internal linkage on purpose (numeric.hpp):
// the baseline and the AVX-512 tiers each compile their own copy.
#pragma once

#include "kernels.hpp"
#include "numeric.hpp"

#include <cmath>

namespace metrale::cpu {
namespace {

struct Rotary {
  const float* cosines;
  const float* sines;
};

// cos and sin at `position` into the scratch (kMaxHeadDim/2 of each): the angle is the f32
// product inv_freq[i] · position; cos and sin are taken in f32, multiplied by `scaling` and
// rounded to bf16, as transformers hands them to the attention.
inline Rotary rotary(const float* inv_freq, int32_t position, float scaling, uint32_t half, unsigned char* scratch) {
  float* cosines = scratch_at<float>(scratch, 0);
  float* sines = cosines + kMaxHeadDim / 2;
  const auto at = static_cast<float>(position);
  for (uint32_t i = 0; i < half; ++i) {
    const float angle = inv_freq[i] * at;
    cosines[i] = bf16_to_f32(f32_to_bf16(std::cos(angle) * scaling));
    sines[i] = bf16_to_f32(f32_to_bf16(std::sin(angle) * scaling));
  }
  return {cosines, sines};
}

// qk_norm_rope (q, k, q_weight, k_weight, positions, inv_freq, t, q_heads, kv_heads, head_dim,
// eps, scaling), token `bx`: `head_body(head, weight, cosines, sines, half, eps)` normalises and
// rotates one head in place, every head of q with q_weight, then every head of k with k_weight.
template <class HeadBody>
void qk_norm_rope_token(const KernelArgs& args, uint32_t bx, unsigned char* scratch, HeadBody head_body) {
  const uint32_t q_heads = arg_u32(args, 7), kv_heads = arg_u32(args, 8), head_dim = arg_u32(args, 9);
  const uint32_t half = head_dim / 2;
  const float eps = arg_f32(args, 10);
  const Rotary r = rotary(arg_ptr<const float>(args, 5), arg_ptr<const int32_t>(args, 4)[bx], arg_f32(args, 11), half, scratch);
  uint16_t* q = arg_ptr<uint16_t>(args, 0) + size_t{bx} * q_heads * head_dim;
  uint16_t* k = arg_ptr<uint16_t>(args, 1) + size_t{bx} * kv_heads * head_dim;
  const uint16_t* q_weight = arg_ptr<const uint16_t>(args, 2);
  const uint16_t* k_weight = arg_ptr<const uint16_t>(args, 3);
  for (uint32_t hd = 0; hd < q_heads; ++hd) head_body(q + size_t{hd} * head_dim, q_weight, r.cosines, r.sines, half, eps);
  for (uint32_t hd = 0; hd < kv_heads; ++hd) head_body(k + size_t{hd} * head_dim, k_weight, r.cosines, r.sines, half, eps);
}

}  // namespace
}  // namespace metrale::cpu
