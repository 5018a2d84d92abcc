// SPDX-License-Identifier: MIT OR Apache-2.0
// Safetensors reader and writer, the project's FFN tensor names and GPTQ checkpoints.
#include <doctest/doctest.h>

#include "core/numeric.hpp"
#include "decoder/embedding_table.hpp"
#include "io/tensor_source.hpp"
#include "io/safetensors.hpp"
#include "io/quant_config.hpp"
#include "io/weights.hpp"
#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <tuple>

using namespace metrale::layers;
using namespace layers_test;

namespace {

// A safetensors file assembled by hand: 8-byte little-endian length, header, data.
std::string hand_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

bool same(const QuantMatrix& a, const QuantMatrix& b) {
  return a.batch == b.batch && a.n == b.n && a.k == b.k && a.qweight == b.qweight && a.scales == b.scales;
}

}  // namespace

TEST_CASE("a hand-written safetensors file loads") {
  TempDir dir;
  std::vector<uint16_t> halves{f32_to_f16(1.5f), f32_to_f16(-2.0f), f32_to_f16(0.25f)};
  std::vector<int32_t> ints{7, -1};
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
      R"("i":{"dtype":"I32","shape":[1,2],"data_offsets":[6,14]}})";
  write_file(dir / "hand.safetensors", hand_file(header, bytes_of(halves) + bytes_of(ints)));
  SafetensorsReader r(dir / "hand.safetensors");
  CHECK(r.metadata().at("format") == "pt");
  CHECK(r.names() == std::vector<std::string>{"h", "i"});
  CHECK(r.info("i").shape == std::vector<uint64_t>{1, 2});
  CHECK(r.read_f32("h", {3}) == std::vector<float>{1.5f, -2.0f, 0.25f});
  auto words = r.read_u32("i", {Dtype::i32}, {1, 2});
  CHECK(static_cast<int32_t>(words[0]) == 7);
  CHECK(static_cast<int32_t>(words[1]) == -1);
}

