// SPDX-License-Identifier: MIT OR Apache-2.0
// Architectures as data (docs/architectures.md): one ArchitectureSpec per Hugging Face model_type
// metrale implements, saying which token mixer and which FFN each layer has, how the attention
// reads its biases and norms, every config.json key it honours (with the values it supports) and
// the tensors it reads (one table per architecture, as llama.cpp keeps them). Everything else is
// refused before a weight is read: an unknown model_type, a key that changes the math which the
// spec does not honour, a value of an honoured key it does not support, a tensor the table does
// not name. A key that changes nothing metrale computes (token ids, dtype, generation defaults)
// is listed as such; a key in neither list gets one warning line naming it.
// Adding an architecture: one spec file beside the others (see llama.cpp here), its entry in
// registry.cpp's table, and tests. Specs are immutable and live for the program; thread-safe.
#pragma once

#include "io/config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

class TensorSource;
namespace config_json {
class Object;
}

// What mixes information across positions in a layer (transformers' layer_types entries): causal
// attention over a KV cache, or a Gated DeltaNet over a fixed-size recurrent state (layers/deltanet).
enum class TokenMixer { full_attention, linear_attention };
const char* token_mixer_name(TokenMixer mixer) noexcept;  // "full_attention", "linear_attention"

// How a checkpoint stores a Gated DeltaNet's input projections.
enum class DeltaNetProjections {
  none,                  // the architecture has no DeltaNet
  separate,              // Qwen3.5: in_proj_qkv (q of every key head, then k, then v), in_proj_z, in_proj_a, in_proj_b
  grouped_per_key_head,  // Qwen3-Next: in_proj_qkvz and in_proj_ba, each grouped per key head
};

// Whether a MoE's top-k routing weights are renormalised to sum to 1.
enum class TopkNorm {
  key,     // as norm_topk_prob says (io/config.cpp: absent is false, but Mixtral's true)
  always,  // whatever the config says (Qwen3.5-MoE: transformers' router always renormalises)
};

// How the attention's projections carry biases.
enum class AttentionBias {
  none,               // never (Mistral, Mixtral)
  qkv,                // q, k and v always (Qwen2)
  qkv_key,            // q, k and v when the key qkv_bias says so (Qwen2-MoE; default true)
  all_key,            // q, k, v and o when the key attention_bias says so (Llama, Qwen3)
};

// A config.json key the spec reads, and what it supports. check() refuses (config_json's
// unsupported(): exit 3) a value the spec does not run; null: any well-formed value.
struct HonouredKey {
  std::string_view key;
  std::string_view supported;  // for messages and `metrale list --architectures`
  void (*check)(const config_json::Object& root, std::string_view key) = nullptr;
};

// One entry of an architecture's tensor table. `name` is the module or tensor's name with {L}
// for a layer number and {E} for an expert number; a linear module's tensors are its name plus
// one of the suffixes a quantization format writes (.weight, .qweight, .weight_scale, ...).
enum class TensorKind { vector, linear, fused_experts };
// Which config setting lets a linear module carry a ".bias" (a bias nothing reads would be lost).
enum class TensorBias { none, qkv, o, mlp };
struct TensorEntry {
  std::string_view name;
  TensorKind kind;
  std::string_view role;  // "q projection", "router", ... for the listing
  TensorBias bias = TensorBias::none;
};

struct ArchitectureSpec {
  std::string_view model_type;   // "qwen3"
  std::string_view description;  // one line
  std::vector<std::string_view> classes;  // transformers' classes ("Qwen3ForCausalLM")
  // Empty when metrale decodes it; else why only `metrale run` (its FFN) serves it.
  std::string_view decode_refusal;
  std::vector<TokenMixer> mixers;  // the layer_types entries it runs
  std::vector<FfnKind> ffns;       // dense and/or moe (which layer gets which: ModelConfig::for_layer)
  bool qk_norm = false;            // RMSNorm over head_dim of each q and k head before RoPE
  AttentionBias attention_bias = AttentionBias::none;
  std::vector<HonouredKey> keys;   // every key it reads beyond the common ones (registry.cpp)
  std::vector<TensorEntry> tensors;
  // Qwen3.5 / Qwen3-Next: every RMSNorm but the DeltaNet's is x/rms(x) * (1 + w) (norm/rms_norm_zero_centred).
  bool zero_centred_norms = false;
  // q_proj's rows are per head [q ; gate], and the attention's output is o_proj(attn * sigmoid(gate)).
  bool attention_output_gate = false;
  // partial_rotary_factor when the config gives none (Qwen3-Next's and Qwen3.5's 0.25).
  double default_partial_rotary_factor = 1.0;
  DeltaNetProjections deltanet = DeltaNetProjections::none;
  // A wrapper (Qwen3_5ForConditionalGeneration): the language model's settings are this key's
  // object (language_model_config()), its tensors under `language_model_root`.
  std::string_view language_model_key = {};
  std::string_view language_model_root = {};
  // Prefixes of tensors a checkpoint may hold that metrale does not run (a vision tower, an MTP
  // head): skipped and reported, not refused.
  std::vector<std::string_view> unused_tensors = {};
  TopkNorm topk_norm = TopkNorm::key;
};

