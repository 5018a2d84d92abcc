// SPDX-License-Identifier: MIT OR Apache-2.0
// Every kernel of the CPU backend against the double-precision reference, on every instruction
// set tier this CPU has (forced through the "target" option), plus agreement between tiers and
// between thread counts. W4A16 weights reach the kernels as the layers hand them over: through
// w4a16_repack, into the layout the manifest says the kernels read ("cpu-native").
#include "compare.hpp"
#include "reference.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>

using namespace cpu_test;

namespace {

std::array<uint32_t, 2> w4_grid(const std::string& kernel, uint32_t m, uint32_t n) {
  if (kernel == "w4a16_gemv" || kernel == "w4a16_gemv_b8") return {ceil_div(n, 64), 1};
  return {ceil_div(n, 128), ceil_div(m, 64)};
}

// w4a16_repack of `count` stacked canonical [n, k] matrices already on the device into outputs
// of the same sizes (docs/kernels.md: grid (ceil(n/64), count)).
void repack(Backend& b, uint64_t q_in, uint64_t s_in, uint64_t q_out, uint64_t s_out, uint32_t n,
            uint32_t k, uint32_t count, std::array<uint32_t, 2> extra_blocks = {0, 0}) {
  Args args;
  args.ptr(q_in).ptr(s_in).ptr(q_out).ptr(s_out).u32(n).u32(k).u32(count);
  const metrale_status status = b.launch(
      b.kernel("w4a16", "w4a16_repack"),
      {ceil_div(n, 64) + extra_blocks[0], count + extra_blocks[1]}, args);
  REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error());
}

// A canonical W4A16 stack on the device in the layout the kernels read (the manifest's
// "cpu-native"): uploaded, then passed through w4a16_repack, as the layers load weights.
struct DeviceW4 {
  uint64_t qweight = 0;
  uint64_t scales = 0;
};
DeviceW4 upload_w4(Backend& b, const std::vector<uint32_t>& qweight,
                   const std::vector<uint16_t>& scales, uint32_t n, uint32_t k,
                   uint32_t count = 1) {
  const uint64_t q_in = b.upload(qweight), s_in = b.upload(scales);
  const DeviceW4 packed{b.alloc(qweight.size() * 4), b.alloc(scales.size() * 2)};
  repack(b, q_in, s_in, packed.qweight, packed.scales, n, k, count);
  b.free(q_in);
  b.free(s_in);
  return packed;
}

std::vector<uint16_t> run_w4(Backend& b, const std::string& kernel, const W4Problem& p,
                             std::array<uint32_t, 2> grid) {
  const DeviceW4 w = upload_w4(b, p.qweight, p.scales, p.n, p.k);
  const uint64_t x = b.upload(p.x);
  const uint64_t y = b.alloc(size_t{p.m} * p.n * 2);
  Args args;
  args.ptr(x).ptr(w.qweight).ptr(w.scales).ptr(y).u32(p.m).u32(p.n).u32(p.k);
  const metrale_status status = b.launch(b.kernel("w4a16", kernel.c_str()), grid, args);
  REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error());
  auto out = b.download<uint16_t>(y, size_t{p.m} * p.n);
  for (uint64_t a : {x, w.qweight, w.scales, y}) b.free(a);
  return out;
}

// Experts stacked [E][n][k], rows of x grouped by expert (docs/kernels.md, moe).
struct GroupedProblem {
  uint32_t n = 0, k = 0, experts = 0, t = 0;
  std::vector<int32_t> offsets;  // [E + 1]
  std::vector<uint16_t> x;       // [t][k]
  std::vector<uint32_t> qweight;
  std::vector<uint16_t> scales;
  std::vector<double> ref, absum;  // [t][n]
};

