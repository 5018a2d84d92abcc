// SPDX-License-Identifier: MIT OR Apache-2.0
// config.json parsing, presets and their errors.
#include <doctest/doctest.h>

#include "io/config.hpp"
#include "test_support.hpp"

#include <nlohmann/json.hpp>

using namespace metrale::layers;
using namespace layers_test;
using nlohmann::json;

TEST_CASE("a Hugging Face config.json describes the FFN") {
  json qwen3_moe = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"hidden_size", 2048},
                    {"intermediate_size", 6144}, {"hidden_act", "silu"}, {"num_experts", 128},
                    {"num_experts_per_tok", 8}, {"moe_intermediate_size", 768}, {"norm_topk_prob", true},
                    {"rope_theta", 1e6}};
  ModelConfig c = parse_model_config(qwen3_moe, "config.json");
  CHECK(c.ffn_kind() == FfnKind::moe);
  CHECK(c.num_experts == 128);
  CHECK(c.num_experts_per_tok == 8);
  CHECK(c.moe_intermediate_size == 768);
  CHECK(c.norm_topk_prob);
  CHECK(c.activation == Activation::silu);
  CHECK(c.model_type == "qwen3_moe");

  ModelConfig dense = parse_model_config({{"hidden_size", 1024}, {"intermediate_size", 2816}, {"hidden_act", "gelu_pytorch_tanh"}}, "x");
  CHECK(dense.ffn_kind() == FfnKind::dense);
  CHECK(dense.activation == Activation::gelu_tanh);
  CHECK(parse_model_config({{"hidden_size", 256}}, "x").ffn_kind() == FfnKind::none);

  // Mixtral's names: num_local_experts, experts sized by intermediate_size, renormalised.
  ModelConfig mixtral = parse_model_config({{"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_local_experts", 8},
                                            {"num_experts_per_tok", 2}, {"hidden_act", "silu"}}, "mixtral");
  CHECK(mixtral.num_experts == 8);
  CHECK(mixtral.moe_intermediate_size == 14336);
  CHECK(mixtral.norm_topk_prob);
}

TEST_CASE("config errors name the source and the key") {
  auto err = [](const json& doc) { return error_of([&] { parse_model_config(doc, "cfg.json"); }); };
  CHECK(err({{"intermediate_size", 512}}) == "cfg.json: hidden_size: expected a positive integer (the model width), found nothing");
  CHECK(err({{"hidden_size", "big"}}) == "cfg.json: hidden_size: expected a non-negative integer below 2^32, found string \"big\"");
  CHECK(err({{"hidden_size", -5}}) == "cfg.json: hidden_size: expected a non-negative integer below 2^32, found number -5");
  CHECK(contains(err({{"hidden_size", 200}, {"intermediate_size", 512}}), "hidden_size = 200 is not a multiple of 128"));
  CHECK(contains(err({{"hidden_size", 256}, {"intermediate_size", 500}}), "intermediate_size = 500 is not a multiple of 128"));
  CHECK(contains(err({{"hidden_size", 256}, {"intermediate_size", 512}, {"hidden_act", "relu2"}}), "cfg.json: hidden_act = \"relu2\" is not supported"));
  CHECK(contains(err({{"hidden_size", 256}, {"num_experts", 4}, {"num_experts_per_tok", 5}, {"moe_intermediate_size", 128}}),
                 "num_experts_per_tok = 5 must be in 1..4"));
  CHECK(contains(err({{"hidden_size", 256}, {"num_experts", 4}, {"num_experts_per_tok", 2}}), "needs moe_intermediate_size"));
  CHECK(contains(err({{"hidden_size", 256}, {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 128},
                      {"norm_topk_prob", "yes"}}),
                 "cfg.json: norm_topk_prob: expected true or false, found string \"yes\""));
  CHECK(err(json::array()) == "cfg.json: expected a JSON object (a model config), found an array");
  CHECK(err({{"hidden_size", 256}, {"model_type", 7}}) == "cfg.json: model_type: expected a string, found number 7");
  CHECK(err({{"hidden_size", 256}, {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 128},
             {"mlp_only_layers", {1, "two"}}}) ==
        "cfg.json: mlp_only_layers[1]: expected a non-negative integer below 2^32, found string \"two\"");
  CHECK(err({{"hidden_size", 256}, {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 128},
             {"routed_scaling_factor", "2.5"}}) == "cfg.json: routed_scaling_factor: expected a number, found string \"2.5\"");
  // A well-formed config metrale cannot run is a refusal (exit 3), not an error.
  CHECK_THROWS_AS(parse_model_config({{"hidden_size", 200}, {"intermediate_size", 512}}, "cfg.json"), metrale::Refusal);
  CHECK_THROWS_AS(parse_model_config({{"hidden_size", 256}, {"hidden_act", "relu2"}}, "cfg.json"), metrale::Refusal);
  CHECK_FALSE(error_of([] { parse_model_config({{"hidden_size", "big"}}, "cfg.json"); }).empty());
}

TEST_CASE("presets carry the real models' FFN shapes") {
  ModelConfig q32 = *preset_config("qwen3-32b");
  CHECK(q32.ffn_kind() == FfnKind::dense);
  CHECK(q32.hidden_size == 5120);
  CHECK(q32.intermediate_size == 25600);
  CHECK(q32.activation == Activation::silu);
  ModelConfig q30 = *preset_config("qwen3-30b-a3b");
  CHECK(q30.ffn_kind() == FfnKind::moe);
  CHECK(q30.hidden_size == 2048);
  CHECK(q30.num_experts == 128);
  CHECK(q30.num_experts_per_tok == 8);
  CHECK(q30.moe_intermediate_size == 768);
  CHECK(q30.norm_topk_prob);
  for (const auto& p : presets()) CHECK(preset_config(p.name).has_value());
  CHECK(!preset_config("nope"));
  std::string e = error_of([] { resolve_model("qwen4-1t"); });
  CHECK(contains(e, "neither a preset"));
  CHECK(contains(e, "qwen3-32b"));
}

TEST_CASE("config.json from a file or its directory") {
  TempDir dir;
  write_file(dir / "config.json", R"({"model_type":"llama","hidden_size":512,"intermediate_size":1536,"hidden_act":"silu"})");
  CHECK(resolve_model((dir / "config.json").string()).intermediate_size == 1536);
  CHECK(resolve_model(dir.path().string()).hidden_size == 512);
  write_file(dir / "bad.json", "{\"hidden_size\": ");
  CHECK(contains(error_of([&] { load_model_config(dir / "bad.json"); }), "not valid JSON"));
}