TEST_CASE("the writer's files read back, header aligned to 8") {
  TempDir dir;
  std::vector<float> a{1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b{1, 2, 3};
  SafetensorsWriter w;
  w.add("a", Dtype::f32, {2, 3}, std::span<const float>(a));
  w.add("b", Dtype::bf16, {3}, std::span<const uint16_t>(b));
  w.set_metadata("k", "v");
  w.write(dir / "w.safetensors");
  const std::string raw = read_file(dir / "w.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  CHECK(header_len % 8 == 0);
  CHECK(raw.size() == 8 + header_len + 24 + 6);
  SafetensorsReader r(dir / "w.safetensors");
  CHECK(r.read_f32("a", {2, 3}) == a);
  CHECK(r.read_u16("b", {Dtype::bf16}, {3}) == b);
  CHECK(r.metadata().at("k") == "v");
  CHECK(!std::filesystem::exists(dir / "w.safetensors.partial"));
  // The writer refuses inconsistent input.
  CHECK(contains(error_of([&] { w.add("c", Dtype::f32, {4}, std::span<const float>(a)); }), "24 bytes given for F32 [4]"));
  CHECK(contains(error_of([&] { w.add("a", Dtype::f32, {6}, std::span<const float>(a)); }), "added twice"));
}

TEST_CASE("malformed files give errors naming the file, the tensor and the expectation") {
  TempDir dir;
  std::vector<float> data{1, 2, 3, 4};
  const std::string good_header = R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  const std::string good = hand_file(good_header, bytes_of(data));
  const auto file = dir / "m.safetensors";
  const std::string name = file.string();

  write_file(file, good.substr(0, good.size() - 3));  // truncated tensor data
  std::string e = error_of([&] { SafetensorsReader r(file); });
  CHECK(contains(e, name));
  CHECK(contains(e, "tensor 't'"));
  CHECK(contains(e, "truncated"));

  write_file(file, good.substr(0, 5));  // shorter than the length prefix
  e = error_of([&] { SafetensorsReader r(file); });
  CHECK(contains(e, "8-byte"));

  write_file(file, good.substr(0, 20));  // header length past the end
  e = error_of([&] { SafetensorsReader r(file); });
  CHECK(contains(e, "header length"));
  CHECK(contains(e, "past the end"));

  write_file(file, hand_file("{not json", ""));
  CHECK(contains(error_of([&] { SafetensorsReader r(file); }), "not valid JSON"));

  write_file(file, hand_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", bytes_of(data)));
  CHECK(contains(error_of([&] { SafetensorsReader r(file); }), "F32 [3] needs 12"));

  write_file(file, hand_file(R"({"t":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", bytes_of(data)));
  CHECK(contains(error_of([&] { SafetensorsReader r(file); }), "unknown dtype 'Q4'"));

  write_file(file, hand_file(R"({"t":{"dtype":"F32","shape":[4]}})", bytes_of(data)));
  CHECK(contains(error_of([&] { SafetensorsReader r(file); }), "data_offsets"));

  write_file(file, hand_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                             bytes_of(data)));
  CHECK(contains(error_of([&] { SafetensorsReader r(file); }), "overlap"));

  write_file(file, good);
  SafetensorsReader r(file);
  e = error_of([&] { r.read_f32("t", {4}); });  // shape mismatch
  CHECK(contains(e, name + ": tensor 't': shape [2, 2], expected [4]"));
  e = error_of([&] { r.read_u16("t", {Dtype::f16}, {2, 2}); });  // wrong dtype
  CHECK(contains(e, name + ": tensor 't': dtype F32, expected F16"));
  e = error_of([&] { r.read_f32("nope", {1}); });  // missing
  CHECK(contains(e, name + ": tensor 'nope': missing"));

  CHECK(contains(error_of([&] { SafetensorsReader r2(dir / "absent.safetensors"); }), "cannot read"));
}

TEST_CASE("FFN weights round-trip through the project's tensor names") {
  TempDir dir;
  for (const char* preset : {"small-dense", "small-moe"}) {
    CAPTURE(preset);
    ModelConfig c = *preset_config(preset);
    FfnWeights w = synthetic_ffn_weights(c, 11);
    save_ffn_weights(w, c, dir / "ffn.safetensors");
    SafetensorsReader r(dir / "ffn.safetensors");
    CHECK(r.metadata().at("format") == "metrale-w4a16");
    FfnWeights back = load_ffn_weights(dir / "ffn.safetensors", c);
    CHECK(back.kind == w.kind);
    if (w.dense) {
      CHECK(same(back.dense->gate_up, w.dense->gate_up));
      CHECK(same(back.dense->down, w.dense->down));
      CHECK(r.info("ffn.gate_up.qweight").shape == std::vector<uint64_t>{1024, 32});
      CHECK(r.info("ffn.down.scales").shape == std::vector<uint64_t>{256, 4});
    } else {
      CHECK(back.moe->router == w.moe->router);
      CHECK(same(back.moe->gate_up, w.moe->gate_up));
      CHECK(same(back.moe->down, w.moe->down));
      CHECK(same(back.moe->shared_expert->gate_up, w.moe->shared_expert->gate_up));
      CHECK(back.moe->shared_expert_gate == w.moe->shared_expert_gate);
      CHECK(r.info("ffn.experts.gate_up.qweight").shape == std::vector<uint64_t>{8, 512, 32});
    }
  }
}

TEST_CASE("loading checks weights against the config: shape, dtype, missing") {
  TempDir dir;
  ModelConfig c = *preset_config("small-dense");
  save_ffn_weights(synthetic_ffn_weights(c, 1), c, dir / "ffn.safetensors");
  ModelConfig wider = c;
  wider.intermediate_size = 640;
  std::string e = error_of([&] { load_ffn_weights(dir / "ffn.safetensors", wider); });
  CHECK(contains(e, "tensor 'ffn.gate_up.qweight': shape [1024, 32], expected [1280, 32]"));

  // Scales stored as bf16 instead of fp16.
  FfnWeights w = synthetic_ffn_weights(c, 1);
  SafetensorsWriter out;
  out.add("ffn.gate_up.qweight", Dtype::u32, {1024, 32}, std::span<const uint32_t>(w.dense->gate_up.qweight));
  out.add("ffn.gate_up.scales", Dtype::bf16, {1024, 2}, std::span<const uint16_t>(w.dense->gate_up.scales));
  out.write(dir / "bad.safetensors");
  e = error_of([&] { load_ffn_weights(dir / "bad.safetensors", c); });
  CHECK(contains(e, (dir / "bad.safetensors").string()));
  CHECK(contains(e, "tensor 'ffn.gate_up.scales': dtype BF16, expected F16"));

  SafetensorsWriter partial;
  partial.add("ffn.gate_up.qweight", Dtype::u32, {1024, 32}, std::span<const uint32_t>(w.dense->gate_up.qweight));
  partial.add("ffn.gate_up.scales", Dtype::f16, {1024, 2}, std::span<const uint16_t>(w.dense->gate_up.scales));
  partial.write(dir / "partial.safetensors");
  e = error_of([&] { load_ffn_weights(dir / "partial.safetensors", c); });
  CHECK(contains(e, "tensor 'ffn.down.qweight': missing"));

  // A dense file against a MoE config: the MoE names are missing.
  e = error_of([&] { load_ffn_weights(dir / "ffn.safetensors", *preset_config("small-moe")); });
  CHECK(contains(e, "ffn.router.weight"));
}

namespace {

// Writes one projection in GPTQ's layout: qweight int32 [K/8, N], scales fp16 [K/128, N],
// qzeros int32 [K/128, N/8] (symmetric: every nibble 7), g_idx int32 [K].
struct GptqTensors {
  std::vector<uint32_t> qweight, qzeros;
  std::vector<uint16_t> scales;
  std::vector<int32_t> g_idx;
};

GptqTensors to_gptq(const QuantView& v, uint32_t zero_nibble = 7) {
  GptqTensors t;
  const uint32_t kw = v.k / 8, groups = v.k / 128;
  t.qweight.resize(size_t{kw} * v.n);
  t.scales.resize(size_t{groups} * v.n);
  for (uint32_t n = 0; n < v.n; ++n) {
    for (uint32_t w = 0; w < kw; ++w) t.qweight[size_t{w} * v.n + n] = v.qweight[size_t{n} * kw + w];
    for (uint32_t g = 0; g < groups; ++g) t.scales[size_t{g} * v.n + n] = v.scales[size_t{n} * groups + g];
  }
  t.qzeros.assign(size_t{groups} * ((v.n + 7) / 8), zero_nibble * 0x11111111u);
  for (uint32_t k = 0; k < v.k; ++k) t.g_idx.push_back(static_cast<int32_t>(k / 128));
  return t;
}

void add_gptq(SafetensorsWriter& w, std::vector<GptqTensors>& keep, const std::string& base, const QuantView& v,
              uint32_t zero_nibble = 7) {
  keep.push_back(to_gptq(v, zero_nibble));
  const GptqTensors& t = keep.back();
  w.add(base + ".qweight", Dtype::i32, {v.k / 8, v.n}, std::span<const uint32_t>(t.qweight));
  w.add(base + ".scales", Dtype::f16, {v.k / 128, v.n}, std::span<const uint16_t>(t.scales));
  w.add(base + ".qzeros", Dtype::i32, {v.k / 128, (v.n + 7) / 8}, std::span<const uint32_t>(t.qzeros));
  w.add(base + ".g_idx", Dtype::i32, {v.k}, std::span<const int32_t>(t.g_idx));
}

// The gate and up halves of a fused [2I, H] matrix as separate [I, H] views.
QuantView half(const QuantMatrix& m, uint32_t index, bool upper) {
  QuantView v = m.view(index);
  const uint32_t rows = m.n / 2;
  v.n = rows;
  v.qweight = v.qweight.subspan(upper ? size_t{rows} * (v.k / 8) : 0, size_t{rows} * (v.k / 8));
  v.scales = v.scales.subspan(upper ? size_t{rows} * (v.k / 128) : 0, size_t{rows} * (v.k / 128));
  return v;
}

}  // namespace

// The quantization_config AutoGPTQ writes for a symmetric group-128 checkpoint (v1 zeros).
constexpr const char* kGptqConfig =
    R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": true, "desc_act": false,
        "checkpoint_format": "gptq"}})";

