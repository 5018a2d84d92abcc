// SPDX-License-Identifier: MIT OR Apache-2.0
// The reference of the decoder's small kernels (docs/kernels.md, modules norm and rope), in
// double precision with the contract's bf16 rounding points. Each bound allows what f32 may do
// differently at each rounding point: one bf16 ulp of every rounded intermediate (carried through
// what follows) and two ulps of the output.
#pragma once

#include "reference/reference.hpp"

#include <cstdint>
#include <span>

namespace metrale::layers {

// rms_norm of x [m][h] with weight [h].
ReferenceOutput reference_rms_norm(std::span<const uint16_t> x, std::span<const uint16_t> weight, uint32_t m,
                                   uint32_t h, double eps);

// rms_norm_residual: residual_out = bf16(x + residual) (exact: bound 0) and y = rms_norm of it.
struct ReferenceResidualNorm {
  ReferenceOutput y;
  ReferenceOutput residual_out;
};
ReferenceResidualNorm reference_rms_norm_residual(std::span<const uint16_t> x, std::span<const uint16_t> residual,
                                                  std::span<const uint16_t> weight, uint32_t m, uint32_t h, double eps);

// bias_add: out[r][j] = bf16(x[r][j] + bias[j]) over x [m][n], bias [n] (exact: bound 0).
ReferenceOutput reference_bias_add(std::span<const uint16_t> x, std::span<const uint16_t> bias, uint32_t m, uint32_t n);

// rope on one [t][heads][head_dim] tensor: the result as [t * heads][head_dim].
ReferenceOutput reference_rope(std::span<const uint16_t> x, std::span<const int32_t> positions,
                               std::span<const float> inv_freq, uint32_t t, uint32_t heads, uint32_t head_dim,
                               float scaling);

// qk_norm_rope on one [t][heads][head_dim] tensor (q or k) with its norm weight [head_dim]:
// rms_norm of every head row, rounded to bf16, then rope; the norm's bound carried through the
// rotation. The result as [t * heads][head_dim].
ReferenceOutput reference_qk_norm_rope(std::span<const uint16_t> x, std::span<const uint16_t> weight,
                                      std::span<const int32_t> positions, std::span<const float> inv_freq, uint32_t t,
                                      uint32_t heads, uint32_t head_dim, double eps, float scaling);

}  // namespace metrale::layers