GroupedProblem make_grouped(uint32_t n, uint32_t k, const std::vector<int32_t>& rows_per_expert,
                            uint64_t seed) {
  std::mt19937_64 rng(seed);
  GroupedProblem p;
  p.n = n;
  p.k = k;
  p.experts = static_cast<uint32_t>(rows_per_expert.size());
  p.offsets = {0};
  for (int32_t rows : rows_per_expert) p.offsets.push_back(p.offsets.back() + rows);
  p.t = static_cast<uint32_t>(p.offsets.back());
  p.x = random_bf16(rng, size_t{p.t} * k, -1.0, 1.0);
  p.qweight.resize(size_t{p.experts} * n * (k / 8));
  for (auto& word : p.qweight) word = static_cast<uint32_t>(rng());
  p.scales = random_scales(rng, size_t{p.experts} * n * (k / 128));
  p.ref.resize(size_t{p.t} * n);
  p.absum.resize(size_t{p.t} * n);
  for (uint32_t e = 0; e < p.experts; ++e)
    w4_reference(p.x, p.qweight.data() + size_t{e} * n * (k / 8),
                 p.scales.data() + size_t{e} * n * (k / 128), n, k,
                 static_cast<uint32_t>(p.offsets[e]), static_cast<uint32_t>(rows_per_expert[e]),
                 p.ref.data() + size_t(p.offsets[e]) * n, p.absum.data() + size_t(p.offsets[e]) * n);
  return p;
}

std::vector<uint16_t> run_grouped(Backend& b, const GroupedProblem& p) {
  const DeviceW4 w = upload_w4(b, p.qweight, p.scales, p.n, p.k, p.experts);
  const uint64_t dx = b.upload(p.x), doff = b.upload(p.offsets),
                 dy = b.alloc(size_t{std::max(p.t, 1u)} * p.n * 2);
  Args args;
  args.ptr(dx).ptr(w.qweight).ptr(w.scales).ptr(doff).ptr(dy).u32(p.n).u32(p.k).u32(p.experts);
  REQUIRE_MESSAGE(b.launch(b.kernel("moe", "w4a16_grouped_gemm"), {ceil_div(p.n, 128), p.experts},
                           args) == METRALE_STATUS_OK,
                  b.last_error());
  auto y = b.download<uint16_t>(dy, size_t{p.t} * p.n);
  for (uint64_t a : {dx, w.qweight, w.scales, doff, dy}) b.free(a);
  return y;
}

void check_against(const W4Problem& p, const std::vector<uint16_t>& y, const std::string& what) {
  const Mismatch m = compare(
      widen_bf16(y), p.ref, [&](size_t i) { return bf16_budget(p.ref[i], p.absum[i]); }, p.n);
  INFO(what << ": worst " << m.worst << ", error/budget " << m.worst_ratio);
  CHECK(m.count == 0);
}

// Two tiers agree within one bf16 ulp (plus the f32 summation slack of both).
void check_same(const W4Problem& p, const std::vector<uint16_t>& a,
                const std::vector<uint16_t>& b, const std::string& what) {
  const auto wa = widen_bf16(a), wb = widen_bf16(b);
  const Mismatch m = compare(
      wa, wb,
      [&](size_t i) {
        return std::ldexp(std::max(std::fabs(wa[i]), std::fabs(wb[i])), -7) +
               std::ldexp(p.absum[i], -15) + 1e-30;
      },
      p.n);
  INFO(what << ": worst " << m.worst);
  CHECK(m.count == 0);
}

struct W4Case {
  uint32_t m, n, k;
  std::vector<std::string> kernels;
};

}  // namespace

TEST_CASE("w4a16 family matches the reference on every tier, and the tiers agree") {
  const std::vector<std::string> all{"w4a16_gemv", "w4a16_gemv_b8", "w4a16_gemm_t",
                                     "w4a16_gemm_t_k64"};
  const std::vector<std::string> b8_up{"w4a16_gemv_b8", "w4a16_gemm_t", "w4a16_gemm_t_k64"};
  const std::vector<std::string> tiles{"w4a16_gemm_t", "w4a16_gemm_t_k64"};
  const std::vector<W4Case> cases{
      {1, 129, 128, all},    {1, 1, 384, all},      {1, 200, 8192, all},
      {3, 129, 384, b8_up},  {8, 65, 8192, b8_up},  {3, 1, 128, b8_up},
      {9, 129, 384, tiles},  {64, 129, 8192, tiles}, {200, 129, 384, tiles},
      {200, 1, 128, tiles},  {65, 257, 256, tiles},
      // K past the BF16 tier's 16384-wide GEMV activation chunk (a second, partial chunk).
      {1, 67, 16512, all},   {5, 33, 16512, b8_up},
  };
  const auto tiers = supported_tiers();
  REQUIRE(!tiers.empty());
  REQUIRE(tiers.front() == "baseline");
  MESSAGE("tiers on this CPU: " << [&] {
    std::string t;
    for (const auto& s : tiers) t += s + " ";
    return t;
  }());
  uint64_t seed = 1;
  for (const W4Case& c : cases) {
    const W4Problem p = make_w4(c.m, c.n, c.k, seed++);
    for (const std::string& kernel : c.kernels) {
      std::vector<uint16_t> baseline;
      for (const std::string& tier : tiers) {
        const std::string what = kernel + " m=" + std::to_string(c.m) + " n=" +
                                 std::to_string(c.n) + " k=" + std::to_string(c.k) + " on " + tier;
        const auto y = run_w4(tier_backend(tier), kernel, p, w4_grid(kernel, c.m, c.n));
        check_against(p, y, what);
        if (tier == "baseline")
          baseline = y;
        else
          check_same(p, baseline, y, what + " vs baseline");
      }
    }
  }
}