TEST_CASE("a symmetric group-128 GPTQ checkpoint loads into our layout") {
  TempDir dir;
  write_file(dir / "config.json", kGptqConfig);
  ModelConfig c = *preset_config("small-dense");
  FfnWeights w = synthetic_ffn_weights(c, 5);
  std::vector<GptqTensors> keep;
  keep.reserve(16);
  SafetensorsWriter out;
  const std::string p = "model.layers.3.mlp.";
  add_gptq(out, keep, p + "gate_proj", half(w.dense->gate_up, 0, false));
  add_gptq(out, keep, p + "up_proj", half(w.dense->gate_up, 0, true));
  add_gptq(out, keep, p + "down_proj", w.dense->down.view());
  out.write(dir / "gptq.safetensors");
  FfnWeights back = load_ffn_weights(dir / "gptq.safetensors", c);
  CHECK(same(back.dense->gate_up, w.dense->gate_up));
  CHECK(same(back.dense->down, w.dense->down));
  CHECK(contains(error_of([&] { load_ffn_weights(dir / "gptq.safetensors", c, {.layer = 4}); }), "no FFN tensors for layer 4"));

  // Zero points other than 8 contradict sym: true.
  SafetensorsWriter asym;
  add_gptq(asym, keep, p + "gate_proj", half(w.dense->gate_up, 0, false), 5);
  add_gptq(asym, keep, p + "up_proj", half(w.dense->gate_up, 0, true));
  add_gptq(asym, keep, p + "down_proj", w.dense->down.view());
  asym.write(dir / "asym.safetensors");
  std::string e = error_of([&] { load_ffn_weights(dir / "asym.safetensors", c); });
  CHECK(contains(e, "tensor 'model.layers.3.mlp.gate_proj.qzeros': quantization_config.sym = true"));
  CHECK(contains(e, "zero point 6"));

  // A permuted g_idx contradicts desc_act: false.
  keep.push_back(to_gptq(w.dense->down.view()));
  const GptqTensors& d = keep.back();  // `keep` is reserved: references stay valid
  std::vector<int32_t> shuffled = d.g_idx;
  std::swap(shuffled[0], shuffled[300]);
  SafetensorsWriter act;
  add_gptq(act, keep, p + "gate_proj", half(w.dense->gate_up, 0, false));
  add_gptq(act, keep, p + "up_proj", half(w.dense->gate_up, 0, true));
  act.add(p + "down_proj.qweight", Dtype::i32, {64, 256}, std::span<const uint32_t>(d.qweight));
  act.add(p + "down_proj.scales", Dtype::f16, {4, 256}, std::span<const uint16_t>(d.scales));
  act.add(p + "down_proj.g_idx", Dtype::i32, {512}, std::span<const int32_t>(shuffled));
  act.write(dir / "act.safetensors");
  e = error_of([&] { load_ffn_weights(dir / "act.safetensors", c); });
  CHECK(contains(e, "down_proj.g_idx': quantization_config.desc_act = false"));
  CHECK(contains(e, "act-order"));

  // No FFN tensors at all.
  SafetensorsWriter empty;
  std::vector<float> one{1};
  empty.add("lm_head.weight", Dtype::f32, {1}, std::span<const float>(one));
  empty.write(dir / "empty.safetensors");
  CHECK(contains(error_of([&] { load_ffn_weights(dir / "empty.safetensors", c); }), "no FFN tensors found"));

  // Without a declaration nothing is guessed from the tensors.
  TempDir bare;
  std::filesystem::copy_file(dir / "gptq.safetensors", bare / "gptq.safetensors");
  CHECK(contains(error_of([&] { load_ffn_weights(bare / "gptq.safetensors", c); }), "declares no quantization"));
}

