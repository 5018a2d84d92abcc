// SPDX-License-Identifier: MIT OR Apache-2.0
// Conformance cases of the deltanet module's stateful kernels (docs/kernels.md, "Module deltanet"):
// conv_silu, delta_rule_recurrent and delta_rule_chunked over several runs with their state slots
// out of order, against a double-precision reference written here from the contract (bf16 of the
// convolution's sum, of beta, of each output; the rest in double). Outputs within what f32 may
// do; states after the runs within 2^-10 of each head's largest value (the convolution windows
// exactly); rows and slots no run names untouched.
#include "conformance/conformance.hpp"
#include "conformance/hybrid_support.hpp"

#include "core/device_buffer.hpp"
#include "core/numeric.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

namespace metrale::conformance {

using namespace metrale::layers;

namespace {

using catalogue::signature;
constexpr auto kConvSig = signature("deltanet", "conv_silu");
constexpr auto kRecurrentSig = signature("deltanet", "delta_rule_recurrent");
constexpr auto kChunkedSig = signature("deltanet", "delta_rule_chunked");
constexpr double kDrift = 0x1p-10;  // f32 against double over a run, of the head's largest value

// ---- runs over state slots

// Runs of the case's lengths, one row that no run names before each, in slots n, n - 1, .., 1 of
// n + 1 (out of order; slot 0 named by none).
struct Runs {
  std::vector<int32_t> table;
  std::vector<uint8_t> named;  // per row
  uint32_t rows = 0, slots = 0;
};
Runs lay_runs(const std::vector<uint32_t>& lengths) {
  Runs out;
  out.slots = static_cast<uint32_t>(lengths.size()) + 1;
  for (size_t i = 0; i < lengths.size(); ++i) {
    out.named.push_back(0);
    const auto slot = static_cast<int32_t>(lengths.size() - i);  // slot 0 unnamed
    out.table.insert(out.table.end(), {static_cast<int32_t>(out.named.size()), static_cast<int32_t>(lengths[i]), slot});
    out.named.insert(out.named.end(), lengths[i], 1);
  }
  out.rows = static_cast<uint32_t>(out.named.size());
  return out;
}

// The named rows of `all` ([rows][width]) packed, and whether every other row kept its canary.
std::vector<uint16_t> named_rows(const Runs& runs, const std::vector<uint16_t>& all, size_t width, bool& guard_ok) {
  std::vector<uint16_t> out;
  guard_ok = all_canary(all, size_t{runs.rows} * width);
  for (uint32_t row = 0; row < runs.rows; ++row) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(row * width);
    if (runs.named[row])
      out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(width));
    else
      guard_ok = guard_ok && std::all_of(first, first + static_cast<std::ptrdiff_t>(width), [](uint16_t e) { return e == kCanary; });
  }
  return out;
}

std::vector<float> random_floats(size_t count, double amplitude, uint64_t stream, bool bf16_exact) {
  std::mt19937_64 rng(stream);
  std::uniform_real_distribution<double> pick(-amplitude, amplitude);
  std::vector<float> out(count);
  for (float& v : out) v = bf16_exact ? bf16_to_f32(f64_to_bf16(pick(rng))) : static_cast<float>(pick(rng));
  return out;
}

// States after the kernel: slots the runs name within `tolerance` * max|expected| of each block
// of `block` floats, every other float bit for bit.
std::optional<std::string> states_differ(const std::vector<float>& got, const std::vector<double>& want, const Runs& runs,
                                         uint32_t stride, size_t block, double tolerance) {
  for (uint32_t s = 0; s < runs.slots; ++s) {
    bool named = false;
    for (size_t i = 2; i < runs.table.size(); i += 3) named |= runs.table[i] == static_cast<int32_t>(s);
    for (size_t begin = size_t{s} * stride; begin < size_t{s + 1} * stride; begin += block) {
      const size_t end = std::min(begin + block, size_t{s + 1} * stride);
      const bool state = named && end - begin == block;
      double top = 0;
      for (size_t e = begin; e < end; ++e) top = std::max(top, std::fabs(want[e]));
      for (size_t e = begin; e < end; ++e)
        if (!(std::fabs(got[e] - want[e]) <= (state ? tolerance * top : 0.0)))
          return "state float " + std::to_string(e) + " (slot " + std::to_string(s) + "): " + std::to_string(got[e]) +
                 ", expected " + std::to_string(want[e]) + (state ? "" : " (no run writes there)");
    }
  }
  return std::nullopt;
}