TEST_CASE("w4a16: results do not depend on the thread count; extra blocks are harmless") {
  const W4Problem p = make_w4(130, 300, 384, 77);
  for (const std::string& tier : supported_tiers()) {
    Backend one({{"target", tier}, {"threads", "1"}});
    Backend three({{"target", tier}, {"threads", "3"}});
    for (const char* kernel : {"w4a16_gemm_t", "w4a16_gemm_t_k64"}) {
      INFO(kernel << " on " << tier);
      const auto grid = w4_grid(kernel, p.m, p.n);
      const auto a = run_w4(one, kernel, p, grid);
      const auto b = run_w4(three, kernel, p, grid);
      CHECK(a == b);  // a block is computed the same way whichever thread runs it
      const auto c = run_w4(three, kernel, p, {grid[0] + 2, grid[1] + 1});
      CHECK(a == c);
    }
  }
}

TEST_CASE("w4a16 GEMV tiers: results do not depend on the thread count") {
  const W4Problem p = make_w4(3, 300, 384, 78);
  for (const std::string& tier : supported_tiers()) {
    Backend one({{"target", tier}, {"threads", "1"}});
    Backend three({{"target", tier}, {"threads", "3"}});
    INFO("w4a16_gemv_b8 on " << tier);
    const auto grid = w4_grid("w4a16_gemv_b8", p.m, p.n);
    CHECK(run_w4(one, "w4a16_gemv_b8", p, grid) == run_w4(three, "w4a16_gemv_b8", p, grid));
  }
}

TEST_CASE("w4a16_grouped_gemm matches the reference on every tier (empty experts included)") {
  struct GroupedCase {
    uint32_t n, k;
    std::vector<int32_t> rows_per_expert;
  };
  // More experts than the launch lists on its stack (512): the rows with work go to the heap.
  std::vector<int32_t> many(600, 0);
  many[0] = 1, many[511] = 2, many[599] = 3;
  const std::vector<GroupedCase> cases{
      {129, 384, {3, 0, 70, 1, 0, 9}},
      {65, 8192, {1, 2, 0}},
      {1, 128, {0, 5}},
      {64, 128, many},
  };
  uint64_t seed = 100;
  for (const GroupedCase& c : cases) {
    const GroupedProblem p = make_grouped(c.n, c.k, c.rows_per_expert, seed++);
    for (const std::string& tier : supported_tiers()) {
      const auto y = run_grouped(tier_backend(tier), p);
      const Mismatch m = compare(
          widen_bf16(y), p.ref, [&](size_t i) { return bf16_budget(p.ref[i], p.absum[i]); }, c.n);
      INFO("grouped n=" << c.n << " k=" << c.k << " on " << tier << ": worst " << m.worst);
      CHECK(m.count == 0);
    }
  }
}