TEST_CASE("a sharded GPTQ MoE checkpoint loads through its index") {
  TempDir dir;
  ModelConfig c = *preset_config("small-moe");
  FfnWeights w = synthetic_ffn_weights(c, 9);
  const MoeWeights& m = *w.moe;
  std::vector<GptqTensors> keep;
  keep.reserve(64);
  const std::string p = "model.layers.0.mlp.";
  SafetensorsWriter first, second;
  nlohmann::json map;
  first.add(p + "gate.weight", Dtype::f32, {8, 256}, std::span<const float>(m.router));
  map[p + "gate.weight"] = "part-1.safetensors";
  for (uint32_t e = 0; e < m.experts; ++e) {
    SafetensorsWriter& shard = e < 4 ? first : second;
    const std::string file = e < 4 ? "part-1.safetensors" : "part-2.safetensors";
    const std::string base = p + "experts." + std::to_string(e) + ".";
    add_gptq(shard, keep, base + "gate_proj", half(m.gate_up, e, false));
    add_gptq(shard, keep, base + "up_proj", half(m.gate_up, e, true));
    add_gptq(shard, keep, base + "down_proj", m.down.view(e));
    for (const char* part : {"gate_proj", "up_proj", "down_proj"})
      for (const char* t : {".qweight", ".scales", ".qzeros", ".g_idx"}) map[base + part + t] = file;
  }
  add_gptq(second, keep, p + "shared_expert.gate_proj", half(m.shared_expert->gate_up, 0, false));
  add_gptq(second, keep, p + "shared_expert.up_proj", half(m.shared_expert->gate_up, 0, true));
  add_gptq(second, keep, p + "shared_expert.down_proj", m.shared_expert->down.view());
  second.add(p + "shared_expert_gate.weight", Dtype::f32, {1, 256}, std::span<const float>(m.shared_expert_gate));
  for (const char* part : {"gate_proj", "up_proj", "down_proj"})
    for (const char* t : {".qweight", ".scales", ".qzeros", ".g_idx"}) map[p + "shared_expert." + part + t] = "part-2.safetensors";
  map[p + "shared_expert_gate.weight"] = "part-2.safetensors";
  first.write(dir / "part-1.safetensors");
  second.write(dir / "part-2.safetensors");
  write_file(dir / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  write_file(dir / "config.json", kGptqConfig);

  FfnWeights back = load_ffn_weights(dir.path(), c);
  CHECK(back.moe->router == m.router);
  CHECK(same(back.moe->gate_up, m.gate_up));
  CHECK(same(back.moe->down, m.down));
  CHECK(same(back.moe->shared_expert->gate_up, m.shared_expert->gate_up));
  CHECK(back.moe->shared_expert_gate == m.shared_expert_gate);
}

// An unquantized checkpoint as save_pretrained writes it: P.weight in torch_dtype, no
// quantization_config. The values load as they are (bf16-nk / f16-nk).
TEST_CASE("an unquantized checkpoint loads its FFN as bf16 or f16 weights") {
  ModelConfig c = *preset_config("small-dense");
  const uint32_t h = c.hidden_size, inter = c.intermediate_size;
  const std::string p = "model.layers.0.mlp.";
  auto values = [](size_t count, uint16_t salt) {
    std::vector<uint16_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<uint16_t>(0x3c00 + (i * 7 + salt) % 0x300);
    return v;
  };
  const auto gate = values(size_t{inter} * h, 1), up = values(size_t{inter} * h, 2), down = values(size_t{h} * inter, 3);
  auto write = [&](const TempDir& dir, const char* config, Dtype dtype, Dtype down_dtype) {
    write_file(dir / "config.json", config);
    SafetensorsWriter out;
    out.add(p + "gate_proj.weight", dtype, {inter, h}, std::span<const uint16_t>(gate));
    out.add(p + "up_proj.weight", dtype, {inter, h}, std::span<const uint16_t>(up));
    out.add(p + "down_proj.weight", down_dtype, {h, inter}, std::span<const uint16_t>(down));
    out.write(dir / "model.safetensors");
  };
  for (const auto& [dtype, torch_dtype, format] : {std::tuple{Dtype::bf16, "bfloat16", WeightFormat::bf16},
                                                    std::tuple{Dtype::f16, "float16", WeightFormat::f16}}) {
    TempDir dir;
    write(dir, (std::string(R"({"torch_dtype": ")") + torch_dtype + "\"}").c_str(), dtype, dtype);
    FfnWeights w = load_ffn_weights(dir / "model.safetensors", c);
    CAPTURE(torch_dtype);
    CHECK(w.dense->gate_up.format == format);
    CHECK(w.dense->down.format == format);
    const QuantView gu = w.dense->gate_up.view(), d = w.dense->down.view();
    const auto value = [&](uint16_t bits) { return dtype == Dtype::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits); };
    CHECK(gu.value(0, 1) == value(gate[1]));               // gate rows first
    CHECK(gu.value(inter, 5) == value(up[5]));             // then up
    CHECK(d.value(h - 1, inter - 1) == value(down.back()));
  }
  // torch_dtype rules the tensors' dtype; F32 weights and undeclared quantized tensors are refused.
  TempDir mixed;
  write(mixed, R"({"torch_dtype": "bfloat16"})", Dtype::bf16, Dtype::f16);
  std::string e = error_of([&] { load_ffn_weights(mixed / "model.safetensors", c); });
  CHECK(contains(e, "down_proj.weight"));
  CHECK(contains(e, "torch_dtype"));
  CHECK(contains(e, "= \"bfloat16\", but the tensor is F16"));
  TempDir wide;
  write_file(wide / "config.json", R"({"torch_dtype": "float32"})");
  SafetensorsWriter f32;
  std::vector<float> big(size_t{inter} * h), big_down(size_t{h} * inter);
  f32.add(p + "gate_proj.weight", Dtype::f32, {inter, h}, std::span<const float>(big));
  f32.add(p + "up_proj.weight", Dtype::f32, {inter, h}, std::span<const float>(big));
  f32.add(p + "down_proj.weight", Dtype::f32, {h, inter}, std::span<const float>(big_down));
  f32.write(wide / "model.safetensors");
  e = error_of([&] { load_ffn_weights(wide / "model.safetensors", c); });
  CHECK(contains(e, "gate_proj.weight"));
  CHECK(contains(e, "dtype F32: metrale runs unquantized linear weights in BF16 or F16"));
}

