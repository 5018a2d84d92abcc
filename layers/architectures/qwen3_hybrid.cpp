// SPDX-License-Identifier: MIT OR Apache-2.0
// The hybrid Qwen models as transformers' modeling_qwen3_next and modeling_qwen3_5 compute them:
// three of every four layers mix tokens with a Gated DeltaNet (layers/deltanet), the others with
// attention whose heads are 256 wide, whose q_proj carries an output gate per head and whose
// rotary embedding turns a quarter of each head; every RMSNorm but the DeltaNet's is
// zero-centred. Qwen3-Next stores the DeltaNet's projections grouped per key head and has a
// Qwen2-MoE style FFN; Qwen3.5's text model is dense, and Qwen3_5ForConditionalGeneration wraps it
// with a vision tower, which is skipped. Qwen3.5-MoE is Qwen3.5 with a MoE FFN on every layer
// (softmax top-k, always renormalised, plus sigmoid(x . shared_expert_gate) * shared_expert(x)),
// its experts read fused (gate_up_proj [E, 2I, H], down_proj [E, H, I], as released) or per
// expert (as transformers' save_pretrained writes them); Qwen3_5MoeForConditionalGeneration wraps it.
#include "architectures/specs.hpp"

#include "io/config_json.hpp"

namespace metrale::layers {

using namespace spec_parts;
using config_json::Object;

namespace {

void layer_types_listed(const Object&, std::string_view) {}  // entries checked against the mixers (registry.cpp)

void rotary_fraction(const Object& root, std::string_view key) {
  const auto f = root.number(key);
  if (!f || !(*f > 0 && *f <= 1)) root.unsupported(key, *root.find(key), "a fraction in (0, 1] of each head that rotates");
}

// Qwen3.5's mrope_section is plain RoPE for text positions (all three position ids are equal).
void default_rope_object(const Object& root, std::string_view key) {
  const auto rope = root.object(key, "an object (the rotary embedding)");
  if (!rope) return;
  const char* type_key = rope->has("rope_type") ? "rope_type" : "type";
  if (const auto type = rope->string(type_key); type && *type != "default")
    rope->unsupported(type_key, *rope->find(type_key), "\"default\" (with partial rotary)");
  if (rope->has("partial_rotary_factor")) rotary_fraction(*rope, "partial_rotary_factor");
}

// Released Qwen3.5 configs name the DeltaNet state's dtype; metrale keeps it in f32.
void state_in_f32(const Object& root, std::string_view key) {
  if (const auto dtype = root.string(key); dtype && *dtype != "float32")
    root.unsupported(key, *root.find(key), "\"float32\" (the DeltaNet's state is kept in f32)");
}

void output_gate_on(const Object& root, std::string_view key) {
  if (!root.boolean(key).value_or(true)) root.unsupported(key, *root.find(key), "true (the attention's output gate)");
}

void positive(const Object& root, std::string_view key) {
  if (const auto v = root.u32(key); !v || *v == 0) root.malformed(key, "a positive integer", root.find(key));
}

std::vector<HonouredKey> hybrid_keys() {
  return {{"layer_types", "full_attention and linear_attention entries", layer_types_listed},
          {"full_attention_interval", "layer i is full attention iff (i + 1) % interval == 0 (without layer_types)", positive},
          {"linear_conv_kernel_dim", "2 .. 8", positive},
          {"linear_key_head_dim", "16 .. 256", positive},
          {"linear_value_head_dim", "16 .. 256", positive},
          {"linear_num_key_heads", "dividing linear_num_value_heads", positive},
          {"linear_num_value_heads", "a multiple of linear_num_key_heads", positive},
          {"partial_rotary_factor", "a fraction in (0, 1] (default 0.25)", rotary_fraction},
          {"rope_parameters", "rope_type default, partial_rotary_factor, mrope_section (text: plain RoPE)", default_rope_object},
          {"rope_scaling", "rope_type default", default_rope_object},
          {"attention_bias", "false", key_checks::must_be_false},
          {"attn_output_gate", "true", output_gate_on},
          {"mtp_use_dedicated_embeddings", "any (the MTP head is not run)", nullptr},
          {"mamba_ssm_dtype", "float32 (the DeltaNet's state dtype)", state_in_f32}};
}

// transformers' Qwen3_5MoeSparseMoeBlock has a MoE FFN on every layer; keys that would make some
// layers dense are refused rather than followed.
void every_layer_moe(const Object& root, std::string_view key) {
  const nlohmann::json& v = *root.find(key);
  const bool inert = v.is_null() || (v.is_array() && v.empty()) || (key == "decoder_sparse_step" && v == 1);
  if (!inert) root.unsupported(key, v, key == "decoder_sparse_step" ? "1 (a MoE FFN on every layer)" : "[] (a MoE FFN on every layer)");
}

std::vector<HonouredKey> qwen35_moe_keys() {
  return {{"num_experts", "up to 4096", nullptr},
          {"num_experts_per_tok", "1 .. the experts", nullptr},
          {"moe_intermediate_size", "a multiple of 128", nullptr},
          {"shared_expert_intermediate_size", "a multiple of 128 (the gated shared expert)", nullptr},
          {"norm_topk_prob", "any: the top-k weights are always renormalised (as transformers' router does)", nullptr},
          {"decoder_sparse_step", "1 (a MoE FFN on every layer)", every_layer_moe},
          {"mlp_only_layers", "[] (a MoE FFN on every layer)", every_layer_moe}};
}

std::vector<TensorEntry> deltanet_tensors(DeltaNetProjections projections) {
  std::vector<TensorEntry> t;
  if (projections == DeltaNetProjections::separate) {
    t = {{"model.layers.{L}.linear_attn.in_proj_qkv", TensorKind::linear, "DeltaNet q, k, v (flat)", TensorBias::none},
         {"model.layers.{L}.linear_attn.in_proj_z", TensorKind::linear, "DeltaNet output gate z", TensorBias::none},
         {"model.layers.{L}.linear_attn.in_proj_a", TensorKind::linear, "DeltaNet decay input a", TensorBias::none},
         {"model.layers.{L}.linear_attn.in_proj_b", TensorKind::linear, "DeltaNet write strength b", TensorBias::none}};
  } else {
    t = {{"model.layers.{L}.linear_attn.in_proj_qkvz", TensorKind::linear, "DeltaNet q, k, v, z (per key head)", TensorBias::none},
         {"model.layers.{L}.linear_attn.in_proj_ba", TensorKind::linear, "DeltaNet b, a (per key head)", TensorBias::none}};
  }
  t.push_back({"model.layers.{L}.linear_attn.conv1d.weight", TensorKind::vector, "DeltaNet causal conv [C, 1, K]", TensorBias::none});
  t.push_back({"model.layers.{L}.linear_attn.A_log", TensorKind::vector, "DeltaNet decay rate (log)", TensorBias::none});
  t.push_back({"model.layers.{L}.linear_attn.dt_bias", TensorKind::vector, "DeltaNet decay bias", TensorBias::none});
  t.push_back({"model.layers.{L}.linear_attn.norm.weight", TensorKind::vector, "DeltaNet gated norm", TensorBias::none});
  t.push_back({"model.layers.{L}.linear_attn.out_proj", TensorKind::linear, "DeltaNet output", TensorBias::none});
  return t;
}

// What every hybrid language model of this file shares: both mixers, Qwen3-style q/k norm
// without biases, zero-centred norms, the gated attention rotating a quarter of each head, an MTP
// head's tensors skipped.
ArchitectureSpec hybrid_spec(std::string_view model_type, std::string_view description, std::string_view cls,
                             std::vector<FfnKind> ffns, DeltaNetProjections deltanet) {
  ArchitectureSpec s;
  s.model_type = model_type;
  s.description = description;
  s.classes = {cls};
  s.mixers = {TokenMixer::linear_attention, TokenMixer::full_attention};
  s.ffns = std::move(ffns);
  s.qk_norm = true;
  s.attention_bias = AttentionBias::none;
  s.zero_centred_norms = true;
  s.attention_output_gate = true;
  s.default_partial_rotary_factor = 0.25;
  s.deltanet = deltanet;
  s.unused_tensors = {"mtp."};
  return s;
}

const ArchitectureSpec kQwen3Next = [] {
  ArchitectureSpec s = hybrid_spec("qwen3_next",
                                   "Qwen3-Next: Gated DeltaNet (3 of 4 layers) + gated attention (heads of 256, partial "
                                   "RoPE), zero-centred RMSNorm, MoE FFN with a gated shared expert",
                                   "Qwen3NextForCausalLM", {FfnKind::dense, FfnKind::moe},
                                   DeltaNetProjections::grouped_per_key_head);
  s.keys = join(join(hybrid_keys(), moe_keys()), {{"shared_expert_intermediate_size", "a multiple of 128", nullptr}});
  s.tensors = join(join(join(decoder_tensors(true), dense_ffn_tensors()), qwen_moe_tensors(true)),
                   deltanet_tensors(DeltaNetProjections::grouped_per_key_head));
  return s;
}();

const ArchitectureSpec kQwen35Text = [] {
  ArchitectureSpec s = hybrid_spec("qwen3_5_text",
                                   "Qwen3.5 (text): Gated DeltaNet (3 of 4 layers) + gated attention (heads of 256, "
                                   "partial RoPE), zero-centred RMSNorm, SiLU-gated FFN",
                                   "Qwen3_5ForCausalLM", {FfnKind::dense}, DeltaNetProjections::separate);
  s.keys = hybrid_keys();
  s.tensors = join(join(decoder_tensors(true), dense_ffn_tensors()), deltanet_tensors(DeltaNetProjections::separate));
  return s;
}();

const ArchitectureSpec kQwen35MoeText = [] {
  ArchitectureSpec s = hybrid_spec("qwen3_5_moe_text",
                                   "Qwen3.5-MoE (text): Qwen3.5's mixers, a MoE FFN on every layer (softmax top-k, "
                                   "always renormalised) with a gated shared expert; experts fused or per expert",
                                   "Qwen3_5MoeForCausalLM", {FfnKind::moe}, DeltaNetProjections::separate);
  s.keys = join(hybrid_keys(), qwen35_moe_keys());
  s.tensors = join(join(decoder_tensors(true), qwen_moe_tensors(true)), deltanet_tensors(DeltaNetProjections::separate));
  s.topk_norm = TopkNorm::always;
  return s;
}();

// `text` says which language model the wrapper's text_config holds.
std::vector<HonouredKey> wrapper_keys(std::string_view text) {
  return {{"text_config", text, nullptr},
          {"vision_config", "any (the vision tower is not run; its tensors are skipped)", nullptr},
          {"image_token_id", "any (images are not run)", nullptr},
          {"video_token_id", "any (videos are not run)", nullptr},
          {"vision_start_token_id", "any", nullptr},
          {"vision_end_token_id", "any", nullptr},
          {"tie_word_embeddings", "true or false (the wrapper's flag decides, as in transformers)", nullptr}};
}

// A ConditionalGeneration wrapper of `text`: its language model's structure (for the listing),
// its own keys, the language model's tensors under model.language_model., the vision tower skipped.
ArchitectureSpec wrapper_of(const ArchitectureSpec& text, std::string_view model_type, std::string_view description,
                            std::string_view cls, std::string_view text_config) {
  ArchitectureSpec s = text;
  s.model_type = model_type;
  s.description = description;
  s.classes = {cls};
  s.keys = wrapper_keys(text_config);
  s.tensors = {};
  s.language_model_key = "text_config";
  s.language_model_root = "model.language_model.";
  s.unused_tensors = {"model.visual.", "mtp."};
  return s;
}

const ArchitectureSpec kQwen35 =
    wrapper_of(kQwen35Text, "qwen3_5",
               "Qwen3.5 (Qwen3_5ForConditionalGeneration): its text model (qwen3_5_text); the vision tower is skipped",
               "Qwen3_5ForConditionalGeneration", "the language model's config (qwen3_5_text)");

const ArchitectureSpec kQwen35Moe =
    wrapper_of(kQwen35MoeText, "qwen3_5_moe",
               "Qwen3.5-MoE (Qwen3_5MoeForConditionalGeneration): its text model (qwen3_5_moe_text); the vision tower "
               "is skipped",
               "Qwen3_5MoeForConditionalGeneration", "the language model's config (qwen3_5_moe_text)");

}  // namespace

std::vector<const ArchitectureSpec*> qwen3_hybrid_specs() {
  return {&kQwen3Next, &kQwen35Text, &kQwen35, &kQwen35MoeText, &kQwen35Moe};
}

}  // namespace metrale::layers
