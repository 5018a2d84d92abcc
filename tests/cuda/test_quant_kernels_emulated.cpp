// SPDX-License-Identifier: MIT OR Apache-2.0
// The quantized-weight kernels of kernel_src/ (modules w4a16_zp, w8a16, fp8, w4a8, w8a8, w4afp8, quant)
// and the plain 16-bit weights (modules bf16, f16), compiled for the host against the CUDA
// emulation of tests/cuda/emulation and checked against the double-precision definitions of
// quant_reference.hpp: GEMV tiers, bf16 / int8 / E4M3 tensor core tiles and their grouped forms at
// awkward shapes, every group size, zero points at the ends of their ranges, FP8 subnormals, ±448
// and NaN, f16 subnormals and the low bits bf16 cannot hold, E4M3 activations scaled per 128 columns,
// and the activation quantizers bit for bit (f32 and bf16 arithmetic, per row and per 128 columns).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "metrale_emulated_ptx.hpp"
#include "quant_reference.hpp"
#include "quantizer_cases.hpp"

// The kernel sources themselves, as NVRTC sees them.
#include "bf16.cu"
#include "fp8.cu"
#include "quant.cu"
#include "w4a16_zp.cu"
#include "w4a8.cu"
#include "w4afp8.cu"
#include "w8a16.cu"
#include "w8a8.cu"

namespace ref = metrale::reference;
using ref::QuantKind;

