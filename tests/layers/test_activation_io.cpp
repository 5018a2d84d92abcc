// SPDX-License-Identifier: MIT OR Apache-2.0
// Activations in and out of safetensors (`metrale run --input / --output`): the round trip, the
// rounding of F32/F16 inputs to bf16, and the messages for a wrong tensor, dtype or shape.
#include <doctest/doctest.h>

#include "io/activation_io.hpp"
#include "core/numeric.hpp"
#include "io/safetensors.hpp"
#include "test_support.hpp"

#include <cstring>

using namespace metrale::layers;
using namespace layers_test;

namespace {

template <class T>
std::filesystem::path write_tensor(const TempDir& dir, const std::string& file, const std::string& name, Dtype dtype,
                                   std::vector<uint64_t> shape, const std::vector<T>& values) {
  SafetensorsWriter w;
  w.add(name, dtype, std::move(shape), std::span<const T>(values));
  w.write(dir / file);
  return dir / file;
}

}  // namespace

TEST_CASE("activations: BF16 written, read back bit for bit, with metadata") {
  TempDir dir;
  std::vector<uint16_t> y{f32_to_bf16(1.0f), f32_to_bf16(-2.5f), 0x7fc0, f32_to_bf16(3.0e-3f), 0x0001, 0x8000};
  write_activations(dir / "y.safetensors", "y", y, 2, 3, {{"producer", "test"}});
  SafetensorsReader reader(dir / "y.safetensors");
  CHECK(reader.info("y").dtype == Dtype::bf16);
  CHECK(reader.info("y").shape == std::vector<uint64_t>{2, 3});
  CHECK(reader.metadata().at("producer") == "test");
  Activations back = read_activations(dir / "y.safetensors", "y", 3);
  CHECK(back.rows == 2);
  CHECK(back.width == 3);
  CHECK(back.source_dtype == Dtype::bf16);
  CHECK(back.bf16 == y);
}

TEST_CASE("activations: F32 and F16 inputs are rounded to bf16, nearest, ties to even") {
  TempDir dir;
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to the even 1. 1 + 3·2^-8 is halfway
  // between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6. 1 + 2^-8 + 2^-20 rounds up.
  std::vector<float> f{1.0f + 0x1.0p-8f, 1.0f + 3 * 0x1.0p-8f, 1.0f + 0x1.0p-8f + 0x1.0p-20f, -0.0f};
  auto x = read_activations(write_tensor(dir, "f.safetensors", "x", Dtype::f32, {1, 4}, f), "x", 4);
  CHECK(x.source_dtype == Dtype::f32);
  CHECK(bf16_to_f32(x.bf16[0]) == 1.0f);
  CHECK(bf16_to_f32(x.bf16[1]) == 1.0f + 0x1.0p-6f);
  CHECK(bf16_to_f32(x.bf16[2]) == 1.0f + 0x1.0p-7f);
  CHECK(x.bf16[3] == 0x8000);
  // An f16 with more mantissa than bf16 holds: 1 + 2^-8 + 2^-10 rounds up to 1 + 2^-7.
  std::vector<uint16_t> h{f32_to_f16(1.0f + 0x1.0p-8f + 0x1.0p-10f), f32_to_f16(-0.5f)};
  auto xh = read_activations(write_tensor(dir, "h.safetensors", "x", Dtype::f16, {2, 1}, h), "x", 1);
  CHECK(xh.rows == 2);
  CHECK(bf16_to_f32(xh.bf16[0]) == 1.0f + 0x1.0p-7f);
  CHECK(bf16_to_f32(xh.bf16[1]) == -0.5f);
}

TEST_CASE("activations: a missing tensor, a wrong dtype or a wrong shape names the file, tensor and expectation") {
  TempDir dir;
  auto other = write_tensor(dir, "o.safetensors", "not_x", Dtype::f32, {1, 4}, std::vector<float>(4, 1.0f));
  auto missing = error_of([&] { read_activations(other, "x", 4); });
  CHECK(contains(missing, "o.safetensors"));
  CHECK(contains(missing, "'x'"));

  auto ints = write_tensor(dir, "i.safetensors", "x", Dtype::i32, {1, 4}, std::vector<int32_t>(4, 1));
  auto dtype = error_of([&] { read_activations(ints, "x", 4); });
  CHECK(contains(dtype, "i.safetensors: tensor 'x': dtype I32, expected BF16, F16 or F32 of shape [m, 4]"));

  auto wide = write_tensor(dir, "w.safetensors", "x", Dtype::f32, {2, 3}, std::vector<float>(6, 1.0f));
  CHECK(contains(error_of([&] { read_activations(wide, "x", 4); }), "w.safetensors: tensor 'x': shape [2, 3], expected [m, 4]"));
  auto flat = write_tensor(dir, "v.safetensors", "x", Dtype::f32, {4}, std::vector<float>(4, 1.0f));
  CHECK(contains(error_of([&] { read_activations(flat, "x", 4); }), "shape [4], expected [m, 4]"));
  auto empty = write_tensor(dir, "e.safetensors", "x", Dtype::f32, {0, 4}, std::vector<float>{});
  CHECK(contains(error_of([&] { read_activations(empty, "x", 4); }), "shape [0, 4], expected [m, 4] (m >= 1"));
  CHECK(contains(error_of([&] { read_activations(dir / "none.safetensors", "x", 4); }), "none.safetensors"));
}
