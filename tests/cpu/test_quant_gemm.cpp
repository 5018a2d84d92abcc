// SPDX-License-Identifier: MIT OR Apache-2.0
// The weight families (w4a16_zp, w8a16, fp8, w4a8, w8a8, and plain bf16 / f16) against the double-precision
// reference of their contract, on every instruction-set tier this CPU has: dense GEMV and GEMM
// on awkward shapes with every group size, extreme zero points, negative and tiny scales, FP8
// special values, int8 activation extremes; grouped GEMMs with experts without rows; the
// cross-row FP8 decode over the active experts; results independent of the thread count.
#include "compare.hpp"
#include "quant_device.hpp"

#include <doctest/doctest.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace cpu_test;

namespace {

constexpr Fam kFamilies[] = {Fam::w4a16_zp, Fam::w8a16, Fam::fp8, Fam::w4a8, Fam::w8a8, Fam::bf16, Fam::f16};

std::string describe(const QuantProblem& p, const std::string& kernel, const std::string& tier) {
  return std::string(info(p.fam).module) + "_" + kernel + " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
         " k=" + std::to_string(p.k) + " group=" + std::to_string(p.group) + " on " + tier;
}

void check_against(const QuantProblem& p, const std::vector<uint16_t>& y, const std::string& what) {
  const Mismatch m = compare(
      widen_bf16(y), p.ref, [&](size_t i) { return bf16_budget(p.ref[i], p.absum[i]); }, p.n);
  INFO(what << ": worst " << m.worst << ", error/budget " << m.worst_ratio);
  CHECK(m.count == 0);
}

struct Shape {
  uint32_t m, n, k, group;
};

}  // namespace

TEST_CASE("quantized families: gemv and gemm match the reference on every tier (awkward shapes, every group)") {
  // Every n of 1, 17, 100, 129, m of 1, 3, 8, 9, 70, k of 128, 384, 2048 and group of 32, 64, 128
  // appears; n ends inside a panel or a block, m inside a row block of every tier.
  const Shape shapes[] = {{1, 17, 128, 32},  {1, 129, 2048, 64}, {3, 100, 384, 128}, {8, 1, 384, 64},
                          {8, 129, 128, 32}, {9, 17, 2048, 128}, {70, 100, 384, 32}, {70, 1, 128, 128},
                          {70, 129, 2048, 64}, {3, 1, 2048, 32}};
  uint64_t seed = 1000;
  for (const Fam fam : kFamilies)
    for (const Shape& s : shapes) {
      const QuantProblem p = make_quant(fam, s.m, s.n, s.k, s.group, seed++);
      for (const std::string& tier : supported_tiers()) {
        Backend& b = tier_backend(tier);
        if (p.m <= 8) check_against(p, run_dense(b, p, "gemv"), describe(p, "gemv", tier));
        check_against(p, run_dense(b, p, "gemm"), describe(p, "gemm", tier));
      }
    }
}

TEST_CASE("quantized families: grouped GEMMs match the reference on every tier (experts without rows)") {
  struct GroupedCase {
    uint32_t n, k, group;
    std::vector<int32_t> rows;
  };
  const GroupedCase cases[] = {{129, 384, 32, {3, 0, 70, 1, 0, 9}}, {17, 2048, 128, {1, 2, 0}},
                               {1, 128, 64, {0, 8}}, {100, 384, 64, {0, 0, 1}}};
  uint64_t seed = 2000;
  for (const Fam fam : kFamilies)
    for (const GroupedCase& c : cases) {
      const QuantProblem p = make_quant(fam, 0, c.n, c.k, c.group, seed++, c.rows);
      for (const std::string& tier : supported_tiers())
        check_against(p, run_grouped(tier_backend(tier), p), describe(p, "grouped_gemm", tier));
    }
}

TEST_CASE("quantized families: results do not depend on the thread count; extra blocks are harmless") {
  for (const Fam fam : kFamilies) {
    const QuantProblem p = make_quant(fam, 70, 300, 384, 64, 3000 + static_cast<int>(fam));
    const QuantProblem q = make_quant(fam, 5, 300, 384, 32, 3100 + static_cast<int>(fam));
    for (const std::string& tier : supported_tiers()) {
      Backend one({{"target", tier}, {"threads", "1"}});
      Backend three({{"target", tier}, {"threads", "3"}});
      INFO(info(fam).module << " on " << tier);
      const auto a = run_dense(one, p, "gemm");
      CHECK(a == run_dense(three, p, "gemm"));  // a block is computed the same way on any thread
      CHECK(a == run_dense(three, p, "gemm", {ceil_div(p.n, 128) + 2, ceil_div(p.m, 64) + 1}));
      CHECK(run_dense(one, q, "gemv") == run_dense(three, q, "gemv"));
    }
  }
}

