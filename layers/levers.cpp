// SPDX-License-Identifier: MIT OR Apache-2.0
#include "levers.hpp"

#include <metrale/levers.hpp>

#include <array>
#include <mutex>

namespace metrale::layers {

namespace {

using T = LeverType;

const std::array<LeverSpec, 6>& specs() {
  static const std::array<LeverSpec, 6> table{{
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
  }};
  return table;
}

}  // namespace

void register_levers() {
  static std::once_flag once;
  std::call_once(once, [] { metrale::register_levers(specs()); });
}

}  // namespace metrale::layers
