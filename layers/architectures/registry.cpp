// SPDX-License-Identifier: MIT OR Apache-2.0
// The registry of architecture specs, the keys every spec shares, and the checks that refuse what
// no spec honours (architecture.hpp).
#include "architectures/architecture.hpp"
#include "architectures/specs.hpp"

#include "io/config_json.hpp"
#include "io/safetensors_header.hpp"  // display_name
#include "io/tensor_source.hpp"

#include <metrale/log.hpp>
#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>

namespace metrale::layers {

using config_json::Object;

const char* token_mixer_name(TokenMixer mixer) noexcept {
  switch (mixer) {
    case TokenMixer::full_attention: return "full_attention";
    case TokenMixer::linear_attention: return "linear_attention";
  }
  return "?";
}

namespace key_checks {

void must_be_false(const Object& root, std::string_view key) {
  if (root.boolean(key).value_or(false)) root.unsupported(key, *root.find(key), "false");
}

// A window no sequence can reach changes nothing; a smaller one masks keys metrale would attend.
void sliding_window_inactive(const Object& root, std::string_view key) {
  const auto window = root.u32(key);
  if (!window || *window == 0) return;  // null, or Qwen2-MoE's 0: no window
  if (root.has("use_sliding_window") && !root.boolean("use_sliding_window").value_or(false)) return;  // Qwen: off
  const uint32_t context = root.u32("max_position_embeddings").value_or(0);
  if (*window < context || context == 0) {
    root.unsupported(key, *root.find(key),
                     "no sliding window: null, or at least max_position_embeddings (= " + std::to_string(context) +
                         "); metrale's attention is causal over the whole context");
  }
}

}  // namespace key_checks

namespace {

void positive(const Object& root, std::string_view key) {
  if (const auto v = root.u32(key); !v || *v == 0) root.malformed(key, "a positive integer", root.find(key));
}

void any_number(const Object& root, std::string_view key) { (void)root.number(key); }
void any_bool(const Object& root, std::string_view key) { (void)root.boolean(key); }

// The activations the act kernels compute exactly (erf-GELU is not among them).
void exact_activation(const Object& root, std::string_view key) {
  const auto act = root.string(key).value_or("silu");
  for (const char* ok : {"silu", "swish", "gelu_pytorch_tanh", "gelu_new", "gelu_fast"})
    if (act == ok) return;
  root.unsupported(key, *root.find(key), "silu, swish, gelu_pytorch_tanh, gelu_new or gelu_fast (the act kernels)");
}

// Rope settings are read and refused field by field by attention/rope.cpp; here only their shape.
void rope_object(const Object& root, std::string_view key) {
  const auto rope = root.object(key, "an object (the rotary embedding)");
  if (!rope) return;
  if (const auto* partial = rope->find("partial_rotary_factor"); partial && !(partial->is_number() && partial->get<double>() == 1.0))
    rope->unsupported("partial_rotary_factor", *partial, "1 (the whole head rotates)");
  // A rope per layer type (Gemma 3's {"full_attention": {...}, "sliding_attention": {...}}).
  for (const char* nested : {"full_attention", "sliding_attention"})
    if (rope->has(nested)) rope->unsupported(nested, *rope->find(nested), "one rotary embedding for every layer");
}

void one_rotary_factor(const Object& root, std::string_view key) {
  if (const auto f = root.number(key); f && *f != 1.0) root.unsupported(key, *root.find(key), "1 (the whole head rotates)");
}

}  // namespace

const std::vector<HonouredKey>& common_keys() {
  static const std::vector<HonouredKey> keys{
      {"model_type", "a model_type of this registry", nullptr},
      {"hidden_size", "a multiple of 128", positive},
      {"intermediate_size", "a multiple of 128 (the dense FFN)", nullptr},
      {"num_hidden_layers", "any", positive},
      {"num_attention_heads", "at most 128 per kv head", positive},
      {"num_key_value_heads", "dividing num_attention_heads", nullptr},
      {"head_dim", "64, 128 or 256 (else hidden_size / num_attention_heads)", nullptr},
      {"vocab_size", "any", positive},
      {"rms_norm_eps", "any", any_number},
      {"max_position_embeddings", "any (yarn's context ratio, the sliding-window check)", nullptr},
      {"tie_word_embeddings", "true or false (the logits projection is the embedding)", any_bool},
      {"hidden_act", "silu, swish, gelu_pytorch_tanh, gelu_new, gelu_fast", exact_activation},
      {"rope_theta", "above 1", nullptr},
      {"rope_scaling", "rope_type default, llama3 or yarn", rope_object},
      {"rope_parameters", "rope_type default, llama3 or yarn", rope_object},
      {"partial_rotary_factor", "1", one_rotary_factor},
      {"original_max_position_embeddings", "any (yarn)", nullptr},
      {"quantization_config", "the formats of docs/checkpoint-formats.md", nullptr},
  };
  return keys;
}

const std::vector<std::string_view>& inert_keys() {
  // What changes nothing metrale computes: identity, dtype, token ids, training-only settings
  // (dropout, auxiliary losses, router noise), generation defaults, PretrainedConfig's bookkeeping.
  static const std::vector<std::string_view> keys{
      "architectures", "_name_or_path", "transformers_version", "torch_dtype", "dtype", "auto_map",
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
      "use_cache", "initializer_range", "attention_dropout", "embd_pdrop", "resid_pdrop", "hidden_dropout",
      "pretraining_tp", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
      "output_attentions", "output_hidden_states", "return_dict", "torchscript", "use_bfloat16", "tf_legacy_loss",
      "pruned_heads", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
      "cross_attention_hidden_size", "tie_encoder_decoder", "prefix", "problem_type", "finetuning_task", "id2label",
      "label2id", "tokenizer_class", "task_specific_params", "_attn_implementation_autoset", "attn_implementation",
      "do_sample", "temperature", "top_k", "top_p", "typical_p", "max_length", "min_length", "num_beams",
      "num_beam_groups", "diversity_penalty", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
      "encoder_no_repeat_ngram_size", "early_stopping", "num_return_sequences", "bad_words_ids",
      "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
      "suppress_tokens", "begin_suppress_tokens", "output_scores", "return_dict_in_generate",
      // Multi-token-prediction heads: recorded, not run (the main model's math is unchanged).
      "num_nextn_predict_layers", "mtp_num_hidden_layers",
  };
  return keys;
}

namespace {

// Keys other architectures use to change the math, each with the one value that changes nothing.
struct GuardedKey {
  std::string_view key;
  std::string_view inert;  // the value (as text) metrale computes
  bool (*is_inert)(const nlohmann::json& value);
};

bool is_null(const nlohmann::json& v) { return v.is_null(); }
bool is_false(const nlohmann::json& v) { return v.is_null() || (v.is_boolean() && !v.get<bool>()); }
bool is_one(const nlohmann::json& v) { return v.is_null() || (v.is_number() && v.get<double>() == 1.0); }
bool is_empty(const nlohmann::json& v) { return v.is_null() || (v.is_array() && v.empty()); }

const std::vector<GuardedKey>& guarded_keys() {
  static const std::vector<GuardedKey> keys{
      {"attn_logit_softcapping", "null (no soft-capping)", is_null},
      {"final_logit_softcapping", "null (no soft-capping)", is_null},
      {"query_pre_attn_scalar", "absent (scores scaled by head_dim^-0.5)", is_null},
      {"attention_multiplier", "absent (scores scaled by head_dim^-0.5)", is_null},
      {"embedding_multiplier", "1", is_one},
      {"residual_multiplier", "1", is_one},
      {"logits_scaling", "1", is_one},
      {"logit_scale", "1", is_one},
      {"scale_embedding", "false", is_false},
      {"use_qk_norm", "false", is_false},
      {"use_bidirectional_attention", "false", is_false},
      {"no_rope_layers", "absent (every layer rotates)", is_empty},
      {"hidden_activation", "absent (hidden_act)", is_null},
      {"attention_bias", "false", is_false},
      {"mlp_bias", "false", is_false},
      {"qkv_bias", "false", is_false},
      {"use_sliding_window", "false", is_false},
      {"sliding_window", "null", is_null},
      {"layer_types", "absent", is_null},
  };
  return keys;
}

const HonouredKey* find_key(const std::vector<HonouredKey>& keys, std::string_view key) {
  for (const auto& k : keys)
    if (k.key == key) return &k;
  return nullptr;
}

std::string supported_types() {
  std::string out;
  for (const ArchitectureSpec* s : architectures()) out += (out.empty() ? "" : ", ") + std::string(s->model_type);
  return out;
}

// layer_types (transformers 5 writes it for every model of these families): one entry per layer,
// each a mixer the spec runs.
std::vector<TokenMixer> layer_mixers(const ArchitectureSpec& spec, const Object& root, uint32_t layers) {
  std::vector<TokenMixer> out(layers, spec.mixers.front());
  const auto types = root.strings("layer_types");
  const bool hybrid = std::find(spec.mixers.begin(), spec.mixers.end(), TokenMixer::linear_attention) != spec.mixers.end();
  if (types.empty() && hybrid) {
    // Qwen3-Next's release form: no layer_types; layer i is full attention iff (i + 1) % interval == 0.
    const uint32_t interval = root.u32("full_attention_interval").value_or(4);
    if (interval == 0) root.malformed("full_attention_interval", "a positive integer", root.find("full_attention_interval"));
    for (uint32_t i = 0; i < layers; ++i)
      out[i] = (i + 1) % interval == 0 ? TokenMixer::full_attention : TokenMixer::linear_attention;
    return out;
  }
  if (types.empty()) return out;
  if (types.size() != layers) {
    root.malformed("layer_types", "one entry per layer (num_hidden_layers = " + std::to_string(layers) + ")", root.find("layer_types"));
  }
  std::string supported;
  for (TokenMixer m : spec.mixers) supported += (supported.empty() ? "" : ", ") + std::string(token_mixer_name(m));
  for (size_t i = 0; i < types.size(); ++i) {
    const auto it = std::find_if(spec.mixers.begin(), spec.mixers.end(),
                                 [&](TokenMixer m) { return types[i] == token_mixer_name(m); });
    if (it == spec.mixers.end()) {
      root.unsupported("layer_types[" + std::to_string(i) + "]", nlohmann::json(types[i]),
                       std::string(spec.model_type) + " layers in metrale: " + supported);
    }
    out[i] = *it;
  }
  return out;
}

void attention_biases(const ArchitectureSpec& spec, const Object& root, ResolvedArchitecture& r) {
  switch (spec.attention_bias) {
    case AttentionBias::none: break;
    case AttentionBias::qkv: r.qkv_bias = true; break;
    case AttentionBias::qkv_key: r.qkv_bias = root.boolean("qkv_bias").value_or(true); break;
    case AttentionBias::all_key: r.qkv_bias = r.o_bias = root.boolean("attention_bias").value_or(false); break;
  }
  r.mlp_bias = find_key(spec.keys, "mlp_bias") && root.boolean("mlp_bias").value_or(false);
}

}  // namespace

const ArchitectureSpec* find_architecture(std::string_view model_type) {
  for (const ArchitectureSpec* s : architectures())
    if (s->model_type == model_type) return s;
  return nullptr;
}

const std::vector<const ArchitectureSpec*>& architectures() {
  static const std::vector<const ArchitectureSpec*> all = [] {
    std::vector<const ArchitectureSpec*> v;
    for (const auto& group : {llama_specs(), qwen2_specs(), qwen3_specs(), qwen3_hybrid_specs(), deepseek_specs()})
      for (const ArchitectureSpec* s : group) v.push_back(s);
    return v;
  }();
  return all;
}

namespace {

// A wrapper's own keys, then its language model's config resolved as the document it is.
ResolvedArchitecture resolve_wrapper(const ArchitectureSpec& wrapper, const nlohmann::json& doc, const std::string& source,
                                     ArchitectureUse use, bool warn) {
  const Object root(doc, source, "", "a JSON object (the model config)");
  for (const auto& [key, value] : doc.items()) {
    if (const HonouredKey* k = find_key(wrapper.keys, key)) {
      if (k->check) k->check(root, key);
      continue;
    }
    const bool inert = std::find(inert_keys().begin(), inert_keys().end(), key) != inert_keys().end();
    if (!inert && key != "model_type" && warn) {
      logger()->warn("{}: key '{}' is not one metrale's {} spec reads or knows to be inert; ignored", source,
                     display_name(key), wrapper.model_type);
    }
  }
  const nlohmann::json inner = language_model_config(doc, source);
  ResolvedArchitecture r = resolve_architecture(inner, source + " (" + std::string(wrapper.language_model_key) + ")", use, warn);
  // The language model this wrapper's transformers class builds: qwen3_5 -> qwen3_5_text.
  const std::string expected = std::string(wrapper.model_type) + "_text";
  if (r.spec->model_type != expected)
    root.unsupported(std::string(wrapper.language_model_key) + ".model_type", inner["model_type"], "\"" + expected + "\"");
  r.wrapper = &wrapper;
  return r;
}

}  // namespace

nlohmann::json language_model_config(const nlohmann::json& doc, const std::string& source) {
  const Object root(doc, source, "", "a JSON object (the model config)");
  const ArchitectureSpec* spec = find_architecture(root.string("model_type").value_or(""));
  if (!spec || spec->language_model_key.empty()) return doc;
  const std::string key(spec->language_model_key);
  if (!root.object(key, "an object (the language model's config)")) root.malformed(key, "an object (the language model's config)", nullptr);
  nlohmann::json inner = doc.at(key);
  // transformers ties the wrapper's lm_head by the wrapper's own flag.
  if (doc.contains("tie_word_embeddings")) inner["tie_word_embeddings"] = doc["tie_word_embeddings"];
  return inner;
}

ModelConfig architecture_model_config(const nlohmann::json& doc, const std::string& source) {
  ModelConfig c = parse_model_config(language_model_config(doc, source), source);
  const ArchitectureSpec* spec = find_architecture(c.model_type);
  if (spec && spec->topk_norm == TopkNorm::always) c.norm_topk_prob = true;
  return c;
}

ResolvedArchitecture resolve_architecture(const nlohmann::json& doc, const std::string& source, ArchitectureUse use,
                                          bool warn) {
  const Object root(doc, source, "", "a JSON object (the model config)");
  const auto model_type = root.string("model_type");
  if (!model_type) {
    throw Refusal(source + ": model_type is missing: metrale runs an architecture it knows by its model_type (" +
                  supported_types() + ")");
  }
  ResolvedArchitecture r;
  r.spec = find_architecture(*model_type);
  if (!r.spec) {
    std::string inner;
    if (const auto text = root.object("text_config", "an object (the language model's config)")) {
      inner = "; its language model (text_config.model_type " + config_json::value_text(nlohmann::json(text->string("model_type").value_or(""))) +
              ") is not run inside a wrapper either";
    }
    root.unsupported("model_type", *root.find("model_type"), "one of " + supported_types() + inner +
                                                                 " (metrale list --architectures)");
  }
  const ArchitectureSpec& spec = *r.spec;
  if (!spec.language_model_key.empty()) return resolve_wrapper(spec, doc, source, use, warn);
  if (use == ArchitectureUse::ffn_only) return r;
  if (!spec.decode_refusal.empty()) {
    throw Refusal(root.where("model_type") + " = " + config_json::value_text(*root.find("model_type")) +
                  ": metrale does not decode it: " + std::string(spec.decode_refusal));
  }
  const nlohmann::json& object = doc;
  for (const auto& [key, value] : object.items()) {
    if (const HonouredKey* k = find_key(spec.keys, key)) {
      if (k->check) k->check(root, key);
      continue;
    }
    if (const HonouredKey* k = find_key(common_keys(), key)) {
      if (k->check) k->check(root, key);
      continue;
    }
    if (std::find(inert_keys().begin(), inert_keys().end(), key) != inert_keys().end()) continue;
    const auto guarded = std::find_if(guarded_keys().begin(), guarded_keys().end(), [&](const GuardedKey& g) { return g.key == key; });
    if (guarded != guarded_keys().end()) {
      if (!guarded->is_inert(value)) {
        root.unsupported(key, value, std::string(guarded->inert) + " (" + std::string(spec.model_type) + " in metrale does not read " +
                                         std::string(key) + ")");
      }
      continue;
    }
    r.unknown_keys.push_back(key);
  }
  r.layer_mixers = layer_mixers(spec, root, root.u32("num_hidden_layers").value_or(0));
  attention_biases(spec, root, r);
  if (warn) {
    for (const auto& key : r.unknown_keys) {
      logger()->warn("{}: key '{}' is not one metrale's {} spec reads or knows to be inert; ignored", source,
                     display_name(key), spec.model_type);
    }
  }
  return r;
}

namespace {

// The suffixes a linear module's tensors carry, across the formats of docs/checkpoint-formats.md.
constexpr std::array<std::string_view, 16> kLinearSuffixes{
    ".weight", ".bias", ".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_scale", ".weight_shape",
    ".weight_zero_point", ".weight_g_idx", ".input_scale", ".weight_scale_inv", ".input_zero_point", ".input_global_scale",
    ".weight_global_scale"};

// The rest of `name` after `pattern` ({L}/{E}: one or more digits); nullopt when it does not match.
std::optional<std::string_view> after_pattern(std::string_view pattern, std::string_view name) {
  size_t n = 0;
  for (size_t p = 0; p < pattern.size();) {
    if (pattern.compare(p, 3, "{L}") == 0 || pattern.compare(p, 3, "{E}") == 0) {
      const size_t start = n;
      while (n < name.size() && std::isdigit(static_cast<unsigned char>(name[n]))) ++n;
      if (n == start) return std::nullopt;
      p += 3;
      continue;
    }
    if (n >= name.size() || name[n] != pattern[p]) return std::nullopt;
    ++n;
    ++p;
  }
  return name.substr(n);
}

bool bias_declared(TensorBias bias, const ResolvedArchitecture& r) {
  switch (bias) {
    case TensorBias::none: return false;
    case TensorBias::qkv: return r.qkv_bias;
    case TensorBias::o: return r.o_bias;
    case TensorBias::mlp: return r.mlp_bias;
  }
  return false;
}

bool entry_names(const TensorEntry& e, const ResolvedArchitecture& r, std::string_view name) {
  const auto rest = after_pattern(e.name, name);
  if (!rest) return false;
  if (*rest == ".bias") return e.kind == TensorKind::linear && bias_declared(e.bias, r);
  switch (e.kind) {
    case TensorKind::vector: return rest->empty();
    case TensorKind::linear:
      return std::find(kLinearSuffixes.begin(), kLinearSuffixes.end(), *rest) != kLinearSuffixes.end();
    case TensorKind::fused_experts:
      // transformers 5's fused expert tensors carry no ".weight"; FP8 adds its scales.
      return rest->empty() || *rest == "_scale_inv" || *rest == "_scale" ||
             std::find(kLinearSuffixes.begin(), kLinearSuffixes.end(), *rest) != kLinearSuffixes.end();
  }
  return false;
}

}  // namespace

namespace {

// A tensor name as the spec's table names it: a wrapper's "model.language_model.x" is "model.x".
std::string spec_tensor_name(const ResolvedArchitecture& r, std::string_view name) {
  if (r.wrapper && name.starts_with(r.wrapper->language_model_root))
    return "model." + std::string(name.substr(r.wrapper->language_model_root.size()));
  return std::string(name);
}

const std::string_view* unused_prefix(const ResolvedArchitecture& r, std::string_view name) {
  for (const ArchitectureSpec* s : {r.wrapper, r.spec}) {
    if (!s) continue;
    for (const std::string_view& prefix : s->unused_tensors)
      if (name.starts_with(prefix)) return &prefix;
  }
  return nullptr;
}

}  // namespace

bool unused_tensor(const ResolvedArchitecture& r, std::string_view name) { return unused_prefix(r, name) != nullptr; }

std::vector<UnusedTensors> check_tensor_names(const ResolvedArchitecture& r, const TensorSource& src) {
  const ArchitectureSpec& spec = *r.spec;
  std::vector<UnusedTensors> unused;
  for (const std::string& stored : src.names()) {
    if (stored.ends_with(".rotary_emb.inv_freq")) continue;  // older checkpoints store RoPE's buffer; recomputed
    if (const std::string_view* prefix = unused_prefix(r, stored)) {
      auto it = std::find_if(unused.begin(), unused.end(), [&](const UnusedTensors& u) { return u.prefix == *prefix; });
      if (it == unused.end()) it = unused.insert(unused.end(), UnusedTensors{std::string(*prefix), 0});
      ++it->count;
      continue;
    }
    const std::string name = spec_tensor_name(r, stored);
    const bool named = std::any_of(spec.tensors.begin(), spec.tensors.end(), [&](const TensorEntry& e) { return entry_names(e, r, name); });
    if (named) continue;
    if (name.ends_with(".bias")) {
      throw Refusal(src.description() + ": tensor '" + display_name(stored) + "' is a bias the config does not declare (" +
                    std::string(spec.model_type) + ": attention_bias / qkv_bias / mlp_bias): metrale would leave it out");
    }
    throw Refusal(src.description() + ": tensor '" + display_name(stored) + "' is not one metrale's " + std::string(spec.model_type) +
                  " spec reads: the model computes something metrale would leave out (metrale list --architectures)");
  }
  return unused;
}

nlohmann::json architectures_json() {
  nlohmann::json out = nlohmann::json::array();
  const auto keys_json = [](const std::vector<HonouredKey>& keys) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& k : keys) j[std::string(k.key)] = k.supported;
    return j;
  };
  for (const ArchitectureSpec* s : architectures()) {
    nlohmann::json mixers = nlohmann::json::array(), ffns = nlohmann::json::array(), tensors = nlohmann::json::array();
    for (TokenMixer m : s->mixers) mixers.push_back(token_mixer_name(m));
    for (FfnKind f : s->ffns) ffns.push_back(ffn_kind_name(f));
    for (const auto& t : s->tensors) {
      tensors.push_back({{"name", t.name},
                         {"kind", t.kind == TensorKind::vector ? "vector" : t.kind == TensorKind::linear ? "linear" : "fused experts"},
                         {"role", t.role},
                         {"bias", t.bias == TensorBias::none ? nlohmann::json(nullptr)
                                  : nlohmann::json(t.bias == TensorBias::qkv ? "qkv" : t.bias == TensorBias::o ? "o" : "mlp")}});
    }
    nlohmann::json classes = nlohmann::json::array();
    for (auto c : s->classes) classes.push_back(c);
    out.push_back({{"model_type", s->model_type},
                   {"description", s->description},
                   {"classes", classes},
                   {"decodes", s->decode_refusal.empty()},
                   {"decode_refusal", s->decode_refusal.empty() ? nlohmann::json(nullptr) : nlohmann::json(s->decode_refusal)},
                   {"mixers", mixers},
                   {"ffns", ffns},
                   {"qk_norm", s->qk_norm},
                   {"keys", keys_json(s->keys)},
                   {"tensors", tensors}});
  }
  return {{"architectures", out}, {"common_keys", keys_json(common_keys())}, {"inert_keys", inert_keys()}};
}

}  // namespace metrale::layers