namespace {

enum class Variant { gemv, gemm, grouped };

const __nv_bfloat16* bf(const std::vector<uint16_t>& v) { return reinterpret_cast<const __nv_bfloat16*>(v.data()); }
__nv_bfloat16* bf(std::vector<uint16_t>& v) { return reinterpret_cast<__nv_bfloat16*>(v.data()); }
const unsigned char* bytes(const ref::QuantMatrix& w) { return reinterpret_cast<const unsigned char*>(w.words.data()); }
unsigned ceil_div(unsigned a, unsigned b) { return (a + b - 1) / b; }

emu::dim3 grid_of(Variant v, uint32_t n, uint32_t m, uint32_t experts) {
  switch (v) {
    case Variant::gemv: return {ceil_div(n, 64), 1, 1};
    case Variant::gemm: return {ceil_div(n, 128), ceil_div(m, 64), 1};
    case Variant::grouped: break;
  }
  return {ceil_div(n, 128), experts, 1};
}

// bf16 activations: w4a16_zp_*, w8a16_*, fp8_*, bf16_*, f16_*. `m`: rows (dense) or unused (grouped).
void launch_bf16(Variant v, const std::vector<uint16_t>& x, const ref::QuantMatrix& w, const std::vector<int>& offsets,
                 std::vector<uint16_t>& y, uint32_t m) {
  const unsigned* q = w.words.data();
  const float* s = w.scales.data();
  const unsigned char* z = w.zeros.data();
  const uint32_t n = w.n, k = w.k, g = w.group, e = w.count;
  emu::launch(grid_of(v, n, m, e), {128, 1, 1}, [&] {
    switch (w.kind) {
      case QuantKind::w4zp:
        if (v == Variant::gemv) w4a16_zp_gemv(bf(x), q, s, z, bf(y), m, n, k, g);
        if (v == Variant::gemm) w4a16_zp_gemm(bf(x), q, s, z, bf(y), m, n, k, g);
        if (v == Variant::grouped) w4a16_zp_grouped_gemm(bf(x), q, s, z, offsets.data(), bf(y), n, k, g, e);
        break;
      case QuantKind::w8zp:
        if (v == Variant::gemv) w8a16_gemv(bf(x), bytes(w), s, z, bf(y), m, n, k, g);
        if (v == Variant::gemm) w8a16_gemm(bf(x), bytes(w), s, z, bf(y), m, n, k, g);
        if (v == Variant::grouped) w8a16_grouped_gemm(bf(x), bytes(w), s, z, offsets.data(), bf(y), n, k, g, e);
        break;
      case QuantKind::fp8:
        if (v == Variant::gemv) fp8_gemv(bf(x), bytes(w), s, bf(y), m, n, k);
        if (v == Variant::gemm) fp8_gemm(bf(x), bytes(w), s, bf(y), m, n, k);
        if (v == Variant::grouped) fp8_grouped_gemm(bf(x), bytes(w), s, offsets.data(), bf(y), n, k, e);
        break;
      case QuantKind::bf16: {
        const auto* v16 = reinterpret_cast<const __nv_bfloat16*>(q);
        if (v == Variant::gemv) bf16_gemv(bf(x), v16, bf(y), m, n, k);
        if (v == Variant::gemm) bf16_gemm(bf(x), v16, bf(y), m, n, k);
        if (v == Variant::grouped) bf16_grouped_gemm(bf(x), v16, offsets.data(), bf(y), n, k, e);
        break;
      }
      case QuantKind::f16: {
        const auto* v16 = reinterpret_cast<const __half*>(q);
        if (v == Variant::gemv) f16_gemv(bf(x), v16, bf(y), m, n, k);
        if (v == Variant::gemm) f16_gemm(bf(x), v16, bf(y), m, n, k);
        if (v == Variant::grouped) f16_grouped_gemm(bf(x), v16, offsets.data(), bf(y), n, k, e);
        break;
      }
    }
  });
}

// 8-bit activations: w4a8_* and w8a8_* (int8), fp8_*_a8 and w4afp8_* (E4M3; no gemv).
void launch_act8(Variant v, const std::vector<uint8_t>& xq, const std::vector<float>& xscale, const ref::QuantMatrix& w,
                 const std::vector<int>& offsets, std::vector<uint16_t>& y, uint32_t m, bool e4m3_act) {
  const unsigned char* a = xq.data();
  const float* xs = xscale.data();
  const float* s = w.scales.data();
  const unsigned char* z = w.zeros.data();
  const uint32_t n = w.n, k = w.k, g = w.group, e = w.count;
  emu::launch(grid_of(v, n, m, e), {128, 1, 1}, [&] {
    switch (w.kind) {
      case QuantKind::w4zp:
        if (e4m3_act) {
          if (v == Variant::gemm) w4afp8_gemm(a, xs, w.words.data(), s, z, bf(y), m, n, k, g);
          if (v == Variant::grouped) w4afp8_grouped_gemm(a, xs, w.words.data(), s, z, offsets.data(), bf(y), n, k, g, e);
          break;
        }
        if (v == Variant::gemv) w4a8_gemv(a, xs, w.words.data(), s, z, bf(y), m, n, k, g);
        if (v == Variant::gemm) w4a8_gemm(a, xs, w.words.data(), s, z, bf(y), m, n, k, g);
        if (v == Variant::grouped) w4a8_grouped_gemm(a, xs, w.words.data(), s, z, offsets.data(), bf(y), n, k, g, e);
        break;
      case QuantKind::w8zp:
        if (v == Variant::gemv) w8a8_gemv(a, xs, bytes(w), s, z, bf(y), m, n, k, g);
        if (v == Variant::gemm) w8a8_gemm(a, xs, bytes(w), s, z, bf(y), m, n, k, g);
        if (v == Variant::grouped) w8a8_grouped_gemm(a, xs, bytes(w), s, z, offsets.data(), bf(y), n, k, g, e);
        break;
      case QuantKind::fp8:
        if (v == Variant::gemm) fp8_gemm_a8(a, xs, bytes(w), s, bf(y), m, n, k);
        if (v == Variant::grouped) fp8_grouped_gemm_a8(a, xs, bytes(w), s, offsets.data(), bf(y), n, k, e);
        break;
      case QuantKind::bf16:
      case QuantKind::f16: break;  // bf16 activations only: launch_bf16
    }
  });
}

struct Shape {
  uint32_t m, n, k, group;
};

const Shape kGemvShapes[] = {{1, 1, 128, 32}, {3, 17, 384, 64}, {8, 129, 384, 128}, {9, 17, 128, 32}, {1, 129, 384, 64}};
const Shape kGemmShapes[] = {{1, 17, 128, 32}, {9, 129, 384, 64}, {70, 129, 128, 128}, {3, 1, 384, 32}, {8, 17, 384, 128}};

// Experts with 3, 0, 9 and 70 rows.
const std::vector<int> kOffsets = {0, 3, 3, 12, 82};

const char* kind_name(QuantKind kind) {
  switch (kind) {
    case QuantKind::w4zp: return "w4-zp";
    case QuantKind::w8zp: return "w8-zp";
    case QuantKind::fp8: return "fp8-e4m3";
    case QuantKind::bf16: return "bf16-nk";
    case QuantKind::f16: return "f16-nk";
  }
  return "?";
}

// Dense variants: every shape, bf16 or 8-bit activations, checked against the reference.
void check_dense(QuantKind kind, Variant v, const Shape& s, bool act8, bool e4m3_act) {
  CAPTURE(kind_name(kind));
  CAPTURE(static_cast<int>(v));
  CAPTURE(s.m);
  CAPTURE(s.n);
  CAPTURE(s.k);
  CAPTURE(s.group);
  ref::QuantData data(s.m * 131 + s.n * 7 + s.k + s.group);
  const auto w = data.weights(kind, s.n, s.k, s.group, 1);
  std::vector<uint16_t> y(static_cast<size_t>(s.m) * s.n, 0xffff);  // NaN: an unwritten output fails
  ref::Comparison c;
  if (act8) {
    const auto xq = e4m3_act ? data.e4m3(static_cast<size_t>(s.m) * s.k) : data.int8(static_cast<size_t>(s.m) * s.k);
    const auto xscale = data.f32(s.m, 0.001f, 0.02f);
    launch_act8(v, xq, xscale, w, {}, y, s.m, e4m3_act);
    ref::check_act8_rows(c, xq.data(), xscale.data(), w, 0, s.m, y.data(), e4m3_act);
  } else {
    const auto x = data.bf16(static_cast<size_t>(s.m) * s.k);
    launch_bf16(v, x, w, {}, y, s.m);
    ref::check_bf16_rows(c, x.data(), w, 0, s.m, y.data());
  }
  CHECK_MESSAGE(c.ok(), c.report());
}

// Grouped variants: four experts (one without rows, one of two 64-row tiles), then three.
void check_grouped(QuantKind kind, bool act8, bool e4m3_act) {
  struct Case {
    std::vector<int> offsets;
    uint32_t n, k, group;
  };
  // K = 256: the 3-stage ring ends on a stage the next 64 rows' prologue refills.
  const Case cases[] = {{kOffsets, 129, 384, 64}, {kOffsets, 129, 256, 128}, {{0, 0, 1, 9}, 17, 128, 32}};
  for (const auto& cs : cases) {
    CAPTURE(kind_name(kind));
    CAPTURE(cs.n);
    const auto experts = static_cast<uint32_t>(cs.offsets.size() - 1);
    const auto t = static_cast<uint32_t>(cs.offsets.back());
    ref::QuantData data(cs.n + cs.k + t);
    const auto w = data.weights(kind, cs.n, cs.k, cs.group, experts);
    std::vector<uint16_t> y(static_cast<size_t>(t) * cs.n, 0xffff);
    const auto xq = e4m3_act ? data.e4m3(static_cast<size_t>(t) * cs.k) : data.int8(static_cast<size_t>(t) * cs.k);
    const auto xscale = data.f32(t, 0.001f, 0.02f);
    const auto x = data.bf16(static_cast<size_t>(t) * cs.k);
    if (act8) launch_act8(Variant::grouped, xq, xscale, w, cs.offsets, y, 0, e4m3_act);
    else launch_bf16(Variant::grouped, x, w, cs.offsets, y, 0);
    ref::Comparison c;
    for (uint32_t e = 0; e < experts; ++e) {
      const auto begin = static_cast<size_t>(cs.offsets[e]);
      const auto rows = static_cast<uint32_t>(cs.offsets[e + 1] - cs.offsets[e]);
      if (act8) {
        ref::check_act8_rows(c, xq.data() + begin * cs.k, xscale.data() + begin, w, e, rows, y.data() + begin * cs.n,
                             e4m3_act, 0, begin * cs.n);
      } else {
        ref::check_bf16_rows(c, x.data() + begin * cs.k, w, e, rows, y.data() + begin * cs.n, begin * cs.n);
      }
    }
    CHECK_MESSAGE(c.ok(), c.report());
  }
}

}  // namespace

