// SPDX-License-Identifier: MIT OR Apache-2.0
// kernel_src/deltanet.cu compiled for the host against the CUDA emulation, checked against the
// contracts written once more in tests/cuda/hybrid_reference.hpp: conv_silu and gated_norm bit
// for bit (inputs whose sums are exact), the delta rules (recurrent and chunked) against the
// double-precision recurrence, over several runs with distinct state slots (1, 5, 64, 65 and 130
// tokens, nonzero initial states, padding rows between runs), k_heads 2 / v_heads 4 at
// k_dim = v_dim = 32 and a shape whose dims are no multiples of the kernels' tiles. Every kernel at
// several block sizes with the same bits; rows and slots no run names, and each slot's bytes
// outside the kernel's part, untouched; runs with a negative field, blocks past the grid's work
// and shapes outside the contract write nothing.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "hybrid_reference.hpp"
#include "metrale_cuda_emulation.hpp"

// The kernel source itself, as NVRTC sees it.
#include "deltanet.cu"

#include <algorithm>

namespace ref = hybrid_reference;
using ref::Run;

namespace {

const __nv_bfloat16* bf(const std::vector<uint16_t>& v) { return reinterpret_cast<const __nv_bfloat16*>(v.data()); }
__nv_bfloat16* bf(std::vector<uint16_t>& v) { return reinterpret_cast<__nv_bfloat16*>(v.data()); }

constexpr uint16_t kSentinel = 0x7fc1;  // a NaN no kernel writes
constexpr size_t kWindow = 24;          // floats before each slot's matrices (a stand-in conv window)
constexpr uint32_t kSlots = 7;

// Runs of 130, 1, 64, 5 and 65 tokens in slots 2, 0, 5, 1, 6 (3 and 4 named by none), padding
// rows before, between and after them.
const std::vector<Run> kRuns = {{2, 130, 2}, {133, 1, 0}, {134, 64, 5}, {201, 5, 1}, {206, 65, 6}};
constexpr uint32_t kRows = 273;

using DeltaKernel = decltype(&delta_rule_recurrent);

struct DeltaResult {
  std::vector<uint16_t> out;
  std::vector<float> states;
};

DeltaResult run_delta(DeltaKernel kernel, const ref::DeltaInputs& in, const std::vector<float>& states0,
                      const std::vector<Run>& runs, unsigned block, emu::dim3 grid = {}) {
  const ref::DeltaShape& s = in.shape;
  DeltaResult r{std::vector<uint16_t>(in.a.size() / s.v_heads * s.v_heads * s.v_dim, kSentinel), states0};
  const auto table = ref::runs_table(runs);
  const auto n_runs = static_cast<uint32_t>(runs.size());
  if (grid.x == 1 && grid.y == 1) grid = {n_runs, s.v_heads, 1};
  const auto stride = static_cast<uint32_t>(kWindow + s.state_floats());
  emu::launch(grid, {block, 1, 1}, [&] {
    kernel(bf(in.qkv), bf(in.a), bf(in.b), in.a_log.data(), in.dt_bias.data(), r.states.data() + kWindow, table.data(),
           bf(r.out), n_runs, s.k_heads, s.v_heads, s.k_dim, s.v_dim, stride);
  });
  return r;
}

// The same bits under the emulation's other thread schedules (races that round robin hides).
void check_schedules(DeltaKernel kernel, const ref::DeltaInputs& in, const std::vector<float>& states0,
                     const DeltaResult& first) {
  for (const emu::Schedule schedule : {emu::Schedule::lowest_first, emu::Schedule::highest_first}) {
    emu::set_schedule(schedule);
    const DeltaResult other = run_delta(kernel, in, states0, kRuns, 96);
    CHECK(other.out == first.out);
    CHECK(std::memcmp(other.states.data(), first.states.data(), first.states.size() * 4) == 0);
  }
  emu::set_schedule(emu::Schedule::round_robin);
}

bool named(const std::vector<Run>& runs, uint32_t slot) {
  return std::any_of(runs.begin(), runs.end(), [&](const Run& r) { return r.slot >= 0 && static_cast<uint32_t>(r.slot) == slot; });
}
bool in_runs(const std::vector<Run>& runs, size_t row) {
  return std::any_of(runs.begin(), runs.end(),
                     [&](const Run& r) { return row >= size_t(r.first) && row < size_t(r.first) + size_t(r.rows); });
}

// Outputs within the contract's tolerance of the double recurrence, rows outside the runs
// untouched; named slots' matrices within 1e-4 of the largest state of their slot, everything
// else of the state buffer as it was.
void check_delta(const DeltaResult& got, const ref::DeltaInputs& in, const std::vector<float>& states0,
                 const std::vector<Run>& runs) {
  const ref::DeltaShape& s = in.shape;
  const size_t stride = kWindow + s.state_floats();
  std::vector<double> want_states(states0.begin(), states0.end());
  const auto want = ref::delta_rule(in, want_states, runs, stride, kWindow);
  const double ratio = ref::worst_ratio(got.out, want, s, runs);
  CHECK(ratio <= 1.0);
  MESSAGE("worst output error / bound: " << ratio);
  const size_t row_width = size_t{s.v_heads} * s.v_dim;
  size_t touched = 0;
  for (size_t row = 0; row < got.out.size() / row_width; ++row) {
    if (in_runs(runs, row)) continue;
    for (size_t i = 0; i < row_width; ++i) touched += got.out[row * row_width + i] != kSentinel;
  }
  CHECK(touched == 0);
  size_t far = 0, changed = 0;
  for (uint32_t slot = 0; slot < states0.size() / stride; ++slot) {
    const size_t base = size_t{slot} * stride;
    double top = 0;
    for (size_t i = kWindow; i < stride; ++i) top = std::max(top, std::fabs(want_states[base + i]));
    for (size_t i = 0; i < stride; ++i) {
      if (named(runs, slot) && i >= kWindow) {
        far += !(std::fabs(double(got.states[base + i]) - want_states[base + i]) <= 1e-4 * (1.0 + top));
      } else {
        changed += std::memcmp(&got.states[base + i], &states0[base + i], 4) != 0;
      }
    }
  }
  CHECK(far == 0);
  CHECK(changed == 0);
}

std::vector<float> initial_states(const ref::DeltaShape& s, uint64_t stream) {
  return ref::uniform_f32(kSlots * (kWindow + s.state_floats()), -1.0f, 1.0f, stream);
}

}  // namespace

