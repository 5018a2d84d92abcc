// SPDX-License-Identifier: MIT OR Apache-2.0
// The 8-bit PTX primitives of metrale_emulated_ptx.hpp, from the PTX ISA's definitions:
// mma.sync m16n8k32 with .s8 A and .u8 B (exact int32) or .e4m3 A and B (f32 accumulation),
// dp4a.s32.u32, and cvt.rn.satfinite.e4m3x2.f32. E4M3 is decoded and encoded here by arithmetic
// on its definition (the test reference does it by table search, independently).
#include "metrale_emulated_ptx.hpp"

#include <algorithm>
#include <cmath>

namespace emu {
namespace {

double e4m3_value(unsigned code) {
  const unsigned e = (code >> 3) & 0xfu;
  const unsigned m = code & 7u;
  if (e == 15 && m == 7) return NAN;
  const double magnitude = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, static_cast<int>(e) - 10);
  return (code & 0x80u) ? -magnitude : magnitude;
}

unsigned e4m3_code(float v) {
  const unsigned sign = std::signbit(v) ? 0x80u : 0u;
  if (std::isnan(v)) return sign | 0x7fu;
  const double a = std::fabs(static_cast<double>(v));
  if (std::isinf(a)) return sign | 0x7eu;  // satfinite
  int e = 0;
  std::frexp(a, &e);
  const int binade = std::max(e - 1, -6);  // subnormals share the lowest binade's spacing
  const double quantum = std::ldexp(1.0, binade - 3);
  double q = std::nearbyint(a / quantum) * quantum;  // ties to even multiple = even mantissa
  if (q > 448) q = 448;
  if (q == 0) return sign;
  int qe = 0;
  std::frexp(q, &qe);
  if (qe - 1 < -6) return sign | static_cast<unsigned>(std::ldexp(q, 9));
  const unsigned mantissa = static_cast<unsigned>((std::ldexp(q, -(qe - 1)) - 1) * 8);
  return sign | (static_cast<unsigned>(qe - 1 + 7) << 3) | mantissa;
}

struct Mma8Deposit {
  unsigned a[4];
  unsigned b[2];
  uint32_t c[4];  // int32 or f32 bits
};

unsigned byte_of(unsigned reg, unsigned i) { return (reg >> (8 * i)) & 0xffu; }

// Rebuilds A (16×32) and B (32×8) as codes from the lanes' fragments with the PTX ISA's formulas
// for m16n8k32 8-bit types (groupID = lane >> 2, threadID_in_group = lane % 4), and C.
void gather(const unsigned char* in, unsigned (&A)[16][32], unsigned (&B)[32][8], uint32_t (&C)[16][8]) {
  for (unsigned lane = 0; lane < 32; ++lane) {
    Mma8Deposit dep;
    std::memcpy(&dep, in + lane * kWarpSlotBytes, sizeof(dep));
    const unsigned group = lane >> 2;
    const unsigned tig = lane % 4;
    for (unsigned i = 0; i < 16; ++i) {
      const unsigned row = (i < 4 || (i >= 8 && i < 12)) ? group : group + 8;
      const unsigned col = tig * 4 + (i & 3u) + (i >= 8 ? 16 : 0);
      A[row][col] = byte_of(dep.a[i / 4], i % 4);
    }
    for (unsigned i = 0; i < 8; ++i) B[tig * 4 + (i & 3u) + (i >= 4 ? 16 : 0)][group] = byte_of(dep.b[i / 4], i % 4);
    for (unsigned i = 0; i < 4; ++i) C[group + (i >= 2 ? 8 : 0)][tig * 2 + (i & 1u)] = dep.c[i];
  }
}

template <class Element>
void mma8(Element (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
          Element (*product_sum)(Element c, const unsigned (&row)[32], const unsigned (&B)[32][8], unsigned col)) {
  Mma8Deposit mine{};
  std::memcpy(mine.a, a, sizeof(mine.a));
  std::memcpy(mine.b, b, sizeof(mine.b));
  std::memcpy(mine.c, d, sizeof(mine.c));
  Element result[4] = {};
  warp_collective(&mine, sizeof(mine), result, sizeof(result), [product_sum](const unsigned char* in, unsigned char* out) {
    unsigned A[16][32] = {};
    unsigned B[32][8] = {};
    uint32_t C[16][8] = {};
    gather(in, A, B, C);
    for (unsigned lane = 0; lane < 32; ++lane) {
      Element d_lane[4];
      for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = (lane >> 2) + (i >= 2 ? 8 : 0);
        const unsigned col = (lane % 4) * 2 + (i & 1u);
        d_lane[i] = product_sum(std::bit_cast<Element>(C[row][col]), A[row], B, col);
      }
      std::memcpy(out + lane * kWarpSlotBytes, d_lane, sizeof(d_lane));
    }
  });
  std::memcpy(d, result, sizeof(result));
}

}  // namespace

void mma_s8u8_16832(int (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  mma8<int>(d, a, b, [](int c, const unsigned (&row)[32], const unsigned (&B)[32][8], unsigned col) {
    int64_t sum = c;
    for (unsigned k = 0; k < 32; ++k) sum += static_cast<int8_t>(row[k]) * static_cast<int64_t>(B[k][col]);
    return static_cast<int>(static_cast<uint32_t>(sum));  // wraps: no .satfinite
  });
}

void mma_e4m3_16832(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  mma8<float>(d, a, b, [](float c, const unsigned (&row)[32], const unsigned (&B)[32][8], unsigned col) {
    float sum = c;  // products are exact in f32; accumulation in f32
    for (unsigned k = 0; k < 32; ++k) sum += static_cast<float>(e4m3_value(row[k]) * e4m3_value(B[k][col]));
    return sum;
  });
}

int dp4a_su(unsigned a, unsigned b, int c) {
  int sum = c;
  for (unsigned i = 0; i < 4; ++i) sum += static_cast<int8_t>(byte_of(a, i)) * static_cast<int>(byte_of(b, i));
  return sum;
}

unsigned cvt_e4m3x2(float hi, float lo) { return (e4m3_code(hi) << 8) | e4m3_code(lo); }

}  // namespace emu
