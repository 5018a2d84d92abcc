// SPDX-License-Identifier: MIT OR Apache-2.0
// Where a layer's FFN lives is read from the checkpoint's tensor names (io/ffn_names.hpp): the
// Mixtral names transformers 4 writes (w1/w3/w2), the per-expert names transformers 5 saves
// (gate_proj/up_proj/down_proj), fused expert tensors, a router kept in another block, and a
// refusal naming the tensors for any other layout.
#include <doctest/doctest.h>

#include "io/config.hpp"
#include "io/ffn_names.hpp"
#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

using namespace metrale::layers;
using namespace layers_test;
namespace fs = std::filesystem;

namespace {

// A safetensors file holding one F32 [1] tensor under each name: only the names matter here.
fs::path names_file(const TempDir& dir, const std::vector<std::string>& names) {
  nlohmann::json header = nlohmann::json::object();
  for (size_t i = 0; i < names.size(); ++i) {
    header[names[i]] = {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {4 * i, 4 * i + 4}}};
  }
  std::string text = header.dump();
  text += std::string((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[static_cast<size_t>(b)] = static_cast<char>((text.size() >> (8 * b)) & 0xff);
  const fs::path path = dir / "model.safetensors";
  write_file(path, out + text + std::string(4 * names.size(), '\0'));
  return path;
}

const ModelConfig& mixtral() {
  static const ModelConfig c = parse_model_config({{"model_type", "mixtral"}, {"hidden_size", 256}, {"intermediate_size", 128},
                                                   {"num_local_experts", 2}, {"num_experts_per_tok", 1}},
                                                  "config.json");
  return c;
}

// Expert e's three projections under `experts` ("model.layers.0.block_sparse_moe.experts.").
std::vector<std::string> expert_names(const std::string& experts, std::vector<std::string> projections) {
  std::vector<std::string> out;
  for (int e = 0; e < 2; ++e)
    for (const auto& p : projections) out.push_back(experts + std::to_string(e) + "." + p + ".qweight");
  return out;
}

FfnNames names_of(const std::vector<std::string>& names, const ModelConfig& config = mixtral()) {
  TempDir dir;
  return ffn_names(TensorSource(names_file(dir, names)), config, 0);
}

}  // namespace

TEST_CASE("Mixtral experts: transformers 4's w1/w3/w2 and transformers 5's gate_proj/up_proj/down_proj") {
  auto names = expert_names("model.layers.0.block_sparse_moe.experts.", {"w1", "w2", "w3"});
  names.push_back("model.layers.0.block_sparse_moe.gate.weight");
  FfnNames n = names_of(names);
  CHECK(n.block == "model.layers.0.block_sparse_moe.");
  CHECK(n.gate == "w1");
  CHECK(n.up == "w3");
  CHECK(n.down == "w2");
  CHECK(n.router == "model.layers.0.block_sparse_moe.gate");
  CHECK_FALSE(n.fused_experts);
  CHECK(n.expert(1) == "model.layers.0.block_sparse_moe.experts.1.");

  names = expert_names("model.layers.0.block_sparse_moe.experts.", {"gate_proj", "up_proj", "down_proj"});
  names.push_back("model.layers.0.block_sparse_moe.gate.weight");
  n = names_of(names);
  CHECK(n.gate == "gate_proj");
  CHECK(n.up == "up_proj");
  CHECK(n.down == "down_proj");
  CHECK(n.router == "model.layers.0.block_sparse_moe.gate");

  // The router in one block, the experts in another: each found where it is.
  names = expert_names("model.layers.0.mlp.experts.", {"gate_proj", "up_proj", "down_proj"});
  names.push_back("model.layers.0.block_sparse_moe.gate.weight");
  n = names_of(names);
  CHECK(n.block == "model.layers.0.mlp.");
  CHECK(n.router == "model.layers.0.block_sparse_moe.gate");
}

TEST_CASE("fused expert tensors (transformers 5's expert modules)") {
  const FfnNames n = names_of({"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.gate_up_proj_scale_inv",
                               "model.layers.0.mlp.experts.down_proj", "model.layers.0.mlp.experts.down_proj_scale_inv",
                               "model.layers.0.mlp.gate.weight"});
  CHECK(n.fused_experts);
  CHECK(n.experts() == "model.layers.0.mlp.experts.");
  CHECK(n.router == "model.layers.0.mlp.gate");
}

TEST_CASE("a layout no transformers version writes is a refusal naming the tensors") {
  auto names = expert_names("model.layers.0.block_sparse_moe.experts.", {"fc1", "fc2"});
  names.push_back("model.layers.0.block_sparse_moe.gate.weight");
  std::string e;
  try {
    names_of(names);
  } catch (const metrale::Refusal& r) {
    e = r.what();
  }
  CHECK(contains(e, "model.safetensors: layer 0: the experts' tensors are in a layout metrale does not read"));
  CHECK(contains(e, "model.layers.0.block_sparse_moe.experts.0.fc1.qweight"));
  CHECK(contains(e, "expected experts.<E>.{w1,w3,w2}"));

  // Both namings at once: ambiguous.
  names = expert_names("model.layers.0.block_sparse_moe.experts.", {"w1", "gate_proj"});
  CHECK_THROWS_AS(names_of(names), metrale::Refusal);

  // A dense layer whose projections are not gate_proj/up_proj/down_proj.
  const ModelConfig dense = parse_model_config({{"hidden_size", 256}, {"intermediate_size", 256}}, "config.json");
  CHECK_THROWS_AS(names_of({"model.layers.0.mlp.fc1.weight", "model.layers.0.mlp.fc2.weight"}, dense), metrale::Refusal);

  // config.json makes the layer a MoE, the checkpoint has a dense FFN there: an error, not a refusal.
  e = error_of([] { names_of({"model.layers.0.mlp.gate_proj.qweight", "model.layers.0.mlp.down_proj.qweight"}); });
  CHECK(contains(e, "layer 0: config.json makes it a MoE of 2 experts, but it has no experts tensors"));
  bool refusal = false;
  try {
    names_of({"model.layers.0.mlp.gate_proj.qweight"});
  } catch (const metrale::Refusal&) {
    refusal = true;
  } catch (const metrale::Error&) {
  }
  CHECK_FALSE(refusal);
}