TEST_CASE("delta_rule_recurrent: the double recurrence over runs of 1 to 130 tokens; the same bits at any block and schedule") {
  const ref::DeltaShape s{2, 4, 32, 32};
  const auto in = ref::delta_inputs(s, kRows, 11);
  const auto states0 = initial_states(s, 12);
  const DeltaResult first = run_delta(&delta_rule_recurrent, in, states0, kRuns, 32);
  check_delta(first, in, states0, kRuns);
  for (const unsigned block : {1u, 96u, 128u}) {
    CAPTURE(block);
    const DeltaResult other = run_delta(&delta_rule_recurrent, in, states0, kRuns, block);
    CHECK(other.out == first.out);
    CHECK(std::memcmp(other.states.data(), first.states.data(), first.states.size() * 4) == 0);
  }
  check_schedules(&delta_rule_recurrent, in, states0, first);
}

TEST_CASE("delta_rule_chunked: the double recurrence in chunks of 64; the same bits at any block and schedule") {
  const ref::DeltaShape s{2, 4, 32, 32};
  const auto in = ref::delta_inputs(s, kRows, 11);
  const auto states0 = initial_states(s, 12);
  const DeltaResult first = run_delta(&delta_rule_chunked, in, states0, kRuns, 128);
  check_delta(first, in, states0, kRuns);
  for (const unsigned block : {1u, 32u, 100u, 256u}) {
    CAPTURE(block);
    const DeltaResult other = run_delta(&delta_rule_chunked, in, states0, kRuns, block);
    CHECK(other.out == first.out);
    CHECK(std::memcmp(other.states.data(), first.states.data(), first.states.size() * 4) == 0);
  }
  check_schedules(&delta_rule_chunked, in, states0, first);
}

TEST_CASE("delta rules: dims that are no multiples of the tiles (k_dim 40, v_dim 72), one key head for two value heads") {
  const ref::DeltaShape s{1, 2, 40, 72};
  const std::vector<Run> runs = {{1, 70, 3}, {72, 3, 0}, {75, 1, 1}};
  const auto in = ref::delta_inputs(s, 77, 21);
  const auto states0 = initial_states(s, 22);
  for (const auto& [kernel, block] : {std::pair<DeltaKernel, unsigned>{&delta_rule_recurrent, 64},
                                      {&delta_rule_chunked, 96}}) {
    CAPTURE(block);
    check_delta(run_delta(kernel, in, states0, runs, block), in, states0, runs);
  }
}

