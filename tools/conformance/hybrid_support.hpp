// SPDX-License-Identifier: MIT OR Apache-2.0
// What the hybrid models' conformance cases share (hybrid_cases.cpp, deltanet_cases.cpp): the case
// maker, grids, reference outputs and their comparison, canary buffers. Internal linkage.
#pragma once

#include "conformance/conformance.hpp"

#include "core/device_buffer.hpp"
#include "core/numeric.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace metrale::conformance {
namespace {

using namespace metrale::layers;

inline double bf16(double value) { return bf16_to_f32(f64_to_bf16(value)); }
inline double silu(double v) { return v / (1 + std::exp(-v)); }
inline uint64_t stream_of(const Case& c) { return (uint64_t{c.m} << 40) ^ (uint64_t{c.n} << 8) ^ c.k ^ (uint64_t{c.kv_heads} << 20); }

inline Case hybrid_case(const std::string& name, const char* module, const char* kernel, uint32_t m, uint32_t n, uint32_t k = 0,
                 uint32_t heads = 0, std::vector<uint32_t> runs = {}, std::string variant = {}) {
  Case c;
  c.kind = CaseKind::decoder;
  c.name = name;
  c.module = module;
  c.kernel = kernel;
  c.m = m;
  c.n = n;
  c.k = k;
  c.kv_heads = heads;
  c.attn_lengths = std::move(runs);
  c.variant = std::move(variant);
  return c;
}

inline LaunchShape grid(uint32_t x, uint32_t y) {
  LaunchShape shape;
  shape.grid = {x, y, 1};
  shape.block = {128, 1, 1};
  return shape;
}

inline ReferenceOutput sized(uint32_t m, uint32_t n) {
  ReferenceOutput out;
  out.m = m;
  out.n = n;
  out.value.resize(size_t{m} * n);
  out.bound.resize(size_t{m} * n);
  out.row_excluded.assign(m, 0);
  return out;
}

inline CaseResult compared(CaseResult r, const std::vector<uint16_t>& got, const ReferenceOutput& ref, bool guard_ok) {
  if (!guard_ok) {
    r.outcome = Outcome::failed;
    r.detail = "wrote where no row of the output is (past the end, or a row no run names)";
    return r;
  }
  const Comparison cmp = compare_to_reference(got, ref);
  r.outcome = cmp.passed() ? Outcome::passed : Outcome::failed;
  r.detail = cmp.summary();
  r.comparison = cmp;
  return r;
}

inline bool all_canary(const std::vector<uint16_t>& v, size_t from) {
  return std::all_of(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), [](uint16_t e) { return e == kCanary; });
}

// An output buffer of `count` canaries and `extra` more after it.
inline DeviceBuffer canaries(Backend& b, size_t count, size_t extra) {
  DeviceBuffer out(b, (count + extra) * 2);
  out.upload(std::span<const uint16_t>(std::vector<uint16_t>(count + extra, kCanary)));
  return out;
}

template <class T>
inline DeviceBuffer uploaded(Backend& b, const std::vector<T>& values) {
  DeviceBuffer out(b, values.size() * sizeof(T));
  out.upload(std::span<const T>(values));
  return out;
}

}  // namespace
}  // namespace metrale::conformance