TEST_CASE("bf16 activations: w4a16_zp, w8a16 and fp8 GEMV, GEMM and grouped GEMM at awkward shapes") {
  for (const QuantKind kind : {QuantKind::w4zp, QuantKind::w8zp, QuantKind::fp8}) {
    for (const auto& s : kGemvShapes) check_dense(kind, Variant::gemv, s, false, false);
    for (const auto& s : kGemmShapes) check_dense(kind, Variant::gemm, s, false, false);
    check_grouped(kind, false, false);
  }
}

// Plain 16-bit weights (no groups): n off the tiles, m of one row, a few, 8, past the GEMV's
// batch and past two M tiles; K multiples of 128.
TEST_CASE("plain bf16 and f16 weights: GEMV, GEMM and grouped GEMM at awkward shapes") {
  const Shape gemv_shapes[] = {{1, 1, 128, 0}, {3, 17, 384, 0}, {8, 129, 128, 0}, {17, 130, 256, 0}};
  const Shape gemm_shapes[] = {{1, 17, 128, 0}, {3, 129, 384, 0}, {8, 1, 128, 0}, {17, 200, 256, 0}, {130, 129, 384, 0}};
  for (const QuantKind kind : {QuantKind::bf16, QuantKind::f16}) {
    for (const auto& s : gemv_shapes) check_dense(kind, Variant::gemv, s, false, false);
    for (const auto& s : gemm_shapes) check_dense(kind, Variant::gemm, s, false, false);
    check_grouped(kind, false, false);
  }
}

