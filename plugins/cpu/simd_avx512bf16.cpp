// SPDX-License-Identifier: MIT OR Apache-2.0
// Bodies of the cpu-x86_64-avx512bf16 tier: the bf16-activation GEMM families with integer
// codes on the panel layouts (panel_layout.hpp) that this tier's repacks write at load, the loop
// structure panel_kernels.hpp's and the instructions bf16_isa.hpp's; the activations of
// act_avx512.hpp; attention of attn_avx512bf16.hpp; the activation quantizers of
// quant_avx512.hpp. The FP8 family comes from fp8_avx512vbmi.cpp and the int8-activation families from int8_avx512vnni.cpp (or, on a CPU
// without VBMI or VNNI, from the avx512 tier). Compiled with the matching -m flags; called only
// after target detection.
#include "intrinsics.hpp"  // first: before any header that includes <immintrin.h>

#include "act_avx512.hpp"
#include "attn_avx512bf16.hpp"
#include "decoder_avx512.hpp"
#include "deltanet_avx512.hpp"
#include "bf16_isa.hpp"
#include "quant_avx512.hpp"

namespace metrale::cpu::avx512bf16 {

SimdBodies bodies() {
  SimdBodies b;
  PanelKernels<Bf16Isa, Family::w4a16>::install(b);
  PanelKernels<Bf16Isa, Family::w4a16_zp>::install(b);
  PanelKernels<Bf16Isa, Family::w8a16>::install(b);
  PanelKernels<Bf16Isa, Family::w4afp8>::install(b);
  PanelKernels<Bf16Isa, Family::bf16>::install(b);
  ActAvx512::set(b);
  QuantAvx512::set(b);
  AttnAvx512Bf16::set(b);
  DecoderAvx512::set(b);
  DeltanetAvx512::set(b);
  return b;
}

}  // namespace metrale::cpu::avx512bf16
