// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/projection_set.hpp"

#include "core/numeric.hpp"

#include <metrale/levers.hpp>
#include <metrale/status.hpp>

#include <array>

namespace metrale::layers {

namespace {

constexpr std::array<metrale_param_type, 8> kW4a16GroupedSignature{
    METRALE_PARAM_PTR, METRALE_PARAM_PTR, METRALE_PARAM_PTR, METRALE_PARAM_PTR,
    METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_U32, METRALE_PARAM_U32};

// The annotations of every lookup made under one tier attempt: the pin a lock compares,
// "<activations>/<family module>", and the human text (where the tier came from, the fallback
// that led here), which the set keeps as ProjectionSet::tier.
std::vector<AuditAnnotation> tier_annotations(KernelFamily family, ActivationQuant act, const std::string& text) {
  const std::string pin = std::string(activation_quant_name(act)) + "/" + std::string(family_info(family).module);
  return {AuditAnnotation{"tier", pin, true}, AuditAnnotation{"tier_note", text, false}};
}

// "w4a8: int8 activations (m/config.json)"; after a fall back, "w4a16_zp: bf16 activations
// (default); <the note saying why>".
std::string tier_text(KernelFamily family, ActivationQuant act, const std::string& source, const std::string& note) {
  std::string text = std::string(family_info(family).module) + ": " + activation_quant_name(act) + " activations (" +
                     (note.empty() ? source : "default") + ")";
  return note.empty() ? text : text + "; " + note;
}

// Which weight formats an activation tier runs with, for refusals.
std::string formats_for(ActivationQuant a) {
  return a == ActivationQuant::int8 ? "4-bit (w4a16-nk-g128, w4-zp) and 8-bit (w8-zp) integer weights"
                                    : "FP8 (fp8-e4m3) weights";
}

// The W4A16 family: MoE experts try the grouped GEMM first and need the section-7 projection
// chain only without it (per-expert launches).
void resolve_w4a16(Backend& backend, const ProjectionSetRequest& r, ProjectionSet& set, const LookupNotes& notes,
                   std::source_location site) {
  if (r.grouped) {
    set.quant.grouped =
        backend.lookup("moe", "w4a16_grouped_gemm", noted_request(notes, LookupKind::try_lookup, kW4a16GroupedSignature), site);
  }
  if (!set.quant.grouped) set.w4a16 = resolve_projection_kernels(backend, r.shapes, r.model_type, site, notes);
  set.repack = resolve_w4a16_repack(backend, site, notes);
  set.layout = weight_layout_of(backend, set.repack);
  require_weight_layout(backend, set.w4a16, set.layout);
  require_weight_layout(backend, set.quant.grouped, set.layout);
  set.quant.family = KernelFamily::w4a16;
}

}  // namespace

QuantMatrix ProjectionSet::prepare(const QuantMatrix& weights) const {
  if (family_info(family).weights == WeightFormat::w4_zp && weights.format == WeightFormat::w4a16) {
    return to_w4_zp(weights);
  }
  return weights;
}

DeviceQuantMatrix ProjectionSet::upload(Backend& backend, const QuantMatrix& weights) const {
  if (family_info(family).weights == WeightFormat::w4_zp && weights.format == WeightFormat::w4a16) {
    return DeviceQuantMatrix::upload(backend, to_w4_zp(weights), repack);
  }
  return DeviceQuantMatrix::upload(backend, weights, repack);
}

ProjectionSet resolve_projection_set(Backend& backend, const ProjectionSetRequest& r, std::source_location site) {
  ActivationQuant act = r.activations.tier;
  // W4A16 weights with a permutation run as the zero-point family (the W4A16 chain gathers nothing).
  const WeightFormat weights = r.format == WeightFormat::w4a16 && r.act_order ? WeightFormat::w4_zp : r.format;
  const std::string format = weight_format_name(weights);
  std::string note;
  std::optional<KernelFamily> family = family_for(weights, act);
  if (!family) {
    if (r.activations.is_explicit) {
      throw Refusal(r.activations.source + ": " + activation_quant_name(act) + " activations run with " + formats_for(act) +
                    ", but " + r.name + " has " + format + " weights");
    }
    note = std::string(activation_quant_name(act)) + " activations (" + r.activations.source + ") fell back to bf16: no family runs " +
           format + " weights with them";
    act = ActivationQuant::bf16;
    family = family_for(weights, act);
  }
  const std::string lever = r.activations.source.starts_with(std::string(kActivationQuantizationLever)) ? r.activations.source : "";
  ProjectionSet set;
  // Each attempt's lookups carry the tier they are made under: a fall back's abandoned rows say
  // which tier was tried, the rows after it the tier the set ended at.
  for (;;) {
    set.tier = tier_text(*family, act, r.activations.source, note);
    const std::vector<AuditAnnotation> annotations = tier_annotations(*family, act, set.tier);
    if (*family == KernelFamily::w4a16) {
      resolve_w4a16(backend, r, set, LookupNotes{{}, annotations}, site);
      break;
    }
    KernelMiss missing;
    const FamilyRequest request{*family, r.grouped, r.act_order, r.grouped_decode, LookupNotes{lever, annotations}};
    if (auto kernels = resolve_family(backend, request, missing, site)) {
      set.quant = *kernels;
      set.repack = kernels->repack;
      set.layout = kernels->layout;
      break;
    }
    const std::string why = missing.kernel + " on backend '" + backend.name() + "': " + missing.reason;
    if (act == ActivationQuant::bf16) {
      throw Refusal(r.name + " has " + format + " weights, which need " + why);
    }
    if (r.activations.is_explicit) {
      throw Refusal(r.activations.source + " cannot be honoured for " + r.name + ": it needs " + why);
    }
    note = std::string(activation_quant_name(act)) + " activations (" + r.activations.source + ") fell back to bf16: " + why;
    act = ActivationQuant::bf16;
    family = family_for(weights, act);
  }
  set.family = *family;
  set.activations = act;
  return set;
}

void run_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& w, uint32_t index, DevicePtr x,
                    DevicePtr y, uint32_t m, ProjectionScratch& scratch, uint64_t stream) {
  if (set.family == KernelFamily::w4a16) {
    launch_projection(backend, set.w4a16, w, index, x, y, m, stream);
    return;
  }
  DevicePtr in = x;
  if (w.act_order) {
    scratch.gathered.ensure(backend, size_t{m} * w.k * 2);
    if (scratch.offsets_rows != m) {
      scratch.offsets.ensure(backend, 2 * sizeof(int32_t));
      const std::array<int32_t, 2> offsets{0, static_cast<int32_t>(m)};
      scratch.offsets.upload(std::span<const int32_t>(offsets), 0, stream);
      scratch.offsets_rows = m;
    }
    launch_gather(backend, set.quant, x, w.perm.at(size_t{index} * w.k * sizeof(int32_t)), scratch.offsets.ptr(),
                  scratch.gathered.ptr(), m, w.k, 1, stream);
    in = scratch.gathered.ptr();
  }
  DevicePtr xscale{};
  if (set.activations != ActivationQuant::bf16) {
    scratch.quantized.ensure(backend, size_t{m} * w.k);
    scratch.scales.ensure(backend, size_t{m} * sizeof(float));
    launch_quantize(backend, set.quant, in, scratch.quantized.ptr(), scratch.scales.ptr(), m, w.k, stream);
    in = scratch.quantized.ptr();
    xscale = scratch.scales.ptr();
  }
  launch_family_projection(backend, set.quant, w, index, in, xscale, y, m, stream);
}

