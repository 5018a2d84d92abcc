// SPDX-License-Identifier: MIT OR Apache-2.0
// Every kernel of kernel_src/, compiled for the host against the CUDA emulation of
// tests/cuda/emulation and checked against the double-precision definitions of
// kernel_reference.hpp: W4A16 tile GEMMs (tensor-core fragments, cp.async pipelines, the Hopper
// bulk-copy ring), the GEMV tiers, activations and the MoE kernels (device-side routing included),
// at ragged shapes, with asynchronous copies landing as early and as late as PTX allows.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "metrale_emulated_ptx.hpp"
#include "quant_reference.hpp"

// The kernel sources themselves, as NVRTC sees them.
#include "act.cu"
#include "moe.cu"
#include "w4a16.cu"
#include "w4a16_v2.cu"
#include "w4a16_v3.cu"

namespace ref = metrale::reference;

namespace {

using Kernel = void (*)(const __nv_bfloat16*, const unsigned*, const __half*, __nv_bfloat16*, unsigned, unsigned, unsigned);

const __nv_bfloat16* bf(const std::vector<uint16_t>& v) { return reinterpret_cast<const __nv_bfloat16*>(v.data()); }
__nv_bfloat16* bf(std::vector<uint16_t>& v) { return reinterpret_cast<__nv_bfloat16*>(v.data()); }
const __half* half(const std::vector<uint16_t>& v) { return reinterpret_cast<const __half*>(v.data()); }

struct TileKernel {
  const char* name;
  Kernel kernel;
  unsigned tile_n, tile_m, threads;
};

const TileKernel kTileKernels[] = {
    {"w4a16_gemm_t", w4a16_gemm_t, 128, 64, 128},
    {"w4a16_gemm_t_p3", w4a16_gemm_t_p3, 128, 64, 128},
    {"w4a16_gemm_t_k64", w4a16_gemm_t_k64, 128, 64, 128},
    {"w4a16_gemm_t_k64_p3", w4a16_gemm_t_k64_p3, 128, 64, 128},
    {"w4a16_gemm_t_k64_n64_p3", w4a16_gemm_t_k64_n64_p3, 64, 64, 128},
    {"w4a16_gemm_t_m128_v2", w4a16_gemm_t_m128_v2, 128, 128, 256},
    {"w4a16_gemm_t_m128_v3", w4a16_gemm_t_m128_v3, 128, 128, 256},
};

unsigned ceil_div(unsigned a, unsigned b) { return (a + b - 1) / b; }

ref::Comparison run_w4a16(Kernel kernel, emu::dim3 grid, emu::dim3 block, uint32_t m, uint32_t n, uint32_t k,
                          uint32_t seed) {
  ref::Data data(seed);
  const auto x = data.bf16(static_cast<size_t>(m) * k);
  const auto w = data.w4a16(n, k);
  std::vector<uint16_t> y(static_cast<size_t>(m) * n, 0xffff);  // NaN: an unwritten output fails
  emu::launch(grid, block, [&] { kernel(bf(x), w.qweight.data(), half(w.scales), bf(y), m, n, k); });
  return ref::check_w4a16(x, w, m, y);
}

struct GemmShape {
  uint32_t m, n, k;
};

}  // namespace

TEST_CASE("W4A16 tile GEMMs match the reference at ragged shapes, whatever the schedule and copy timing") {
  const GemmShape shapes[] = {{1, 130, 256}, {67, 300, 384}, {130, 72, 128}, {16, 8, 640}};
  const std::pair<emu::Schedule, emu::AsyncPolicy> regimes[] = {
      {emu::Schedule::round_robin, emu::AsyncPolicy::deferred},
      {emu::Schedule::lowest_first, emu::AsyncPolicy::eager},      // producers run ahead, copies land at once
      {emu::Schedule::highest_first, emu::AsyncPolicy::deferred},  // consumers run ahead, copies land late
  };
  for (const auto& [schedule, policy] : regimes) {
    emu::set_schedule(schedule);
    emu::set_async_policy(policy);
    for (const auto& tk : kTileKernels) {
      for (const auto& s : shapes) {
        CAPTURE(tk.name);
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        CAPTURE(static_cast<int>(schedule));
        const auto c = run_w4a16(tk.kernel, {ceil_div(s.n, tk.tile_n), ceil_div(s.m, tk.tile_m), 1}, {tk.threads, 1, 1},
                                 s.m, s.n, s.k, s.m * 7919 + s.n);
        CHECK_MESSAGE(c.ok(), c.report());
      }
    }
  }
  emu::set_schedule(emu::Schedule::round_robin);
  emu::set_async_policy(emu::AsyncPolicy::deferred);
}