// The run's inputs at position p of one channel (negative: the window), as conv_silu reads them.
CaseResult run_conv(Backend& b, const Case& c, CaseResult r) {
  const uint32_t ch = c.n, taps = c.k;
  const Runs runs = lay_runs(c.attn_lengths);
  const uint32_t window = (taps - 1) * ch, stride = window + 16;  // a slot holds more than the window
  const std::vector<uint16_t> x = synthetic_activations(runs.rows, ch, stream_of(c)), w = synthetic_activations(ch, taps, stream_of(c) + 1);
  const std::vector<float> states = random_floats(size_t{runs.slots} * stride, 1.0, stream_of(c) + 2, true);
  std::vector<double> want(states.begin(), states.end());
  ReferenceOutput ref = sized(static_cast<uint32_t>(std::count(runs.named.begin(), runs.named.end(), 1)), ch);
  size_t out_row = 0;
  for (size_t i = 0; i < runs.table.size(); i += 3) {
    const auto first = static_cast<uint32_t>(runs.table[i]), rows = static_cast<uint32_t>(runs.table[i + 1]);
    double* win = want.data() + size_t(runs.table[i + 2]) * stride;
    std::vector<double> in(win, win + window);  // the window, then the run's rows
    for (size_t e = size_t{first} * ch; e < (size_t{first} + rows) * ch; ++e) in.push_back(bf16_to_f32(x[e]));
    for (uint32_t t = 0; t < rows; ++t, ++out_row)
      for (uint32_t k = 0; k < ch; ++k) {
        double y = 0;
        for (uint32_t j = 0; j < taps; ++j) y += double{bf16_to_f32(w[size_t{k} * taps + j])} * in[size_t{t + j} * ch + k];
        const double v = bf16(y), at = out_row * ch + k;
        ref.value[static_cast<size_t>(at)] = silu(v);
        // f32's sum may round to the bf16 beside the double's (silu's slope is under 1.1).
        ref.bound[static_cast<size_t>(at)] = 1.1 * bf16_ulp(v) + 2 * bf16_ulp(silu(v));
      }
    std::copy(in.end() - window, in.end(), win);
  }
  DeviceBuffer dx = uploaded(b, x), dw = uploaded(b, w), ds = uploaded(b, states), dr = uploaded(b, runs.table),
               dout = canaries(b, x.size(), ch);
  b.launch(b.kernel("deltanet", "conv_silu", kConvSig), grid(runs.slots - 1, 1), dx.ptr(), dw.ptr(), ds.ptr(), dr.ptr(),
           dout.ptr(), runs.slots - 1, ch, taps, stride);
  b.synchronize();
  bool guard = true;
  const std::vector<uint16_t> got = named_rows(runs, dout.download<uint16_t>(x.size() + ch), ch, guard);
  CaseResult out = compared(std::move(r), got, ref, guard);
  if (const auto bad = states_differ(ds.download<float>(states.size()), want, runs, stride, stride, 0.0)) {
    out.outcome = Outcome::failed;
    out.detail = "windows: " + *bad;
  }
  return out;
}

// The delta rule's problem: runs of the case's lengths, k_dim = v_dim = c.n, c.k key heads, c.kv_heads value heads.
struct Delta {
  Runs runs;
  uint32_t kh, vh, dim, stride;
  std::vector<uint16_t> qkv, a, b;
  std::vector<float> a_log, dt_bias, states;
  size_t width() const { return 2 * size_t{kh} * dim + size_t{vh} * dim; }
};