// The repack's contract (docs/kernels.md): whatever the layout, the output has the input's byte
// sizes, matrix i of a stack lands where it was (so per-matrix offsets stay valid), the input is
// not touched and nothing is written past the output. A tier without a layout of its own copies;
// the baseline tier always does.
TEST_CASE("w4a16_repack keeps sizes and per-matrix offsets on every tier") {
  constexpr uint32_t kCount = 3;
  constexpr size_t kGuardWords = 16;  // after each output: must survive the repack
  constexpr uint32_t kGuardWord = 0xdeadbeefu;
  constexpr uint16_t kGuardHalf = 0xbeefu;
  uint64_t seed = 300;
  for (const uint32_t n : {1u, 17u, 100u, 129u}) {
    for (const uint32_t k : {128u, 384u}) {
      std::mt19937_64 rng(seed++);
      std::vector<uint32_t> qweight(size_t{kCount} * n * (k / 8));
      for (auto& word : qweight) word = static_cast<uint32_t>(rng());
      const auto scales = random_scales(rng, size_t{kCount} * n * (k / 128));
      const size_t words = size_t{n} * (k / 8), groups = size_t{n} * (k / 128);
      for (const std::string& tier : supported_tiers()) {
        INFO("n=" << n << " k=" << k << " count=" << kCount << " on " << tier);
        Backend& b = tier_backend(tier);
        const uint64_t q_in = b.upload(qweight), s_in = b.upload(scales);
        std::vector<uint32_t> q_fill(qweight.size() + kGuardWords, kGuardWord);
        std::vector<uint16_t> s_fill(scales.size() + 2 * kGuardWords, kGuardHalf);
        const uint64_t q_out = b.upload(q_fill), s_out = b.upload(s_fill);
        repack(b, q_in, s_in, q_out, s_out, n, k, kCount);
        auto q = b.download<uint32_t>(q_out, q_fill.size());
        auto sc = b.download<uint16_t>(s_out, s_fill.size());
        CHECK(std::all_of(q.begin() + static_cast<std::ptrdiff_t>(qweight.size()), q.end(),
                          [&](uint32_t v) { return v == kGuardWord; }));
        CHECK(std::all_of(sc.begin() + static_cast<std::ptrdiff_t>(scales.size()), sc.end(),
                          [&](uint16_t v) { return v == kGuardHalf; }));
        q.resize(qweight.size());
        sc.resize(scales.size());
        CHECK(b.download<uint32_t>(q_in, qweight.size()) == qweight);
        CHECK(b.download<uint16_t>(s_in, scales.size()) == scales);
        if (tier == "baseline") {
          CHECK(q == qweight);  // the canonical layout is the baseline's own
          CHECK(sc == scales);
        }

        // Matrix by matrix: each matrix repacked alone is the stack's slice at its canonical offset.
        for (uint32_t i = 0; i < kCount; ++i) {
          const std::vector<uint32_t> one_q(qweight.begin() + static_cast<std::ptrdiff_t>(i * words),
                                            qweight.begin() + static_cast<std::ptrdiff_t>((i + 1) * words));
          const std::vector<uint16_t> one_s(scales.begin() + static_cast<std::ptrdiff_t>(i * groups),
                                            scales.begin() + static_cast<std::ptrdiff_t>((i + 1) * groups));
          const DeviceW4 alone = upload_w4(b, one_q, one_s, n, k);
          CHECK(b.download<uint32_t>(alone.qweight, words) ==
                std::vector<uint32_t>(q.begin() + static_cast<std::ptrdiff_t>(i * words),
                                      q.begin() + static_cast<std::ptrdiff_t>((i + 1) * words)));
          CHECK(b.download<uint16_t>(alone.scales, groups) ==
                std::vector<uint16_t>(sc.begin() + static_cast<std::ptrdiff_t>(i * groups),
                                      sc.begin() + static_cast<std::ptrdiff_t>((i + 1) * groups)));
          b.free(alone.qweight);
          b.free(alone.scales);
        }

        // Blocks past the grid the problem needs do nothing; the result does not depend on them.
        const uint64_t q_again = b.alloc(qweight.size() * 4), s_again = b.alloc(scales.size() * 2);
        repack(b, q_in, s_in, q_again, s_again, n, k, kCount, {2, 1});
        CHECK(b.download<uint32_t>(q_again, qweight.size()) == q);
        CHECK(b.download<uint16_t>(s_again, scales.size()) == sc);
        for (uint64_t a : {q_in, s_in, q_out, s_out, q_again, s_again}) b.free(a);
      }
    }
  }
}

