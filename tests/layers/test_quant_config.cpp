// SPDX-License-Identifier: MIT OR Apache-2.0
// quantization_config as the tools write it: what each declaration reads as, and a refusal
// (naming the field, its value and what is supported) for everything metrale does not run.
#include <doctest/doctest.h>

#include <io/checkpoint.hpp>
#include <io/quant_config.hpp>
#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

#include <string>

using namespace metrale;
using namespace metrale::layers;
using nlohmann::json;

namespace {

std::string refusal(const json& doc) {
  try {
    parse_quant_config(doc, "m/config.json");
  } catch (const Refusal& r) {
    return r.what();
  } catch (const std::exception& e) {
    return std::string("not a refusal: ") + e.what();
  }
  return "accepted";
}

std::string malformed(const json& doc) {
  try {
    parse_quant_config(doc, "m/config.json");
  } catch (const Refusal& r) {
    return std::string("a refusal: ") + r.what();
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <class Fn>
std::string error_text(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("GPTQ declarations: v1 and v2, groups, symmetry, act-order") {
  json gptq{{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"sym", true}, {"desc_act", false},
            {"damp_percent", 0.01}, {"true_sequential", true}, {"checkpoint_format", "gptq"}};
  CheckpointQuant q = parse_quant_config(gptq, "m/config.json");
  CHECK(q.method == QuantMethod::gptq);
  CHECK(q.scheme == WeightScheme::gptq);
  CHECK(q.bits == 4);
  CHECK(q.group_size == 128);
  CHECK(q.sym);
  CHECK_FALSE(q.desc_act);
  CHECK_FALSE(q.gptq_v2);
  CHECK(q.summary() == "gptq v1, 4-bit int, group 128, symmetric");

  gptq["checkpoint_format"] = "gptq_v2";
  gptq["sym"] = false;
  gptq["desc_act"] = true;
  gptq["group_size"] = -1;
  q = parse_quant_config(gptq, "m/config.json");
  CHECK(q.gptq_v2);
  CHECK_FALSE(q.sym);
  CHECK(q.desc_act);
  CHECK(q.strategy == ScaleStrategy::channel);
  CHECK(q.summary() == "gptq v2, 4-bit int, per channel, asymmetric, act-order");

  for (int g : {32, 64, 256}) {
    gptq["group_size"] = g;
    CHECK(parse_quant_config(gptq, "x").group_size == g);
  }
  gptq["group_size"] = 128;
  gptq["bits"] = 8;
  CHECK(parse_quant_config(gptq, "x").bits == 8);
  // Without checkpoint_format (older AutoGPTQ): v1.
  gptq.erase("checkpoint_format");
  CHECK_FALSE(parse_quant_config(gptq, "x").gptq_v2);
}

TEST_CASE("unsupported GPTQ values are refusals naming field, value and what is supported") {
  json gptq{{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}};
  std::string r = refusal(gptq);
  CHECK(has(r, "m/config.json: quantization_config.bits = 3 is not supported: GPTQ with 4 or 8 bits"));
  gptq["bits"] = 2;
  CHECK(has(refusal(gptq), "bits = 2"));
  gptq["bits"] = 4;
  gptq["group_size"] = 48;
  r = refusal(gptq);
  CHECK(has(r, "quantization_config.group_size = 48"));
  CHECK(has(r, "32, 64, 128"));
  gptq["group_size"] = 128;
  gptq["checkpoint_format"] = "marlin";
  CHECK(has(refusal(gptq), "checkpoint_format = \"marlin\" is not supported"));
  gptq["checkpoint_format"] = "gptq";
  gptq["dynamic"] = {{"-:.*mlp.*", json::object()}};
  CHECK(has(refusal(gptq), "quantization_config.dynamic"));
}

TEST_CASE("an unknown quant_method is refused listing the supported ones") {
  std::string r = refusal({{"quant_method", "bitsandbytes"}, {"bits", 4}});
  CHECK(has(r, "quant_method = \"bitsandbytes\" is not supported: gptq, awq, compressed-tensors or fp8"));
  CHECK(has(malformed({{"bits", 4}}), "quantization_config.quant_method: expected a string"));
  CHECK(has(malformed({{"quant_method", "gptq"}, {"bits", "four"}}), "quantization_config.bits: expected an integer"));
}

TEST_CASE("AWQ declarations") {
  json awq{{"quant_method", "awq"}, {"zero_point", true}, {"group_size", 128}, {"bits", 4}, {"version", "GEMM"},
           {"modules_to_not_convert", nullptr}};
  CheckpointQuant q = parse_quant_config(awq, "x");
  CHECK(q.scheme == WeightScheme::awq_gemm);
  CHECK_FALSE(q.sym);
  awq["version"] = "gemv";
  CHECK(has(refusal(awq), "version = \"gemv\" is not supported"));
  awq["version"] = "gemm";
  awq["zero_point"] = false;
  CHECK(has(refusal(awq), "zero_point = false"));
}

TEST_CASE("compressed-tensors declarations: pack-quantized, int8 W8A8, FP8") {
  json weights{{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 128},
               {"dynamic", false}, {"actorder", nullptr}};
  json ct{{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
          {"ignore", {"lm_head"}}};
  CheckpointQuant q = parse_quant_config(ct, "x");
  CHECK(q.scheme == WeightScheme::ct_pack_int);
  CHECK(q.group_size == 128);
  CHECK(q.ignore == std::vector<std::string>{"lm_head"});
  CHECK(q.activations == DeclaredActivations::bf16);

  ct["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
  ct["config_groups"]["group_0"]["weights"]["symmetric"] = false;
  q = parse_quant_config(ct, "x");
  CHECK(q.strategy == ScaleStrategy::channel);
  CHECK_FALSE(q.sym);

  json w8a8 = ct;
  w8a8["format"] = "int-quantized";
  w8a8["config_groups"]["group_0"]["weights"] = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}};
  w8a8["config_groups"]["group_0"]["input_activations"] = {
      {"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}};
  q = parse_quant_config(w8a8, "x");
  CHECK(q.scheme == WeightScheme::ct_int);
  CHECK(q.activations == DeclaredActivations::int8_dynamic_token);
  // Static scales: per tensor (each module's input_scale) is read, per token or channel refused.
  const json dynamic_token = w8a8["config_groups"]["group_0"]["input_activations"];
  w8a8["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
  CHECK(has(refusal(w8a8), "input_activations.strategy = \"token\" is not supported: \"tensor\" for static"));
  w8a8["config_groups"]["group_0"]["input_activations"]["strategy"] = "tensor";
  CHECK(parse_quant_config(w8a8, "x").activations == DeclaredActivations::int8_static_tensor);
  w8a8["config_groups"]["group_0"]["input_activations"]["type"] = "float";
  CHECK(parse_quant_config(w8a8, "x").activations == DeclaredActivations::fp8_static_tensor);
  w8a8["config_groups"]["group_0"]["input_activations"]["symmetric"] = false;
  CHECK(has(refusal(w8a8), "input_activations.symmetric = false"));
  w8a8["config_groups"]["group_0"]["input_activations"] = dynamic_token;

  json fp8 = ct;
  fp8["format"] = "float-quantized";
  fp8["config_groups"]["group_0"]["weights"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
  q = parse_quant_config(fp8, "x");
  CHECK(q.scheme == WeightScheme::ct_fp8);
  // Per-group scales exist for integer weights only (pack-quantized and int-quantized).
  fp8["config_groups"]["group_0"]["weights"]["strategy"] = "group";
  fp8["config_groups"]["group_0"]["weights"]["group_size"] = 128;
  CHECK(has(refusal(fp8), "weights.strategy = \"group\" is not supported: \"channel\", \"tensor\" or \"block\" for "
                          "float-quantized weights"));
  // llm-compressor's W4A8: int-quantized int4 per group, int8 activations per token.
  w8a8["config_groups"]["group_0"]["weights"] = {{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}};
  w8a8["config_groups"]["group_0"]["input_activations"]["dynamic"] = true;
  q = parse_quant_config(w8a8, "x");
  CHECK(q.scheme == WeightScheme::ct_int);
  CHECK(q.bits == 4);
  CHECK(q.strategy == ScaleStrategy::group);
  CHECK(q.activations == DeclaredActivations::int8_dynamic_token);
  w8a8["config_groups"]["group_0"]["weights"]["num_bits"] = 2;
  CHECK(has(refusal(w8a8), "num_bits"));

  ct["config_groups"]["group_0"]["weights"]["actorder"] = nullptr;
  ct["config_groups"]["group_1"] = ct["config_groups"]["group_0"];
  ct["config_groups"]["group_1"]["weights"]["num_bits"] = 8;
  CHECK(has(refusal(ct), "differs from"));
}

TEST_CASE("compressed-tensors FP8_BLOCK: 128x128 weight blocks, FP8 activations per token group of 128") {
  json ct{{"quant_method", "compressed-tensors"}, {"format", "float-quantized"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "block"},
                           {"block_structure", {128, 128}}, {"dynamic", false}}},
              {"input_activations", {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "group"},
                                     {"group_size", 128}, {"dynamic", true}}}}}}}};
  CheckpointQuant q = parse_quant_config(ct, "m/config.json");
  CHECK(q.scheme == WeightScheme::ct_fp8);
  CHECK(q.strategy == ScaleStrategy::block);
  CHECK(q.activations == DeclaredActivations::fp8_dynamic_group128);
  CHECK(q.summary().find("activations fp8 (dynamic, per token group of 128)") != std::string::npos);
  auto& acts = ct["config_groups"]["group_0"]["input_activations"];
  acts["group_size"] = 64;
  CHECK(has(refusal(ct), "input_activations.group_size = 64 is not supported: 128"));
  acts["group_size"] = 128;
  acts["type"] = "int";  // int8 activations per group: no such tier
  CHECK(has(refusal(ct), "input_activations.strategy = \"group\" is not supported"));
}

TEST_CASE("block FP8 declarations") {
  json fp8{{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  CheckpointQuant q = parse_quant_config(fp8, "x");
  CHECK(q.scheme == WeightScheme::fp8_block);
  CHECK(q.activations == DeclaredActivations::fp8_dynamic_group128);  // 1x128 activation blocks
  fp8["weight_block_size"] = {64, 64};
  CHECK(has(refusal(fp8), "weight_block_size = [64,64] is not supported: [128, 128]"));
  fp8["weight_block_size"] = {128, 128};
  fp8["activation_scheme"] = "static";
  CHECK(has(refusal(fp8), "activation_scheme = \"static\""));
}

// Every field is read through the checked accessors (io/config_json.hpp): a value of the wrong type
// is an Error (never a json exception) naming the file, the field path and what was expected.
TEST_CASE("malformed quantization_config fields name the file, the field path and the expected type") {
  const auto err = [](const json& doc) {
    try {
      parse_quant_config(doc, "config.json");
    } catch (const Refusal& r) {
      return std::string("a refusal: ") + r.what();
    } catch (const Error& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return std::string("not an Error: ") + e.what();
    }
    return std::string("accepted");
  };
  json ct{{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"config_groups", {{"group_0", 5}}}};
  CHECK(err(ct) == "config.json: quantization_config.config_groups.group_0: expected an object (a quantization scheme), "
                   "found number 5");
  ct["config_groups"] = json::array();
  CHECK(err(ct) == "config.json: quantization_config.config_groups: expected an object of quantization schemes (group "
                   "name -> scheme), found an array");
  ct["config_groups"] = {{"group_0", {{"weights", "int4"}}}};
  CHECK(err(ct) == "config.json: quantization_config.config_groups.group_0.weights: expected an object (the weight "
                   "scheme), found string \"int4\"");
  ct["config_groups"] = {{"group_0", {{"weights", {{"num_bits", 4}, {"strategy", 7}}}}}};
  CHECK(err(ct) == "config.json: quantization_config.config_groups.group_0.weights.strategy: expected a string, found number 7");
  ct["config_groups"] = {{"group_0", {{"weights", {{"num_bits", 4}, {"strategy", "group"}, {"group_size", 1099511627904}}}}}};
  CHECK(err(ct) == "config.json: quantization_config.config_groups.group_0.weights.group_size: expected an integer from "
                   "-2147483648 to 2147483647, found number 1099511627904");
  ct["config_groups"] = {{"group_0", {{"weights", {{"num_bits", 4}, {"strategy", "group"}, {"group_size", 128}}}}}};
  ct["ignore"] = {"lm_head", 3};
  CHECK(err(ct) == "config.json: quantization_config.ignore[1]: expected a string, found number 3");
  CHECK(err(json::array()) == "config.json: quantization_config: expected an object (the quantization declaration), "
                              "found an array");
  CHECK(err({{"quant_method", "gptq"}, {"bits", 4}, {"sym", "yes"}}) ==
        "config.json: quantization_config.sym: expected true or false, found string \"yes\"");
  // quantize_config.json is the declaration itself: its fields have no quantization_config prefix.
  CHECK(error_text([] { parse_quant_config({{"quant_method", "gptq"}, {"bits", "4"}}, "quantize_config.json", ""); }) ==
        "quantize_config.json: bits: expected an integer from -2147483648 to 2147483647, found string \"4\"");
}

TEST_CASE("config.json and quantize_config.json: a malformed declaration names the file and the field") {
  layers_test::TempDir dir;
  layers_test::write_file(dir / "config.json", R"({"hidden_size": 256, "quantization_config": 5})");
  const std::string file = (dir / "config.json").string();
  CHECK(error_text([&] { read_checkpoint_quant(dir.path()); }) ==
        file + ": quantization_config: expected an object (the quantization declaration), found number 5");
  layers_test::write_file(dir / "config.json", R"([1, 2])");
  CHECK(error_text([&] { read_checkpoint_quant(dir.path()); }) == file + ": expected a JSON object (the model config), found an array");
  std::filesystem::remove(dir / "config.json");
  layers_test::write_file(dir / "quantize_config.json", R"({"bits": 4, "desc_act": 1})");
  CHECK(error_text([&] { read_checkpoint_quant(dir.path()); }) ==
        (dir / "quantize_config.json").string() + ": desc_act: expected true or false, found number 1");
}

// GPTQModifier's actorder: "group" (and its alias "dynamic", or true) declares weight_g_idx and
// runs as act-order; "weight" (alias "static", the default) is the plain format.
TEST_CASE("compressed-tensors actorder as llm-compressor writes it") {
  json weights{{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 128},
               {"dynamic", false}, {"actorder", "static"}, {"observer", "minmax"}};
  json ct{{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"format", "pack-quantized"}}}}}};
  auto& order = ct["config_groups"]["group_0"]["weights"]["actorder"];
  for (const json& plain : {json("static"), json("weight"), json("STATIC"), json(false), json(nullptr)}) {
    order = plain;
    const CheckpointQuant q = parse_quant_config(ct, "x");
    CHECK_FALSE(q.desc_act);
    CHECK(q.scheme == WeightScheme::ct_pack_int);
    CHECK(q.summary() == "compressed-tensors, 4-bit int, group 128, symmetric");
  }
  for (const json& grouped : {json("group"), json("dynamic"), json(true)}) {
    order = grouped;
    const CheckpointQuant q = parse_quant_config(ct, "x");
    CHECK(q.desc_act);
    CHECK(q.summary() == "compressed-tensors, 4-bit int, group 128, symmetric, act-order");
  }
  order = "bogus";
  CHECK(refusal(ct) == "m/config.json: quantization_config.config_groups.group_0.weights.actorder = \"bogus\" is not "
                       "supported: null, \"group\" / \"dynamic\" (weight_g_idx) or \"weight\" / \"static\"");
  order = 3;
  CHECK(malformed(ct) == "m/config.json: quantization_config.config_groups.group_0.weights.actorder: expected a string, "
                         "found number 3");
  order = "group";
  ct["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
  CHECK(has(malformed(ct), "weights.actorder: expected null: activation ordering needs strategy \"group\""));
}
