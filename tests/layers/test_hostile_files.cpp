// SPDX-License-Identifier: MIT OR Apache-2.0
// Hostile checkpoint files: what is not a regular file, what is too large or too deep, shapes that
// overflow, headers that hide overlaps, shard paths that leave the checkpoint, and names built to
// break a parser. Every case must end in a metrale::Error naming the file (and tensor or key).
#include <doctest/doctest.h>

#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "io/weights.hpp"
#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <cstring>

using namespace metrale::layers;
using namespace layers_test;
namespace fs = std::filesystem;

namespace {

std::string hand_file(const std::string& header, const std::string& data = {}) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

fs::path make_fifo(const fs::path& path) {
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  return path;
}

// A valid one-tensor safetensors file (F32 [4]) for the shard tests.
void write_small_safetensors(const fs::path& path) {
  write_file(path, hand_file(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(16, '\0')));
}

}  // namespace

TEST_CASE("config.json: a FIFO, a device or a directory is refused by name, without blocking") {
  TempDir dir;
  const fs::path fifo = make_fifo(dir / "config.json");
  std::string e = error_of([&] { load_model_config(fifo); });
  CHECK(contains(e, fifo.string()));
  CHECK(contains(e, "FIFO"));
  e = error_of([&] { load_model_config("/dev/zero"); });
  CHECK(contains(e, "/dev/zero"));
  CHECK(contains(e, "character device"));
  fs::create_directories(dir / "nested" / "config.json");
  e = error_of([&] { load_model_config(dir / "nested"); });
  CHECK(contains(e, "directory"));
}

TEST_CASE("config.json: size, depth and number overflow are errors naming the file") {
  TempDir dir;
  const fs::path file = dir / "config.json";
  write_file(file, std::string(5u << 20, ' ') + R"({"hidden_size": 256})");
  std::string e = error_of([&] { load_model_config(file); });
  CHECK(contains(e, file.string()));
  CHECK(contains(e, "MiB"));

  write_file(file, std::string(100000, '[') + std::string(100000, ']'));
  e = error_of([&] { load_model_config(file); });
  CHECK(contains(e, file.string()));
  CHECK(contains(e, "nested deeper than"));

  write_file(file, R"({"hidden_size": 1e999})");
  e = error_of([&] { load_model_config(file); });
  CHECK(contains(e, file.string()));
  CHECK(contains(e, "line 1"));
}

TEST_CASE("config.json: shapes are limited, each error names the key and the maximum") {
  using nlohmann::json;
  std::string e = error_of([] { parse_model_config({{"hidden_size", 2147483648u}}, "cfg"); });
  CHECK(contains(e, "cfg: hidden_size = 2147483648"));
  CHECK(contains(e, "at most 65536"));
  // 2 * intermediate_size would wrap in 32 bits.
  e = error_of([] { parse_model_config({{"hidden_size", 256}, {"intermediate_size", 2147483648u}}, "cfg"); });
  CHECK(contains(e, "cfg: intermediate_size = 2147483648"));
  e = error_of([] {
    parse_model_config({{"hidden_size", 256}, {"num_experts", 100000}, {"num_experts_per_tok", 2},
                        {"moe_intermediate_size", 256}}, "cfg");
  });
  CHECK(contains(e, "cfg: num_experts = 100000"));
  // Each key within its maximum, the whole FFN beyond the weight budget.
  e = error_of([] {
    parse_model_config({{"hidden_size", 65536}, {"num_experts", 4096}, {"num_experts_per_tok", 8},
                        {"moe_intermediate_size", 65536}}, "cfg");
  });
  CHECK(contains(e, "cfg: the FFN's weights"));
  CHECK(contains(e, "GiB"));
}

TEST_CASE("safetensors: an overlap hidden behind a zero-size tensor is refused") {
  TempDir dir;
  const fs::path file = dir / "overlap.safetensors";
  write_file(file, hand_file(R"({"a":{"dtype":"U8","shape":[100],"data_offsets":[0,100]},)"
                             R"("z":{"dtype":"U8","shape":[0],"data_offsets":[10,10]},)"
                             R"("b":{"dtype":"U8","shape":[100],"data_offsets":[50,150]}})",
                             std::string(150, 'x')));
  const std::string e = error_of([&] { SafetensorsReader r(file); });
  CHECK(contains(e, file.string()));
  CHECK(contains(e, "overlap"));
}