TEST_CASE("modules a quantization declaration leaves unquantized match as each tool matches them") {
  CheckpointQuant ct;
  ct.method = QuantMethod::compressed_tensors;
  ct.ignore = {"lm_head", "re:.*mlp.gate$", "re:model.layers.1.mlp"};
  CHECK(ct.leaves_unquantized("lm_head"));
  CHECK(ct.leaves_unquantized("model.layers.0.mlp.gate"));
  CHECK(!ct.leaves_unquantized("model.layers.0.mlp.gate_proj"));  // re.match: the pattern, not a substring
  CHECK(ct.leaves_unquantized("model.layers.1.mlp.down_proj"));   // from the start of the name
  CHECK(!ct.leaves_unquantized("model.layers.11.xmlp"));
  CHECK(!ct.leaves_unquantized("x.model.layers.1.mlp.down_proj"));
  CHECK(!ct.leaves_unquantized("model.lm_head"));                 // a plain entry is the whole name
  CheckpointQuant awq;
  awq.method = QuantMethod::awq;
  awq.ignore = {"gate"};
  CHECK(awq.leaves_unquantized("model.layers.0.block_sparse_moe.gate"));
  CHECK(awq.leaves_unquantized("model.layers.0.mlp.gate_proj"));  // transformers' substring rule
  CHECK(!awq.leaves_unquantized("model.layers.0.mlp.down_proj"));
  ct.ignore = {"re:("};
  ct.source = "config.json";
  CHECK(contains(error_of([&] { (void)ct.leaves_unquantized("lm_head"); }), "quantization_config.ignore entry \"re:(\" is not a regular expression"));
}

