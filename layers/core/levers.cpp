// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/levers.hpp"

#include <metrale/levers.hpp>

#include <array>
#include <mutex>

namespace metrale::layers {

namespace {

using T = LeverType;

const std::array<LeverSpec, 12>& specs() {
  static const std::array<LeverSpec, 12> table{{
      {"METRALE_W4A16_K64_MIN_K", T::u32, "6144 (8192 with METRALE_NO_W4A16_K64=1)",
       "Smallest K at which tile-GEMM sites take the deep-K k64 kernel.", {}, false, "layers"},
      {"METRALE_NO_W4A16_K64", T::flag, "0",
       "Exactly 1 raises the k64 threshold default to 8192; 0 leaves it at 6144.", {}, false, "layers"},
      {"METRALE_W4A16_VARIANT", T::choice, "v1",
       "v2 or v3 opts into the m128 v2/v3 kernels and refuses to start when they are missing.",
       {"v1", "v2", "v3"}, false, "layers"},
      {"METRALE_NO_TGEMM_PIPELINE3", T::presence, "(unset)",
       "Set to any value, 0 included: the tile GEMM skips w4a16_gemm_t_p3.", {}, false, "layers"},
      {"METRALE_NO_K64_PIPELINE3", T::presence, "(unset)",
       "Set to any value, 0 included: the k64 GEMM skips w4a16_gemm_t_k64_p3.", {}, false, "layers"},
      {"METRALE_NO_K64_N64", T::presence, "(unset)",
       "Set to any value, 0 included: no lookup of the N64 deep-K twin.", {}, false, "layers"},
      // Quantization tiers (docs/quantization.md).
      {"METRALE_ACTIVATION_QUANTIZATION", T::choice, "(what the checkpoint declares, else bf16)",
       "Activation tier of the FFN projections: bf16, or int8 / fp8 quantized per token; an explicit tier the "
       "backend lacks is a refusal.", {"bf16", "int8", "fp8"}, false, "layers"},
      {"METRALE_WEIGHT_QUANTIZATION", T::choice, "int4",
       "Weight tier of synthetic weights: int4 (symmetric group-128 W4A16), int4-zp, int8, fp8, or unquantized bf16 "
       "or f16; a checkpoint's declared format rules instead.", {"int4", "int4-zp", "int8", "fp8", "bf16", "f16"}, false,
       "layers"},
      {"METRALE_EXPERT_QUANTIZATION", T::choice, "(the weight tier)",
       "Weight tier of synthetic MoE experts, when it differs from METRALE_WEIGHT_QUANTIZATION.",
       {"int4", "int4-zp", "int8", "fp8", "bf16", "f16"}, false, "layers"},
      {"METRALE_FP8_MOE_GROUPED_DECODE", T::choice, "(try it)",
       "1 requires the cross-row grouped FP8 MoE decode (refusing when the backend lacks it); 0 turns it off; "
       "unset tries it and falls back.", {"0", "1"}, false, "layers"},
      {"METRALE_QK_NORM_ROPE", T::choice, "(try it)",
       "Qwen3-style q/k norm: 1 requires the fused rope/qk_norm_rope kernel (refusing when the backend lacks it); 0 "
       "runs norm/rms_norm then rope/rope; unset tries the fused kernel and falls back.", {"0", "1"}, false, "layers"},
      {"METRALE_DELTANET_PREFILL", T::choice, "chunked",
       "Gated DeltaNet prompts: chunked runs deltanet/delta_rule_chunked (chunks of 64), recurrent runs "
       "deltanet/delta_rule_recurrent token by token; the kernel asked for is required.", {"chunked", "recurrent"}, false,
       "layers"},
  }};
  return table;
}

}  // namespace

void register_levers() {
  static std::once_flag once;
  std::call_once(once, [] { metrale::register_levers(specs()); });
}

}  // namespace metrale::layers
