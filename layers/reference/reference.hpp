// SPDX-License-Identifier: MIT OR Apache-2.0
// The reference: a plain scalar implementation of every layer in double precision, written apart
// from the kernels. It reads weights only through QuantView::value/dequantize_row and follows the
// kernel contracts of docs/kernels.md: sums in double, intermediate results rounded to bf16 where
// the contract stores bf16 (gate_up, act, expert outputs, the shared expert's output), the final
// output left exact.
//
// Tolerance (stated once, used by tests, conformance and `metrale run --check`): an output element
// y of reference r passes when
//     |y - r| <= 2^-7 |r| + 2^-12 S + F
// where S = sum_k |x_k w_k| over the dot product that produced it (the scale of f32 accumulation
// error) and, when that dot product's inputs x are bf16 intermediates of an earlier stage (the
// down projections), F = 4 max_k |w_k| ulp(x_k): up to four inputs whose rounding fell the other
// way in f32 than in double. For inputs given to the layer F = 0. 2^-7 is two bf16 ulps of the
// output. A MoE combine output gets 2^-7 |r| + sum_j |w_j| (2 ulp(e_j) + slack_j)
// + 2^-16 sum_j |w_j e_j|: each expert row e_j may be off by two ulps plus its own dot-product
// slack (2^-12 S_j + F_j), the f32 routing weights by 2^-16. Tokens whose k-th and (k+1)-th router
// logits are closer than 2^-14 of their scale (but not exactly equal) could route either way in
// f32 and are excluded from the check (counted and reported).
#pragma once

#include "io/config.hpp"
#include "core/tiers.hpp"
#include "core/w4a16.hpp"
#include "io/weights.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

inline constexpr double kRefRelTolerance = 0x1.0p-7;
inline constexpr double kRefScaleTolerance = 0x1.0p-12;
inline constexpr double kRefWeightTolerance = 0x1.0p-16;
inline constexpr double kRefTieMargin = 0x1.0p-14;
inline constexpr double kRefFlipInputs = 4.0;

struct ReferenceOptions {
  unsigned threads = 0;  // 0: hardware concurrency
  // How the projections' inputs are quantized (the layer's activation tier: a dense FFN and a
  // MoE's shared expert); the router and the shared expert's gate stay exact.
  ActivationQuant activations = ActivationQuant::bf16;
  // The MoE experts' tier, when it differs (the experts' family fell back, say); unset: `activations`.
  std::optional<ActivationQuant> expert_activations;
  ActivationScaling activation_scaling;  // how the quantized tiers set their scales
  // Called now and then with a stage name and the fraction done (for stderr progress).
  std::function<void(std::string_view stage, double fraction)> progress;
};

struct ReferenceOutput {
  uint32_t m = 0;
  uint32_t n = 0;
  std::vector<double> value;  // [m][n]
  std::vector<double> bound;  // [m][n]: allowed |y - value|
  std::vector<uint8_t> row_excluded;  // [m]: 1 when routing is ambiguous in f32
  size_t excluded_rows() const noexcept;
};

// y = x W^T for bf16 x [m, k].
ReferenceOutput reference_projection(const QuantView& w, std::span<const uint16_t> x, uint32_t m,
                                     const ReferenceOptions& options = {});
// act(gate) * up for bf16 gate_up [m, 2I] (the act kernels' contract), as doubles.
double reference_activation(Activation act, double gate) noexcept;
ReferenceOutput reference_dense_ffn(const DenseFfnWeights& w, Activation act, std::span<const uint16_t> x, uint32_t m,
                                    const ReferenceOptions& options = {});
ReferenceOutput reference_moe(const MoeWeights& w, const ModelConfig& config, std::span<const uint16_t> x, uint32_t m,
                              const ReferenceOptions& options = {});
// Dispatches on the config's kind; None returns x itself (bound 0).
ReferenceOutput reference_ffn(const FfnWeights& w, const ModelConfig& config, std::span<const uint16_t> x, uint32_t m,
                              const ReferenceOptions& options = {});

// Routing as topk_softmax's contract defines it: ids and weights [m][k], ties to the lower id.
struct ReferenceRouting {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  std::vector<uint8_t> ambiguous;  // [m]
};
ReferenceRouting reference_topk_softmax(std::span<const double> logits, std::span<const double> logit_scale, uint32_t m,
                                        uint32_t experts, uint32_t k, bool renormalize);

struct Comparison {
  size_t checked = 0;
  size_t violations = 0;
  size_t excluded_rows = 0;
  double max_abs = 0;    // max |y - r|
  double max_rel = 0;    // max |y - r| / |r| over elements with |r| >= rms(r) / 4
  double worst_ratio = 0;  // max |y - r| / bound: <= 1 passes
  // The worst element (by ratio).
  uint32_t worst_row = 0;
  uint32_t worst_col = 0;
  double worst_got = 0;
  double worst_want = 0;
  double worst_bound = 0;
  bool passed() const noexcept { return violations == 0 && checked > 0; }
  std::string summary() const;
};

// Compares a bf16 [m, n] result with the reference; NaN or infinity always violates.
Comparison compare_to_reference(std::span<const uint16_t> got, const ReferenceOutput& reference);

// Deterministic bf16 inputs in [-1, 1) for m rows of width `width`.
std::vector<uint16_t> synthetic_activations(uint32_t m, uint32_t width, uint64_t seed);

}  // namespace metrale::layers