TEST_CASE("safetensors: element count x dtype size may not wrap") {
  TempDir dir;
  const fs::path file = dir / "wrap.safetensors";
  // 2^62 F32 elements are 2^64 bytes: wrapped, that is 0 and matched the empty data_offsets.
  write_file(file, hand_file(R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})"));
  const std::string e = error_of([&] { SafetensorsReader r(file); });
  CHECK(contains(e, file.string() + ": tensor 't'"));
  CHECK(contains(e, "overflow"));
}

TEST_CASE("safetensors: empty tensors read as empty vectors") {
  TempDir dir;
  const fs::path file = dir / "empty.safetensors";
  write_file(file, hand_file(R"({"e":{"dtype":"U32","shape":[0],"data_offsets":[0,0]},)"
                             R"("h":{"dtype":"F16","shape":[0, 3],"data_offsets":[0,0]}})"));
  SafetensorsReader r(file);
  CHECK(r.read_u32("e", {Dtype::u32}, {0}).empty());
  CHECK(r.read_u16("h", {Dtype::f16}, {0, 3}).empty());
  CHECK(r.read_f32("h", {0, 3}).empty());
}

TEST_CASE("safetensors: a FIFO is refused by name; nesting is refused at the first level too deep") {
  TempDir dir;
  const fs::path fifo = make_fifo(dir / "pipe.safetensors");
  std::string e = error_of([&] { SafetensorsReader r(fifo); });
  CHECK(contains(e, fifo.string()));
  CHECK(contains(e, "FIFO"));
  const fs::path deep = dir / "deep.safetensors";
  write_file(deep, hand_file(R"({"t":)" + std::string(100000, '[') + std::string(100000, ']') + "}"));
  e = error_of([&] { SafetensorsReader r(deep); });
  CHECK(contains(e, deep.string() + ": tensor 't': the header entry must be an object"));
  write_file(deep, hand_file(R"({"t":{"dtype":"U8","shape":[[[[[1]]]]],"data_offsets":[0,1]}})", "x"));
  e = error_of([&] { SafetensorsReader r(deep); });
  CHECK(contains(e, deep.string() + ": tensor 't': shape entries must be non-negative integers, found an array"));
  // More dimensions than any tensor has.
  std::string ones = "1";
  for (int i = 0; i < 100; ++i) ones += ",1";
  write_file(deep, hand_file(R"({"t":{"dtype":"U8","shape":[)" + ones + "]}}"));
  e = error_of([&] { SafetensorsReader r(deep); });
  CHECK(contains(e, "more than 64 dimensions"));
}