TEST_CASE("a tile kernel launched with another block size traps instead of computing garbage") {
  ref::Data data(1);
  const auto x = data.bf16(64 * 128);
  const auto w = data.w4a16(128, 128);
  std::vector<uint16_t> y(64 * 128);
  CHECK_THROWS_WITH_AS(emu::launch({1, 1, 1}, {256, 1, 1},
                                   [&] { w4a16_gemm_t(bf(x), w.qweight.data(), half(w.scales), bf(y), 64, 128, 128); }),
                       doctest::Contains("__trap"), std::runtime_error);
}

TEST_CASE("GEMV tiers: one row and up to eight (and more, in passes), any 32-multiple block") {
  struct Case {
    Kernel kernel;
    const char* name;
    uint32_t m, n, k, block;
  };
  const Case cases[] = {
      {w4a16_gemv, "gemv", 1, 1, 128, 128},       {w4a16_gemv, "gemv", 1, 100, 1024, 128},
      {w4a16_gemv, "gemv", 1, 257, 4224, 128},    {w4a16_gemv, "gemv", 1, 100, 512, 64},
      {w4a16_gemv, "gemv", 1, 130, 512, 256},     {w4a16_gemv, "gemv", 2, 70, 256, 128},
      {w4a16_gemv_b8, "gemv_b8", 1, 70, 640, 128}, {w4a16_gemv_b8, "gemv_b8", 3, 70, 640, 128},
      {w4a16_gemv_b8, "gemv_b8", 8, 129, 1152, 128}, {w4a16_gemv_b8, "gemv_b8", 11, 64, 256, 128},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    CAPTURE(c.m);
    CAPTURE(c.n);
    CAPTURE(c.k);
    CAPTURE(c.block);
    const auto result = run_w4a16(c.kernel, {ceil_div(c.n, 64), 1, 1}, {c.block, 1, 1}, c.m, c.n, c.k, c.n + c.k);
    CHECK_MESSAGE(result.ok(), result.report());
  }
}

TEST_CASE("activations: silu_mul and gelu_mul over 1024-column blocks, any block size") {
  ref::Data data(5);
  const uint32_t m = 3, i = 2500;
  const auto gate_up = data.bf16(static_cast<size_t>(m) * 2 * i, -6.f, 6.f);
  for (const unsigned block : {256u, 100u}) {
    CAPTURE(block);
    std::vector<uint16_t> out(static_cast<size_t>(m) * i, 0xffff);
    emu::launch({ceil_div(i, 1024), m, 1}, {block, 1, 1}, [&] { silu_mul(bf(gate_up), bf(out), m, i); });
    const auto silu = ref::check_act(gate_up, m, i, out, ref::silu);
    CHECK_MESSAGE(silu.ok(), silu.report());
    emu::launch({ceil_div(i, 1024), m, 1}, {block, 1, 1}, [&] { gelu_mul(bf(gate_up), bf(out), m, i); });
    const auto gelu = ref::check_act(gate_up, m, i, out, ref::gelu_tanh);
    CHECK_MESSAGE(gelu.ok(), gelu.report());
  }
}

TEST_CASE("router_gemm: whole warps, a trailing partial warp, and blocks smaller than a warp") {
  ref::Data data(9);
  const uint32_t m = 3, e = 70, h = 200;
  const auto x = data.bf16(static_cast<size_t>(m) * h);
  const auto w = data.f32(static_cast<size_t>(e) * h, -0.5f, 0.5f);
  for (const unsigned block : {128u, 100u, 20u}) {
    CAPTURE(block);
    std::vector<float> logits(static_cast<size_t>(m) * e, NAN);
    emu::launch({ceil_div(e, 64), m, 1}, {block, 1, 1}, [&] { router_gemm(bf(x), w.data(), logits.data(), m, e, h); });
    const auto c = ref::check_router(x, w, m, e, h, logits);
    CHECK_MESSAGE(c.ok(), c.report());
  }
}

