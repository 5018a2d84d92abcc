// SPDX-License-Identifier: MIT OR Apache-2.0
// Running the quantized families' kernels through the raw C ABI as the layers would: weights
// uploaded in their canonical layout, passed through the family's repack (the layout the
// manifest says the kernels read), then the GEMM launched with the contract's grid.
#pragma once

#include "quant_reference.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace cpu_test {

struct DeviceQ {
  uint64_t codes = 0, scales = 0, zeros = 0;
};

inline size_t scale_count(const QuantProblem& p) { return size_t{p.count} * p.n * (p.k / p.group); }

// <module>_repack of `count` stacked canonical matrices already on the device; `extra` adds
// blocks past the grid the contract asks for.
inline metrale_status launch_repack(Backend& b, Fam fam, const DeviceQ& in, const DeviceQ& out, uint32_t n,
                                    uint32_t k, uint32_t group, uint32_t count,
                                    std::array<uint32_t, 2> extra = {0, 0}) {
  const FamInfo f = info(fam);
  Args args;
  if (f.zeros) {
    args.ptr(in.codes).ptr(in.scales).ptr(in.zeros).ptr(out.codes).ptr(out.scales).ptr(out.zeros);
    args.u32(n).u32(k).u32(group).u32(count);
  } else if (f.w16) {
    args.ptr(in.codes).ptr(out.codes).u32(n).u32(k).u32(count);
  } else {
    args.ptr(in.codes).ptr(in.scales).ptr(out.codes).ptr(out.scales).u32(n).u32(k).u32(count);
  }
  const std::string name = std::string(f.module) + "_repack";
  return b.launch(b.kernel(f.module, name.c_str()), {ceil_div(n, 64) + extra[0], count + extra[1]}, args);
}

// The problem's weights on the device, repacked.
inline DeviceQ upload_weights(Backend& b, const QuantProblem& p) {
  const FamInfo f = info(p.fam);
  const DeviceQ in{b.upload(p.codes), f.w16 ? 0 : b.upload(p.scales), f.zeros ? b.upload(p.zeros) : 0};
  const DeviceQ out{b.alloc(p.codes.size()), f.w16 ? 0 : b.alloc(p.scales.size() * 4), f.zeros ? b.alloc(p.zeros.size()) : 0};
  const metrale_status status = launch_repack(b, p.fam, in, out, p.n, p.k, p.group, p.count);
  REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error());
  for (uint64_t a : {in.codes, in.scales, in.zeros})
    if (a) b.free(a);
  return out;
}

// Activations (x, or xq then xscale) then the weights, as every signature starts.
inline void activation_args(Args& args, const FamInfo& f, uint64_t x, uint64_t xscale) {
  args.ptr(x);
  if (f.int8) args.ptr(xscale);
}
inline void weight_args(Args& args, const FamInfo& f, const DeviceQ& w) {
  args.ptr(w.codes);
  if (!f.w16) args.ptr(w.scales);
  if (f.zeros) args.ptr(w.zeros);
}
inline uint64_t upload_activations(Backend& b, const QuantProblem& p, uint64_t& xscale) {
  if (info(p.fam).int8) {
    xscale = b.upload(p.xscale);
    return b.upload(p.xq);
  }
  xscale = 0;
  return b.upload(p.x);
}

// <module>_gemv or <module>_gemm on rows [0, m); grid as the contract says unless given.
inline std::vector<uint16_t> run_dense(Backend& b, const QuantProblem& p, const std::string& kind,
                                       std::array<uint32_t, 2> grid = {0, 0}) {
  const FamInfo f = info(p.fam);
  const DeviceQ w = upload_weights(b, p);
  uint64_t xscale = 0;
  const uint64_t x = upload_activations(b, p, xscale);
  const uint64_t y = b.alloc(size_t{p.m} * p.n * 2);
  Args args;
  activation_args(args, f, x, xscale);
  weight_args(args, f, w);
  args.ptr(y).u32(p.m).u32(p.n).u32(p.k);
  if (!f.fp8 && !f.w16) args.u32(p.group);
  if (grid[0] == 0)
    grid = kind == "gemv" ? std::array<uint32_t, 2>{ceil_div(p.n, 64), 1}
                          : std::array<uint32_t, 2>{ceil_div(p.n, 128), ceil_div(p.m, 64)};
  const std::string name = std::string(f.module) + "_" + kind;
  const metrale_status status = b.launch(b.kernel(f.module, name.c_str()), grid, args);
  REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error());
  auto out = b.download<uint16_t>(y, size_t{p.m} * p.n);
  for (uint64_t a : {x, xscale, w.codes, w.scales, w.zeros, y})
    if (a) b.free(a);
  return out;
}

// <module>_grouped_gemm over the problem's stack and offsets.
inline std::vector<uint16_t> run_grouped(Backend& b, const QuantProblem& p) {
  const FamInfo f = info(p.fam);
  const DeviceQ w = upload_weights(b, p);
  uint64_t xscale = 0;
  const uint64_t x = p.m ? upload_activations(b, p, xscale) : b.alloc(64);
  const uint64_t offsets = b.upload(p.offsets), y = b.alloc(size_t{std::max(p.m, 1u)} * p.n * 2);
  Args args;
  activation_args(args, f, x, xscale ? xscale : x);
  weight_args(args, f, w);
  args.ptr(offsets).ptr(y).u32(p.n).u32(p.k);
  if (!f.fp8 && !f.w16) args.u32(p.group);
  args.u32(p.count);
  const std::string name = std::string(f.module) + "_grouped_gemm";
  const metrale_status status = b.launch(b.kernel(f.module, name.c_str()), {ceil_div(p.n, 128), p.count}, args);
  REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error());
  auto out = b.download<uint16_t>(y, size_t{p.m} * p.n);
  for (uint64_t a : {x, xscale, w.codes, w.scales, w.zeros, offsets, y})
    if (a) b.free(a);
  return out;
}

}  // namespace cpu_test
