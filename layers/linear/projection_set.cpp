// SPDX-License-Identifier: MIT OR Apache-2.0
#include "linear/projection_set.hpp"

#include "core/numeric.hpp"

#include <metrale/levers.hpp>
#include <metrale/status.hpp>

namespace metrale::layers {

namespace {

// The annotations of every lookup made under one tier attempt: the pin a lock compares,
// "<activations>/<family module>", and the human text (where the tier came from, the fallback
// that led here), which the set keeps as ProjectionSet::tier.
std::vector<AuditAnnotation> tier_annotations(KernelFamily family, ActivationQuant act, const std::string& text) {
  const std::string pin = std::string(activation_quant_name(act)) + "/" + std::string(family_info(family).module);
  return {AuditAnnotation{"tier", pin, true}, AuditAnnotation{"tier_note", text, false}};
}

// "w4a8: int8 activations (m/config.json)"; after a fall back, "w4a16_zp: bf16 activations
// (default); <the note saying why>".
std::string tier_text(KernelFamily family, ActivationQuant act, ActivationScaling scaling, const std::string& source,
                      const std::string& note) {
  std::string text = std::string(family_info(family).module) + ": " + activation_quant_name(act) + " activations";
  if (act != ActivationQuant::bf16 && scaling != ActivationScaling{}) text += " " + activation_scaling_name(scaling);
  text += " (" + (note.empty() ? source : std::string("default")) + ")";
  return note.empty() ? text : text + "; " + note;
}

// Which weight formats an activation tier runs with, for refusals.
std::string formats_for(ActivationQuant a) {
  return a == ActivationQuant::int8 ? "4-bit (w4a16-nk-g128, w4-zp) and 8-bit (w8-zp) integer weights"
                                    : "FP8 (fp8-e4m3) and 4-bit (w4a16-nk-g128, w4-zp) weights";
}

}  // namespace

DeviceQuantMatrix ProjectionSet::upload(Backend& backend, const QuantMatrix& weights) const {
  if (kernels().scaling.static_tensor && weights.input_scales.empty()) {
    throw Error(Status::invalid_argument, weights.name + ": " + tier + " quantizes with static scales, but the weights carry "
                                                                       "none (no input_scale)");
  }
  const WeightFormat reads = family_info(family()).weights;
  if (weights.format == reads) return DeviceQuantMatrix::upload(backend, weights, kernels().repack);
  if (reads != WeightFormat::w4_zp) {
    throw Error(Status::invalid_argument, weights.name + ": " + weight_format_name(weights.format) + " weights, but " +
                                              tier + " reads " + weight_format_name(reads));
  }
  return DeviceQuantMatrix::upload(backend, to_w4_zp(weights), kernels().repack);  // to_w4_zp refuses non-W4A16
}

ProjectionSet resolve_projection_set(Backend& backend, const ProjectionSetRequest& r, std::source_location site) {
  ActivationQuant act = r.activations.tier;
  const WeightFormat weights = loaded_format(r.format, r.act_order);
  for (const ProjectionShape& shape : r.shapes) check_quant_shape(shape.name, weights, shape.n, shape.k, 1, kW4a16GroupSize);
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
    set.tier = tier_text(*family, act, r.activations.scaling, r.activations.source, note);
    const std::vector<AuditAnnotation> annotations = tier_annotations(*family, act, set.tier);
    KernelMiss missing;
    const FamilyRequest request{*family, r.grouped, r.act_order, r.grouped_decode, LookupNotes{lever, annotations},
                                r.shapes, r.model_type, r.activations.scaling};
    if ((set.plan = resolve_linear_plan(backend, request, missing, site))) break;
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
  set.activations = act;
  return set;
}

void run_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& w, uint32_t index, DevicePtr x,
                    DevicePtr y, uint32_t m, ProjectionScratch& scratch, uint64_t stream) {
  set.plan->run(backend, w, index, x, y, m, scratch, stream);
}

void run_grouped_projection(Backend& backend, const ProjectionSet& set, const DeviceQuantMatrix& w, DevicePtr x,
                            DevicePtr offsets, DevicePtr y, uint32_t rows, ProjectionScratch& scratch, uint64_t stream) {
  set.plan->run_grouped(backend, w, x, offsets, y, rows, scratch, stream);
}

PlanStep describe_set_projection(Backend& backend, const ProjectionSet& set, const std::string& step, uint32_t m,
                                 uint32_t n, uint32_t k) {
  return set.plan->describe(backend, step, m, n, k);
}

}  // namespace metrale::layers
