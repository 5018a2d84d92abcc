// SPDX-License-Identifier: MIT OR Apache-2.0
// The hybrid models' CUDA kernels on a real GPU (module deltanet, norm/rms_norm_zero_centred,
// attn/output_gate) at Qwen3-Next's sizes (16 key heads, 32 value heads of 128, conv window 4,
// 8192 channels) against the contracts of tests/cuda/hybrid_reference.hpp: the delta rules against
// the double recurrence (a prefill of runs of 1 to 300 tokens in distinct slots, then a decode
// step over every sequence at once), chunked against recurrent, conv_silu's outputs and windows,
// the elementwise kernels within one bf16 step of the f32 mirror (the device's expf may differ
// from the host's in the last f32 bit) and rms_norm_zero_centred bit for bit. Rows no run names
// must stay as they were. Suite 'gpu'; exits 77 with one line when no CUDA device is usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gpu_support.hpp"
#include "hybrid_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace metrale;
using metrale::gpu_test::DeviceBuffer;
namespace ref = hybrid_reference;

namespace {

std::shared_ptr<Backend> g_cuda;
constexpr uint16_t kSentinel = 0x7fc1;
constexpr float kEps = 1e-6f;

// Runs of 300, 1, 64, 65 and 7 tokens in slots 3, 0, 5, 1, 2 with padding rows between them.
const std::vector<ref::Run> kRuns = {{1, 300, 3}, {302, 1, 0}, {303, 64, 5}, {370, 65, 1}, {436, 7, 2}};
constexpr uint32_t kRows = 445, kSlots = 6;

// Elements more than one bf16 step apart (NaN sentinels must match exactly).
size_t beyond_one_step(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    const float a = ref::bf16_value(got[i]), b = ref::bf16_value(want[i]);
    bad += !(std::fabs(a - b) <= std::ldexp(std::max(std::fabs(a), std::fabs(b)), -7));
  }
  return bad;
}

LaunchShape shape_of(uint32_t gx, uint32_t gy, uint32_t block) {
  LaunchShape shape;
  shape.grid = {gx, gy, 1};
  shape.block = {block, 1, 1};
  return shape;
}

struct DeltaRun {
  std::vector<uint16_t> out;
  std::vector<float> states;
};

DeltaRun run_delta(const char* kernel, const ref::DeltaInputs& in, const std::vector<float>& states0,
                   const std::vector<ref::Run>& runs, std::vector<uint16_t> out) {
  const ref::DeltaShape& s = in.shape;
  const auto table = ref::runs_table(runs);
  DeviceBuffer dqkv(*g_cuda, in.qkv), da(*g_cuda, in.a), db(*g_cuda, in.b), dlog(*g_cuda, in.a_log),
      dbias(*g_cuda, in.dt_bias), dstates(*g_cuda, states0), druns(*g_cuda, table), dout(*g_cuda, out);
  const auto n_runs = static_cast<uint32_t>(runs.size());
  g_cuda->launch(g_cuda->kernel("deltanet", kernel), shape_of(n_runs, s.v_heads, 128), dqkv.ptr(), da.ptr(), db.ptr(),
                 dlog.ptr(), dbias.ptr(), dstates.ptr(), druns.ptr(), dout.ptr(), n_runs, s.k_heads, s.v_heads, s.k_dim,
                 s.v_dim, static_cast<uint32_t>(s.state_floats()));
  g_cuda->synchronize();
  return {dout.download<uint16_t>(out.size()), dstates.download<float>(states0.size())};
}

