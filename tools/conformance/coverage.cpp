// SPDX-License-Identifier: MIT OR Apache-2.0
#include "conformance/coverage.hpp"

#include "attention/attention.hpp"
#include "decoder/decoder_layer.hpp"
#include "deltanet/deltanet.hpp"
#include "engine/engine.hpp"
#include "io/config.hpp"
#include "ffn/dense_ffn.hpp"
#include "ffn/moe.hpp"
#include "linear/projection.hpp"

#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>

namespace metrale::conformance {

using namespace metrale::layers;

namespace {

constexpr uint32_t kHidden = 256;
constexpr uint32_t kIntermediate = 512;
constexpr const char* kModelType = "conformance";

// One kernel a path needs: the first of `any_of` that the manifest lists ungated serves.
using Need = std::vector<std::string>;

// What resolving a path yielded.
struct Probe {
  bool native = true;                // the path runs on the kernels made for it
  std::vector<std::string> kernels;  // what it runs on
  std::string primary;               // when not native: the kernel it would have used
};

struct PathSpec {
  std::string path;
  std::string what;
  std::vector<Need> needs;  // all usable: the backend claims the path
  std::function<Probe(Backend&, Activation)> probe;
};

const Need kTileGemm{"w4a16/w4a16_gemm_t_k64", "w4a16/w4a16_gemm_t_k64_p3"};
const Need kAct{"act/silu_mul", "act/gelu_mul"};
// What every attention path needs: the attn module, RoPE and the bf16 projections.
const std::vector<Need> kAttention{{"attn/kv_append"}, {"attn/attn_decode"}, {"attn/attn_decode_combine"}, {"attn/attn_prefill"},
                                   {"rope/rope"}, {"norm/rms_norm"}, {"bf16/bf16_gemm"}};
const std::vector<Need> kMoeBase{{"moe/router_gemm"}, {"moe/topk_softmax"}, {"moe/moe_gather"}, {"moe/moe_combine"}, kAct};

// Why `kernel` ("module/name") is not usable on `backend`, or "" when it is.
std::string unusable(const Backend& backend, const std::string& kernel) {
  const auto slash = kernel.find('/');
  const ManifestKernel* listed = backend.manifest().find_kernel(kernel.substr(0, slash), kernel.substr(slash + 1));
  if (listed == nullptr) return "the manifest does not list " + kernel;
  if (std::string gate = backend.gate_reason(*listed); !gate.empty()) return kernel + " is gated: " + gate;
  return {};
}

// The first need no listed kernel meets, in words; "" when the backend claims every one.
std::string first_unmet(const Backend& backend, const std::vector<Need>& needs) {
  for (const Need& need : needs) {
    std::vector<std::string> reasons;
    for (const auto& kernel : need) reasons.push_back(unusable(backend, kernel));
    if (std::any_of(reasons.begin(), reasons.end(), [](const std::string& r) { return r.empty(); })) continue;
    if (need.size() == 1) return reasons[0];
    std::string names, gated;
    for (size_t i = 0; i < need.size(); ++i) {
      names += (i ? ", " : "") + need[i];
      if (reasons[i].find(" is gated: ") != std::string::npos) gated += "; " + reasons[i];
    }
    return "the manifest lists none of " + names + " for this device" + gated;
  }
  return {};
}

std::vector<Need> with(std::vector<Need> needs, std::initializer_list<Need> more) {
  needs.insert(needs.end(), more.begin(), more.end());
  return needs;
}

std::string name_of(Backend& b, KernelHandle h) { return b.kernel_name(h); }

// A dense W4A16 FFN resolved as the layers do, its gate_up projection planned for m rows.
// `primary` (empty: any kernel is native) is the kernel the path is native with.
Probe dense_probe(Backend& b, Activation act, uint32_t m, const char* primary) {
  DenseFfnKernels k = DenseFfnLayer::resolve(b, "conformance.coverage", kHidden, kIntermediate, act, kModelType);
  const PlanStep step = describe_set_projection(b, k.projections, "gate_up", m, 2 * kIntermediate, kHidden);
  Probe p;
  p.kernels = {step.kernel, name_of(b, k.act)};
  p.native = *primary == '\0' || step.kernel == primary;
  p.primary = primary;
  return p;
}

// A dense FFN on weights of `format`, under an activation tier asked for by default (so the
// layers may fall back to bf16 activations, as they do for a checkpoint's declaration).
Probe family_probe(Backend& b, Activation act, WeightFormat format, ActivationQuant tier, KernelFamily native,
                   bool act_order = false) {
  DenseFfnTier request{format, act_order, ActivationRequest{tier, false, "conformance coverage", {}}};
  DenseFfnKernels k = DenseFfnLayer::resolve(b, "conformance.coverage", kHidden, kIntermediate, act, kModelType, request);
  const FamilyKernels& f = k.projections.kernels();
  Probe p;
  for (KernelHandle h : {f.gather, f.quantize, f.gemv, f.gemm, f.repack})
    if (h) p.kernels.push_back(name_of(b, h));
  p.native = k.projections.family() == native && (!act_order || f.gather);
  p.primary = std::string(family_info(native).module) + "/" + std::string(family_info(native).prefix) + "_gemm";
  if (act_order) p.primary = "quant/gather_k";
  if (tier == ActivationQuant::int8) p.primary += " with quant/quantize_int8";
  return p;
}

ModelConfig moe_config(Activation act) {
  const nlohmann::json doc{{"model_type", kModelType}, {"hidden_size", kHidden},
                           {"hidden_act", act == Activation::silu ? "silu" : "gelu_pytorch_tanh"},
                           {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 128},
                           {"norm_topk_prob", true}};
  return parse_model_config(doc, "conformance coverage");
}

Probe moe_probe(Backend& b, Activation act, bool grouped, bool device_routing) {
  const MoeKernels k = MoeLayer::resolve(b, moe_config(act), MoeBuildOptions{.use_grouped_kernel = grouped});
  Probe p;
  if (k.grouped()) {
    p.kernels.push_back(name_of(b, k.experts.kernels().grouped));
  } else {
    p.kernels.push_back(describe_set_projection(b, k.experts, "experts.gate_up", 4, 256, kHidden).kernel + " per expert");
  }
  if (device_routing) {
    p.native = k.device_routing();
    p.primary = "moe/moe_align";
    if (k.align) p.kernels.insert(p.kernels.begin(), name_of(b, k.align));
    else p.kernels.insert(p.kernels.begin(), "routing on the host");
  } else {
    p.native = !grouped || k.grouped();
    p.primary = "moe/w4a16_grouped_gemm";
  }
  return p;
}

// The attention of a small bf16 model of `model_type` ("llama": RoPE alone; "qwen3": q/k norm;
// "qwen2": q/k/v biases), resolved as the layers do; the step of `m` rows planned.
AttentionConfig attention_config(const char* model_type) {
  const nlohmann::json doc{{"model_type", model_type}, {"hidden_size", kHidden}, {"num_attention_heads", 4},
                           {"num_key_value_heads", 2}, {"head_dim", 64}, {"max_position_embeddings", 4096}};
  return parse_attention_config(doc, "conformance coverage");
}

Probe attention_probe(Backend& b, const char* model_type, const char* primary) {
  const AttentionKernels k = AttentionLayer::resolve(b, attention_config(model_type), WeightFormat::bf16, false);
  Probe p;
  for (KernelHandle h : {k.bias_add, k.qk_norm_rope, k.rms_norm, k.rope, k.kv_append, k.decode, k.decode_combine, k.prefill})
    if (h) p.kernels.push_back(name_of(b, h));
  p.primary = primary;
  p.native = *primary == '\0' || std::find(p.kernels.begin(), p.kernels.end(), p.primary) != p.kernels.end();
  return p;
}

// The attention of a small Qwen3.5 (gated, heads of 256, zero-centred q/k norm, partial rotary).
Probe gated_attention_probe(Backend& b) {
  const nlohmann::json doc{{"model_type", "qwen3_5_text"}, {"hidden_size", kHidden}, {"num_attention_heads", 2},
                           {"num_key_value_heads", 1}, {"head_dim", 256}, {"max_position_embeddings", 4096}};
  const AttentionKernels k = AttentionLayer::resolve(b, parse_attention_config(doc, "conformance coverage"), WeightFormat::bf16, false);
  Probe p;
  for (KernelHandle h : {k.rms_norm, k.rope, k.kv_append, k.decode, k.decode_combine, k.prefill, k.output_gate})
    if (h) p.kernels.push_back(name_of(b, h));
  p.primary = "attn/output_gate";
  return p;
}

// A Gated DeltaNet mixer (Qwen3.5's layout) of bf16 weights, resolved as the layers do.
Probe deltanet_probe(Backend& b) {
  DeltaNetConfig c;
  c.source = "conformance coverage";
  c.hidden_size = kHidden;
  c.k_heads = 2;
  c.v_heads = 4;
  c.k_dim = c.v_dim = 64;
  const DeltaNetKernels k = DeltaNetLayer::resolve(b, c, WeightFormat::bf16, false);
  Probe p;
  for (KernelHandle h : {k.conv, k.prefill, k.decode, k.gated_norm}) p.kernels.push_back(name_of(b, h));
  p.primary = "deltanet/delta_rule_chunked";
  return p;
}

// The decoder layer's norms and residual adds.
Probe decoder_norms_probe(Backend& b) {
  const DecoderNormKernels k = resolve_decoder_norms(b);
  Probe p;
  for (KernelHandle h : {k.rms_norm, k.rms_norm_residual, k.add})
    if (h) p.kernels.push_back(name_of(b, h));
  p.native = static_cast<bool>(k.rms_norm_residual);
  p.primary = "norm/rms_norm_residual";
  return p;
}

// The zero-centred norms of a hybrid model's layers (no fused add + norm serves them).
Probe zero_centred_norms_probe(Backend& b) {
  const DecoderNormKernels k = resolve_decoder_norms(b, /*zero_centred=*/true);
  return Probe{.native = true, .kernels = {name_of(b, k.rms_norm), name_of(b, k.add)}, .primary = {}};
}

// Greedy tokens: sample/argmax as the engine tries it, else the host's argmax on copied logits.
Probe greedy_probe(Backend& b) {
  const KernelHandle h = try_argmax_kernel(b);
  Probe p;
  p.kernels.push_back(h ? name_of(b, h) : "argmax on the host");
  p.native = static_cast<bool>(h);
  p.primary = "sample/argmax";
  return p;
}

std::vector<PathSpec> paths() {
  using A = Activation;
  const std::vector<Need> dense{kTileGemm, kAct};
  return {
      {"dense/decode", "dense FFN, 1 row (W4A16)", with(dense, {{"w4a16/w4a16_gemv"}}),
       [](Backend& b, A a) { return dense_probe(b, a, 1, "w4a16/w4a16_gemv"); }},
      {"dense/batched", "dense FFN, 8 rows (W4A16)", with(dense, {{"w4a16/w4a16_gemv_b8"}}),
       [](Backend& b, A a) { return dense_probe(b, a, 8, "w4a16/w4a16_gemv_b8"); }},
      {"dense/prefill", "dense FFN, 64 rows (W4A16)", dense,
       [](Backend& b, A a) { return dense_probe(b, a, 64, ""); }},
      {"moe/grouped", "MoE experts in one grouped GEMM", with(kMoeBase, {{"moe/w4a16_grouped_gemm"}}),
       [](Backend& b, A a) { return moe_probe(b, a, true, false); }},
      {"moe/per_expert", "MoE experts one launch each", with(kMoeBase, {kTileGemm}),
       [](Backend& b, A a) { return moe_probe(b, a, false, false); }},
      {"moe/device_routing", "MoE routing on the device (moe_align)",
       with(kMoeBase, {{"moe/w4a16_grouped_gemm"}, {"moe/moe_align"}}),
       [](Backend& b, A a) { return moe_probe(b, a, true, true); }},
      {"act/silu", "SiLU activation", {{"act/silu_mul"}, kTileGemm},
       [](Backend& b, A) { return dense_probe(b, Activation::silu, 64, ""); }},
      {"act/gelu", "GELU (tanh) activation", {{"act/gelu_mul"}, kTileGemm},
       [](Backend& b, A) { return dense_probe(b, Activation::gelu_tanh, 64, ""); }},
      {"quant/w4a16_zp", "4-bit weights with zero points", {{"w4a16_zp/w4a16_zp_gemm"}, kAct},
       [](Backend& b, A a) { return family_probe(b, a, WeightFormat::w4_zp, ActivationQuant::bf16, KernelFamily::w4a16_zp); }},
      {"quant/w8a16", "8-bit weights with zero points", {{"w8a16/w8a16_gemm"}, kAct},
       [](Backend& b, A a) { return family_probe(b, a, WeightFormat::w8_zp, ActivationQuant::bf16, KernelFamily::w8a16); }},
      {"quant/fp8", "FP8 (E4M3) weights", {{"fp8/fp8_gemm"}, kAct},
       [](Backend& b, A a) { return family_probe(b, a, WeightFormat::fp8, ActivationQuant::bf16, KernelFamily::fp8); }},
      {"quant/bf16", "unquantized bf16 weights", {{"bf16/bf16_gemm"}, kAct},
       [](Backend& b, A a) { return family_probe(b, a, WeightFormat::bf16, ActivationQuant::bf16, KernelFamily::bf16); }},
      {"quant/f16", "unquantized f16 weights", {{"f16/f16_gemm"}, kAct},
       [](Backend& b, A a) { return family_probe(b, a, WeightFormat::f16, ActivationQuant::bf16, KernelFamily::f16); }},
      {"quant/w4a8", "4-bit weights, int8 activations", {{"w4a8/w4a8_gemm"}, {"quant/quantize_int8"}, kAct},
       [](Backend& b, A a) { return family_probe(b, a, WeightFormat::w4_zp, ActivationQuant::int8, KernelFamily::w4a8); }},
      {"quant/w8a8", "8-bit weights, int8 activations", {{"w8a8/w8a8_gemm"}, {"quant/quantize_int8"}, kAct},
       [](Backend& b, A a) { return family_probe(b, a, WeightFormat::w8_zp, ActivationQuant::int8, KernelFamily::w8a8); }},
      {"quant/act_order", "act-order weights (gather_k)", {{"quant/gather_k"}, {"w4a16_zp/w4a16_zp_gemm"}, kAct},
       [](Backend& b, A a) {
         return family_probe(b, a, WeightFormat::w4_zp, ActivationQuant::bf16, KernelFamily::w4a16_zp, true);
       }},
      {"decoder/attention", "self-attention over the paged KV cache (bf16 weights, RoPE)", kAttention,
       [](Backend& b, A) { return attention_probe(b, "llama", ""); }},
      {"decoder/qk_norm_rope", "Qwen3's q/k RMSNorm and RoPE in one kernel", with(kAttention, {{"rope/qk_norm_rope"}}),
       [](Backend& b, A) { return attention_probe(b, "qwen3", "rope/qk_norm_rope"); }},
      {"decoder/bias", "q/k/v projection biases (Qwen2)", with(kAttention, {{"norm/bias_add"}}),
       [](Backend& b, A) { return attention_probe(b, "qwen2", "norm/bias_add"); }},
      {"decoder/layer", "the decoder layer's norms and residual adds", {{"norm/rms_norm"}, {"norm/add"}, {"norm/rms_norm_residual"}},
       [](Backend& b, A) { return decoder_norms_probe(b); }},
      {"hybrid/deltanet", "Gated DeltaNet mixer (Qwen3.5, Qwen3-Next): conv, chunked and recurrent delta rule, gated norm",
       {{"deltanet/conv_silu"}, {"deltanet/delta_rule_chunked"}, {"deltanet/delta_rule_recurrent"}, {"deltanet/gated_norm"},
        {"bf16/bf16_gemm"}},
       [](Backend& b, A) { return deltanet_probe(b); }},
      {"hybrid/gated_attention", "gated attention: heads of 256, output gate, zero-centred q/k norm, partial RoPE",
       with(kAttention, {{"attn/output_gate"}, {"norm/rms_norm_zero_centred"}}),
       [](Backend& b, A) { return gated_attention_probe(b); }},
      {"hybrid/layer", "the hybrid layer's zero-centred norms and residual adds", {{"norm/rms_norm_zero_centred"}, {"norm/add"}},
       [](Backend& b, A) { return zero_centred_norms_probe(b); }},
      {"engine/greedy", "greedy tokens chosen on the device, only ids copied back", {{"sample/argmax"}},
       [](Backend& b, A) { return greedy_probe(b); }},
  };
}

// The audit's reason for the last lookup of `kernel` ("module/name"), for a FAILS row.
std::string last_reason(Backend& b, const std::string& kernel) {
  std::string reason;
  for (const auto& row : b.audit().snapshot())
    if (row.module + "/" + row.kernel == kernel) reason = row.reason;
  return reason.empty() ? "no lookup of it was made" : reason;
}

CoverageRow evaluate(Backend& b, const PathSpec& spec, Activation act) {
  CoverageRow row{spec.path, spec.what, PathStatus::cannot_run, {}, first_unmet(b, spec.needs)};
  const bool claimed = row.detail.empty();
  try {
    Probe p = spec.probe(b, act);
    row.kernels = std::move(p.kernels);
    if (p.native) {
      row.status = PathStatus::serves;
    } else if (!claimed) {
      row.status = PathStatus::falls_back;
    } else {
      row.status = PathStatus::fails;
      const std::string primary = p.primary.substr(0, p.primary.find(' '));
      row.detail = "the manifest lists " + p.primary + ", but the layers fell back: " + primary + ": " + last_reason(b, primary);
    }
  } catch (const std::exception& e) {
    if (claimed) {
      row.status = PathStatus::fails;
      row.detail = std::string("the manifest lists every kernel it needs, but it cannot be built: ") + e.what();
    }
  }
  return row;
}

}  // namespace

const char* path_status_name(PathStatus status) noexcept {
  switch (status) {
    case PathStatus::serves: return "serves";
    case PathStatus::falls_back: return "falls back";
    case PathStatus::cannot_run: return "cannot run";
    case PathStatus::fails: return "FAILS";
  }
  return "?";
}

std::vector<CoverageRow> coverage(Backend& backend) {
  // The other paths build an FFN with the activation the backend has (SiLU first).
  const Activation act = unusable(backend, "act/silu_mul").empty() ? Activation::silu : Activation::gelu_tanh;
  std::vector<CoverageRow> rows;
  for (const PathSpec& spec : paths()) rows.push_back(evaluate(backend, spec, act));
  return rows;
}

std::string render_coverage(const std::vector<CoverageRow>& rows) {
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows) {
    std::string kernels;
    for (const auto& k : r.kernels) kernels += (kernels.empty() ? "" : ", ") + k;
    table.push_back({r.path, path_status_name(r.status), kernels.empty() ? "-" : kernels, r.detail});
  }
  return render_table({"path", "status", "runs on", "detail"}, table);
}

}  // namespace metrale::conformance