// fp8_grouped_gemv: the experts with rows (at most 8 each) as moe_align lists them in `active`;
// the grid's spare slots do nothing.
TEST_CASE("fp8_grouped_gemv matches the reference over the active experts on every tier") {
  const std::vector<int32_t> rows{2, 0, 8, 1, 0, 0, 5};
  QuantProblem p = make_quant(Fam::fp8, 0, 129, 384, 128, 4000, rows);
  std::vector<int32_t> active{0};
  for (size_t e = 0; e < rows.size(); ++e)
    if (rows[e] > 0) {
      active.push_back(static_cast<int32_t>(e));
      ++active[0];
    }
  const uint32_t slots = static_cast<uint32_t>(active[0]) + 2;
  active.resize(rows.size() + 1, -1);
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    const DeviceQ w = upload_weights(b, p);
    const uint64_t x = b.upload(p.x), offsets = b.upload(p.offsets), act = b.upload(active),
                   y = b.alloc(size_t{p.m} * p.n * 2);
    Args args;
    args.ptr(x).ptr(w.codes).ptr(w.scales).ptr(offsets).ptr(act).ptr(y).u32(p.n).u32(p.k).u32(slots);
    REQUIRE_MESSAGE(b.launch(b.kernel("fp8", "fp8_grouped_gemv"), {ceil_div(p.n, 64), slots}, args) ==
                        METRALE_STATUS_OK,
                    b.last_error());
    check_against(p, b.download<uint16_t>(y, size_t{p.m} * p.n), "fp8_grouped_gemv on " + tier);
    for (uint64_t a : {x, offsets, act, y, w.codes, w.scales}) b.free(a);
  }
}

namespace {

// FP8 weights n = 256, k = 128, row c holding code c once (at column 7c mod 128, the others +0),
// scales 1: against activations 1.0 output c is code c's value.
QuantProblem every_fp8_code() {
  constexpr uint32_t n = 256, k = 128;
  QuantProblem p;
  p.fam = Fam::fp8;
  p.m = 1;
  p.n = n;
  p.k = k;
  p.codes.assign(size_t{n} * k, 0x00);
  for (uint32_t c = 0; c < n; ++c) p.codes[size_t{c} * k + (c * 7) % k] = static_cast<uint8_t>(c);
  p.scales.assign(n, 1.0f);
  return p;
}

// Output c against code c's value (NaN for the NaN codes; every E4M3 value is a bf16).
void check_every_code(const std::vector<double>& y, const std::string& what) {
  for (uint32_t c = 0; c < 256; ++c) {
    const double want = e4m3_value(static_cast<uint8_t>(c));
    INFO(what << " code 0x" << std::hex << c << std::dec << ": got " << y[c] << " want " << want);
    if (std::isnan(want))
      CHECK(std::isnan(y[c]));
    else
      CHECK(y[c] == want);
  }
}

}  // namespace

// FP8 decoding exactly: a row of every one of the 254 finite codes against x = 1 (bf16).
TEST_CASE("fp8: every E4M3 code decodes exactly on every tier (subnormals, +-448, +-0, NaN)") {
  QuantProblem p = every_fp8_code();
  p.x.assign(p.k, to_bf16(1.0));
  for (const std::string& tier : supported_tiers())
    check_every_code(widen_bf16(run_dense(tier_backend(tier), p, "gemv")), "gemv on " + tier);
}

