// SPDX-License-Identifier: MIT OR Apache-2.0
// Instruction-set tiers of the CPU backend and how one is chosen: detection through libcpuinfo
// (which also checks that the OS saves the wider registers), then the "target" option, which
// may only lower the tier. The choice is a pure function of the detected features so it can be
// checked against any feature set, not only this machine's.
#pragma once

#include <metrale/plugin_abi.h>

#include <string>
#include <string_view>
#include <vector>

namespace metrale::cpu {

enum class Tier { baseline = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3 };

struct CpuFeatures {
  bool detected = false;  // libcpuinfo initialised
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512bf16 = false;
  bool avx512vnni = false;  // not tiers of their own: the BF16 tier's int8 dot products
  bool avx512vbmi = false;  // and FP8 decoder
  std::string model;  // package name, "" when unknown
};

// This machine's features (libcpuinfo is initialised once per process).
CpuFeatures detect_features();

// "baseline", "avx2", "avx512", "avx512bf16": the option values.
const char* tier_option_name(Tier tier);
// "cpu-x86_64-avx2", ...: the target string reported in device_info.
const char* tier_target(Tier tier);
// Whether this build carries SIMD bodies for the tier (x86-64 builds carry all four).
bool tier_built(Tier tier);

// Features the tier needs that `have` lacks, by their usual names ("avx512bf16", ...).
std::vector<std::string> missing_features(Tier tier, const CpuFeatures& have);
// The highest tier `have` supports (and this build carries).
Tier best_tier(const CpuFeatures& have);

// The tier whose int8 dot products (the w4a8 and w8a8 families) run on `tier`: the BF16 tier's
// are AVX-512 VNNI `vpdpbusd`, so without VNNI they are the avx512 tier's; every other tier
// runs its own.
Tier int8_tier(Tier tier, const CpuFeatures& have);
// How those dot products are formed, for the log: "vpdpbusd", "vpmaddwd" or "scalar".
const char* int8_dot_name(Tier tier, const CpuFeatures& have);
// The same for the FP8 family: the BF16 tier's decoder is a VBMI table lookup (`vpermi2b`), so
// without VBMI it runs the avx512 tier's bodies.
Tier fp8_tier(Tier tier, const CpuFeatures& have);
const char* fp8_decode_name(Tier tier, const CpuFeatures& have);  // "vpermi2b", "vcvtph2ps", "scalar"

// Resolves the "target" option (nullptr or "auto": the best tier). On failure returns
// INVALID_ARGUMENT (unknown value, listing the valid ones) or INCOMPATIBLE (the CPU lacks the
// tier's features, naming them) with a message in `error`.
metrale_status choose_tier(const char* requested, const CpuFeatures& have, Tier& chosen,
                           std::string& error);

}  // namespace metrale::cpu