// Every W4A16 kernel on repacked weights, on shapes that end inside a block, a panel or a group
// of rows: n = 1, 17, 100, 129 (odd tails), k = 128, 384, m = 1, 3, 8, 70.
TEST_CASE("w4a16 kernels read repacked weights correctly on every tier (awkward shapes)") {
  uint64_t seed = 400;
  for (const uint32_t n : {1u, 17u, 100u, 129u}) {
    for (const uint32_t k : {128u, 384u}) {
      for (const uint32_t m : {1u, 3u, 8u, 70u}) {
        const W4Problem p = make_w4(m, n, k, seed++);
        std::vector<std::string> kernels{"w4a16_gemm_t", "w4a16_gemm_t_k64"};
        if (m <= 8) kernels.push_back("w4a16_gemv_b8");
        if (m == 1) kernels.push_back("w4a16_gemv");
        for (const std::string& kernel : kernels)
          for (const std::string& tier : supported_tiers())
            check_against(p, run_w4(tier_backend(tier), kernel, p, w4_grid(kernel, m, n)),
                          kernel + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                              " k=" + std::to_string(k) + " on " + tier);
      }
      // Experts with 1, none, 3, 8 and 70 rows: the BF16 tier's GEMV path (<= 8 rows) and the tile.
      const GroupedProblem p = make_grouped(n, k, {1, 0, 3, 8, 70}, seed++);
      for (const std::string& tier : supported_tiers()) {
        const Mismatch mm = compare(
            widen_bf16(run_grouped(tier_backend(tier), p)), p.ref,
            [&](size_t i) { return bf16_budget(p.ref[i], p.absum[i]); }, n);
        INFO("grouped n=" << n << " k=" << k << " on " << tier << ": worst " << mm.worst);
        CHECK(mm.count == 0);
      }
    }
  }
}

TEST_CASE("silu_mul and gelu_mul match the reference on every tier") {
  const double kSqrt2OverPi = std::sqrt(2.0 / std::acos(-1.0));
  struct ActCase {
    uint32_t m, i;
    double lo, hi;
  };
  // The wide case reaches where exp over- and underflows (|g| up to 120) on the SIMD tiers' own exp.
  for (const ActCase c : {ActCase{3, 2049, -6.0, 6.0}, ActCase{1, 1, -6.0, 6.0}, ActCase{2, 1024, -6.0, 6.0},
                          ActCase{2, 1037, -120.0, 120.0}})
  for (const std::string& tier : supported_tiers()) {
    std::mt19937_64 rng(c.m * 7919 + c.i);
    const auto gate_up = random_bf16(rng, size_t{c.m} * 2 * c.i, c.lo, c.hi);
    for (const char* name : {"silu_mul", "gelu_mul"}) {
      const bool gelu = std::string(name) == "gelu_mul";
      std::vector<double> ref(size_t{c.m} * c.i), scale(ref.size());
      for (uint32_t r = 0; r < c.m; ++r)
        for (uint32_t j = 0; j < c.i; ++j) {
          const double g = bf16_value(gate_up[size_t{r} * 2 * c.i + j]);
          const double u = bf16_value(gate_up[size_t{r} * 2 * c.i + c.i + j]);
          const double act = gelu ? 0.5 * g * (1 + std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)))
                                  : g / (1 + std::exp(-g));
          ref[size_t{r} * c.i + j] = act * u;
          scale[size_t{r} * c.i + j] = std::fabs(g * u);
        }
      Backend& b = tier_backend(tier);
      const uint64_t in = b.upload(gate_up), out = b.alloc(size_t{c.m} * c.i * 2);
      Args args;
      args.ptr(in).ptr(out).u32(c.m).u32(c.i);
      REQUIRE_MESSAGE(b.launch(b.kernel("act", name), {ceil_div(c.i, 1024), c.m}, args, 256) ==
                          METRALE_STATUS_OK,
                      b.last_error());
      const auto got = widen_bf16(b.download<uint16_t>(out, size_t{c.m} * c.i));
      // bf16 rounding, plus the f32 evaluation of exp/tanh: about 2^-22 of |g * u| absolute
      // (the 1 + tanh cancellation for very negative g), allowed 2^-20.
      const Mismatch m = compare(
          got, ref,
          [&](size_t i) { return std::ldexp(std::fabs(ref[i]), -8) + std::ldexp(scale[i], -20) + 1e-30; },
          c.i);
      INFO(name << " m=" << c.m << " i=" << c.i << " on " << tier << ": worst " << m.worst);
      CHECK(m.count == 0);
      b.free(in);
      b.free(out);
    }
  }
}