TEST_CASE("topk_softmax: descending probabilities, lower id first on ties, optional renormalisation") {
  ref::Data data(11);
  const uint32_t m = 4, e = 70, k = 6;
  auto logits = data.f32(static_cast<size_t>(m) * e, -3.f, 3.f);
  // Row 2: a four-way tie at the top, which must come out in id order.
  for (const uint32_t j : {5u, 17u, 40u, 66u}) logits[2 * e + j] = 7.5f;
  for (const unsigned block : {128u, 33u}) {
    for (const uint32_t renormalize : {0u, 1u}) {
      CAPTURE(block);
      CAPTURE(renormalize);
      std::vector<int> ids(m * k, -7);
      std::vector<float> weights(m * k, NAN);
      emu::launch({m, 1, 1}, {block, 1, 1},
                  [&] { topk_softmax(logits.data(), ids.data(), weights.data(), m, e, k, renormalize); });
      for (uint32_t r = 0; r < m; ++r) {
        const auto want = ref::topk_row(&logits[r * e], e, k, renormalize != 0);
        for (uint32_t j = 0; j < k; ++j) {
          CAPTURE(r);
          CAPTURE(j);
          CHECK(ids[r * k + j] == want[j].first);
          CHECK(weights[r * k + j] == doctest::Approx(want[j].second).epsilon(1e-5));
        }
      }
      CHECK(ids[2 * k + 0] == 5);
      CHECK(ids[2 * k + 3] == 66);
    }
  }
}

TEST_CASE("moe_gather and moe_combine") {
  ref::Data data(13);
  const uint32_t rows_in = 9, t = 5, h = 300;
  const auto x = data.bf16(static_cast<size_t>(rows_in) * h);
  const std::vector<int> rows = {4, 0, 8, 4, 2};
  std::vector<uint16_t> gathered(static_cast<size_t>(t) * h, 0xffff);
  emu::launch({t, 1, 1}, {128, 1, 1}, [&] { moe_gather(bf(x), rows.data(), bf(gathered), t, h); });
  for (uint32_t i = 0; i < t; ++i) {
    CHECK(std::equal(gathered.begin() + i * h, gathered.begin() + (i + 1) * h, x.begin() + rows[i] * h));
  }

  const uint32_t m = 4, k = 3;
  const std::vector<int> slots = {0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 0, 1};
  const auto weights = data.f32(m * k, 0.f, 1.f);
  std::vector<uint16_t> out(static_cast<size_t>(m) * h, 0xffff);
  emu::launch({m, 1, 1}, {96, 1, 1}, [&] { moe_combine(bf(x), slots.data(), weights.data(), bf(out), m, k, h); });
  ref::Comparison c;
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t j = 0; j < h; ++j) {
      double want = 0, magnitude = 0;
      for (uint32_t s = 0; s < k; ++s) {
        const double term = weights[r * k + s] * ref::bf16_to_float(x[slots[r * k + s] * h + j]);
        want += term;
        magnitude += std::abs(term);
      }
      c.add(r * h + j, ref::bf16_to_float(out[r * h + j]), want, ref::tolerance(want, magnitude, k));
    }
  }
  CHECK_MESSAGE(c.ok(), c.report());
}

TEST_CASE("w4a16_grouped_gemm: experts with no rows, few rows, more rows than one tile; block 128 only") {
  ref::Data data(17);
  const uint32_t experts = 5, n = 200, k = 256;
  const std::vector<int> offsets = {0, 3, 3, 73, 74, 93};  // expert 1 has no rows, expert 2 has 70
  const uint32_t t = static_cast<uint32_t>(offsets.back());
  const auto x = data.bf16(static_cast<size_t>(t) * k);
  std::vector<ref::W4A16Weight> w;
  std::vector<uint32_t> qweight;
  std::vector<uint16_t> scales;
  for (uint32_t e = 0; e < experts; ++e) {
    w.push_back(data.w4a16(n, k));
    qweight.insert(qweight.end(), w.back().qweight.begin(), w.back().qweight.end());
    scales.insert(scales.end(), w.back().scales.begin(), w.back().scales.end());
  }
  std::vector<uint16_t> y(static_cast<size_t>(t) * n, 0xffff);
  const auto run = [&](unsigned block) {
    emu::launch({ceil_div(n, 128), experts, 1}, {block, 1, 1}, [&] {
      w4a16_grouped_gemm(bf(x), qweight.data(), half(scales), offsets.data(), bf(y), n, k, experts);
    });
  };
  run(128);
  for (uint32_t e = 0; e < experts; ++e) {
    CAPTURE(e);
    const auto rows = static_cast<uint32_t>(offsets[e + 1] - offsets[e]);
    if (rows == 0) continue;
    const std::vector<uint16_t> xe(x.begin() + offsets[e] * k, x.begin() + offsets[e + 1] * k);
    const std::vector<uint16_t> ye(y.begin() + offsets[e] * n, y.begin() + offsets[e + 1] * n);
    const auto c = ref::check_w4a16(xe, w[e], rows, ye);
    CHECK_MESSAGE(c.ok(), c.report());
  }
  CHECK_THROWS_WITH_AS(run(96), doctest::Contains("__trap"), std::runtime_error);  // a tensor-core tile of 128
}