// Rows x = (1, -1, 0, ...) against columns (w, bf16(w), ...): y = w - bf16(w), the low bits of an
// f16 weight that one bf16 operand would drop, exactly; an infinite weight gives an infinite y.
TEST_CASE("f16 weights: the bits below bf16's precision count exactly, an infinite weight stays infinite") {
  ref::QuantData data(5);
  const uint32_t m = 3, n = 130, k = 256;
  auto w = data.weights(QuantKind::f16, n, k, 128, 1);
  auto* v = reinterpret_cast<uint16_t*>(w.words.data());
  std::vector<uint16_t> want(n);
  for (uint32_t c = 0; c < n; ++c) {
    const uint16_t full = static_cast<uint16_t>(0x3c00u | (c * 37u & 0x3ffu) | (c % 2 ? 0x8000u : 0u));
    const float value = ref::f16_to_float(full);
    const float rounded = ref::bf16_to_float(ref::float_to_bf16(value));
    v[c * k] = full;
    v[c * k + 1] = ref::float_to_f16(rounded);  // exact: 8 significant bits
    want[c] = ref::float_to_bf16(value - rounded);
  }
  v[7 * k] = 0x7c00;  // +inf
  v[7 * k + 1] = 0;
  want[7] = 0x7f80;
  std::vector<uint16_t> x(static_cast<size_t>(m) * k, 0);
  for (uint32_t r = 0; r < m; ++r) {
    x[r * k] = ref::float_to_bf16(1.f);
    x[r * k + 1] = ref::float_to_bf16(-1.f);
  }
  for (const Variant variant : {Variant::gemv, Variant::gemm}) {
    CAPTURE(static_cast<int>(variant));
    std::vector<uint16_t> y(static_cast<size_t>(m) * n, 0xffff);
    launch_bf16(variant, x, w, {}, y, m);
    uint32_t differ = 0;
    for (uint32_t r = 0; r < m; ++r)
      for (uint32_t c = 0; c < n; ++c) differ += y[r * n + c] != want[c];
    CHECK(differ == 0);
  }
}

TEST_CASE("int8 activations: w4a8 and w8a8 GEMV, GEMM and grouped GEMM; E4M3 activations: fp8_*_a8 and w4afp8") {
  for (const QuantKind kind : {QuantKind::w4zp, QuantKind::w8zp}) {
    for (const auto& s : kGemvShapes) check_dense(kind, Variant::gemv, s, true, false);
    for (const auto& s : kGemmShapes) check_dense(kind, Variant::gemm, s, true, false);
    check_grouped(kind, true, false);
  }
  for (const QuantKind kind : {QuantKind::fp8, QuantKind::w4zp}) {
    for (const auto& s : kGemmShapes) check_dense(kind, Variant::gemm, s, true, true);
    check_grouped(kind, true, true);
  }
}

