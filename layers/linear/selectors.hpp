// SPDX-License-Identifier: MIT OR Apache-2.0
// The W4A16 kernel selectors shared by the layers (docs/layers.md). Each lookup leaves an audit row
// whose site is the *caller* of the selector (the selectors forward their std::source_location),
// carrying the caller's `notes` (its lever after the selector's own, its annotations).
// A selector that decides "null" without a lookup leaves no row. The levers they read are the
// layers' own (levers.hpp); each selector declares them before reading.
#pragma once

#include "core/lookup_notes.hpp"

#include <metrale/backend.hpp>
#include <metrale/catalogue_signatures.h>

#include <cstdint>
#include <source_location>
#include <span>
#include <string_view>

namespace metrale::layers {

// (x, qweight, scales, y, m, n, k): the one parameter list of the w4a16 GEMM family, w4a16_gemm_t's.
inline constexpr std::span<const metrale_param_type> kW4a16GemmSignature = catalogue::signature("w4a16", "w4a16_gemm_t");

// Smallest K at which tile-GEMM sites take the deep-K k64 kernel: METRALE_W4A16_K64_MIN_K if set;
// else 8192 when METRALE_NO_W4A16_K64 is exactly 1; else 6144. A bad value is a Refusal.
uint32_t w4a16_k64_min_k();

// w4a16_v2/w4a16_gemm_t_m128_v2 when METRALE_W4A16_VARIANT is v2 or v3, refusing to start when the
// backend lacks it; otherwise the null handle with no lookup.
KernelHandle w4a16_v2_kernel(Backend& backend, std::source_location site = std::source_location::current(),
                             const LookupNotes& notes = {});
// w4a16_v3/w4a16_gemm_t_m128_v3 when METRALE_W4A16_VARIANT is v3 (refusing when missing); else null.
KernelHandle w4a16_v3_kernel(Backend& backend, std::source_location site = std::source_location::current(),
                             const LookupNotes& notes = {});
// The N128/M64 tile GEMM: w4a16_gemm_t_p3 unless METRALE_NO_TGEMM_PIPELINE3 is set (any value) or
// missing; then w4a16_gemm_t (null when that is missing too).
KernelHandle tgemm_kernel(Backend& backend, std::source_location site = std::source_location::current(),
                          const LookupNotes& notes = {});
// False for kimi_k3 and kimi_linear, whose builders skip the tgemm lookup and keep null.
bool tgemm_probe_ok(std::string_view model_type);
// The deep-K GEMM: w4a16_gemm_t_k64_p3 unless METRALE_NO_K64_PIPELINE3 is set (any value) or
// missing; then w4a16_gemm_t_k64 is required — throws Error when missing. Its rows carry the
// pinned annotation w4a16_k64_min_k (the K from which the site takes it), so locks pin it.
KernelHandle k64_kernel(Backend& backend, std::source_location site = std::source_location::current(),
                        const LookupNotes& notes = {});
// The N64 deep-K twin w4a16_gemm_t_k64_n64_p3; null with no lookup when METRALE_NO_K64_N64 is set.
KernelHandle k64_n64_kernel(Backend& backend, std::source_location site = std::source_location::current(),
                            const LookupNotes& notes = {});
// Whether the N64 twin serves an m x n launch: the wide tile's grid ceil(n/128)*ceil(m/64) <= 64.
bool k64_n64_wins(uint32_t m, uint32_t n);

// The handles a tile-GEMM site resolves once at build time.
struct TileGemmKernels {
  KernelHandle tgemm;    // tgemm_kernel()
  KernelHandle k64;      // k64_kernel(); may be null only if the site skipped it
  KernelHandle k64_n64;  // k64_n64_kernel()
};

// The tile-GEMM site's choice for one launch: K >= w4a16_k64_min_k() takes the deep-K kernel (the
// N64 twin when non-null and it wins), else the N128/M64 tgemm kernel. Null when that is null.
KernelHandle choose_tile_gemm(const TileGemmKernels& kernels, uint32_t m, uint32_t n, uint32_t k);

}  // namespace metrale::layers
