// SPDX-License-Identifier: MIT OR Apache-2.0
// The deltanet module (docs/kernels.md, "Module deltanet") on every tier this CPU has, against the
// double references of deltanet_reference.hpp: conv_silu over several runs with distinct slots
// (a run shorter than kernel_size - 1 continuing its window, the window written back, a sequence
// split over launches equal to one launch), delta_rule_recurrent and delta_rule_chunked (runs of
// 1, 5, 64, 65 and 130 tokens, k_dim = v_dim 24, 32 and 128, GQA 2 -> 4 heads, nonzero initial
// states), the chunked form against the recurrent one over 4096 tokens within the contract's
// budget, the same bits on 1 thread as on 2, and rows and slots no run names left untouched. The launch checks: test_deltanet_checks.cpp.
#include "support.hpp"

#include "deltanet_reference.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace cpu_test;

namespace {

constexpr uint16_t kCanary = 0x7fc1;  // a NaN no kernel computes

void require_ok(Backend& b, metrale_status status) { REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error()); }

uint32_t run_count(const std::vector<int32_t>& runs) { return static_cast<uint32_t>(runs.size() / 3); }

// ---- conv_silu

ConvProblem conv_problem(uint32_t taps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  ConvProblem p;
  p.channels = 40, p.taps = taps, p.slots = 6;
  p.stride = (taps - 1) * p.channels + 8;  // more than the window: the matrices follow it in the layers
  // 2 rows: shorter than taps - 1 for taps >= 4, so the window keeps older entries.
  p.rows = lay_runs({5, 2, 1, 20}, {2, 0, 5, 1}, 2, p.runs);
  for (size_t i = 0; i < size_t{p.rows} * p.channels; ++i) p.x.push_back(to_bf16(2 * unit(rng)));
  for (size_t i = 0; i < size_t{p.channels} * taps; ++i) p.weight.push_back(to_bf16(0.5 * unit(rng)));
  for (size_t i = 0; i < size_t{p.slots} * p.stride; ++i) p.states.push_back(static_cast<float>(bf16_value(to_bf16(unit(rng)))));
  return p;
}

struct ConvOutput {
  std::vector<uint16_t> out;
  std::vector<float> states;
};

// conv_silu over `runs` (a part of p's), on device buffers the caller keeps between launches.
struct ConvDevice {
  Backend& b;
  const ConvProblem& p;
  uint64_t x, weight, states, out;
  ConvDevice(Backend& backend, const ConvProblem& problem)
      : b(backend), p(problem), x(b.upload(p.x)), weight(b.upload(p.weight)), states(b.upload(p.states)),
        out(b.upload(std::vector<uint16_t>(p.x.size(), kCanary))) {}
  ~ConvDevice() {
    for (uint64_t a : {x, weight, states, out}) b.free(a);
  }
  void launch(const std::vector<int32_t>& runs) {
    const uint64_t dr = b.upload(runs);
    Args args;
    args.ptr(x).ptr(weight).ptr(states).ptr(dr).ptr(out).u32(run_count(runs)).u32(p.channels).u32(p.taps).u32(p.stride);
    require_ok(b, b.launch(b.kernel("deltanet", "conv_silu"), {run_count(runs), 1}, args));
    b.free(dr);
  }
  ConvOutput read() { return {b.download<uint16_t>(out, p.x.size()), b.download<float>(states, p.states.size())}; }
};

void check_conv(const ConvProblem& p, const ConvOutput& got, const ConvResult& want) {
  size_t wrong = 0, canaries = 0;
  for (size_t i = 0; i < want.out.size(); ++i) {
    if (std::isnan(want.out[i])) {
      canaries += got.out[i] != kCanary;
      continue;
    }
    // One bf16 step: the f32 sum of the kernel and the double one may round bf16(y) apart.
    wrong += !(std::fabs(bf16_value(got.out[i]) - want.out[i]) <= std::ldexp(std::fabs(want.out[i]), -7) + 1e-30);
  }
  CHECK_MESSAGE(wrong == 0, wrong << " outputs off by more than one bf16 step");
  CHECK_MESSAGE(canaries == 0, canaries << " outputs written in rows no run names");
  CHECK_MESSAGE(std::memcmp(got.states.data(), want.states.data(), p.states.size() * 4) == 0,
                "the states differ from the runs' last inputs (or a byte outside the windows changed)");
}

// ---- the delta rule

struct DeltaOutput {
  std::vector<uint16_t> out;
  std::vector<float> states;
};