TEST_CASE("the tiles and the grouped loop under other schedules and copy timings (races show up here)") {
  const std::pair<emu::Schedule, emu::AsyncPolicy> regimes[] = {
      {emu::Schedule::lowest_first, emu::AsyncPolicy::eager},      // producers run ahead, copies land at once
      {emu::Schedule::highest_first, emu::AsyncPolicy::deferred},  // consumers run ahead, copies land late
  };
  for (const auto& [schedule, policy] : regimes) {
    CAPTURE(static_cast<int>(schedule));
    emu::set_schedule(schedule);
    emu::set_async_policy(policy);
    check_dense(QuantKind::w4zp, Variant::gemm, {70, 129, 384, 32}, false, false);
    check_dense(QuantKind::w8zp, Variant::gemm, {70, 129, 384, 64}, true, false);
    check_dense(QuantKind::fp8, Variant::gemm, {9, 17, 384, 128}, true, true);
    check_grouped(QuantKind::w4zp, true, false);
    check_grouped(QuantKind::fp8, false, false);
    check_dense(QuantKind::f16, Variant::gemm, {70, 129, 384, 0}, false, false);
    check_grouped(QuantKind::bf16, false, false);
  }
  emu::set_schedule(emu::Schedule::round_robin);
  emu::set_async_policy(emu::AsyncPolicy::deferred);
}

TEST_CASE("FP8 weights: subnormals and ±448 exactly, a NaN weight poisons its column only") {
  ref::QuantData data(77);
  const uint32_t m = 9, n = 17, k = 256;
  auto w = data.weights(QuantKind::fp8, n, k, 128, 1);
  auto* b = reinterpret_cast<uint8_t*>(w.words.data());
  for (uint32_t j = 0; j < k; ++j) {
    b[2 * k + j] = static_cast<uint8_t>((j % 8) | (j % 16 >= 8 ? 0x80 : 0));  // ±0 and the 7 subnormals
    b[4 * k + j] = j % 2 ? 0x7e : 0xfe;                                         // ±448
  }
  b[6 * k + 200] = 0x7f;  // NaN
  const auto x = data.bf16(static_cast<size_t>(m) * k);
  for (const Variant v : {Variant::gemv, Variant::gemm}) {
    CAPTURE(static_cast<int>(v));
    std::vector<uint16_t> y(static_cast<size_t>(m) * n, 0xffff);
    launch_bf16(v, x, w, {}, y, m);
    ref::Comparison c;
    ref::check_bf16_rows(c, x.data(), w, 0, m, y.data());
    CHECK_MESSAGE(c.ok(), c.report());
    for (uint32_t r = 0; r < m; ++r) {
      CHECK(std::isnan(ref::bf16_to_float(y[r * n + 6])));
      CHECK_FALSE(std::isnan(ref::bf16_to_float(y[r * n + 5])));
    }
  }
  std::vector<uint8_t> xq = data.e4m3(static_cast<size_t>(m) * k);
  for (uint32_t j = 0; j < 16; ++j) xq[j] = static_cast<uint8_t>(j < 8 ? j : 0x7e);  // subnormal and ±448 activations
  const auto xscale = data.f32(m, 0.001f, 0.02f);
  std::vector<uint16_t> y(static_cast<size_t>(m) * n, 0xffff);
  launch_act8(Variant::gemm, xq, xscale, w, {}, y, m, true);
  ref::Comparison c;
  ref::check_act8_rows(c, xq.data(), xscale.data(), w, 0, m, y.data(), true);
  CHECK_MESSAGE(c.ok(), c.report());
}

