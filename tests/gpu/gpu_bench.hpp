// SPDX-License-Identifier: MIT OR Apache-2.0
// Shared pieces of the GPU benchmark program (gpu_bench.cpp, gpu_bench_quant.cpp).
#pragma once

#include "gpu_support.hpp"

#include <nlohmann/json.hpp>

#include <chrono>

namespace gpu_bench {

inline uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// Seconds per call of `body`, after a warm-up, over enough calls to last ~0.2 s.
template <class Body>
double time_per_call(metrale::Backend& backend, Body&& body) {
  using Clock = std::chrono::steady_clock;
  body();
  backend.synchronize();
  int calls = 1;
  for (;;) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) body();
    backend.synchronize();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (seconds > 0.2 || calls >= 1 << 14) return seconds / calls;
    calls *= seconds < 0.02 ? 8 : 2;
  }
}

// The quantized families (w4a16_zp, w8a16, fp8, w4a8, w8a8, fp8 E4M3 activations): dense GEMV and
// GEMM rows, grouped GEMMs over 64 experts and the grouped FP8 decode; printed and appended to rows.
void bench_quant(metrale::Backend& b, double copy_gbps, nlohmann::json& rows);

}  // namespace gpu_bench