// Outputs within the contract's tolerance, rows outside the runs untouched, named slots' states
// within 1e-4 of their largest entry, the others as they were.
void check_delta(const DeltaRun& got, const std::vector<uint16_t>& out0, const std::vector<double>& want,
                 const std::vector<double>& want_states, const std::vector<float>& states0, const ref::DeltaShape& s,
                 const std::vector<ref::Run>& runs) {
  const double ratio = ref::worst_ratio(got.out, want, s, runs);
  CHECK_MESSAGE(ratio <= 1.0, "worst output error / bound " << ratio);
  size_t touched = 0;
  const size_t width = size_t{s.v_heads} * s.v_dim;
  for (size_t row = 0; row < out0.size() / width; ++row) {
    const bool in_run = std::any_of(runs.begin(), runs.end(), [&](const ref::Run& r) {
      return row >= size_t(r.first) && row < size_t(r.first) + size_t(r.rows);
    });
    if (!in_run) touched += !std::equal(out0.begin() + row * width, out0.begin() + (row + 1) * width, got.out.begin() + row * width);
  }
  CHECK(touched == 0);
  size_t far = 0;
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    const size_t base = slot * s.state_floats();
    const bool named = std::any_of(runs.begin(), runs.end(), [&](const ref::Run& r) { return r.slot == int32_t(slot); });
    double top = 0;
    for (size_t i = 0; i < s.state_floats(); ++i) top = std::max(top, std::fabs(want_states[base + i]));
    for (size_t i = 0; i < s.state_floats(); ++i) {
      far += named ? !(std::fabs(got.states[base + i] - want_states[base + i]) <= 1e-4 * (1.0 + top))
                   : got.states[base + i] != states0[base + i];
    }
  }
  CHECK(far == 0);
}

}  // namespace

TEST_CASE("delta_rule_recurrent and delta_rule_chunked: a prefill of five runs, then a decode step, at Qwen3-Next's heads") {
  const ref::DeltaShape s{16, 32, 128, 128};
  const auto in = ref::delta_inputs(s, kRows, 1);
  const auto states0 = ref::uniform_f32(kSlots * s.state_floats(), -0.5f, 0.5f, 2);
  std::vector<double> want_states(states0.begin(), states0.end());
  const auto want = ref::delta_rule(in, want_states, kRuns, s.state_floats());
  const std::vector<uint16_t> out0(size_t{kRows} * s.v_heads * s.v_dim, kSentinel);
  std::vector<float> after_prefill;
  for (const char* kernel : {"delta_rule_recurrent", "delta_rule_chunked"}) {
    CAPTURE(kernel);
    const DeltaRun got = run_delta(kernel, in, states0, kRuns, out0);
    check_delta(got, out0, want, want_states, states0, s, kRuns);
    if (after_prefill.empty()) after_prefill = got.states;
  }
  // A decode step: one row per sequence, all six slots, from the recurrent kernel's states.
  const std::vector<ref::Run> step = {{0, 1, 4}, {1, 1, 3}, {2, 1, 0}, {3, 1, 5}, {4, 1, 1}, {5, 1, 2}};
  const auto next = ref::delta_inputs(s, 6, 3);
  std::vector<double> step_states(after_prefill.begin(), after_prefill.end());
  const auto step_want = ref::delta_rule(next, step_states, step, s.state_floats());
  const std::vector<uint16_t> step_out0(size_t{6} * s.v_heads * s.v_dim, kSentinel);
  for (const char* kernel : {"delta_rule_recurrent", "delta_rule_chunked"}) {
    CAPTURE(kernel);
    check_delta(run_delta(kernel, next, after_prefill, step, step_out0), step_out0, step_want, step_states, after_prefill,
                s, step);
  }
}