TEST_CASE("delta_rule_chunked agrees with delta_rule_recurrent: outputs within one bf16 step, states within 1e-5") {
  const ref::DeltaShape s{2, 4, 32, 32};
  const auto in = ref::delta_inputs(s, kRows, 31);
  const auto states0 = initial_states(s, 32);
  const DeltaResult rec = run_delta(&delta_rule_recurrent, in, states0, kRuns, 64);
  const DeltaResult chk = run_delta(&delta_rule_chunked, in, states0, kRuns, 64);
  size_t far = 0;
  for (size_t i = 0; i < rec.out.size(); ++i) {
    const float a = ref::bf16_value(rec.out[i]), b = ref::bf16_value(chk.out[i]);
    if (rec.out[i] == kSentinel || chk.out[i] == kSentinel) {
      far += rec.out[i] != chk.out[i];
      continue;
    }
    far += !(std::fabs(a - b) <= std::ldexp(std::max(std::fabs(a), std::fabs(b)), -7) + 1e-5f);
  }
  CHECK(far == 0);
  float worst = 0;
  for (size_t i = 0; i < rec.states.size(); ++i) worst = std::max(worst, std::fabs(rec.states[i] - chk.states[i]));
  CHECK(worst <= 1e-5f);
}

TEST_CASE("delta rules skip runs with a negative field, blocks past the runs or heads, and shapes outside the contract") {
  const ref::DeltaShape s{2, 4, 32, 32};
  const auto in = ref::delta_inputs(s, 20, 41);
  const auto states0 = initial_states(s, 42);
  const std::vector<Run> runs = {{0, 6, -1}, {6, 3, 2}, {-1, 4, 3}, {12, -2, 4}};
  for (const DeltaKernel kernel : {&delta_rule_recurrent, &delta_rule_chunked}) {
    // Only the run (6, 3, 2) is done, though the grid is wider than the runs and the heads.
    const DeltaResult got = run_delta(kernel, in, states0, runs, 64, {6, 5, 1});
    check_delta(got, in, states0, {{6, 3, 2}});
    // k_dim 8 is outside 16..256; v_heads 3 no multiple of k_heads 2: nothing is written.
    for (const ref::DeltaShape bad : {ref::DeltaShape{2, 4, 8, 32}, ref::DeltaShape{2, 3, 32, 32}}) {
      ref::DeltaInputs odd = ref::delta_inputs(bad, 20, 43);
      const auto odd_states = initial_states(bad, 44);
      const DeltaResult none = run_delta(kernel, odd, odd_states, {{0, 5, 1}}, 32);
      CHECK(std::all_of(none.out.begin(), none.out.end(), [](uint16_t v) { return v == kSentinel; }));
      CHECK(std::memcmp(none.states.data(), odd_states.data(), odd_states.size() * 4) == 0);
    }
  }
}

namespace {

struct ConvResult {
  std::vector<uint16_t> out;
  std::vector<float> states;
};

// conv_silu over kRuns' rows of `channels` (eighths: every sum exact), windows of eighths.
ConvResult run_conv(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w, const std::vector<float>& states0,
                    const std::vector<Run>& runs, uint32_t channels, uint32_t kernel_size, uint32_t stride, unsigned block,
                    unsigned grid) {
  ConvResult r{std::vector<uint16_t>(x.size(), kSentinel), states0};
  const auto table = ref::runs_table(runs);
  emu::launch({grid, 1, 1}, {block, 1, 1}, [&] {
    conv_silu(bf(x), bf(w), r.states.data(), table.data(), bf(r.out), static_cast<uint32_t>(runs.size()), channels,
              kernel_size, stride);
  });
  return r;
}

std::vector<float> eighths_f32(size_t count, uint64_t stream) {
  const auto bits = ref::eighths(count, -16, 16, stream);
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = ref::bf16_value(bits[i]);
  return out;
}

}  // namespace