void run_grouped_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& w, DevicePtr x,
                            DevicePtr offsets, DevicePtr y, uint32_t rows, ProjectionScratch& scratch, uint64_t stream) {
  if (set.family == KernelFamily::w4a16) {
    LaunchShape s;
    s.grid = {(w.n + 127) / 128, w.batch, 1};
    s.block = {128, 1, 1};
    s.stream = stream;
    backend.launch(set.quant.grouped, s, x, w.qweight.ptr(), w.scales.ptr(), offsets, y, w.n, w.k, w.batch);
    return;
  }
  DevicePtr in = x;
  if (w.act_order) {
    scratch.gathered.ensure(backend, size_t{rows} * w.k * 2);
    launch_gather(backend, set.quant, x, w.perm.ptr(), offsets, scratch.gathered.ptr(), rows, w.k, w.batch, stream);
    in = scratch.gathered.ptr();
  }
  DevicePtr xscale{};
  if (set.activations != ActivationQuant::bf16) {
    scratch.quantized.ensure(backend, size_t{rows} * w.k);
    scratch.scales.ensure(backend, size_t{rows} * sizeof(float));
    launch_quantize(backend, set.quant, in, scratch.quantized.ptr(), scratch.scales.ptr(), rows, w.k, stream);
    in = scratch.quantized.ptr();
    xscale = scratch.scales.ptr();
  }
  launch_family_grouped(backend, set.quant, w, in, xscale, offsets, y, stream);
}

PlanStep describe_set_projection(Backend& backend, const ProjectionSet& set, const std::string& step, uint32_t m,
                                 uint32_t n, uint32_t k) {
  if (set.family == KernelFamily::w4a16) return describe_projection(backend, set.w4a16, step, m, n, k);
  return describe_family_projection(backend, set.quant, step, m, n, k);
}

}  // namespace metrale::layers
