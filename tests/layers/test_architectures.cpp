// SPDX-License-Identifier: MIT OR Apache-2.0
// The architecture registry (layers/architectures/): lookups, what each spec reads, the keys it
// refuses or warns about, and the tensor table. Whole checkpoints written by transformers run in
// tests/checkpoints/run_architecture_tests.py.
#include <doctest/doctest.h>

#include "architectures/architecture.hpp"
#include "attention/attention_config.hpp"

#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <string>

using namespace metrale::layers;
using nlohmann::json;

namespace {

json llama_like(const char* model_type) {
  return {{"model_type", model_type}, {"hidden_size", 256}, {"intermediate_size", 512}, {"num_hidden_layers", 2},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 64}, {"vocab_size", 512},
          {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}};
}

std::string architecture_refusal_of(const json& doc) {
  try {
    (void)resolve_architecture(doc, "config.json", ArchitectureUse::decoder, false);
  } catch (const metrale::Refusal& r) {
    return r.what();
  }
  return "(no refusal)";
}

}  // namespace

TEST_CASE("every supported model_type has a spec; the registry lists each once") {
  for (const char* type : {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text",
                           "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe", "deepseek_v2", "deepseek_v3"}) {
    CAPTURE(type);
    const ArchitectureSpec* s = find_architecture(type);
    REQUIRE(s != nullptr);
    CHECK(s->model_type == type);
    CHECK((!s->tensors.empty() || !s->language_model_key.empty()));  // a wrapper's tensors are its language model's
  }
  CHECK(find_architecture("gemma3") == nullptr);
  CHECK(architectures().size() == 14);
  const json listed = architectures_json();
  CHECK(listed["architectures"].size() == 14);
  CHECK(listed["architectures"][5]["model_type"] == "qwen3");
  CHECK(listed["architectures"][5]["qk_norm"] == true);
}

TEST_CASE("the spec decides the attention's biases and q/k norm, not the model_type's spelling") {
  json qwen2_moe = llama_like("qwen2_moe");
  CHECK(parse_attention_config(qwen2_moe, "c").qkv_bias);  // qkv_bias defaults to true
  qwen2_moe["qkv_bias"] = false;
  CHECK(!parse_attention_config(qwen2_moe, "c").qkv_bias);
  const AttentionConfig qwen2 = parse_attention_config(llama_like("qwen2"), "c");
  CHECK((qwen2.qkv_bias && !qwen2.o_bias && !qwen2.qk_norm));
  json llama = llama_like("llama");
  llama["attention_bias"] = true;
  const AttentionConfig biased = parse_attention_config(llama, "c");
  CHECK((biased.qkv_bias && biased.o_bias && !biased.qk_norm));
  CHECK(parse_attention_config(llama_like("qwen3"), "c").qk_norm);
  json mistral = llama_like("mistral");
  CHECK(!parse_attention_config(mistral, "c").qkv_bias);
}

TEST_CASE("layer_types: one entry per layer, each a mixer of the spec") {
  json q = llama_like("qwen3");
  q["layer_types"] = {"full_attention", "full_attention"};
  const ResolvedArchitecture r = resolve_architecture(q, "config.json", ArchitectureUse::decoder, false);
  CHECK(r.layer_mixers == std::vector<TokenMixer>{TokenMixer::full_attention, TokenMixer::full_attention});
  q["layer_types"] = {"full_attention", "sliding_attention"};
  CHECK(architecture_refusal_of(q) == "config.json: layer_types[1] = \"sliding_attention\" is not supported: qwen3 layers in metrale: full_attention");
  q["layer_types"] = {"full_attention"};
  CHECK_THROWS_WITH_AS(resolve_architecture(q, "config.json", ArchitectureUse::decoder, false),
                       doctest::Contains("one entry per layer"), metrale::Error);
}