TEST_CASE("the 8-bit tiles trap on another block size") {
  ref::QuantData data(3);
  const auto w = data.weights(QuantKind::w8zp, 128, 128, 128, 1);
  const auto xq = data.int8(64 * 128);
  const auto xscale = data.f32(64, 0.01f, 0.02f);
  std::vector<uint16_t> y(64 * 128);
  CHECK_THROWS_WITH_AS(emu::launch({1, 1, 1}, {256, 1, 1},
                                   [&] {
                                     w8a8_gemm(xq.data(), xscale.data(), bytes(w), w.scales.data(), w.zeros.data(),
                                               bf(y), 64, 128, 128, 128);
                                   }),
                       doctest::Contains("__trap"), std::runtime_error);
}

TEST_CASE("quantize_int8 and quantize_fp8: scales and codes bit for bit, any block size") {
  ref::QuantData data(91);
  const uint32_t m = 5, k = 384;
  auto x = data.bf16(static_cast<size_t>(m) * k);
  for (uint32_t j = 0; j < k; ++j) {
    x[k + j] = 0;                                                                  // a zero row: scale 0, codes 0
    x[2 * k + j] = ref::float_to_bf16(std::ldexp(data.uniform(-1.f, 1.f), -static_cast<int>(j % 24)));  // wide range
    x[3 * k + j] = ref::float_to_bf16(j == 7 ? 3.f : -data.uniform(0.f, 1e-4f));  // tiny negatives: signed zeros
  }
  x[4 * k + 5] = ref::float_to_bf16(-448.f);
  for (const bool fp8 : {false, true}) {
    for (const unsigned block : {256u, 100u}) {
      CAPTURE(fp8);
      CAPTURE(block);
      std::vector<uint8_t> xq(static_cast<size_t>(m) * k, 0xaa);
      std::vector<float> xscale(m, NAN);
      emu::launch({m, 1, 1}, {block, 1, 1}, [&] {
        if (fp8) quantize_fp8(bf(x), xq.data(), xscale.data(), m, k);
        else quantize_int8(bf(x), xq.data(), xscale.data(), m, k);
      });
      for (uint32_t r = 0; r < m; ++r) {
        CAPTURE(r);
        std::vector<uint8_t> want(k);
        const float sr = ref::quantize_row(&x[r * k], k, fp8, want.data());
        CHECK(xscale[r] == sr);
        uint32_t differ = 0;
        for (uint32_t j = 0; j < k; ++j) differ += xq[r * k + j] != want[j];
        CHECK(differ == 0);
      }
    }
  }
}

TEST_CASE("fp8_gemm_a8_group128 and its grouped form: activation scales per 128 columns join the weights' scales") {
  for (const auto& s : kGemmShapes) {
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    ref::QuantData data(s.m * 17 + s.n + s.k);
    const auto w = data.weights(QuantKind::fp8, s.n, s.k, 128, 1);
    const auto xq = data.e4m3(static_cast<size_t>(s.m) * s.k);
    const auto xscale = data.f32(static_cast<size_t>(s.m) * (s.k / 128), 0.001f, 0.02f);
    std::vector<uint16_t> y(static_cast<size_t>(s.m) * s.n, 0xffff);
    emu::launch(grid_of(Variant::gemm, s.n, s.m, 1), {128, 1, 1}, [&] {
      fp8_gemm_a8_group128(xq.data(), xscale.data(), bytes(w), w.scales.data(), bf(y), s.m, s.n, s.k);
    });
    ref::Comparison c;
    ref::check_act8_rows(c, xq.data(), xscale.data(), w, 0, s.m, y.data(), true, 0, 0, true);
    CHECK_MESSAGE(c.ok(), c.report());
  }
  const uint32_t n = 129, k = 384, experts = static_cast<uint32_t>(kOffsets.size() - 1);
  const auto t = static_cast<uint32_t>(kOffsets.back());
  ref::QuantData data(901);
  const auto w = data.weights(QuantKind::fp8, n, k, 128, experts);
  const auto xq = data.e4m3(static_cast<size_t>(t) * k);
  const auto xscale = data.f32(static_cast<size_t>(t) * (k / 128), 0.001f, 0.02f);
  std::vector<uint16_t> y(static_cast<size_t>(t) * n, 0xffff);
  emu::launch(grid_of(Variant::grouped, n, 0, experts), {128, 1, 1}, [&] {
    fp8_grouped_gemm_a8_group128(xq.data(), xscale.data(), bytes(w), w.scales.data(), kOffsets.data(), bf(y), n, k, experts);
  });
  ref::Comparison c;
  for (uint32_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<size_t>(kOffsets[e]);
    ref::check_act8_rows(c, xq.data() + begin * k, xscale.data() + begin * (k / 128), w, e,
                         static_cast<uint32_t>(kOffsets[e + 1] - kOffsets[e]), y.data() + begin * n, true, 0, begin * n, true);
  }
  CHECK_MESSAGE(c.ok(), c.report());
}

