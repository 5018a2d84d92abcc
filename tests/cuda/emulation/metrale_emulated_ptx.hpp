// SPDX-License-Identifier: MIT OR Apache-2.0
// The PTX primitives of kernel_src/metrale_ptx.cuh, emulated from the PTX ISA's definitions:
// cp.async groups (per thread, landing no later than the wait), ldmatrix .trans, mma.sync m16n8k16 (bf16) and
// m16n8k32 (s8·u8, e4m3) with the documented fragment layouts, dp4a, the f32 -> E4M3 conversion,
// and mbarrier phases with transaction counts fed by bulk copies. The emulated device has FP8
// (sm_89+), so the kernels' FP8 paths are compiled and tested.
#pragma once

#include "metrale_cuda_emulation.hpp"

namespace emu {

void cp_async(void* dst, const void* src, bool valid);
void cp_async_commit();
void cp_async_wait(int pending);
void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
void ldmatrix_x4_trans(unsigned (&r)[4], const void* row);
void mma_s8u8_16832(int (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
void mma_e4m3_16832(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
int dp4a_su(unsigned a, unsigned b, int c);
unsigned cvt_e4m3x2(float hi, float lo);
void mbarrier_init(unsigned long long* bar, unsigned count);
void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes);
void mbarrier_wait(unsigned long long* bar, unsigned parity);
void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar);

}  // namespace emu

#define METRALE_HAS_FP8 1

namespace metrale {

inline void cp_async16(void* dst, const void* src, bool valid) { emu::cp_async(dst, src, valid); }
inline void cp_async_commit() { emu::cp_async_commit(); }
template <int N>
inline void cp_async_wait() {
  emu::cp_async_wait(N);
}
inline void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  emu::mma_bf16_16816(d, a, b);
}
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) { emu::ldmatrix_x4_trans(r, row); }
inline void mma_s8u8_16832(int (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  emu::mma_s8u8_16832(d, a, b);
}
inline void mma_e4m3_16832(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  emu::mma_e4m3_16832(d, a, b);
}
inline int dp4a_su(unsigned a, unsigned b, int c) { return emu::dp4a_su(a, b, c); }
inline unsigned cvt_e4m3x2(float hi, float lo) { return emu::cvt_e4m3x2(hi, lo); }
inline void mbarrier_init(unsigned long long* bar, unsigned count) { emu::mbarrier_init(bar, count); }
inline void mbarrier_init_fence() {}
inline void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  emu::mbarrier_arrive_expect_tx(bar, bytes);
}
inline void mbarrier_wait(unsigned long long* bar, unsigned parity) { emu::mbarrier_wait(bar, parity); }
inline void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  emu::bulk_copy(dst, src, bytes, bar);
}
inline void fence_proxy_async() {}

}  // namespace metrale