TEST_CASE("conv_silu: bf16(silu(bf16(y))) per run, windows carried in and written back; the same bits at any block") {
  // 256 channels: the qkv rows of k_heads 2, v_heads 4, k_dim = v_dim = 32; kernel sizes 2, 4, 8.
  for (const auto& [channels, kernel_size] : {std::pair<uint32_t, uint32_t>{256, 4}, {40, 2}, {40, 8}}) {
    CAPTURE(channels);
    CAPTURE(kernel_size);
    const uint32_t stride = (kernel_size - 1) * channels + 16;  // the window, then other state
    const auto x = ref::eighths(size_t{kRows} * channels, -16, 16, channels + kernel_size);
    const auto w = ref::eighths(size_t{channels} * kernel_size, -8, 8, kernel_size);
    const auto states0 = eighths_f32(size_t{kSlots} * stride, 3);
    std::vector<uint16_t> want(x.size(), kSentinel);
    std::vector<float> want_states = states0;
    ref::conv_silu(x, w, want_states, kRuns, want, channels, kernel_size, stride);
    for (const unsigned block : {1u, 32u, 96u, 256u}) {
      CAPTURE(block);
      const ConvResult got = run_conv(x, w, states0, kRuns, channels, kernel_size, stride, block, 5);
      CHECK(got.out == want);  // rows outside the runs stay kSentinel in both
      CHECK(std::memcmp(got.states.data(), want_states.data(), want_states.size() * 4) == 0);
    }
  }
}

TEST_CASE("conv_silu skips runs with a negative field, blocks past n_runs and kernel sizes outside 2..8") {
  constexpr uint32_t channels = 24, stride = 3 * channels;
  const auto x = ref::eighths(size_t{20} * channels, -16, 16, 5);
  const auto w8 = ref::eighths(size_t{channels} * 9, -8, 8, 6);
  const auto states0 = eighths_f32(size_t{kSlots} * stride, 7);
  const std::vector<Run> runs = {{0, 6, -1}, {6, 3, 2}, {-1, 4, 3}, {12, -2, 4}};
  const std::vector<Run> done = {{6, 3, 2}};
  std::vector<uint16_t> want(x.size(), kSentinel);
  std::vector<float> want_states = states0;
  const auto w4 = std::vector<uint16_t>(w8.begin(), w8.begin() + channels * 4);
  ref::conv_silu(x, w4, want_states, done, want, channels, 4, stride);
  const ConvResult got = run_conv(x, w4, states0, runs, channels, 4, stride, 64, 7);
  CHECK(got.out == want);
  CHECK(std::memcmp(got.states.data(), want_states.data(), want_states.size() * 4) == 0);
  for (const uint32_t kernel_size : {1u, 9u}) {
    CAPTURE(kernel_size);
    const ConvResult none = run_conv(x, w8, states0, done, channels, kernel_size, stride, 64, 1);
    CHECK(std::all_of(none.out.begin(), none.out.end(), [](uint16_t v) { return v == kSentinel; }));
    CHECK(std::memcmp(none.states.data(), states0.data(), states0.size() * 4) == 0);
  }
}

TEST_CASE("gated_norm: bf16(w · bf16(x · s) · silu(z)) bit for bit, in place; the same bits at any block") {
  constexpr float eps = 1e-6f;
  for (const uint32_t dim : {128u, 40u}) {
    CAPTURE(dim);
    constexpr uint32_t rows = 6;
    const auto x = ref::eighths(size_t{rows} * dim, -32, 31, dim);  // sums of squares exact in any order
    const auto z = ref::uniform_bf16(size_t{rows} * dim, -6.0f, 6.0f, 2);
    const auto w = ref::uniform_f32(dim, 0.25f, 1.75f, 3);
    const auto want = ref::gated_norm(x, z, w, rows, dim, eps);
    // Rows whose sums of squares round: only the kernel's own order gives its bits.
    const auto rough = ref::uniform_bf16(size_t{rows} * dim, -1.0f, 1.0f, 4);
    std::vector<uint16_t> rough_first;
    for (const unsigned block : {1u, 32u, 96u, 256u, 1024u}) {
      CAPTURE(block);
      std::vector<uint16_t> y(x.size() + dim, kSentinel);  // one row past: a grid wider than rows
      emu::launch({rows + 1, 1, 1}, {block, 1, 1}, [&] { gated_norm(bf(x), bf(z), w.data(), bf(y), rows, dim, eps); });
      CHECK(std::equal(want.begin(), want.end(), y.begin()));
      CHECK(std::all_of(y.begin() + x.size(), y.end(), [](uint16_t v) { return v == kSentinel; }));
      std::vector<uint16_t> in_place = x;
      emu::launch({rows, 1, 1}, {block, 1, 1}, [&] { gated_norm(bf(in_place), bf(z), w.data(), bf(in_place), rows, dim, eps); });
      CHECK(in_place == want);
      std::vector<uint16_t> r(rough.size(), kSentinel);
      emu::launch({rows, 1, 1}, {block, 1, 1}, [&] { gated_norm(bf(rough), bf(z), w.data(), bf(r), rows, dim, eps); });
      if (rough_first.empty()) rough_first = r;
      CHECK(r == rough_first);
    }
  }
}
