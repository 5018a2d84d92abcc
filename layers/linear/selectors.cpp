// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/selectors.hpp"

#include "core/levers.hpp"

#include <metrale/levers.hpp>
#include <metrale/log.hpp>

namespace metrale::layers {

namespace {

constexpr std::string_view kVariant = "METRALE_W4A16_VARIANT";

Backend::LookupRequest try_request(const LookupNotes& notes, std::string_view lever = {}) {
  return noted_request(notes, LookupKind::try_lookup, kW4a16GemmSignature, lever);
}

KernelHandle variant_kernel(Backend& backend, const std::string& variant, std::string_view module,
                            std::string_view name, const std::source_location& site, const LookupNotes& notes) {
  auto request = try_request(notes, lever_note(kVariant));
  request.refuse_because = std::string(kVariant) + "=" + variant + " requested but " + std::string(module) + "::" +
                           std::string(name) + " is not in this target's kernel set; refusing to start with a "
                           "silently-degraded configuration";
  return backend.lookup(module, name, request, site);
}

}  // namespace

uint32_t w4a16_k64_min_k() {
  register_levers();  // the layers declare the levers read here
  // Levers are read once per process and cached, so this is resolved once too.
  if (auto explicit_min = lever_u32("METRALE_W4A16_K64_MIN_K")) return *explicit_min;
  return lever_on("METRALE_NO_W4A16_K64") ? 8192u : 6144u;
}

KernelHandle w4a16_v2_kernel(Backend& backend, std::source_location site, const LookupNotes& notes) {
  register_levers();
  auto variant = lever_choice(kVariant);
  if (variant != "v2" && variant != "v3") {
    if (variant == "v1") logger()->debug("{}=v1: w4a16 m128 v2 suppressed (explicit)", kVariant);
    return {};
  }
  return variant_kernel(backend, *variant, "w4a16_v2", "w4a16_gemm_t_m128_v2", site, notes);
}

KernelHandle w4a16_v3_kernel(Backend& backend, std::source_location site, const LookupNotes& notes) {
  register_levers();
  auto variant = lever_choice(kVariant);
  if (variant != "v3") return {};
  return variant_kernel(backend, *variant, "w4a16_v3", "w4a16_gemm_t_m128_v3", site, notes);
}

KernelHandle tgemm_kernel(Backend& backend, std::source_location site, const LookupNotes& notes) {
  register_levers();
  std::string lever = lever_note("METRALE_NO_TGEMM_PIPELINE3");
  if (lever.empty()) {
    if (auto p3 = backend.lookup("w4a16", "w4a16_gemm_t_p3", try_request(notes), site)) return p3;
  }
  return backend.lookup("w4a16", "w4a16_gemm_t", try_request(notes, lever), site);
}

bool tgemm_probe_ok(std::string_view model_type) { return model_type != "kimi_k3" && model_type != "kimi_linear"; }

KernelHandle k64_kernel(Backend& backend, std::source_location site, const LookupNotes& site_notes) {
  register_levers();
  // The K from which the site launches this kernel is part of what it runs: pinned, so a lock
  // refuses a changed METRALE_W4A16_K64_MIN_K / METRALE_NO_W4A16_K64 although the lookups agree.
  LookupNotes notes = site_notes;
  notes.annotations.push_back(AuditAnnotation{"w4a16_k64_min_k", std::to_string(w4a16_k64_min_k()), true});
  std::string lever = lever_note("METRALE_NO_K64_PIPELINE3");
  if (lever.empty()) {
    if (auto p3 = backend.lookup("w4a16", "w4a16_gemm_t_k64_p3", try_request(notes), site)) return p3;
  }
  auto request = try_request(notes, lever);
  request.kind = LookupKind::require;
  return backend.lookup("w4a16", "w4a16_gemm_t_k64", request, site);
}

KernelHandle k64_n64_kernel(Backend& backend, std::source_location site, const LookupNotes& notes) {
  register_levers();
  if (lever_is_set("METRALE_NO_K64_N64")) return {};
  return backend.lookup("w4a16", "w4a16_gemm_t_k64_n64_p3", try_request(notes), site);
}

bool k64_n64_wins(uint32_t m, uint32_t n) {
  // The wide tile launches ceil(n/128) x ceil(m/64) blocks; the twin about twice that. Up to 64
  // wide blocks the machine is under-filled and the twin's doubled grid wins.
  constexpr uint64_t kMaxWideBlocks = 64;
  uint64_t wide = (uint64_t{n} + 127) / 128 * ((uint64_t{m} + 63) / 64);
  return wide <= kMaxWideBlocks;
}

KernelHandle choose_tile_gemm(const TileGemmKernels& kernels, uint32_t m, uint32_t n, uint32_t k) {
  if (k >= w4a16_k64_min_k()) {
    if (kernels.k64_n64 && k64_n64_wins(m, n)) return kernels.k64_n64;
    return kernels.k64;
  }
  return kernels.tgemm;
}

}  // namespace metrale::layers
