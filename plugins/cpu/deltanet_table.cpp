// SPDX-License-Identifier: MIT OR Apache-2.0
#include "deltanet_table.hpp"

#include "deltanet_calls.hpp"
#include "launch_checks.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace metrale::cpu {

namespace {

std::string num(uint64_t value) { return std::to_string(value); }

// What the runs table asks of the other arguments: the rows the activations must hold (the
// largest first_row + rows) and the slots it names.
struct RunsExtent {
  uint64_t rows = 0;
  uint32_t min_slot = UINT32_MAX, max_slot = 0;
};

// Run i against the runs before it: no shared row (runs of no rows share none), no shared slot.
bool run_apart(const int32_t* runs, uint32_t i, std::string& error) {
  const Run r = run_at(runs, i);
  for (uint32_t j = 0; j < i; ++j) {
    const Run o = run_at(runs, j);
    if (r.slot == o.slot) {
      error = "runs[" + num(i) + "] and runs[" + num(j) + "] share slot " + num(r.slot) + "; no two runs share a slot";
      return false;
    }
    if (r.rows != 0 && o.rows != 0 && r.first < o.first + o.rows && o.first < r.first + r.rows) {
      error = "runs[" + num(i) + "] (rows " + num(r.first) + ".." + num(uint64_t{r.first} + r.rows - 1) + ") and runs[" +
              num(j) + "] (rows " + num(o.first) + ".." + num(uint64_t{o.first} + o.rows - 1) + ") overlap";
      return false;
    }
  }
  return true;
}

// The runs table at argument `index`: n_runs rows of (first_row, rows, slot), none negative, apart.
bool runs_ok(const KernelArgs& a, const MemoryView& mem, unsigned index, uint32_t n_runs, RunsExtent& extent,
             std::string& error) {
  if (!buffer(a, mem, index, "runs", product({n_runs, 3, 4}), "n_runs*3 i32", error)) return false;
  const auto* runs = arg_ptr<const int32_t>(a, index);
  for (uint32_t i = 0; i < n_runs; ++i) {
    const int32_t* r = runs + size_t{i} * 3;
    if (r[0] < 0 || r[1] < 0 || r[2] < 0) {
      error = "runs[" + num(i) + "] = (" + std::to_string(r[0]) + ", " + std::to_string(r[1]) + ", " +
              std::to_string(r[2]) + "): first_row, rows and slot must not be negative";
      return false;
    }
    if (!run_apart(runs, i, error)) return false;
    const Run run = run_at(runs, i);
    extent.rows = std::max<uint64_t>(extent.rows, uint64_t{run.first} + run.rows);
    extent.min_slot = std::min(extent.min_slot, run.slot);
    extent.max_slot = std::max(extent.max_slot, run.slot);
  }
  return true;
}

// The slots' memory at argument `index`: every named slot's `floats` from base + slot * stride.
// Returns the span from the lowest slot's start to the highest slot's end (for the overlap checks).
bool slots_ok(const KernelArgs& a, const MemoryView& mem, unsigned index, const char* name, const RunsExtent& extent,
              uint32_t stride, uint64_t floats, const char* what, Span& span, std::string& error) {
  const uint64_t end = product({uint64_t{extent.max_slot} * stride + floats, 4});
  if (!buffer(a, mem, index, name, end, [&] {
        return "slot " + num(extent.max_slot) + " (the largest the runs name) * state_stride " + num(stride) + " + " +
               what + " = " + num(uint64_t{extent.max_slot} * stride + floats) + " f32";
      }, error))
    return false;
  const uint64_t start = uint64_t{extent.min_slot} * stride * 4;
  span = {a.v[index] + start, end - start, name};
  return true;
}

// conv_silu (x, weight, conv_states, runs, out; n_runs, channels, kernel_size, state_stride).
metrale_status check_conv_silu(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const ConvCall c = conv_call(a);
  if (!at_least_one({{"n_runs", c.n_runs}, {"channels", c.channels}}, error)) return kInvalid;
  if (c.kernel_size < 2 || c.kernel_size > 8) {
    error = "kernel_size must be 2..8 (got kernel_size=" + num(c.kernel_size) + ")";
    return kInvalid;
  }
  const uint64_t window = uint64_t{c.kernel_size - 1} * c.channels;
  if (c.state_stride < window) {
    error = "state_stride must be at least (kernel_size-1)*channels = " + num(window) +
            " floats, one slot's window (got state_stride=" + num(c.state_stride) + ")";
    return kInvalid;
  }
  RunsExtent extent;
  Span states{};
  if (!runs_ok(a, mem, 3, c.n_runs, extent, error)) return kInvalid;
  const uint64_t rows = product({extent.rows, c.channels, 2});
  const auto rows_what = [&] { return "max(first_row+rows) = " + num(extent.rows) + " rows of channels bf16"; };
  if (!buffer(a, mem, 0, "x", rows, rows_what, error) ||
      !buffer(a, mem, 1, "weight", product({c.channels, c.kernel_size, 2}), "channels*kernel_size bf16", error) ||
      !slots_ok(a, mem, 2, "conv_states", extent, c.state_stride, window, "(kernel_size-1)*channels", states, error) ||
      !buffer(a, mem, 4, "out", rows, rows_what, error))
    return kInvalid;
  const Span spans[] = {{a.v[0], rows, "x"},
                        {a.v[1], product({c.channels, c.kernel_size, 2}), "weight"},
                        {a.v[3], product({c.n_runs, 3, 4}), "runs"},
                        states,
                        {a.v[4], rows, "out"}};
  if (!apart(spans, 5, 3, error, "the kernel's outputs overlap nothing it reads")) return kInvalid;
  needed = {c.n_runs, 1};
  return kOk;
}

// The delta rule's shape arguments.
bool delta_shape_ok(const DeltaCall& c, std::string& error) {
  if (!at_least_one({{"n_runs", c.n_runs}, {"k_heads", c.k_heads}, {"v_heads", c.v_heads}}, error)) return false;
  if (c.v_heads % c.k_heads != 0) {
    error = "v_heads must be a multiple of k_heads (got v_heads=" + num(c.v_heads) + ", k_heads=" + num(c.k_heads) + ")";
    return false;
  }
  for (const auto& [name, value] : {std::pair{"k_dim", c.k_dim}, {"v_dim", c.v_dim}}) {
    if (value < kMinDeltaDim || value > kMaxDeltaDim) {
      error = std::string(name) + " must be 16..256 (got " + name + "=" + num(value) + ")";
      return false;
    }
  }
  if (c.state_stride < c.state_floats()) {
    error = "state_stride must be at least v_heads*k_dim*v_dim = " + num(c.state_floats()) +
            " floats, one slot's matrices (got state_stride=" + num(c.state_stride) + ")";
    return false;
  }
  return true;
}

// delta_rule_recurrent and delta_rule_chunked (qkv, a, b, a_log, dt_bias, states, runs, out;
// n_runs, k_heads, v_heads, k_dim, v_dim, state_stride).
metrale_status check_delta_rule(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const DeltaCall c = delta_call(a);
  RunsExtent extent;
  Span states{};
  if (!delta_shape_ok(c, error) || !runs_ok(a, mem, 6, c.n_runs, extent, error)) return kInvalid;
  const uint64_t qkv = product({extent.rows, c.qkv_width(), 2}), gates = product({extent.rows, c.v_heads, 2}),
                 heads = product({c.v_heads, 4}), out = product({extent.rows, c.v_heads, c.v_dim, 2});
  const auto rows_of = [&](const char* what) {
    return [&extent, what] { return "max(first_row+rows) = " + num(extent.rows) + " rows of " + what; };
  };
  if (!buffer(a, mem, 0, "qkv", qkv, rows_of("2*k_heads*k_dim+v_heads*v_dim bf16"), error) ||
      !buffer(a, mem, 1, "a", gates, rows_of("v_heads bf16"), error) ||
      !buffer(a, mem, 2, "b", gates, rows_of("v_heads bf16"), error) ||
      !buffer(a, mem, 3, "a_log", heads, "v_heads f32", error) || !buffer(a, mem, 4, "dt_bias", heads, "v_heads f32", error) ||
      !slots_ok(a, mem, 5, "states", extent, c.state_stride, c.state_floats(), "v_heads*k_dim*v_dim", states, error) ||
      !buffer(a, mem, 7, "out", out, rows_of("v_heads*v_dim bf16"), error))
    return kInvalid;
  const Span spans[] = {{a.v[0], qkv, "qkv"},     {a.v[1], gates, "a"},
                        {a.v[2], gates, "b"},     {a.v[3], heads, "a_log"},
                        {a.v[4], heads, "dt_bias"}, {a.v[6], product({c.n_runs, 3, 4}), "runs"},
                        states,                   {a.v[7], out, "out"}};
  if (!apart(spans, 8, 6, error, "the kernel's outputs overlap nothing it reads")) return kInvalid;
  needed = {c.n_runs, c.v_heads};
  return kOk;
}

// gated_norm (x, z, weight, y; rows, dim, eps): y may be x, nothing else.
metrale_status check_gated_norm(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const GatedNormCall c = gated_norm_call(a);
  if (!at_least_one({{"rows", c.rows}, {"dim", c.dim}}, error) || !finite_ok(c.eps, "eps", true, error)) return kInvalid;
  const uint64_t bytes = product({c.rows, c.dim, 2});
  if (!buffer(a, mem, 0, "x", bytes, "rows*dim bf16", error) || !buffer(a, mem, 1, "z", bytes, "rows*dim bf16", error) ||
      !buffer(a, mem, 2, "weight", product({c.dim, 4}), "dim f32", error) ||
      !buffer(a, mem, 3, "y", bytes, "rows*dim bf16", error))
    return kInvalid;
  const Span spans[] = {{a.v[1], bytes, "z"}, {a.v[2], product({c.dim, 4}), "weight"}, {a.v[3], bytes, "y"}};
  if (!apart(spans, 3, 2, error, "y may be x and overlap nothing else")) return kInvalid;
  if (a.v[3] != a.v[0] && !disjoint(a.v[0], bytes, a.v[3], bytes)) {
    error = "y (" + hex(a.v[3]) + ") overlaps x (" + hex(a.v[0]) + ", " + num(bytes) + " bytes) in part; y may be x itself";
    return kInvalid;
  }
  needed = {c.rows, 1};
  return kOk;
}

const KernelSpec kSpecs[] = {
    {METRALE_CPU_KERNEL(deltanet, conv_silu), check_conv_silu, baseline::conv_silu, -1, "(n_runs, 1)"},
    {METRALE_CPU_KERNEL(deltanet, delta_rule_chunked), check_delta_rule, baseline::delta_rule_chunked,
     static_cast<int>(Simd::delta_rule_chunked),
     "(n_runs, v_heads)"},
    {METRALE_CPU_KERNEL(deltanet, delta_rule_recurrent), check_delta_rule, baseline::delta_rule_recurrent,
     static_cast<int>(Simd::delta_rule_recurrent),
     "(n_runs, v_heads)"},
    {METRALE_CPU_KERNEL(deltanet, gated_norm), check_gated_norm, baseline::gated_norm, -1, "(rows, 1)"},
};

}  // namespace

std::span<const KernelSpec> deltanet_kernel_specs() { return kSpecs; }

}  // namespace metrale::cpu