TEST_CASE("every quantizer on the worked rows: f32 and compressed-tensors' bf16 arithmetic, per row and per 128 columns") {
  const uint32_t m = quantizer_cases::kRows, k = quantizer_cases::kCols;
  std::vector<uint16_t> x;
  for (double v : quantizer_cases::rows()) x.push_back(ref::float_to_bf16(static_cast<float>(v)));
  for (const quantizer_cases::Case& c : quantizer_cases::cases()) {
    for (const unsigned block : {256u, 96u}) {
      CAPTURE(c.kernel);
      CAPTURE(block);
      std::vector<uint8_t> xq(static_cast<size_t>(m) * k, 0xaa);
      std::vector<float> xscale(c.scales.size(), NAN);
      const std::string name = c.kernel;
      emu::launch({m, 1, 1}, {block, 1, 1}, [&] {
        if (name == "quantize_int8") quantize_int8(bf(x), xq.data(), xscale.data(), m, k);
        if (name == "quantize_int8_bf16") quantize_int8_bf16(bf(x), xq.data(), xscale.data(), m, k);
        if (name == "quantize_fp8") quantize_fp8(bf(x), xq.data(), xscale.data(), m, k);
        if (name == "quantize_fp8_bf16") quantize_fp8_bf16(bf(x), xq.data(), xscale.data(), m, k);
        if (name == "quantize_fp8_group128") quantize_fp8_group128(bf(x), xq.data(), xscale.data(), m, k);
        if (name == "quantize_fp8_group128_bf16") quantize_fp8_group128_bf16(bf(x), xq.data(), xscale.data(), m, k);
      });
      CHECK(xq == c.bytes());
      CHECK(xscale == c.scales);
    }
  }
}

TEST_CASE("the static quantizers take each group's stored scale: the dynamic bf16 codes at the same scales") {
  const uint32_t m = quantizer_cases::kRows, k = quantizer_cases::kCols;
  std::vector<uint16_t> x;
  for (double v : quantizer_cases::rows()) x.push_back(ref::float_to_bf16(static_cast<float>(v)));
  const std::vector<int> offsets{0, 1, 2};
  for (const auto& c : quantizer_cases::static_cases()) {
    CAPTURE(c.kernel);
    std::vector<uint8_t> want;
    for (const auto& d : quantizer_cases::cases())
      if (std::string(d.kernel) == c.dynamic) want = d.bytes();
    std::vector<uint8_t> xq(static_cast<size_t>(m) * k, 0xaa);
    std::vector<float> xscale(m, NAN);
    const bool int8 = std::string(c.kernel).starts_with("quantize_int8");
    emu::launch({m, 1, 1}, {128, 1, 1}, [&] {
      if (int8) quantize_int8_static_bf16(bf(x), c.scales.data(), offsets.data(), xq.data(), xscale.data(), k, 2);
      else quantize_fp8_static_bf16(bf(x), c.scales.data(), offsets.data(), xq.data(), xscale.data(), k, 2);
    });
    CHECK(xq == want);
    CHECK(xscale == c.scales);
    if (int8) {
      const std::vector<float> small{quantizer_cases::kSaturatingScale};
      const std::vector<int> one{0, 2};
      emu::launch({m, 1, 1}, {96, 1, 1}, [&] {
        quantize_int8_static_bf16(bf(x), small.data(), one.data(), xq.data(), xscale.data(), k, 1);
      });
      CHECK(xq[0] == 0x7f);
      CHECK(xq[1] == 0x80);
      CHECK(xscale[1] == quantizer_cases::kSaturatingScale);
    }
  }
}