TEST_CASE("safetensors: errors never echo the file's contents") {
  TempDir dir;
  const fs::path file = dir / "secret.safetensors";
  write_file(file, hand_file(R"({"t": "TOPSECRET-PASSWORD)"));
  std::string e = error_of([&] { SafetensorsReader r(file); });
  CHECK(contains(e, file.string()));
  CHECK_FALSE(contains(e, "TOPSECRET"));
  // A text file read as safetensors: its first 8 bytes are not a header length to print.
  write_file(file, "TOPSECRET-PASSWORD and more text to fill it up");
  uint64_t as_length = 0;
  std::memcpy(&as_length, "TOPSECRE", 8);
  e = error_of([&] { SafetensorsReader r(file); });
  CHECK(contains(e, file.string()));
  CHECK_FALSE(contains(e, std::to_string(as_length)));
}

TEST_CASE("index.json: shard paths stay inside the checkpoint directory") {
  TempDir root;
  const fs::path ckpt = root / "ckpt";
  write_small_safetensors(root / "outside.safetensors");
  write_small_safetensors(ckpt / "inside.safetensors");
  fs::create_symlink(root / "outside.safetensors", ckpt / "link.safetensors");
  const ModelConfig c = *preset_config("small-dense");
  for (const std::string& shard : {std::string("../outside.safetensors"), (root / "outside.safetensors").string(),
                                  std::string("link.safetensors"), std::string("sub/../../outside.safetensors")}) {
    CAPTURE(shard);
    write_file(ckpt / "model.safetensors.index.json",
               nlohmann::json{{"weight_map", {{"t", shard}}}}.dump());
    const std::string e = error_of([&] { load_ffn_weights(ckpt / "model.safetensors.index.json", c); });
    CHECK(contains(e, (ckpt / "model.safetensors.index.json").string()));
    CHECK(contains(e, "outside the checkpoint directory"));
  }
}

TEST_CASE("index.json: the Hugging Face cache layout (snapshot links into blobs) still loads") {
  TempDir root;
  const fs::path repo = root / "models--org--name";
  const fs::path snapshot = repo / "snapshots" / "0123abcd";
  // A dense small-dense checkpoint in the project's names, stored as a blob.
  const ModelConfig c = *preset_config("small-dense");
  fs::create_directories(repo / "blobs");
  save_ffn_weights(synthetic_ffn_weights(c, 3), c, repo / "blobs" / "4f1e");
  fs::create_directories(snapshot);
  fs::create_symlink("../../blobs/4f1e", snapshot / "model-00001-of-00001.safetensors");
  nlohmann::json map;
  for (const char* t : {"ffn.gate_up.qweight", "ffn.gate_up.scales", "ffn.down.qweight", "ffn.down.scales"}) {
    map[t] = "model-00001-of-00001.safetensors";
  }
  write_file(snapshot / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  const FfnWeights w = load_ffn_weights(snapshot, c);
  CHECK(w.dense.has_value());
  // A repeated key in the index is refused, naming it.
  write_file(snapshot / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00001.safetensors", "a": "x.safetensors"}})");
  const std::string e = error_of([&] { load_ffn_weights(snapshot, c); });
  CHECK(contains(e, "/weight_map/a: key \"a\" appears twice"));
}

TEST_CASE("index.json: a FIFO, an oversized or a deep index is refused by name") {
  TempDir dir;
  const fs::path fifo = make_fifo(dir / "model.safetensors.index.json");
  const ModelConfig c = *preset_config("small-dense");
  std::string e = error_of([&] { load_ffn_weights(fifo, c); });
  CHECK(contains(e, fifo.string()));
  CHECK(contains(e, "FIFO"));
  const fs::path deep = dir / "deep.safetensors.index.json";
  write_file(deep, std::string(100000, '[') + std::string(100000, ']'));
  e = error_of([&] { load_ffn_weights(deep, c); });
  CHECK(contains(e, deep.string()));
  CHECK(contains(e, "nested deeper than"));
}

TEST_CASE("GPTQ names: a 30,000-character name and an absurd layer number are plain errors") {
  TempDir dir;
  const ModelConfig c = *preset_config("small-dense");
  const std::string long_name = "model." + std::string(30000, 'a') + ".layers.0.mlp.gate_proj.qweight";
  write_file(dir / "config.json", R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}})");
  const fs::path file = dir / "long.safetensors";
  write_file(file, hand_file(nlohmann::json{{long_name, {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}.dump(),
                             std::string(4, '\0')));
  std::string e = error_of([&] { load_ffn_weights(file, c); });
  CHECK(contains(e, file.string()));
  CHECK(contains(e, "gate_proj.qweight"));

  const fs::path huge = dir / "huge.safetensors";
  const std::string huge_name = "model.layers.99999999999999999999999.mlp.gate_proj.qweight";
  write_file(huge, hand_file(nlohmann::json{{huge_name, {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}.dump(),
                             std::string(4, '\0')));
  e = error_of([&] { load_ffn_weights(huge, c); });
  CHECK(contains(e, huge.string()));
  CHECK(contains(e, huge_name));
}

TEST_CASE("W4A16 shapes whose word count overflows 64 bits are refused, not wrapped") {
  // 2^30 x 2^30 x 16 words: the product is 2^64, which wraps to 0.
  const std::string e = error_of([] { check_w4a16_shape("m", uint64_t{1} << 30, 128, uint64_t{1} << 30); });
  CHECK(contains(e, "m: w4a16-nk-g128 shape"));
  CHECK(contains(e, "too large"));
  CHECK(gate_up_rows(1u << 20) == 1u << 21);
  CHECK(contains(error_of([] { gate_up_rows(1u << 31); }), "do not fit in 32 bits"));
}