TEST_CASE("router_gemm matches the reference") {
  struct RouterCase {
    uint32_t m, e, h;
  };
  for (const RouterCase c : {RouterCase{3, 129, 2048}, RouterCase{1, 1, 7}, RouterCase{2, 64, 128}}) {
    std::mt19937_64 rng(c.m + 31 * c.e + 977 * c.h);
    const auto x = random_bf16(rng, size_t{c.m} * c.h, -2.0, 2.0);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> w(size_t{c.e} * c.h);
    for (auto& v : w) v = normal(rng);
    std::vector<double> ref(size_t{c.m} * c.e), absum(ref.size());
    for (uint32_t r = 0; r < c.m; ++r)
      for (uint32_t e = 0; e < c.e; ++e) {
        double sum = 0, abs_sum = 0;
        for (uint32_t t = 0; t < c.h; ++t) {
          const double term = bf16_value(x[size_t{r} * c.h + t]) * double{w[size_t{e} * c.h + t]};
          sum += term;
          abs_sum += std::fabs(term);
        }
        ref[size_t{r} * c.e + e] = sum;
        absum[size_t{r} * c.e + e] = abs_sum;
      }
    Backend& b = tier_backend("baseline");
    const uint64_t dx = b.upload(x), dw = b.upload(w), dl = b.alloc(size_t{c.m} * c.e * 4);
    Args args;
    args.ptr(dx).ptr(dw).ptr(dl).u32(c.m).u32(c.e).u32(c.h);
    REQUIRE_MESSAGE(b.launch(b.kernel("moe", "router_gemm"), {ceil_div(c.e, 64), c.m}, args) ==
                        METRALE_STATUS_OK,
                    b.last_error());
    const auto got = b.download<float>(dl, size_t{c.m} * c.e);
    std::vector<double> gotd(got.begin(), got.end());
    // f32 result: only the summation error, within 2^-16 of the sum of |terms|.
    const Mismatch m = compare(
        gotd, ref, [&](size_t i) { return std::ldexp(absum[i], -16) + 1e-30; }, c.e);
    INFO("router m=" << c.m << " e=" << c.e << " h=" << c.h << ": worst " << m.worst);
    CHECK(m.count == 0);
    for (uint64_t a : {dx, dw, dl}) b.free(a);
  }
}

TEST_CASE("topk_softmax: ids exact, weights within f32 rounding, ties to the lower id") {
  struct TopkCase {
    uint32_t m, e, k, renormalize;
  };
  for (const TopkCase c : {TopkCase{5, 129, 8, 1}, TopkCase{5, 129, 8, 0}, TopkCase{2, 129, 129, 0},
                           TopkCase{3, 1, 1, 1}, TopkCase{4, 16, 4, 1}}) {
    std::mt19937_64 rng(c.m * 13 + c.e * 101 + c.k * 7 + c.renormalize);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(size_t{c.m} * c.e);
    for (auto& v : logits) v = normal(rng);
    // Row 1 of the e=16 case: all equal (every id ties); row 2: pairs of equal values.
    if (c.e == 16) {
      for (uint32_t e = 0; e < c.e; ++e) logits[c.e + e] = 0.5f;
      for (uint32_t e = 0; e < c.e; ++e) logits[2 * c.e + e] = static_cast<float>(e / 2);
    }
    std::vector<int32_t> want_ids(size_t{c.m} * c.k);
    std::vector<double> want_w(size_t{c.m} * c.k);
    for (uint32_t r = 0; r < c.m; ++r) {
      const float* l = &logits[size_t{r} * c.e];
      const double peak = *std::max_element(l, l + c.e);
      std::vector<double> p(c.e);
      double sum = 0;
      for (uint32_t e = 0; e < c.e; ++e) sum += p[e] = std::exp(l[e] - peak);
      for (auto& v : p) v /= sum;
      std::vector<int32_t> order(c.e);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      double picked = 0;
      for (uint32_t j = 0; j < c.k; ++j) picked += p[order[j]];
      for (uint32_t j = 0; j < c.k; ++j) {
        want_ids[size_t{r} * c.k + j] = order[j];
        want_w[size_t{r} * c.k + j] = p[order[j]] / (c.renormalize ? picked : 1.0);
      }
    }
    Backend& b = tier_backend("baseline");
    const uint64_t dl = b.upload(logits), di = b.alloc(size_t{c.m} * c.k * 4),
                   dw = b.alloc(size_t{c.m} * c.k * 4);
    Args args;
    args.ptr(dl).ptr(di).ptr(dw).u32(c.m).u32(c.e).u32(c.k).u32(c.renormalize);
    REQUIRE_MESSAGE(b.launch(b.kernel("moe", "topk_softmax"), {c.m, 1}, args) == METRALE_STATUS_OK,
                    b.last_error());
    INFO("topk m=" << c.m << " e=" << c.e << " k=" << c.k << " renormalize=" << c.renormalize);
    CHECK(b.download<int32_t>(di, size_t{c.m} * c.k) == want_ids);
    const auto got = b.download<float>(dw, size_t{c.m} * c.k);
    std::vector<double> gotd(got.begin(), got.end());
    // f32 exp and divisions over e terms: relative 2^-16 is ample.
    const Mismatch m = compare(
        gotd, want_w, [&](size_t i) { return std::ldexp(want_w[i], -16) + 1e-30; }, c.k);
    INFO("worst " << m.worst);
    CHECK(m.count == 0);
    for (uint64_t a : {dl, di, dw}) b.free(a);
  }
}

