// SPDX-License-Identifier: MIT OR Apache-2.0
// What a checkpoint says it is: the `quantization_config` object of config.json (or the
// quantize_config.json older GPTQ tools write beside it), read into one description. The
// declaration rules: the loaders never infer a format from tensor values, and a tensor that
// contradicts the declaration is refused (docs/checkpoint-formats.md).
//
// Anything outside what metrale runs (bits 2/3, an unknown quant_method or format, a strategy
// it lacks kernels for, per-module overrides) is a Refusal (exit 3) naming the file, the field,
// its value and what is supported. Fields that do not change the arithmetic (damp_percent,
// true_sequential, observer, ...) are ignored.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace metrale::layers {

enum class QuantMethod { none, gptq, awq, compressed_tensors, fp8 };
const char* quant_method_name(QuantMethod method) noexcept;  // "none", "gptq", "awq", "compressed-tensors", "fp8"

// How the checkpoint lays out and scales its quantized weights.
enum class WeightScheme {
  none,           // unquantized: every linear weight in the model dtype (bf16 or f16)
  gptq,           // qweight/qzeros/scales/g_idx, packed along K (GPTQ v1 or v2 zeros)
  awq_gemm,       // AWQ GEMM: qweight [K, N/8] in AWQ's interleaved nibble order
  ct_pack_int,    // compressed-tensors pack-quantized integers (weight_packed, weight_scale, ...)
  ct_int,         // compressed-tensors int-quantized, 4 or 8 bits: one signed value per int8 (weight, weight_scale, ...)
  fp8_block,      // quant_method fp8: weight F8_E4M3 + weight_scale_inv per 128x128 block
  ct_fp8,         // compressed-tensors float-quantized FP8 (weight F8_E4M3 + weight_scale)
};

enum class ScaleStrategy { group, channel, tensor, block };

// Activations as the checkpoint declares them (its default activation tier).
// fp8_dynamic_group128: one scale per 128 columns of a row (block FP8: DeepSeek-V3's and Qwen3's
// own releases, compressed-tensors FP8_BLOCK). *_static_tensor: one scale per projection, stored
// as each module's `input_scale` (compressed-tensors' static presets, llm-compressor's FP8).
enum class DeclaredActivations {
  bf16,
  int8_dynamic_token,
  fp8_dynamic_token,
  fp8_dynamic_group128,
  int8_static_tensor,
  fp8_static_tensor,
};
const char* declared_activations_name(DeclaredActivations a) noexcept;
// Whether the activations take a stored scale per module (P.input_scale).
constexpr bool static_activation_scales(DeclaredActivations a) noexcept {
  return a == DeclaredActivations::int8_static_tensor || a == DeclaredActivations::fp8_static_tensor;
}

struct CheckpointQuant {
  std::string source;  // "<dir>/config.json: quantization_config", for messages
  std::string path = "quantization_config";  // where the fields sit in `source` ("": the whole file)
  QuantMethod method = QuantMethod::none;
  WeightScheme scheme = WeightScheme::none;
  uint32_t bits = 0;
  int32_t group_size = 128;  // along K; -1: one group over K (per channel)
  ScaleStrategy strategy = ScaleStrategy::group;
  bool sym = true;
  bool desc_act = false;       // act-order: GPTQ's g_idx / compressed-tensors' weight_g_idx may permute K
  bool static_groups = false;  // GPTQ: act-order with groups fixed before reordering (g_idx sequential)
  bool gptq_v2 = false;        // GPTQModel "gptq_v2": qzeros hold the true zero (v1: zero - 1)
  bool awq_zero_point = true;
  std::vector<uint32_t> block_size;  // fp8 weight_block_size, e.g. {128, 128}
  DeclaredActivations activations = DeclaredActivations::bf16;
  std::vector<std::string> ignore;  // module names or "re:" patterns left unquantized
  // Unquantized checkpoints: config.json's torch_dtype (transformers 5: dtype), "bfloat16" or
  // "float16", which every linear weight must have; "" when undeclared.
  std::string torch_dtype;

  // Whether the declaration leaves module `name` ("model.layers.3.mlp.down_proj") unquantized:
  // compressed-tensors' `ignore` (a name equal to it, or a "re:" pattern matching from its
  // start, as compressed-tensors' re.match); GPTQ's, AWQ's and block FP8's
  // `modules_to_not_convert` (a substring of it, as transformers matches them).
  bool leaves_unquantized(const std::string& name) const;

  // A field for messages: "quantization_config.bits" in config.json, "bits (quantize_config.json)"
  // when the settings are a file of their own.
  std::string field(std::string_view name) const;
  // One line for `metrale run`: "gptq v1, 4 bits, group 128, asymmetric, act-order".
  std::string summary() const;
};

// Reads `doc` (a quantization_config object) from `source` (the file), where it sits at field
// `path` ("" when it is the whole file, as quantize_config.json). Throws Refusal for unsupported
// values and Error(invalid_argument) for malformed ones, naming file, field path, value, expected.
CheckpointQuant parse_quant_config(const nlohmann::json& doc, const std::string& source,
                                   const std::string& path = "quantization_config");

}  // namespace metrale::layers