namespace {

struct AlignRun {
  std::vector<int> offsets, rows, slots, active;
  std::vector<float> combine_weights;
};

AlignRun run_align(const std::vector<int>& ids, const std::vector<float>& weights, const std::vector<float>& logits,
                   uint32_t m, uint32_t e, uint32_t k, uint32_t shared, unsigned block) {
  const uint32_t s = k + (shared ? 1 : 0);
  AlignRun out{std::vector<int>(e + 1, -7), std::vector<int>(m * k, -7), std::vector<int>(m * s, -7),
               std::vector<int>(e + 1, -7), std::vector<float>(m * s, NAN)};
  emu::launch({1, 1, 1}, {block, 1, 1}, [&] {
    moe_align(ids.data(), weights.data(), logits.data(), out.offsets.data(), out.rows.data(), out.slots.data(),
              out.combine_weights.data(), out.active.data(), m, e, k, shared);
  });
  return out;
}

}  // namespace

TEST_CASE("moe_align: offsets, rows, slots, combine weights and active experts as the host computes them") {
  ref::Data data(23);
  const uint32_t m = 37, e = 9, k = 3;
  std::vector<int> ids(m * k);
  for (uint32_t i = 0; i < m * k; ++i) ids[i] = static_cast<int>((i * 7 + i / 5) % 8);  // expert 8 gets no rows
  ids[4] = ids[5] = 2;  // one token choosing one expert twice keeps choice order
  const auto weights = data.f32(m * k, 0.f, 1.f);
  const auto logits = data.f32(m, -4.f, 4.f);
  for (const uint32_t shared : {0u, 1u, 2u}) {
    for (const unsigned block : {128u, 40u, 20u, 1u}) {
      CAPTURE(shared);
      CAPTURE(block);
      const auto got = run_align(ids, weights, logits, m, e, k, shared, block);
      const auto want = ref::align_routing(ids, weights, logits, m, e, k, shared);
      CHECK(got.offsets == want.offsets);
      CHECK(got.rows == want.rows);
      CHECK(got.slots == want.slots);
      CHECK(std::vector<int>(got.active.begin(), got.active.begin() + want.active.size()) == want.active);
      for (size_t i = 0; i < want.combine_weights.size(); ++i) {
        CHECK(got.combine_weights[i] == doctest::Approx(want.combine_weights[i]).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("moe_align: an expert id out of range fails the launch and writes nothing") {
  const uint32_t m = 4, e = 5, k = 2;
  const std::vector<float> weights(m * k, 0.5f), logits(m, 0.f);
  for (const int bad : {5, -1}) {
    CAPTURE(bad);
    std::vector<int> ids = {0, 1, 2, 3, 4, bad, 1, 0};
    std::vector<int> offsets(e + 1, -7);
    std::vector<int> rows(m * k, -7), slots(m * k, -7), active(e + 1, -7);
    std::vector<float> combine(m * k, -7.f);
    CHECK_THROWS_WITH_AS(emu::launch({1, 1, 1}, {128, 1, 1},
                                     [&] {
                                       moe_align(ids.data(), weights.data(), logits.data(), offsets.data(), rows.data(),
                                                 slots.data(), combine.data(), active.data(), m, e, k, 0);
                                     }),
                         doctest::Contains("__trap"), std::runtime_error);
    CHECK(std::all_of(offsets.begin(), offsets.end(), [](int v) { return v == -7; }));
    CHECK(std::all_of(rows.begin(), rows.end(), [](int v) { return v == -7; }));
    CHECK(std::all_of(slots.begin(), slots.end(), [](int v) { return v == -7; }));
    CHECK(std::all_of(active.begin(), active.end(), [](int v) { return v == -7; }));
    CHECK(std::all_of(combine.begin(), combine.end(), [](float v) { return v == -7.f; }));
  }
}