TEST_CASE("moe_gather copies the named rows exactly") {
  const uint32_t rows = 20, h = 300;
  std::mt19937_64 rng(5);
  const auto x = random_bf16(rng, size_t{rows} * h, -3, 3);
  const std::vector<int32_t> index{7, 0, 19, 7, 3, 3, 12};
  const auto t = static_cast<uint32_t>(index.size());
  Backend& b = tier_backend("baseline");
  const uint64_t dx = b.upload(x), dr = b.upload(index), dout = b.alloc(size_t{t} * h * 2);
  Args args;
  args.ptr(dx).ptr(dr).ptr(dout).u32(t).u32(h);
  REQUIRE_MESSAGE(b.launch(b.kernel("moe", "moe_gather"), {t, 1}, args) == METRALE_STATUS_OK,
                  b.last_error());
  const auto out = b.download<uint16_t>(dout, size_t{t} * h);
  for (uint32_t i = 0; i < t; ++i)
    CHECK(std::equal(out.begin() + i * h, out.begin() + (i + 1) * h, x.begin() + index[i] * h));
  for (uint64_t a : {dx, dr, dout}) b.free(a);
}

TEST_CASE("moe_combine matches the reference") {
  const uint32_t rows = 20, m = 4, k = 3, h = 1000;
  std::mt19937_64 rng(9);
  const auto expert_out = random_bf16(rng, size_t{rows} * h, -4, 4);
  std::vector<int32_t> slots(size_t{m} * k);
  for (auto& s : slots) s = static_cast<int32_t>(rng() % rows);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> weights(size_t{m} * k);
  for (auto& w : weights) w = unit(rng);
  std::vector<double> ref(size_t{m} * h), absum(ref.size());
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t c = 0; c < h; ++c)
      for (uint32_t j = 0; j < k; ++j) {
        const double term = double{weights[r * k + j]} *
                            bf16_value(expert_out[size_t(slots[r * k + j]) * h + c]);
        ref[size_t{r} * h + c] += term;
        absum[size_t{r} * h + c] += std::fabs(term);
      }
  Backend& b = tier_backend("baseline");
  const uint64_t de = b.upload(expert_out), ds = b.upload(slots), dw = b.upload(weights),
                 dout = b.alloc(size_t{m} * h * 2);
  Args args;
  args.ptr(de).ptr(ds).ptr(dw).ptr(dout).u32(m).u32(k).u32(h);
  REQUIRE_MESSAGE(b.launch(b.kernel("moe", "moe_combine"), {m, 1}, args) == METRALE_STATUS_OK,
                  b.last_error());
  const Mismatch mm = compare(
      widen_bf16(b.download<uint16_t>(dout, size_t{m} * h)), ref,
      [&](size_t i) { return bf16_budget(ref[i], absum[i]); }, h);
  INFO("worst " << mm.worst);
  CHECK(mm.count == 0);
  for (uint64_t a : {de, ds, dw, dout}) b.free(a);
}
