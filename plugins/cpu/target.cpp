// SPDX-License-Identifier: MIT OR Apache-2.0
#include "target.hpp"

#include <cpuinfo.h>

#include <array>
#include <cstring>
#include <mutex>

namespace metrale::cpu {

namespace {

constexpr std::array<Tier, 4> kTiers{Tier::baseline, Tier::avx2, Tier::avx512, Tier::avx512bf16};

}  // namespace

CpuFeatures detect_features() {
  static std::once_flag once;
  static CpuFeatures features;
  std::call_once(once, [] {
    if (!cpuinfo_initialize()) return;
    features.detected = true;
#if CPUINFO_ARCH_X86 || CPUINFO_ARCH_X86_64
    features.avx = cpuinfo_has_x86_avx();
    features.avx2 = cpuinfo_has_x86_avx2();
    features.fma = cpuinfo_has_x86_fma3();
    features.f16c = cpuinfo_has_x86_f16c();
    features.avx512f = cpuinfo_has_x86_avx512f();
    features.avx512bw = cpuinfo_has_x86_avx512bw();
    features.avx512vl = cpuinfo_has_x86_avx512vl();
    features.avx512bf16 = cpuinfo_has_x86_avx512bf16();
    features.avx512vnni = cpuinfo_has_x86_avx512vnni();
    features.avx512vbmi = cpuinfo_has_x86_avx512vbmi();
#endif
    if (const cpuinfo_package* package = cpuinfo_get_package(0))
      features.model.assign(package->name, strnlen(package->name, sizeof package->name));
  });
  return features;
}

const char* tier_option_name(Tier tier) {
  switch (tier) {
    case Tier::avx2: return "avx2";
    case Tier::avx512: return "avx512";
    case Tier::avx512bf16: return "avx512bf16";
    case Tier::baseline: break;
  }
  return "baseline";
}

const char* tier_target(Tier tier) {
  switch (tier) {
    case Tier::avx2: return "cpu-x86_64-avx2";
    case Tier::avx512: return "cpu-x86_64-avx512";
    case Tier::avx512bf16: return "cpu-x86_64-avx512bf16";
    case Tier::baseline: break;
  }
#if defined(__x86_64__)
  return "cpu-x86_64-baseline";
#else
  return "cpu-generic-baseline";
#endif
}

bool tier_built(Tier tier) {
#if defined(METRALE_CPU_X86_SIMD)
  (void)tier;
  return true;
#else
  return tier == Tier::baseline;
#endif
}

std::vector<std::string> missing_features(Tier tier, const CpuFeatures& have) {
  std::vector<std::string> missing;
  auto need = [&](bool present, const char* name) {
    if (!present) missing.emplace_back(name);
  };
  // Tiers are cumulative: the AVX-512 bodies also use AVX2, FMA and F16C instructions.
  if (tier >= Tier::avx2) {
    need(have.avx, "avx");
    need(have.avx2, "avx2");
    need(have.fma, "fma");
    need(have.f16c, "f16c");
  }
  if (tier >= Tier::avx512) {
    need(have.avx512f, "avx512f");
    need(have.avx512bw, "avx512bw");
    need(have.avx512vl, "avx512vl");
  }
  if (tier >= Tier::avx512bf16) need(have.avx512bf16, "avx512bf16");
  return missing;
}

Tier best_tier(const CpuFeatures& have) {
  Tier best = Tier::baseline;
  for (Tier tier : kTiers)
    if (tier_built(tier) && missing_features(tier, have).empty()) best = tier;
  return best;
}

Tier int8_tier(Tier tier, const CpuFeatures& have) {
  return tier == Tier::avx512bf16 && !have.avx512vnni ? Tier::avx512 : tier;
}

const char* int8_dot_name(Tier tier, const CpuFeatures& have) {
  if (tier == Tier::baseline) return "scalar";
  return int8_tier(tier, have) == Tier::avx512bf16 ? "vpdpbusd" : "vpmaddwd";
}

Tier fp8_tier(Tier tier, const CpuFeatures& have) {
  return tier == Tier::avx512bf16 && !have.avx512vbmi ? Tier::avx512 : tier;
}

const char* fp8_decode_name(Tier tier, const CpuFeatures& have) {
  if (tier == Tier::baseline) return "scalar";
  return fp8_tier(tier, have) == Tier::avx512bf16 ? "vpermi2b" : "vcvtph2ps";
}

metrale_status choose_tier(const char* requested, const CpuFeatures& have, Tier& chosen,
                           std::string& error) {
  if (requested == nullptr || std::strcmp(requested, "auto") == 0) {
    chosen = best_tier(have);
    return METRALE_STATUS_OK;
  }
  for (Tier tier : kTiers) {
    if (std::strcmp(requested, tier_option_name(tier)) != 0) continue;
    if (!tier_built(tier)) {
      error = std::string("target '") + requested +
              "' is not available: this build of the cpu backend carries only the baseline "
              "bodies (not an x86-64 build)";
      return METRALE_STATUS_INCOMPATIBLE;
    }
    std::vector<std::string> missing = missing_features(tier, have);
    if (!missing.empty()) {
      error = std::string("target '") + requested + "' (" + tier_target(tier) +
              ") needs CPU features this machine lacks: ";
      for (size_t i = 0; i < missing.size(); ++i) error += (i ? ", " : "") + missing[i];
      if (!have.detected) error += " (CPU feature detection failed)";
      error += std::string("; the best tier here is '") + tier_option_name(best_tier(have)) + "'";
      return METRALE_STATUS_INCOMPATIBLE;
    }
    chosen = tier;
    return METRALE_STATUS_OK;
  }
  error = std::string("unknown target '") + requested +
          "'; valid values: auto, avx512bf16, avx512, avx2, baseline";
  return METRALE_STATUS_INVALID_ARGUMENT;
}

}  // namespace metrale::cpu