TEST_CASE("conv_silu: Qwen3-Next's 8192 channels, window 4, over five runs; windows written back") {
  constexpr uint32_t channels = 8192, kernel_size = 4, stride = 3 * channels + 32;
  const auto x = ref::eighths(size_t{kRows} * channels, -16, 16, 4);
  const auto w = ref::eighths(size_t{channels} * kernel_size, -8, 8, 5);
  const auto bits = ref::eighths(size_t{kSlots} * stride, -16, 16, 6);
  std::vector<float> states0(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) states0[i] = ref::bf16_value(bits[i]);
  std::vector<uint16_t> want(x.size(), kSentinel);
  std::vector<float> want_states = states0;
  ref::conv_silu(x, w, want_states, kRuns, want, channels, kernel_size, stride);
  const auto table = ref::runs_table(kRuns);
  DeviceBuffer dx(*g_cuda, x), dw(*g_cuda, w), dstates(*g_cuda, states0), druns(*g_cuda, table),
      dout(*g_cuda, std::vector<uint16_t>(x.size(), kSentinel));
  const auto n_runs = static_cast<uint32_t>(kRuns.size());
  g_cuda->launch(g_cuda->kernel("deltanet", "conv_silu"), shape_of(n_runs, 1, 256), dx.ptr(), dw.ptr(), dstates.ptr(),
                 druns.ptr(), dout.ptr(), n_runs, channels, kernel_size, stride);
  g_cuda->synchronize();
  CHECK(beyond_one_step(dout.download<uint16_t>(x.size()), want) == 0);
  CHECK(dstates.download<float>(states0.size()) == want_states);
}

TEST_CASE("gated_norm, rms_norm_zero_centred and output_gate against the f32 mirror") {
  constexpr uint32_t rows = 300, dim = 128, m = 37, h = 2048;
  const auto x = ref::eighths(size_t{rows} * dim, -32, 31, 7);
  const auto z = ref::uniform_bf16(size_t{rows} * dim, -6.0f, 6.0f, 8);
  const auto gw = ref::uniform_f32(dim, 0.25f, 1.75f, 9);
  DeviceBuffer dx(*g_cuda, x), dz(*g_cuda, z), dgw(*g_cuda, gw), dy(*g_cuda, x.size() * 2);
  g_cuda->launch(g_cuda->kernel("deltanet", "gated_norm"), shape_of(rows, 1, 128), dx.ptr(), dz.ptr(), dgw.ptr(), dy.ptr(),
                 rows, dim, kEps);
  g_cuda->synchronize();
  CHECK(beyond_one_step(dy.download<uint16_t>(x.size()), ref::gated_norm(x, z, gw, rows, dim, kEps)) == 0);

  const auto hx = ref::eighths(size_t{m} * h, -32, 31, 10);
  const auto hw = ref::uniform_bf16(h, -0.75f, 0.75f, 11);
  DeviceBuffer dhx(*g_cuda, hx), dhw(*g_cuda, hw), dhy(*g_cuda, hx.size() * 2);
  g_cuda->launch(g_cuda->kernel("norm", "rms_norm_zero_centred"), shape_of(m, 1, 256), dhx.ptr(), dhw.ptr(), dhy.ptr(), m,
                 h, kEps);
  g_cuda->synchronize();
  CHECK(dhy.download<uint16_t>(hx.size()) == ref::rms_norm_zero_centred(hx, hw, m, h, kEps));

  const auto gx = ref::uniform_bf16(size_t{m} * h, -4.0f, 4.0f, 12), gate = ref::uniform_bf16(size_t{m} * h, -10.0f, 10.0f, 13);
  DeviceBuffer dgx(*g_cuda, gx), dgate(*g_cuda, gate);
  g_cuda->launch(g_cuda->kernel("attn", "output_gate"), shape_of(m, 1, 256), dgx.ptr(), dgate.ptr(), dgx.ptr(), m, h);
  g_cuda->synchronize();
  CHECK(beyond_one_step(dgx.download<uint16_t>(gx.size()), ref::output_gate(gx, gate)) == 0);
}

int main(int argc, char** argv) {
  static Registry registry = gpu_test::discover_cuda();
  g_cuda = gpu_test::cuda_backend_or_explain(registry);
  if (!g_cuda) return 77;
  std::printf("CUDA backend on %s (%s)\n", g_cuda->device_name().c_str(), g_cuda->target().c_str());
  doctest::Context context(argc, argv);
  const int rc = context.run();
  g_cuda.reset();
  return rc;
}