// E4M3 activations exactly: x holds each finite code once (the NaN codes 0x7f and 0xff as +0),
// weight row c is 1.0 at column c (0 elsewhere), scales 1, so output c is activation code c's
// value, whatever path widens it; then a NaN code among zeros makes every output NaN.
TEST_CASE("fp8_gemv_a8 and fp8_gemv_a8_group128: every E4M3 activation code is read exactly on every tier (NaN too)") {
  const uint32_t n = 256, k = 256;
  QuantProblem p;
  p.fam = Fam::fp8;
  p.m = 1;
  p.n = n;
  p.k = k;
  p.codes.assign(size_t{n} * k, 0x00);
  for (uint32_t c = 0; c < n; ++c) p.codes[size_t{c} * k + c] = 0x38;  // 1.0
  p.scales.assign(size_t{n} * (k / 128), 1.0f);
  std::vector<uint8_t> finite(k), nan(k, 0x00);
  for (uint32_t c = 0; c < k; ++c) finite[c] = (c & 0x7f) == 0x7f ? 0x00 : static_cast<uint8_t>(c);
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    const DeviceQ w = upload_weights(b, p);
    for (const auto& [name, scales] : {std::pair{std::string("fp8_gemv_a8"), 1u}, std::pair{std::string("fp8_gemv_a8_group128"), k / 128}}) {
      const auto run = [&, &kernel = name, scale_count = scales](const std::vector<uint8_t>& xq) {
        const uint64_t x = b.upload(xq), xs = b.upload(std::vector<float>(scale_count, 1.0f)), y = b.alloc(size_t{n} * 2);
        Args args;
        args.ptr(x).ptr(xs).ptr(w.codes).ptr(w.scales).ptr(y).u32(1).u32(n).u32(k);
        REQUIRE_MESSAGE(b.launch(b.kernel("fp8", kernel.c_str()), {ceil_div(n, 64), 1}, args) == METRALE_STATUS_OK, b.last_error());
        const auto out = widen_bf16(b.download<uint16_t>(y, n));
        for (uint64_t a : {x, xs, y}) b.free(a);
        return out;
      };
      const auto out = run(finite);
      for (uint32_t c = 0; c < n; ++c) {
        const double want = e4m3_value(finite[c]);
        INFO(name << " code " << c << " on " << tier << ": got " << out[c] << " want " << want);
        CHECK(out[c] == want);
      }
      for (const uint8_t code : {uint8_t{0x7f}, uint8_t{0xff}}) {
        nan[9] = code;
        const auto poisoned = run(nan);
        INFO(name << " NaN code " << int{code} << " on " << tier);
        CHECK(std::all_of(poisoned.begin(), poisoned.end(), [](double v) { return std::isnan(v); }));
      }
    }
    for (uint64_t a : {w.codes, w.scales}) b.free(a);
  }
}

// FP8 weights against E4M3 activations exactly: row c holds weight code c once (the others +0)
// against x = 1.0 everywhere, scales 1, so output c is code c's value; the same when the caller
// runs with flush-to-zero and denormals-are-zero set (as -ffast-math code does): the subnormal
// codes must not vanish.
TEST_CASE("fp8_gemv_a8 and fp8_gemv_a8_group128: every E4M3 weight code decodes exactly on every tier, under the caller's FTZ/DAZ too") {
  const QuantProblem p = every_fp8_code();
  const std::vector<uint8_t> ones(p.k, 0x38);
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    const DeviceQ w = upload_weights(b, p);
    const uint64_t x = b.upload(ones), xs = b.upload(std::vector<float>{1.0f}), y = b.alloc(size_t{p.n} * 2);
    for (const std::string kernel : {"fp8_gemv_a8", "fp8_gemv_a8_group128"})
      for (const bool flush : {false, true}) {
        Args args;
        args.ptr(x).ptr(xs).ptr(w.codes).ptr(w.scales).ptr(y).u32(1).u32(p.n).u32(p.k);
#if defined(__x86_64__)
        const unsigned mxcsr = _mm_getcsr();
        if (flush) _mm_setcsr(mxcsr | 0x8040);  // FTZ | DAZ
#endif
        const metrale_status status = b.launch(b.kernel("fp8", kernel.c_str()), {ceil_div(p.n, 64), 1}, args);
#if defined(__x86_64__)
        // The caller's control bits are back (the low six are sticky exception flags).
        CHECK((_mm_getcsr() & ~0x3fu) == ((flush ? mxcsr | 0x8040 : mxcsr) & ~0x3fu));
        _mm_setcsr(mxcsr);
#endif
        REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error());
        check_every_code(widen_bf16(b.download<uint16_t>(y, p.n)), kernel + (flush ? " under FTZ/DAZ" : "") + " on " + tier);
      }
    for (uint64_t a : {x, xs, y, w.codes, w.scales}) b.free(a);
  }
}
