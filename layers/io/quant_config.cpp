// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/quant_config.hpp"
#include "io/config_json.hpp"

#include <metrale/status.hpp>

#include <regex>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <limits>

namespace metrale::layers {

namespace {

using Json = nlohmann::json;
using Fields = config_json::Object;

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min(), kInt32Max = std::numeric_limits<int32_t>::max();

// An integer field of the declaration (bits, group sizes): anything beyond 32 bits is malformed.
std::optional<int32_t> int32_field(const Fields& f, const char* key) {
  const auto v = f.integer(key, kInt32Min, kInt32Max);
  return v ? std::optional<int32_t>(static_cast<int32_t>(*v)) : std::nullopt;
}

// Group sizes the zero-point kernels run: 32, 64, 128, and multiples of 128 or -1 (stored by
// repeating each scale over the 128-wide groups it covers).
bool runnable_group(int64_t g) { return g == -1 || g == 32 || g == 64 || (g > 0 && g % 128 == 0); }
constexpr std::string_view kGroupSizes = "-1 (one group over K), 32, 64, 128 or a multiple of 128";

void read_group_size(const Fields& f, CheckpointQuant& q, const char* key) {
  const auto g = int32_field(f, key);
  if (!g) return;
  if (!runnable_group(*g)) f.unsupported(key, Json(*g), kGroupSizes);
  q.group_size = *g;
  q.strategy = *g == -1 ? ScaleStrategy::channel : ScaleStrategy::group;
}

void parse_gptq(const Fields& f, CheckpointQuant& q) {
  q.scheme = WeightScheme::gptq;
  const auto bits = int32_field(f, "bits");
  if (!bits) f.malformed("bits", "an integer (4 or 8)", nullptr);
  if (*bits != 4 && *bits != 8) f.unsupported("bits", Json(*bits), "GPTQ with 4 or 8 bits");
  q.bits = static_cast<uint32_t>(*bits);
  read_group_size(f, q, "group_size");
  q.sym = f.boolean("sym").value_or(true);
  q.desc_act = f.boolean("desc_act").value_or(false);
  q.static_groups = f.boolean("static_groups").value_or(false);
  // AutoGPTQ and GPTQModel write "checkpoint_format"; some GPTQModel versions write "format".
  const auto checkpoint_format = f.lower_string("checkpoint_format");
  const auto other = f.lower_string("format");
  if (checkpoint_format && other && *checkpoint_format != *other) {
    throw Error(Status::invalid_argument, f.where("format") + " = \"" + *other + "\" contradicts checkpoint_format = \"" +
                                              *checkpoint_format + "\"");
  }
  const auto format = checkpoint_format ? checkpoint_format : other;
  if (format && *format != "gptq" && *format != "gptq_v2") {
    f.unsupported(checkpoint_format ? "checkpoint_format" : "format", Json(*format),
                  "\"gptq\" (v1 zeros, stored zero - 1) or \"gptq_v2\" (true zeros)");
  }
  q.gptq_v2 = format && *format == "gptq_v2";
  if (const Json* dynamic = f.find("dynamic"); dynamic && !dynamic->empty()) {
    f.unsupported("dynamic", *dynamic, "one quantization for every module (no per-module overrides)");
  }
}

void parse_awq(const Fields& f, CheckpointQuant& q) {
  q.scheme = WeightScheme::awq_gemm;
  const auto version = f.lower_string("version").value_or("gemm");
  if (version != "gemm") f.unsupported("version", Json(version), "\"gemm\" (AWQ's GEMM packing)");
  const auto bits = int32_field(f, "bits").value_or(4);
  if (bits != 4) f.unsupported("bits", Json(bits), "AWQ with 4 bits");
  q.bits = 4;
  read_group_size(f, q, "group_size");
  q.awq_zero_point = f.boolean("zero_point").value_or(true);
  if (!q.awq_zero_point) f.unsupported("zero_point", Json(false), "AWQ with zero points (zero_point: true)");
  q.sym = false;
  q.ignore = f.strings("modules_to_not_convert");
}

// compressed-tensors' activation ordering (GPTQModifier's actorder) of the weights: "group"
// (alias "dynamic", or true) stores weight_g_idx, the group of each column, run through the
// act-order permutation as GPTQ's desc_act; "weight" (alias "static", GPTQModifier's default)
// quantizes in activation order but keeps the groups in column order: no g_idx, the plain
// format. Returns whether a g_idx is declared.
bool read_ct_actorder(const Fields& w, const std::string& strategy) {
  const Json* order = w.find("actorder");
  if (!order || (order->is_boolean() && !order->get<bool>())) return false;
  std::string value = order->is_boolean() ? "group" : w.lower_string("actorder").value_or("");
  if (value == "dynamic") value = "group";
  if (value == "static") value = "weight";
  if (value != "group" && value != "weight") {
    w.unsupported("actorder", *order, "null, \"group\" / \"dynamic\" (weight_g_idx) or \"weight\" / \"static\"");
  }
  if (strategy != "group") {
    w.malformed("actorder", "null: activation ordering needs strategy \"group\", and strategy is \"" + strategy + "\"", order);
  }
  return value == "group";
}

void parse_ct_weights(const Fields& w, const std::string& format, CheckpointQuant& q) {
  const auto bits = int32_field(w, "num_bits");
  const auto type = w.lower_string("type").value_or("int");
  const auto strategy = w.lower_string("strategy").value_or("tensor");
  if (!bits) w.malformed("num_bits", "an integer", nullptr);
  if (*bits != 4 && *bits != 8) w.unsupported("num_bits", Json(*bits), "4 or 8 bits");
  q.bits = static_cast<uint32_t>(*bits);
  q.sym = w.boolean("symmetric").value_or(true);
  q.desc_act = read_ct_actorder(w, strategy);
  if (w.boolean("dynamic").value_or(false)) w.unsupported("dynamic", Json(true), "static (stored) weight scales");
  if (strategy == "group") {
    q.strategy = ScaleStrategy::group;
    read_group_size(w, q, "group_size");
  } else if (strategy == "channel") {
    q.strategy = ScaleStrategy::channel;
    q.group_size = -1;
  } else if (strategy == "tensor" && type == "float") {
    q.strategy = ScaleStrategy::tensor;
    q.group_size = -1;
  } else if (strategy == "block" && type == "float") {
    q.strategy = ScaleStrategy::block;
    const Json* block = w.find("block_structure");
    if (!block || *block != Json::array({128, 128})) w.unsupported("block_structure", block ? *block : Json(), "[128, 128]");
    q.block_size = {128, 128};
  } else {
    w.unsupported("strategy", Json(strategy), type == "float" ? "group, channel, tensor or block" : "group or channel");
  }
  if (format == "pack-quantized" && type == "int" && (q.bits == 4 || q.bits == 8)) {
    q.scheme = WeightScheme::ct_pack_int;
  } else if (format == "int-quantized" && type == "int") {
    q.scheme = WeightScheme::ct_int;
  } else if (format == "float-quantized" && type == "float" && q.bits == 8) {
    q.scheme = WeightScheme::ct_fp8;
  } else {
    throw Refusal(w.where("") + ": " + std::to_string(q.bits) + "-bit " + type + " weights in format \"" + format +
                  "\" are not supported: pack-quantized int (4 or 8 bits), int-quantized int (4 or 8 bits) or "
                  "float-quantized float (8 bits, E4M3)");
  }
  // float-quantized weights are read with one scale per row, per tensor or per 128x128 block:
  // their reader has no per-group scales.
  if (q.scheme == WeightScheme::ct_fp8 && q.strategy == ScaleStrategy::group) {
    w.unsupported("strategy", Json("group"), "\"channel\"" + std::string(type == "float" ? ", \"tensor\" or \"block\"" : "") +
                                                 " for " + format + " weights");
  }
}

DeclaredActivations parse_ct_activations(const Fields& a) {
  const auto bits = int32_field(a, "num_bits").value_or(8);
  const auto type = a.lower_string("type").value_or("int");
  const auto strategy = a.lower_string("strategy").value_or("tensor");
  if (bits != 8) a.unsupported("num_bits", Json(bits), "8-bit activations");
  // Static scales: one stored input_scale per module, computed at calibration.
  if (!a.boolean("dynamic").value_or(false)) {
    if (strategy != "tensor") {
      a.unsupported("strategy", Json(strategy), "\"tensor\" for static activation scales (one input_scale per module)");
    }
    if (!a.boolean("symmetric").value_or(true)) a.unsupported("symmetric", Json(false), "symmetric static activation scales");
    if (type == "int") return DeclaredActivations::int8_static_tensor;
    if (type == "float") return DeclaredActivations::fp8_static_tensor;
    a.unsupported("type", Json(type), "\"int\" or \"float\"");
  }
  // FP8_BLOCK: FP8 per token group of 128 columns.
  if (strategy == "group" && type == "float") {
    const auto group = int32_field(a, "group_size");
    if (!group || *group != 128) a.unsupported("group_size", group ? Json(*group) : Json(), "128 (float group activations)");
    return DeclaredActivations::fp8_dynamic_group128;
  }
  if (strategy != "token") {
    a.unsupported("strategy", Json(strategy), "\"token\" (one scale per row), or \"group\" of 128 for float activations");
  }
  if (type == "int") {
    if (!a.boolean("symmetric").value_or(true)) a.unsupported("symmetric", Json(false), "symmetric int8 activations");
    return DeclaredActivations::int8_dynamic_token;
  }
  if (type == "float") return DeclaredActivations::fp8_dynamic_token;
  a.unsupported("type", Json(type), "\"int\" or \"float\"");
}

void parse_compressed_tensors(const Fields& f, CheckpointQuant& q) {
  const auto status = f.lower_string("quantization_status").value_or("compressed");
  if (status != "compressed") f.unsupported("quantization_status", Json(status), "\"compressed\" (saved compressed)");
  if (const Json* sparsity = f.find("sparsity_config"); sparsity && !sparsity->empty()) {
    f.unsupported("sparsity_config", *sparsity, "no sparsity");
  }
  // Transforms (rotations applied to a layer's inputs as it runs) change what the weights mean.
  if (const Json* transforms = f.find("transform_config"); transforms && !transforms->empty()) {
    f.unsupported("transform_config", *transforms, "no transforms (the weights alone define each projection)");
  }
  const auto groups = f.object("config_groups", "an object of quantization schemes (group name -> scheme)");
  if (!groups || groups->size() == 0) {
    f.malformed("config_groups", "an object with at least one quantization scheme", f.find("config_groups"));
  }
  const std::string top_format = f.lower_string("format").value_or("");
  const auto schemes = groups->objects("an object (a quantization scheme)");
  const Fields& group = schemes.front().second;
  for (const auto& [name, scheme] : schemes) {
    for (const char* part : {"weights", "input_activations"}) {
      const Json* mine = scheme.find(part);
      const Json* first = group.find(part);
      if ((mine == nullptr) != (first == nullptr) || (mine && *mine != *first)) {
        throw Refusal(groups->where(name) + " differs from " + groups->where(schemes.front().first) +
                      ": metrale runs one quantization scheme for every FFN projection");
      }
    }
  }
  const std::string format = group.lower_string("format").value_or(top_format);
  if (format.empty()) f.malformed("format", "a compressed-tensors format name", nullptr);
  const auto weights = group.object("weights", "an object (the weight scheme)");
  if (!weights) group.malformed("weights", "an object (the weight scheme)", nullptr);
  parse_ct_weights(*weights, format, q);
  if (const auto acts = group.object("input_activations", "an object (the activation scheme)")) {
    q.activations = parse_ct_activations(*acts);
  }
  q.ignore = f.strings("ignore");
}

void parse_fp8(const Fields& f, CheckpointQuant& q) {
  q.scheme = WeightScheme::fp8_block;
  q.bits = 8;
  const auto fmt = f.lower_string("fmt").value_or("e4m3");
  if (fmt != "e4m3") f.unsupported("fmt", Json(fmt), "\"e4m3\"");
  const Json* block = f.find("weight_block_size");
  if (!block || *block != Json::array({128, 128})) {
    f.unsupported("weight_block_size", block ? *block : Json(), "[128, 128] (block-scaled FP8)");
  }
  q.block_size = {128, 128};
  q.strategy = ScaleStrategy::block;
  const auto scheme = f.lower_string("activation_scheme").value_or("dynamic");
  if (scheme != "dynamic") f.unsupported("activation_scheme", Json(scheme), "\"dynamic\"");
  q.activations = DeclaredActivations::fp8_dynamic_group128;  // 1x128 activation blocks beside 128x128 weight blocks
  q.ignore = f.strings("modules_to_not_convert");
}

}  // namespace

const char* quant_method_name(QuantMethod method) noexcept {
  switch (method) {
    case QuantMethod::none: return "none";
    case QuantMethod::gptq: return "gptq";
    case QuantMethod::awq: return "awq";
    case QuantMethod::compressed_tensors: return "compressed-tensors";
    case QuantMethod::fp8: return "fp8";
  }
  return "?";
}

const char* declared_activations_name(DeclaredActivations a) noexcept {
  switch (a) {
    case DeclaredActivations::bf16: return "bf16";
    case DeclaredActivations::int8_dynamic_token: return "int8 (dynamic, per token)";
    case DeclaredActivations::fp8_dynamic_token: return "fp8 (dynamic, per token)";
    case DeclaredActivations::fp8_dynamic_group128: return "fp8 (dynamic, per token group of 128)";
    case DeclaredActivations::int8_static_tensor: return "int8 (static, per tensor)";
    case DeclaredActivations::fp8_static_tensor: return "fp8 (static, per tensor)";
  }
  return "?";
}

std::string CheckpointQuant::field(std::string_view name) const {
  if (!path.empty()) return path + "." + std::string(name);
  return std::string(name) + " (" + std::filesystem::path(source).filename().string() + ")";
}

bool CheckpointQuant::leaves_unquantized(const std::string& name) const {
  for (const std::string& entry : ignore) {
    if (method != QuantMethod::compressed_tensors) {
      if (!entry.empty() && name.find(entry) != std::string::npos) return true;
    } else if (entry.starts_with("re:")) {
      std::regex pattern;
      try {
        pattern = std::regex(entry.substr(3));
      } catch (const std::regex_error& e) {
        throw Error(Status::invalid_argument, source + ": " + field("ignore") + " entry \"" + entry +
                                                  "\" is not a regular expression (" + e.what() + ")");
      }
      if (std::regex_search(name, pattern, std::regex_constants::match_continuous)) return true;
    } else if (entry == name) {
      return true;
    }
  }
  return false;
}

std::string CheckpointQuant::summary() const {
  if (method == QuantMethod::none) return "unquantized" + (torch_dtype.empty() ? std::string() : " " + torch_dtype);
  std::string s = quant_method_name(method);
  if (scheme == WeightScheme::gptq) s += gptq_v2 ? " v2" : " v1";
  if (scheme == WeightScheme::awq_gemm) s += " gemm";
  if (scheme == WeightScheme::ct_fp8 || scheme == WeightScheme::fp8_block) {
    s += ", fp8 e4m3";
  } else {
    s += ", " + std::to_string(bits) + "-bit int";
  }
  switch (strategy) {
    case ScaleStrategy::group: s += ", group " + std::to_string(group_size); break;
    case ScaleStrategy::channel: s += ", per channel"; break;
    case ScaleStrategy::tensor: s += ", per tensor"; break;
    case ScaleStrategy::block: s += ", 128x128 blocks"; break;
  }
  if (scheme != WeightScheme::ct_fp8 && scheme != WeightScheme::fp8_block) s += sym ? ", symmetric" : ", asymmetric";
  if (desc_act && !static_groups) s += ", act-order";
  if (activations != DeclaredActivations::bf16) s += std::string(", activations ") + declared_activations_name(activations);
  return s;
}

CheckpointQuant parse_quant_config(const nlohmann::json& doc, const std::string& source, const std::string& path) {
  const Fields f(doc, source, path, "an object (the quantization declaration)");
  CheckpointQuant q;
  q.source = source;
  q.path = path;
  const auto method = f.lower_string("quant_method");
  if (!method) f.malformed("quant_method", "a string (gptq, awq, compressed-tensors or fp8)", nullptr);
  if (*method == "gptq") {
    q.method = QuantMethod::gptq;
    parse_gptq(f, q);
  } else if (*method == "awq") {
    q.method = QuantMethod::awq;
    parse_awq(f, q);
  } else if (*method == "compressed-tensors") {
    q.method = QuantMethod::compressed_tensors;
    parse_compressed_tensors(f, q);
  } else if (*method == "fp8") {
    q.method = QuantMethod::fp8;
    parse_fp8(f, q);
  } else {
    f.unsupported("quant_method", Json(*method), "gptq, awq, compressed-tensors or fp8");
  }
  return q;
}

}  // namespace metrale::layers