TEST_CASE("an embedding table is used in place from the file's mapping, and gathers rows by id") {
  TempDir dir;
  // bf16 [4, 8]: row r holds r*8 .. r*8+7 as bf16; an F32 copy of the same values beside it.
  std::vector<uint16_t> bf16(32);
  std::vector<float> f32(32);
  for (size_t i = 0; i < 32; ++i) {
    f32[i] = static_cast<float>(i);
    bf16[i] = f32_to_bf16(f32[i]);
  }
  SafetensorsWriter w;
  w.add("small", Dtype::bf16, {3}, std::span<const uint16_t>(bf16.data(), 3));  // the next tensor starts unaligned to 8
  w.add("table", Dtype::bf16, {4, 8}, std::span<const uint16_t>(bf16));
  w.add("table32", Dtype::f32, {4, 8}, std::span<const float>(f32));
  w.write(dir / "e.safetensors");
  auto source = std::make_shared<const TensorSource>(dir / "e.safetensors");
  const uint64_t read_before = source->bytes_read();
  CHECK(source->tensor_bytes() == 6 + 64 + 128);

  const EmbeddingTable mapped(source, "table", 4, 8);
  CHECK(mapped.mapped());
  CHECK(source->bytes_read() == read_before);  // nothing read through pread: the mapping's pages
  std::vector<uint16_t> out(3 * 8);
  const std::vector<int32_t> ids{3, 0, 3};
  mapped.gather(ids, out);
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 8; ++c) CHECK(out[r * 8 + c] == bf16[static_cast<size_t>(ids[r]) * 8 + c]);

  const EmbeddingTable rounded(source, "table32", 4, 8);  // F32: rounded to bf16 once, held
  CHECK_FALSE(rounded.mapped());
  std::vector<uint16_t> again(3 * 8);
  rounded.gather(ids, again);
  CHECK(again == out);

  const std::vector<int32_t> outside{1, 4};
  std::vector<uint16_t> two(16);
  CHECK(contains(error_of([&] { mapped.gather(outside, two); }), "row 1: id 4 is outside the vocabulary (0..3)"));
  CHECK(contains(error_of([&] { EmbeddingTable(source, "table", 4, 9); }), "shape [4, 8], expected [4, 9]"));
}