// The spec of `model_type`; nullptr when metrale has none.
const ArchitectureSpec* find_architecture(std::string_view model_type);
// Every spec, in the order `metrale list --architectures` prints them.
const std::vector<const ArchitectureSpec*>& architectures();

// What a config.json document resolves to.
struct ResolvedArchitecture {
  const ArchitectureSpec* spec = nullptr;
  const ArchitectureSpec* wrapper = nullptr;  // the wrapper the language model came in (qwen3_5), or null
  std::vector<TokenMixer> layer_mixers;  // per decoder layer (num_hidden_layers of them)
  std::vector<std::string> unknown_keys;  // in neither list: warned about, not read
  bool qkv_bias = false, o_bias = false;  // the attention's biases for this config
  bool mlp_bias = false;                  // the dense FFN's (Llama's mlp_bias)
};

// How much of the model a command runs: the whole decoder, or one layer's FFN (`metrale run`).
enum class ArchitectureUse { decoder, ffn_only };

// Resolves `doc`'s architecture and checks every key: Refusal naming the file, the key, its value
// and what is supported for an unknown model_type (also a wrapper whose text_config holds the
// language model), a math-changing key the spec does not honour, a value it does not support;
// Error for a malformed value. Logs one warning per unknown key (`warn`). ffn_only: a spec that
// does not decode is accepted, and only the keys the FFN reads are checked.
ResolvedArchitecture resolve_architecture(const nlohmann::json& doc, const std::string& source,
                                          ArchitectureUse use = ArchitectureUse::decoder, bool warn = true);

// The config document of the language model: `doc` itself, or for a wrapper spec (qwen3_5) its
// language_model_key object, with the wrapper's tie_word_embeddings (the one transformers obeys).
// Error naming the key when a wrapper has no such object.
nlohmann::json language_model_config(const nlohmann::json& doc, const std::string& source);

// The FFN settings of `doc` as its architecture runs them: parse_model_config of its language
// model (language_model_config()), with what the spec fixes (TopkNorm::always). A model_type
// without a spec is parsed as it is (resolve_architecture refuses it where that matters).
ModelConfig architecture_model_config(const nlohmann::json& doc, const std::string& source);

// Refusal naming the first tensor of `src` that the spec's table does not name, or a bias the
// config does not declare (a tensor metrale would not read: the model computes something more).
// A wrapper's language-model tensors (`language_model_root`) are named as the inner spec's
// "model.*". Returns the tensors of the spec's unused_tensors prefixes, per prefix: skipped.
struct UnusedTensors {
  std::string prefix;
  uint64_t count = 0;
};
std::vector<UnusedTensors> check_tensor_names(const ResolvedArchitecture& architecture, const TensorSource& src);
// Whether `name` is a tensor the architecture skips (a vision tower's, an MTP head's).
bool unused_tensor(const ResolvedArchitecture& architecture, std::string_view name);

// The registry as `metrale list --architectures --json` prints it.
nlohmann::json architectures_json();

// The keys every spec treats alike: read by the common code (sizes, norms, rope, tying), and the
// keys that change nothing metrale computes.
const std::vector<HonouredKey>& common_keys();
const std::vector<std::string_view>& inert_keys();

// Shared checks for specs' HonouredKey::check.
namespace key_checks {
void must_be_false(const config_json::Object& root, std::string_view key);
void sliding_window_inactive(const config_json::Object& root, std::string_view key);
}  // namespace key_checks

}  // namespace metrale::layers