Delta delta_problem(const Case& c) {
  Delta d{lay_runs(c.attn_lengths), c.k, c.kv_heads, c.n, 0, {}, {}, {}, {}, {}, {}};
  d.stride = d.vh * d.dim * d.dim + 24;
  d.qkv = synthetic_activations(d.runs.rows, static_cast<uint32_t>(d.width()), stream_of(c));
  d.a = synthetic_activations(d.runs.rows, d.vh, stream_of(c) + 1);
  d.b = synthetic_activations(d.runs.rows, d.vh, stream_of(c) + 2);
  for (uint16_t& v : d.a) v = f32_to_bf16(2 * bf16_to_f32(v));
  for (uint16_t& v : d.b) v = f32_to_bf16(3 * bf16_to_f32(v));
  constexpr float kDecays[] = {-4.0f, -1.0f, -8.0f, 0.5f};  // a state kept for thousands of tokens .. a few
  for (uint32_t h = 0; h < d.vh; ++h) d.a_log.push_back(kDecays[h % 4]);
  d.dt_bias = random_floats(d.vh, 1.0, stream_of(c) + 3, false);
  d.states = random_floats(size_t{d.runs.slots} * d.stride, 0.25, stream_of(c) + 4, false);
  return d;
}

std::vector<double> l2(const uint16_t* x, uint32_t n, double scale) {
  std::vector<double> v(n);
  double squares = 0;
  for (uint32_t i = 0; i < n; ++i) v[i] = bf16_to_f32(x[i]), squares += v[i] * v[i];
  for (double& e : v) e *= scale / std::sqrt(squares + 1e-6);
  return v;
}

// One token of value head h over S (double), the contract's steps; the output before rounding.
void delta_step(const Delta& d, uint32_t row, uint32_t h, double* s, double* out) {
  const uint32_t n = d.dim, kh = h / (d.vh / d.kh);
  const uint16_t* x = d.qkv.data() + size_t{row} * d.width();
  const std::vector<double> q = l2(x + size_t{kh} * n, n, 1 / std::sqrt(double(n))), k = l2(x + size_t{d.kh + kh} * n, n, 1);
  const uint16_t* v = x + 2 * size_t{d.kh} * n + size_t{h} * n;
  const double sp = double{bf16_to_f32(d.a[size_t{row} * d.vh + h])} + d.dt_bias[h];
  const double decay = std::exp(-std::exp(double{d.a_log[h]}) * (sp > 20 ? sp : std::log1p(std::exp(sp))));
  const double beta = bf16(1 / (1 + std::exp(-double{bf16_to_f32(d.b[size_t{row} * d.vh + h])})));
  std::vector<double> u(n, 0.0);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < n; ++j) u[j] += (s[size_t{i} * n + j] *= decay) * k[i];
  for (uint32_t j = 0; j < n; ++j) u[j] = beta * (bf16_to_f32(v[j]) - u[j]);
  for (uint32_t j = 0; j < n; ++j) out[j] = 0;
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < n; ++j) out[j] += (s[size_t{i} * n + j] += k[i] * u[j]) * q[i];
}

// The outputs of the named rows ([named][vh * dim]) and the states after, with the bounds.
ReferenceOutput delta_reference(const Delta& d, std::vector<double>& states) {
  const size_t row_width = size_t{d.vh} * d.dim, matrix = size_t{d.dim} * d.dim;
  ReferenceOutput ref = sized(static_cast<uint32_t>(std::count(d.runs.named.begin(), d.runs.named.end(), 1)),
                              static_cast<uint32_t>(row_width));
  size_t out_row = 0;
  for (size_t i = 0; i < d.runs.table.size(); i += 3) {
    const auto first = static_cast<uint32_t>(d.runs.table[i]), rows = static_cast<uint32_t>(d.runs.table[i + 1]);
    double* slot = states.data() + size_t(d.runs.table[i + 2]) * d.stride;
    for (uint32_t h = 0; h < d.vh; ++h)
      for (uint32_t t = 0; t < rows; ++t)
        delta_step(d, first + t, h, slot + h * matrix, ref.value.data() + (out_row + t) * row_width + size_t{h} * d.dim);
    out_row += rows;
  }
  for (uint32_t h = 0; h < d.vh; ++h) {
    double top = 0;
    for (uint32_t r = 0; r < ref.m; ++r)
      for (uint32_t j = 0; j < d.dim; ++j) top = std::max(top, std::fabs(ref.value[r * row_width + h * d.dim + j]));
    for (uint32_t r = 0; r < ref.m; ++r)
      for (uint32_t j = 0; j < d.dim; ++j) {
        const size_t at = r * row_width + h * d.dim + j;
        ref.bound[at] = 2 * bf16_ulp(ref.value[at]) + kDrift * top;
      }
  }
  return ref;
}

