// SPDX-License-Identifier: MIT OR Apache-2.0
// Conformance cases of the hybrid models' kernels (docs/kernels.md): norm/rms_norm_zero_centred,
// attn/output_gate and the deltanet module (conv_silu, delta_rule_recurrent, delta_rule_chunked,
// gated_norm), each launched directly on synthetic data against a double-precision reference
// written here from the contract, with its bf16 rounding points; the bounds allow what f32 may
// do (a rounding point landing on the other side, the f32 recurrence's drift). The deltanet cases
// run several sequences (runs) with their state slots out of order and a row between runs that
// no run names: it must keep its canary, and so must the slots no run names.
#include "conformance/conformance.hpp"
#include "conformance/hybrid_support.hpp"

#include "core/device_buffer.hpp"
#include "core/numeric.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>

namespace metrale::conformance {

using namespace metrale::layers;

namespace {

using catalogue::signature;
constexpr auto kZeroCentredSig = signature("norm", "rms_norm_zero_centred");
constexpr auto kOutputGateSig = signature("attn", "output_gate");
constexpr auto kGatedNormSig = signature("deltanet", "gated_norm");
constexpr float kEps = 1e-6f;

// Rows of very different scales (2^-9..2^9), as decoder_cases.cpp's.
std::vector<uint16_t> scaled_rows(uint32_t m, uint32_t h, uint64_t stream) {
  std::vector<uint16_t> x = synthetic_activations(m, h, stream);
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t j = 0; j < h; ++j)
      x[size_t{r} * h + j] = f32_to_bf16(bf16_to_f32(x[size_t{r} * h + j]) * std::ldexp(1.0f, static_cast<int>(r % 7) * 3 - 9));
  return x;
}

// ---- rms_norm_zero_centred, output_gate, gated_norm: one row per block, `in_place` over x.

CaseResult run_zero_centred(Backend& b, const Case& c, CaseResult r) {
  const uint32_t m = c.m, h = c.n;
  const std::vector<uint16_t> x = scaled_rows(m, h, stream_of(c)), w = synthetic_activations(1, h, stream_of(c) + 1);
  ReferenceOutput ref = sized(m, h);
  for (uint32_t row = 0; row < m; ++row) {
    double squares = 0;
    for (uint32_t j = 0; j < h; ++j) squares += std::pow(double{bf16_to_f32(x[size_t{row} * h + j])}, 2);
    const double s = 1 / std::sqrt(squares / h + kEps);
    for (uint32_t j = 0; j < h; ++j) {
      const size_t at = size_t{row} * h + j;
      ref.value[at] = bf16_to_f32(x[at]) * s * (1 + double{bf16_to_f32(w[j])});
      ref.bound[at] = 2 * bf16_ulp(ref.value[at]);
    }
  }
  DeviceBuffer dx = uploaded(b, x), dw = uploaded(b, w), dy = canaries(b, x.size(), h);
  const bool in_place = c.variant == "in_place";
  const DevicePtr y = in_place ? dx.ptr() : dy.ptr();
  b.launch(b.kernel("norm", "rms_norm_zero_centred", kZeroCentredSig), grid(m, 1), dx.ptr(), dw.ptr(), y, m, h, kEps);
  b.synchronize();
  std::vector<uint16_t> got = (in_place ? dx : dy).download<uint16_t>(in_place ? x.size() : x.size() + h);
  const bool guard = all_canary(got, x.size());
  got.resize(x.size());
  return compared(std::move(r), got, ref, guard);
}

CaseResult run_output_gate(Backend& b, const Case& c, CaseResult r) {
  const uint32_t m = c.m, n = c.n;
  std::vector<uint16_t> x = scaled_rows(m, n, stream_of(c)), gate = synthetic_activations(m, n, stream_of(c) + 1);
  for (uint16_t& g : gate) g = f32_to_bf16(8 * bf16_to_f32(g));  // sigmoid over (-8, 8)
  ReferenceOutput ref = sized(m, n);
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = 1 / (1 + std::exp(-double{bf16_to_f32(gate[i])})), sigma = bf16(exact), xi = bf16_to_f32(x[i]);
    ref.value[i] = xi * sigma;
    // f32's sigmoid may round to the bf16 beside the double's.
    ref.bound[i] = std::fabs(xi) * bf16_ulp(sigma) + 2 * bf16_ulp(ref.value[i]);
  }
  DeviceBuffer dx = uploaded(b, x), dg = uploaded(b, gate), dout = canaries(b, x.size(), n);
  const bool in_place = c.variant == "in_place";
  const DevicePtr out = in_place ? dx.ptr() : dout.ptr();
  b.launch(b.kernel("attn", "output_gate", kOutputGateSig), grid(m, 1), dx.ptr(), dg.ptr(), out, m, n);
  b.synchronize();
  std::vector<uint16_t> got = (in_place ? dx : dout).download<uint16_t>(in_place ? x.size() : x.size() + n);
  const bool guard = all_canary(got, x.size());
  got.resize(x.size());
  return compared(std::move(r), got, ref, guard);
}