DeltaOutput run_delta(Backend& b, const char* kernel, const DeltaProblem& p) {
  const uint64_t qkv = b.upload(p.qkv), a = b.upload(p.a), bb = b.upload(p.b), a_log = b.upload(p.a_log),
                 dt = b.upload(p.dt_bias), states = b.upload(p.states), runs = b.upload(p.runs),
                 out = b.upload(std::vector<uint16_t>(size_t{p.rows} * p.v_heads * p.v_dim, kCanary));
  Args args;
  args.ptr(qkv).ptr(a).ptr(bb).ptr(a_log).ptr(dt).ptr(states).ptr(runs).ptr(out);
  args.u32(run_count(p.runs)).u32(p.k_heads).u32(p.v_heads).u32(p.k_dim).u32(p.v_dim).u32(p.stride);
  require_ok(b, b.launch(b.kernel("deltanet", kernel), {run_count(p.runs), p.v_heads}, args));
  DeltaOutput got{b.download<uint16_t>(out, size_t{p.rows} * p.v_heads * p.v_dim), b.download<float>(states, p.states.size())};
  for (uint64_t x : {qkv, a, bb, a_log, dt, states, runs, out}) b.free(x);
  return got;
}

// The largest |value| of head h over the rows and slots the runs name.
double head_max(const DeltaProblem& p, const std::vector<double>& out, uint32_t h) {
  double top = 0;
  for (uint32_t r = 0; r < p.rows; ++r)
    for (uint32_t j = 0; j < p.v_dim; ++j) {
      const double v = out[(size_t{r} * p.v_heads + h) * p.v_dim + j];
      if (!std::isnan(v)) top = std::max(top, std::fabs(v));
    }
  return top;
}

// Outputs within one bf16 step of |ref| (2^-7 |ref|: two computations a hair apart may round to
// neighbouring bf16 values) + out_tol * max|ref| of the head; rows no run names untouched; states of the runs' slots within state_tol * max|S| of the
// slot's head, every other float of the states unchanged.
void check_delta(const DeltaProblem& p, const DeltaOutput& got, const std::vector<double>& out_ref,
                 const std::vector<double>& state_ref, double out_tol, double state_tol) {
  size_t wrong = 0, canaries = 0;
  for (uint32_t h = 0; h < p.v_heads; ++h) {
    const double bound = out_tol * head_max(p, out_ref, h);
    for (uint32_t r = 0; r < p.rows; ++r)
      for (uint32_t j = 0; j < p.v_dim; ++j) {
        const size_t i = (size_t{r} * p.v_heads + h) * p.v_dim + j;
        if (std::isnan(out_ref[i]))
          canaries += got.out[i] != kCanary;
        else
          wrong += !(std::fabs(bf16_value(got.out[i]) - out_ref[i]) <= std::ldexp(std::fabs(out_ref[i]), -7) + bound);
      }
  }
  CHECK_MESSAGE(wrong == 0, wrong << " outputs outside the budget");
  CHECK_MESSAGE(canaries == 0, canaries << " outputs written in rows no run names");
  size_t states_wrong = 0;
  const size_t matrix = size_t{p.k_dim} * p.v_dim;
  for (uint32_t s = 0; s < p.slots; ++s) {
    bool named = false;
    for (uint32_t i = 0; i < run_count(p.runs); ++i) named |= p.runs[3 * i + 2] == static_cast<int32_t>(s);
    for (uint32_t h = 0; h <= p.v_heads; ++h) {  // h == v_heads: the slot's floats after the matrices
      const size_t begin = size_t{s} * p.stride + h * matrix, end = h < p.v_heads ? begin + matrix : (s + 1) * size_t{p.stride};
      double top = 0;
      for (size_t e = begin; e < end; ++e) top = std::max(top, std::fabs(state_ref[e]));
      const double bound = named && h < p.v_heads ? state_tol * top : 0.0;
      for (size_t e = begin; e < end; ++e) states_wrong += !(std::fabs(got.states[e] - state_ref[e]) <= bound);
    }
  }
  CHECK_MESSAGE(states_wrong == 0, states_wrong << " state floats outside the budget or changed where no run writes");
}

}  // namespace

TEST_CASE("deltanet/conv_silu: runs with distinct slots, a run shorter than its window, the window written back") {
  for (const uint32_t taps : {2u, 4u, 8u}) {
    CAPTURE(taps);
    const ConvProblem p = conv_problem(taps, 100 + taps);
    const ConvResult want = conv_reference(p);
    for (const std::string& tier : supported_tiers()) {
      CAPTURE(tier);
      ConvDevice d(tier_backend(tier), p);
      d.launch(p.runs);
      check_conv(p, d.read(), want);
    }
  }
}