CaseResult run_delta(Backend& b, const Case& c, CaseResult r) {
  const Delta d = delta_problem(c);
  std::vector<double> want(d.states.begin(), d.states.end());
  const ReferenceOutput ref = delta_reference(d, want);
  const uint32_t n_runs = d.runs.slots - 1;
  const size_t out_width = size_t{d.vh} * d.dim;
  DeviceBuffer dq = uploaded(b, d.qkv), da = uploaded(b, d.a), db = uploaded(b, d.b), dl = uploaded(b, d.a_log),
               dt = uploaded(b, d.dt_bias), ds = uploaded(b, d.states), dr = uploaded(b, d.runs.table),
               dout = canaries(b, d.runs.rows * out_width, out_width);
  const bool chunked = c.kernel == "delta_rule_chunked";
  b.launch(chunked ? b.kernel("deltanet", "delta_rule_chunked", kChunkedSig) : b.kernel("deltanet", "delta_rule_recurrent", kRecurrentSig),
           grid(n_runs, d.vh), dq.ptr(), da.ptr(), db.ptr(), dl.ptr(), dt.ptr(), ds.ptr(), dr.ptr(), dout.ptr(), n_runs, d.kh,
           d.vh, d.dim, d.dim, d.stride);
  b.synchronize();
  bool guard = true;
  const std::vector<uint16_t> got = named_rows(d.runs, dout.download<uint16_t>((d.runs.rows + 1) * out_width), out_width, guard);
  CaseResult out = compared(std::move(r), got, ref, guard);
  if (const auto bad = states_differ(ds.download<float>(d.states.size()), want, d.runs, d.stride, size_t{d.dim} * d.dim, kDrift)) {
    out.outcome = Outcome::failed;
    out.detail = "states: " + *bad;
  }
  return out;
}

}  // namespace

std::vector<Case> deltanet_cases() {
  std::vector<Case> out;
  // Qwen3-Next-80B's convolution over q, k, v (16 key heads, 32 value heads of 128: 8192 channels,
  // kernel 4): a decode step of 5 sequences, prefill runs shorter and longer than the window.
  out.push_back(hybrid_case("deltanet/conv_silu/decode5_c8192_k4", "deltanet", "conv_silu", 0, 8192, 4, 0, {1, 1, 1, 1, 1}));
  out.push_back(hybrid_case("deltanet/conv_silu/runs_c1000_k4", "deltanet", "conv_silu", 0, 1000, 4, 0, {2, 1, 37, 5}));
  out.push_back(hybrid_case("deltanet/conv_silu/runs_c96_k8", "deltanet", "conv_silu", 0, 96, 8, 0, {3, 20, 1}));
  // The delta rule: 2 key heads shared by 4 value heads, head dims 128 (the models') and 64.
  out.push_back(hybrid_case("deltanet/delta_rule_recurrent/decode6_kh2_vh4_d128", "deltanet", "delta_rule_recurrent", 0, 128, 2,
                            4, {1, 1, 1, 1, 1, 1}));
  out.push_back(hybrid_case("deltanet/delta_rule_recurrent/runs_kh2_vh4_d128", "deltanet", "delta_rule_recurrent", 0, 128, 2,
                            4, {5, 70, 1}));
  out.push_back(hybrid_case("deltanet/delta_rule_chunked/runs_kh2_vh4_d128", "deltanet", "delta_rule_chunked", 0, 128, 2, 4,
                            {130, 1, 64, 65}));
  out.push_back(hybrid_case("deltanet/delta_rule_chunked/runs_kh1_vh2_d64", "deltanet", "delta_rule_chunked", 0, 64, 1, 2,
                            {200, 7}));
  return out;
}

CaseResult run_deltanet_case(Backend& backend, const Case& c, CaseResult r) {
  if (c.kernel == "conv_silu") return run_conv(backend, c, std::move(r));
  if (c.kernel == "delta_rule_recurrent" || c.kernel == "delta_rule_chunked") return run_delta(backend, c, std::move(r));
  throw Error(Status::internal, "conformance: no runner for " + c.module + "/" + c.kernel);
}

}  // namespace metrale::conformance