TEST_CASE("refusals name the file, the key, its value and what is supported") {
  json unknown = llama_like("gemma3");
  unknown["text_config"] = {{"model_type", "gemma3_text"}};
  const std::string wrapper = architecture_refusal_of(unknown);
  CHECK(wrapper.find("config.json: model_type = \"gemma3\" is not supported") == 0);
  CHECK(wrapper.find("gemma3_text") != std::string::npos);
  CHECK(architecture_refusal_of(json{{"hidden_size", 256}}).find("model_type is missing") != std::string::npos);

  json softcap = llama_like("qwen3");
  softcap["final_logit_softcapping"] = 30.0;
  CHECK(architecture_refusal_of(softcap) == "config.json: final_logit_softcapping = 30.0 is not supported: null (no soft-capping) "
                               "(qwen3 in metrale does not read final_logit_softcapping)");
  softcap["final_logit_softcapping"] = nullptr;  // inert: passes
  CHECK(architecture_refusal_of(softcap) == "(no refusal)");

  json window = llama_like("mistral");
  window["sliding_window"] = 4096;  // == max_position_embeddings: never reached
  CHECK(architecture_refusal_of(window) == "(no refusal)");
  window["sliding_window"] = 1024;
  CHECK(architecture_refusal_of(window).find("config.json: sliding_window = 1024 is not supported") == 0);

  json qwen = llama_like("qwen2");
  qwen["sliding_window"] = 1024;  // off unless use_sliding_window
  qwen["use_sliding_window"] = false;
  CHECK(architecture_refusal_of(qwen) == "(no refusal)");
  qwen["use_sliding_window"] = true;
  CHECK(architecture_refusal_of(qwen) != "(no refusal)");

  json mlp_bias = llama_like("qwen3");  // only Llama reads mlp_bias
  mlp_bias["mlp_bias"] = true;
  CHECK(architecture_refusal_of(mlp_bias).find("mlp_bias = true is not supported") != std::string::npos);
  json gelu = llama_like("llama");
  gelu["hidden_act"] = "gelu";
  CHECK(architecture_refusal_of(gelu).find("hidden_act = \"gelu\" is not supported") != std::string::npos);
  json partial = llama_like("llama");
  partial["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.25}};
  CHECK(architecture_refusal_of(partial).find("rope_parameters.partial_rotary_factor = 0.25") != std::string::npos);

  json deepseek = llama_like("deepseek_v2");
  CHECK(architecture_refusal_of(deepseek).find("multi-head latent attention") != std::string::npos);
  CHECK(resolve_architecture(deepseek, "c", ArchitectureUse::ffn_only, false).spec->model_type == "deepseek_v2");
}

TEST_CASE("inert keys pass silently; a key in no list is reported, not read") {
  json q = llama_like("qwen3");
  q["transformers_version"] = "5.25.0";
  q["bos_token_id"] = 1;
  q["dtype"] = "bfloat16";
  q["frobnication_level"] = 3;
  const ResolvedArchitecture r = resolve_architecture(q, "config.json", ArchitectureUse::decoder, false);
  CHECK(r.unknown_keys == std::vector<std::string>{"frobnication_level"});
}

TEST_CASE("Qwen3.5-MoE: top-k weights always renormalised, every layer MoE, the wrapper's language model") {
  json text = llama_like("qwen3_5_moe_text");
  text.erase("intermediate_size");
  text["num_experts"] = 4;
  text["num_experts_per_tok"] = 2;
  text["moe_intermediate_size"] = 128;
  text["shared_expert_intermediate_size"] = 128;
  text["layer_types"] = {"linear_attention", "full_attention"};
  CHECK(architecture_refusal_of(text) == "(no refusal)");
  const ModelConfig c = architecture_model_config(text, "config.json");
  CHECK(c.norm_topk_prob);  // no norm_topk_prob key: the spec says always
  CHECK(c.shared_expert_intermediate_size == 128);
  text["norm_topk_prob"] = false;  // transformers' router ignores it too
  CHECK(architecture_model_config(text, "config.json").norm_topk_prob);
  CHECK(!parse_model_config(text, "config.json").norm_topk_prob);  // what the key alone would say

  json dense_layers = text;
  dense_layers["mlp_only_layers"] = {0};
  CHECK(architecture_refusal_of(dense_layers).find("mlp_only_layers = [0] is not supported") != std::string::npos);
  dense_layers = text;
  dense_layers["decoder_sparse_step"] = 2;
  CHECK(architecture_refusal_of(dense_layers).find("decoder_sparse_step = 2 is not supported") != std::string::npos);
  dense_layers["decoder_sparse_step"] = 1;
  CHECK(architecture_refusal_of(dense_layers) == "(no refusal)");

  const json wrapper{{"model_type", "qwen3_5_moe"}, {"text_config", text}, {"vision_config", json::object()},
                     {"tie_word_embeddings", false}};
  const ResolvedArchitecture r = resolve_architecture(wrapper, "config.json", ArchitectureUse::decoder, false);
  CHECK(r.spec->model_type == "qwen3_5_moe_text");
  CHECK(r.wrapper->model_type == "qwen3_5_moe");
  CHECK(architecture_model_config(wrapper, "config.json").norm_topk_prob);
  json wrong = wrapper;
  wrong["text_config"]["model_type"] = "qwen3_5_text";
  CHECK(architecture_refusal_of(wrong).find("text_config.model_type = \"qwen3_5_text\" is not supported") != std::string::npos);
}
