// SPDX-License-Identifier: MIT OR Apache-2.0
// Host emulation of the slice of CUDA the kernels in kernel_src/ use, so their logic (indexing,
// tiling, edges, pipelines, warp collectives, tensor-core fragment layouts) is tested on a CPU.
// Every CUDA thread is a fiber; one block runs at a time with real barrier semantics
// (__syncthreads, warp-synchronous shuffles and mma.sync), and a schedule where no fiber can make
// progress is reported as a deadlock instead of hanging. Built only into the test program; the
// kernels see it through the cuda_bf16.h / cuda_fp16.h shims beside this file.
#pragma once

#include <math.h>

#include <cmath>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One block runs at a time, so a function-local static is exactly one block's shared memory.
#define __shared__ static

namespace emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

const dim3& thread_idx();
const dim3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

void syncthreads();
// A warp-wide exchange: every live lane of the calling warp contributes `value` and receives
// the value of lane (lane ^ mask).
uint32_t shfl_xor(uint32_t value, int mask);
// A warp-wide collective: each lane deposits `in` (in_bytes); once all 32 lanes have, `combine`
// runs once over all deposits and fills every lane's output (out_bytes each); each lane gets its own.
// Deposits and outputs are laid out lane after lane, kWarpSlotBytes apart.
constexpr size_t kWarpSlotBytes = 64;
void warp_collective(const void* in, size_t in_bytes, void* out, size_t out_bytes,
                     const std::function<void(const unsigned char* in, unsigned char* out)>& combine);
// A warp-wide barrier of the calling warp's 32 lanes (__syncwarp).
void syncwarp();
// The lanes of the calling warp whose `value` equals this lane's (__match_any_sync).
unsigned match_any(uint32_t value);
// Yields to the other fibers without arriving anywhere (a polling wait).
void poll_yield();
// Something changed that a polling fiber may be waiting for.
void note_progress();
[[noreturn]] void trap();
unsigned lane_id();

// Completion policy of asynchronous copies: Eager lands them when issued, Deferred at the
// latest moment the semantics allow (the wait). A kernel correct under both does not race.
enum class AsyncPolicy { eager, deferred };
void set_async_policy(AsyncPolicy policy);
AsyncPolicy async_policy();

// Which runnable thread runs next: round robin keeps warps in step; lowest_first lets low warps
// (a producer warp 0) run as far ahead as the barriers allow, highest_first the others. Races that
// one schedule hides another exposes.
enum class Schedule { round_robin, lowest_first, highest_first };
void set_schedule(Schedule schedule);

// Runs body in every thread of every block of the grid; throws std::runtime_error on a
// deadlock, a trap or a barrier mismatch.
void launch(dim3 grid, dim3 block, const std::function<void()>& body);

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())

inline void __syncthreads() { emu::syncthreads(); }
[[noreturn]] inline void __trap() { emu::trap(); }

inline float __shfl_xor_sync(unsigned, float value, int mask) {
  return std::bit_cast<float>(emu::shfl_xor(std::bit_cast<uint32_t>(value), mask));
}

inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
inline unsigned __match_any_sync(unsigned, int value) { return emu::match_any(static_cast<uint32_t>(value)); }

// Fibers never preempt each other, so a read-modify-write is atomic as written.
inline int atomicAdd(int* address, int value) {
  const int old = *address;
  *address = old + value;
  return old;
}

inline int __popc(unsigned v) { return std::popcount(v); }
inline int __ffs(int v) { return v == 0 ? 0 : std::countr_zero(static_cast<unsigned>(v)) + 1; }

// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x (x the low four).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  unsigned result = 0;
  for (unsigned i = 0; i < 4; ++i) result |= static_cast<unsigned>((bytes >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return result;
}

// Round to nearest, ties to even (the default rounding mode of the host).
inline int __float2int_rn(float v) { return static_cast<int>(std::nearbyint(v)); }

template <class T>
inline T __ldg(const T* p) {
  return *p;
}

struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }

inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;  // x is the low half of the 32-bit pair
};
struct __half {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 v) { return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16); }

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  return {static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};  // round to nearest even
}

inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

inline __half __ushort_as_half(unsigned short bits) { return {bits}; }

inline float __half2float(__half h) {
  const uint32_t sign = (h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