TEST_CASE("quantize_fp8_group128 is quantize_fp8 of each 128 columns as a row of their own") {
  ref::QuantData data(93);
  const uint32_t m = 3, k = 384, groups = k / 128;
  auto x = data.bf16(static_cast<size_t>(m) * k);
  for (uint32_t j = 0; j < 128; ++j) x[k + 128 + j] = ref::float_to_bf16(data.uniform(-1e-3f, 1e-3f));  // a quiet group
  std::vector<uint8_t> xq(static_cast<size_t>(m) * k, 0xaa);
  std::vector<float> xscale(static_cast<size_t>(m) * groups, NAN);
  emu::launch({m, 1, 1}, {256, 1, 1}, [&] { quantize_fp8_group128(bf(x), xq.data(), xscale.data(), m, k); });
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t g = 0; g < groups; ++g) {
      CAPTURE(r);
      CAPTURE(g);
      std::vector<uint8_t> want(128);
      CHECK(xscale[r * groups + g] == ref::quantize_row(&x[r * k + g * 128], 128, true, want.data()));
      CHECK(std::equal(want.begin(), want.end(), xq.begin() + r * k + g * 128));
    }
}

TEST_CASE("gather_k: a permutation of K per group, empty groups skipped, dense as one group") {
  ref::QuantData data(5);
  const uint32_t k = 128;
  const std::vector<int> offsets = {0, 2, 2, 5};  // group 1 has no rows
  const uint32_t groups = 3, t = 5;
  std::vector<int> perm(static_cast<size_t>(groups) * k);
  for (uint32_t g = 0; g < groups; ++g) {
    for (uint32_t j = 0; j < k; ++j) perm[g * k + j] = static_cast<int>(j);
    std::shuffle(perm.begin() + g * k, perm.begin() + (g + 1) * k, std::mt19937(g));
  }
  const auto x = data.bf16(static_cast<size_t>(t) * k);
  for (const uint32_t used_groups : {groups, 1u}) {
    CAPTURE(used_groups);
    const std::vector<int> offs = used_groups == 1 ? std::vector<int>{0, 5} : offsets;
    std::vector<uint16_t> out(static_cast<size_t>(t) * k, 0xffff);
    emu::launch({t, 1, 1}, {128, 1, 1}, [&] { gather_k(bf(x), perm.data(), offs.data(), bf(out), k, used_groups); });
    for (uint32_t r = 0; r < t; ++r) {
      uint32_t g = 0;
      while (g + 1 < used_groups && static_cast<int>(r) >= offs[g + 1]) ++g;
      uint32_t differ = 0;
      for (uint32_t j = 0; j < k; ++j) differ += out[r * k + j] != x[r * k + perm[g * k + j]];
      CHECK_MESSAGE(differ == 0, "row " << r);
    }
  }
}

TEST_CASE("fp8_grouped_gemv: blocks over the active experts only, the rest of the grid idle") {
  ref::QuantData data(29);
  const uint32_t experts = 6, n = 129, k = 256;
  const std::vector<int> offsets = {0, 8, 8, 9, 9, 12, 12};  // experts 0 (8 rows), 2 (1), 4 (3) active
  const std::vector<int> active = {3, 0, 2, 4, -1, -1, -1};
  const uint32_t t = 12, slots = 6;
  const auto w = data.weights(QuantKind::fp8, n, k, 128, experts);
  const auto x = data.bf16(static_cast<size_t>(t) * k);
  std::vector<uint16_t> y(static_cast<size_t>(t) * n, 0xffff);
  emu::launch({ceil_div(n, 64), slots, 1}, {128, 1, 1}, [&] {
    fp8_grouped_gemv(bf(x), bytes(w), w.scales.data(), offsets.data(), active.data(), bf(y), n, k, slots);
  });
  ref::Comparison c;
  for (uint32_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<size_t>(offsets[e]);
    ref::check_bf16_rows(c, x.data() + begin * k, w, e, static_cast<uint32_t>(offsets[e + 1] - offsets[e]),
                         y.data() + begin * n, begin * n);
  }
  CHECK_MESSAGE(c.ok(), c.report());
  CHECK(c.checked == static_cast<size_t>(t) * n);
}
