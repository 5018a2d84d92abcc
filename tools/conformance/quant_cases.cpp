// SPDX-License-Identifier: MIT OR Apache-2.0
// Conformance cases of the quantized weight families (docs/kernels.md): dense and MoE layers on
// synthetic weights of every format x group size x symmetry x act-order, under each activation
// tier that runs them, against the double-precision reference of the tier's own math.
#include "conformance/conformance.hpp"

#include "linear/family.hpp"

#include <nlohmann/json.hpp>

namespace metrale::conformance {

using namespace metrale::layers;

namespace {

constexpr uint32_t kRows[] = {1, 5, 40};

std::string variant_name(const SyntheticFormats& f, ActivationQuant a, ActivationScaling s) {
  std::string name = weight_tier_name(f.weights);
  if (f.weights == WeightFormat::w4_zp || f.weights == WeightFormat::w8_zp) {
    name += "-g" + std::to_string(f.group) + (f.symmetric ? "-sym" : "-asym");
  }
  if (f.act_order) name += "-actorder";
  name += "/" + std::string(activation_quant_name(a));
  if (s.group128) name += "-g128";
  if (s.static_tensor) name += "-static";
  else if (s.arithmetic == ScaleArithmetic::bf16) name += "-bf16math";
  return name;
}

Case quant_case(const std::string& kind, const ModelConfig& config, const SyntheticFormats& f, ActivationQuant a,
                uint32_t m, uint64_t seed, ActivationScaling scaling = {}) {
  Case c;
  c.kind = config.ffn_kind() == FfnKind::moe ? CaseKind::moe : CaseKind::dense;
  c.name = "quant/" + variant_name(f, a, scaling) + "/" + kind + "/m" + std::to_string(m);
  c.config = config;
  c.formats = f;
  c.activations = a;
  c.scaling = scaling;
  c.m = m;
  c.seed = seed;
  return c;
}

// The activation tiers a weight format runs under.
std::vector<ActivationQuant> tiers_of(WeightFormat format) {
  std::vector<ActivationQuant> out{ActivationQuant::bf16};
  if (!weight_format_has_scales(format)) return out;  // bf16 / f16 weights: bf16 activations only
  if (format != WeightFormat::fp8) out.push_back(ActivationQuant::int8);
  if (format == WeightFormat::fp8) out.push_back(ActivationQuant::fp8);
  return out;
}

// Unquantized bf16 and f16 weights (modules bf16, f16), dense and MoE, bf16 activations.
void unquantized_cases(const ModelConfig& dense, const ModelConfig& moe, uint64_t& seed, std::vector<Case>& out) {
  for (WeightFormat w : {WeightFormat::bf16, WeightFormat::f16}) {
    SyntheticFormats f;
    f.weights = w;
    for (uint32_t m : kRows) {
      out.push_back(quant_case("dense", dense, f, ActivationQuant::bf16, m, ++seed));
      out.push_back(quant_case("moe", moe, f, ActivationQuant::bf16, m, ++seed));
    }
  }
}

}  // namespace

std::vector<Case> quant_layer_cases() {
  const ModelConfig dense = parse_model_config({{"model_type", "conformance"}, {"hidden_size", 256},
                                                {"intermediate_size", 384}, {"hidden_act", "silu"}}, "conformance quant-dense");
  const ModelConfig moe = parse_model_config({{"model_type", "conformance_moe"}, {"hidden_size", 256}, {"hidden_act", "silu"},
                                              {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 128},
                                              {"norm_topk_prob", true}, {"shared_expert_intermediate_size", 256}},
                                             "conformance quant-moe");
  std::vector<Case> out;
  uint64_t seed = 100;
  size_t index = 0;
  // Zero-point formats: the full product dense; MoE at group 32 and 128.
  for (WeightFormat format : {WeightFormat::w4_zp, WeightFormat::w8_zp}) {
    for (uint32_t group : {32u, 64u, 128u}) {
      for (bool symmetric : {true, false}) {
        for (bool act_order : {false, true}) {
          const SyntheticFormats f{format, std::nullopt, group, symmetric, act_order};
          for (ActivationQuant a : tiers_of(format)) {
            out.push_back(quant_case("dense", dense, f, a, kRows[index++ % 3], ++seed));
            if (group != 64) out.push_back(quant_case("moe", moe, f, a, kRows[index++ % 3], ++seed));
          }
        }
      }
    }
  }
  // FP8, and symmetric group-128 4-bit weights under int8 activations (run as w4a8) and with act-order.
  const auto formats = [](WeightFormat w, bool act_order) {
    SyntheticFormats f;
    f.weights = w;
    f.symmetric = true;
    f.act_order = act_order;
    return f;
  };
  for (const SyntheticFormats& f : {formats(WeightFormat::fp8, false), formats(WeightFormat::w4a16, false),
                                    formats(WeightFormat::w4a16, true)}) {
    for (ActivationQuant a : tiers_of(f.weights)) {
      if (f.weights == WeightFormat::w4a16 && !f.act_order && a == ActivationQuant::bf16) continue;  // the W4A16 cases
      for (uint32_t m : kRows) {
        out.push_back(quant_case("dense", dense, f, a, m, ++seed));
        out.push_back(quant_case("moe", moe, f, a, m, ++seed));
      }
    }
  }
  // The other ways of setting activation scales (checkpoints' tools): FP8 per 128 columns, and
  // compressed-tensors' bf16 arithmetic for FP8 and int8.
  const ScaleArithmetic bf16 = ScaleArithmetic::bf16, f32 = ScaleArithmetic::f32;
  const ActivationScaling bf16_rows{.arithmetic = bf16}, static_scales{.static_tensor = true, .arithmetic = bf16};
  for (const ActivationScaling s : {bf16_rows, ActivationScaling{.group128 = true, .arithmetic = f32},
                                    ActivationScaling{.group128 = true, .arithmetic = bf16}, static_scales}) {
    for (uint32_t m : {1u, 40u}) {
      out.push_back(quant_case("dense", dense, formats(WeightFormat::fp8, false), ActivationQuant::fp8, m, ++seed, s));
      out.push_back(quant_case("moe", moe, formats(WeightFormat::fp8, false), ActivationQuant::fp8, m, ++seed, s));
    }
  }
  for (uint32_t m : {1u, 40u}) {
    for (const ActivationScaling s : {bf16_rows, static_scales}) {
      out.push_back(quant_case("dense", dense, formats(WeightFormat::w4a16, false), ActivationQuant::int8, m, ++seed, s));
      out.push_back(quant_case("moe", moe, formats(WeightFormat::w4a16, false), ActivationQuant::int8, m, ++seed, s));
    }
  }
  out.push_back(quant_case("dense", dense, SyntheticFormats{WeightFormat::w8_zp, std::nullopt, 128, false, false},
                           ActivationQuant::int8, 5, ++seed, bf16_rows));
  // 4-bit weights under FP8 activations (W4AFP8): symmetric (loaded as w4-zp) and asymmetric groups.
  for (uint32_t m : kRows) {
    out.push_back(quant_case("dense", dense, formats(WeightFormat::w4a16, false), ActivationQuant::fp8, m, ++seed, bf16_rows));
    out.push_back(quant_case("moe", moe, SyntheticFormats{WeightFormat::w4_zp, std::nullopt, 64, false, false},
                             ActivationQuant::fp8, m, ++seed, bf16_rows));
  }
  out.push_back(quant_case("dense", dense, SyntheticFormats{WeightFormat::w4_zp, std::nullopt, 32, false, true},
                           ActivationQuant::fp8, 5, ++seed));
  unquantized_cases(dense, moe, seed, out);
  // Experts in another format than the shared expert (--expert-quantization).
  SyntheticFormats mixed = formats(WeightFormat::w4_zp, false);
  mixed.experts = WeightFormat::fp8;
  out.push_back(quant_case("moe-fp8-experts", moe, mixed, ActivationQuant::bf16, 5, ++seed));
  return out;
}

std::optional<std::string> quant_skip_reason(Backend& backend, const Case& c) {
  if (c.formats.weights == WeightFormat::w4a16 && !c.formats.act_order && c.activations == ActivationQuant::bf16 &&
      !c.formats.experts) {
    return std::nullopt;  // the W4A16 family: the caller checks its tile GEMMs
  }
  std::vector<WeightFormat> formats{c.formats.weights};
  if (c.formats.experts) formats.push_back(*c.formats.experts);
  for (WeightFormat weights : formats) {
    const WeightFormat format = weights == WeightFormat::w4a16 && (c.formats.act_order || c.activations != ActivationQuant::bf16)
                                    ? WeightFormat::w4_zp
                                    : weights;
    const auto family = family_for(format, c.activations);
    if (!family) return "no kernel family runs " + std::string(weight_format_name(format)) + " weights with " +
                        activation_quant_name(c.activations) + " activations";
    const FamilyInfo& info = family_info(*family);
    if (info.family == KernelFamily::w4a16) continue;
    const std::string gemm = std::string(info.prefix) +
                             (info.family == KernelFamily::fp8_a8 ? (c.scaling.group128 ? "_gemm_a8_group128" : "_gemm_a8") : "_gemm");
    if (!backend.manifest().find_kernel(info.module, gemm)) {
      return "backend '" + backend.name() + "' does not list " + std::string(info.module) + "/" + gemm;
    }
  }
  return std::nullopt;
}

}  // namespace metrale::conformance
