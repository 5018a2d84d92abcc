// SPDX-License-Identifier: MIT OR Apache-2.0
// Every inline-PTX primitive the kernels use, in one place: cp.async (sm_80), mma.sync bf16 and
// s8·u8 (sm_80), ldmatrix .trans (sm_75), mma.sync e4m3 and the f32 -> e4m3 conversion (sm_89), dp4a with a signed and an
// unsigned operand, and the Hopper bulk copy with its mbarrier (sm_90). Kernels call these and
// nothing else in assembly; the host emulation of the test suite (tests/cuda/emulation) supplies the
// same functions with PTX's documented semantics, so the kernels' logic is tested without a GPU.
#pragma once

#ifdef METRALE_HOST_EMULATION
#include <metrale_emulated_ptx.hpp>
#else

#include <cuda_bf16.h>

namespace metrale {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// d += a · b for one m16n8k16 tile (row-major A, column-major B), bf16 inputs, f32 accumulators.
// Fragments per the PTX ISA (g = lane / 4, t = lane % 4): a0,a1 = A[g][2t..2t+1],
// a2,a3 = A[g+8][2t..], a4,a5 = A[g][2t+8..], a6,a7 = A[g+8][2t+8..]; b0,b1 = B[2t..2t+1][g],
// b2,b3 = B[2t+8..2t+9][g]; c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1].
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8×8 matrices of 16-bit elements from shared memory, each transposed on the way: lane l
// gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); register q of lane
// l receives elements (2(l%4), l/4) and (2(l%4) + 1, l/4) of matrix q, the first in the low half.
// Rows of [K][N] data so loaded are the column-major B fragments of mma_bf16_16816.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// d += a · b for one m16n8k32 tile of 8-bit elements (row-major A, column-major B). Fragments per
// the PTX ISA (g = lane / 4, t = lane % 4), four elements per register, lowest byte first:
// a0 = A[g][4t..4t+3], a1 = A[g+8][4t..], a2 = A[g][4t+16..4t+19], a3 = A[g+8][4t+16..];
// b0 = B[4t..4t+3][g], b1 = B[4t+16..4t+19][g]; c as for m16n8k16.
// Signed int8 A, unsigned int8 B, exact int32 accumulation (no saturation).
__device__ __forceinline__ void mma_s8u8_16832(int (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c + Σ a_i · b_i over the four bytes of a (signed) and b (unsigned).
__device__ __forceinline__ int dp4a_su(unsigned a, unsigned b, int c) {
  int d;
  asm("dp4a.s32.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

#if __CUDA_ARCH__ >= 890
#define METRALE_HAS_FP8 1  // E4M3 mma and conversions (sm_89+)
// The m16n8k32 tile of mma_s8u8_16832 with OCP E4M3 elements in A and B, f32 accumulators.
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two f32 as E4M3 bytes, nearest (ties to even), saturating at ±448; `hi` in bits 15..8.
__device__ __forceinline__ unsigned cvt_e4m3x2(float hi, float lo) {
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}
#endif

__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}

// Makes initialised barriers visible to the bulk-copy (async) proxy.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also adds `bytes` to the transaction count the current phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(bytes)
      : "memory");
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}

// bytes (a multiple of 16; both addresses 16-byte aligned) global -> shared, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}

// Orders this thread's earlier generic-proxy accesses to shared memory before later async-proxy
// (bulk copy) writes to it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace metrale

#endif  // METRALE_HOST_EMULATION