CaseResult run_gated_norm(Backend& b, const Case& c, CaseResult r) {
  const uint32_t rows = c.m, dim = c.n;
  const std::vector<uint16_t> x = scaled_rows(rows, dim, stream_of(c)), z = synthetic_activations(rows, dim, stream_of(c) + 1);
  std::vector<float> w(dim);
  const std::vector<uint16_t> wb = synthetic_activations(1, dim, stream_of(c) + 2);
  for (uint32_t j = 0; j < dim; ++j) w[j] = 1.0f + 0.75f * bf16_to_f32(wb[j]) + 0x1p-10f;
  ReferenceOutput ref = sized(rows, dim);
  for (uint32_t row = 0; row < rows; ++row) {
    double squares = 0;
    for (uint32_t j = 0; j < dim; ++j) squares += std::pow(double{bf16_to_f32(x[size_t{row} * dim + j])}, 2);
    const double s = 1 / std::sqrt(squares / dim + kEps);
    for (uint32_t j = 0; j < dim; ++j) {
      const size_t at = size_t{row} * dim + j;
      const double normalised = bf16(bf16_to_f32(x[at]) * s), gate = w[j] * silu(bf16_to_f32(z[at]));
      ref.value[at] = normalised * gate;
      ref.bound[at] = std::fabs(gate) * bf16_ulp(normalised) + 2 * bf16_ulp(ref.value[at]);
    }
  }
  DeviceBuffer dx = uploaded(b, x), dz = uploaded(b, z), dw = uploaded(b, w), dy = canaries(b, x.size(), dim);
  const bool in_place = c.variant == "in_place";
  const DevicePtr y = in_place ? dx.ptr() : dy.ptr();
  b.launch(b.kernel("deltanet", "gated_norm", kGatedNormSig), grid(rows, 1), dx.ptr(), dz.ptr(), dw.ptr(), y, rows, dim, kEps);
  b.synchronize();
  std::vector<uint16_t> got = (in_place ? dx : dy).download<uint16_t>(in_place ? x.size() : x.size() + dim);
  const bool guard = all_canary(got, x.size());
  got.resize(x.size());
  return compared(std::move(r), got, ref, guard);
}

}  // namespace

// The delta-rule and convolution cases live in deltanet_cases.cpp.
std::vector<Case> hybrid_cases() {
  std::vector<Case> out;
  // Qwen3-Next's hidden size (2048) and Qwen3.5's larger ones; its q/k norm over head_dim 256.
  out.push_back(hybrid_case("norm/rms_norm_zero_centred/m7_h2048", "norm", "rms_norm_zero_centred", 7, 2048));
  out.push_back(hybrid_case("norm/rms_norm_zero_centred/m3_h5120", "norm", "rms_norm_zero_centred", 3, 5120));
  out.push_back(hybrid_case("norm/rms_norm_zero_centred/qk_t5_heads16_d256", "norm", "rms_norm_zero_centred", 5 * 16, 256));
  out.push_back(hybrid_case("norm/rms_norm_zero_centred/in_place_m5_h1000", "norm", "rms_norm_zero_centred", 5, 1000, 0, 0, {},
                            "in_place"));
  // The gate of 16 heads of 256 (Qwen3-Next-80B's attention), in place; an n no multiple of a vector.
  out.push_back(hybrid_case("attn/output_gate/m9_n4096", "attn", "output_gate", 9, 4096));
  out.push_back(hybrid_case("attn/output_gate/in_place_m5_n1000", "attn", "output_gate", 5, 1000, 0, 0, {}, "in_place"));
  // One row per (token, value head) of 128: 3 tokens of 32 heads; in place.
  out.push_back(hybrid_case("deltanet/gated_norm/rows96_d128", "deltanet", "gated_norm", 96, 128));
  out.push_back(hybrid_case("deltanet/gated_norm/in_place_rows7_d128", "deltanet", "gated_norm", 7, 128, 0, 0, {}, "in_place"));
  for (Case& c : deltanet_cases()) out.push_back(std::move(c));
  return out;
}

CaseResult run_hybrid_case(Backend& backend, const Case& c, CaseResult r) {
  if (c.kernel == "rms_norm_zero_centred") return run_zero_centred(backend, c, std::move(r));
  if (c.kernel == "output_gate") return run_output_gate(backend, c, std::move(r));
  if (c.kernel == "gated_norm") return run_gated_norm(backend, c, std::move(r));
  return run_deltanet_case(backend, c, std::move(r));
}

}  // namespace metrale::conformance