TEST_CASE("deltanet/conv_silu: a sequence over several launches (runs of 7, 1, 12 rows) equals one launch over it") {
  const ConvProblem p = conv_problem(4, 7);
  const std::vector<int32_t> whole = {p.runs[9], p.runs[10], p.runs[11]};  // the 20-row run
  const std::vector<std::vector<int32_t>> parts = {
      {whole[0], 7, whole[2]}, {whole[0] + 7, 1, whole[2]}, {whole[0] + 8, 12, whole[2]}};
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    ConvDevice one(tier_backend(tier), p), split(tier_backend(tier), p);
    one.launch(whole);
    for (const auto& part : parts) split.launch(part);
    const ConvOutput a = one.read(), b = split.read();
    CHECK(a.out == b.out);
    CHECK(std::memcmp(a.states.data(), b.states.data(), a.states.size() * 4) == 0);
    CHECK(std::count(a.out.begin(), a.out.end(), kCanary) == static_cast<std::ptrdiff_t>(p.x.size() - 20 * p.channels));
  }
}

TEST_CASE("deltanet/delta_rule_recurrent and _chunked against the double reference: runs of 1..130 tokens, k_dim 24 (the AVX-512 tiers on 8 lanes), 32 and 128") {
  for (const uint32_t dim : {24u, 32u, 128u}) {
    CAPTURE(dim);
    const DeltaProblem p = delta_problem({1, 5, 64, 65, 130}, {3, 0, 6, 2, 5}, 2, 4, dim, 8, 40 + dim);
    const DeltaResult want = delta_reference(p);
    for (const std::string kernel : {"delta_rule_recurrent", "delta_rule_chunked"})
      for (const std::string& tier : supported_tiers()) {
        CAPTURE(kernel);
        CAPTURE(tier);
        // f32 against double over up to 130 tokens: 2^-14 of the head's largest value.
        check_delta(p, run_delta(tier_backend(tier), kernel.c_str(), p), want.out, want.states, std::ldexp(1.0, -14),
                    std::ldexp(1.0, -14));
      }
  }
}

TEST_CASE("deltanet/delta_rule_chunked equals delta_rule_recurrent over 4096 tokens within the contract's budget") {
  // Two runs (4096 tokens and 100), heads that keep their state for thousands of tokens and heads
  // that forget in a few; the budget (docs/kernels.md): outputs within 2^-8 max|out| of the head
  // plus one bf16 rounding, states within 2^-8 max|S| of the slot's head.
  const DeltaProblem p = delta_problem({4096, 100}, {2, 0}, 2, 4, 128, 3, 4096);
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    const DeltaOutput recurrent = run_delta(tier_backend(tier), "delta_rule_recurrent", p);
    const DeltaOutput chunked = run_delta(tier_backend(tier), "delta_rule_chunked", p);
    std::vector<double> out(recurrent.out.size()), states(recurrent.states.begin(), recurrent.states.end());
    for (size_t i = 0; i < out.size(); ++i) out[i] = recurrent.out[i] == kCanary ? std::nan("") : bf16_value(recurrent.out[i]);
    check_delta(p, chunked, out, states, std::ldexp(1.0, -8), std::ldexp(1.0, -8));
    // The two differ at all (the chunked form is not the recurrent code), far inside the budget.
    CHECK(chunked.states != recurrent.states);
  }
}

TEST_CASE("deltanet/delta_rule_recurrent and _chunked: the same bits on 1 thread as on 2, on every tier") {
  // Each (run, head) block is one thread's work in a fixed order (the SIMD bodies' GEMM tiles
  // included), so neither the thread count nor the order blocks are dealt in may change a bit.
  const DeltaProblem p = delta_problem({1, 5, 64, 65, 130}, {3, 0, 6, 2, 5}, 2, 4, 128, 8, 168);
  for (const std::string kernel : {"delta_rule_recurrent", "delta_rule_chunked"})
    for (const std::string& tier : supported_tiers()) {
      CAPTURE(kernel);
      CAPTURE(tier);
      Backend one(Options{{"target", tier}, {"threads", "1"}});
      const DeltaOutput a = run_delta(one, kernel.c_str(), p), b = run_delta(tier_backend(tier), kernel.c_str(), p);
      CHECK(a.out == b.out);
      CHECK(std::memcmp(a.states.data(), b.states.data(), a.states.size() * 4) == 0);
    }
}
