// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/activation_io.hpp"

#include "core/numeric.hpp"
#include "io/safetensors.hpp"

#include <metrale/status.hpp>

#include <cstring>
#include <limits>

namespace metrale::layers {

Activations read_activations(const std::filesystem::path& path, std::string_view name, uint32_t width) {
  SafetensorsReader reader(path);
  const TensorInfo& info = reader.info(name);
  const std::string expected = "[m, " + std::to_string(width) + "] (m >= 1 rows of the model's hidden_size " +
                               std::to_string(width) + ")";
  if (info.dtype != Dtype::bf16 && info.dtype != Dtype::f16 && info.dtype != Dtype::f32) {
    throw Error(Status::invalid_argument, reader.where(name) + "dtype " + std::string(dtype_name(info.dtype)) +
                                              ", expected BF16, F16 or F32 of shape " + expected);
  }
  if (info.shape.size() != 2 || info.shape[1] != width || info.shape[0] == 0 ||
      info.shape[0] > std::numeric_limits<uint32_t>::max()) {
    throw Error(Status::invalid_argument, reader.where(name) + "shape " + shape_string(info.shape) + ", expected " + expected);
  }
  Activations out;
  out.rows = static_cast<uint32_t>(info.shape[0]);
  out.width = width;
  out.source_dtype = info.dtype;
  const std::vector<std::byte> raw = reader.read_raw(name, {info.dtype}, info.shape);
  const size_t count = size_t{out.rows} * width;
  out.bf16.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (info.dtype == Dtype::f32) {
      float v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      out.bf16[i] = f32_to_bf16(v);
    } else {
      uint16_t bits;
      std::memcpy(&bits, raw.data() + 2 * i, 2);
      // f16 -> f32 is exact, so this rounds once.
      out.bf16[i] = info.dtype == Dtype::bf16 ? bits : f32_to_bf16(f16_to_f32(bits));
    }
  }
  return out;
}

void write_activations(const std::filesystem::path& path, std::string_view name, std::span<const uint16_t> values,
                       uint32_t rows, uint32_t width, const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer;
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  writer.add(std::string(name), Dtype::bf16, {rows, width}, values);
  writer.write(path);
}

std::optional<IntTensor> read_int_tensor(const std::filesystem::path& path, std::string_view name, size_t rank) {
  SafetensorsReader reader(path);
  if (!reader.contains(name)) return std::nullopt;
  const TensorInfo& info = reader.info(name);
  if ((info.dtype != Dtype::i32 && info.dtype != Dtype::i64) || info.shape.size() != rank) {
    throw Error(Status::invalid_argument, reader.where(name) + "dtype " + std::string(dtype_name(info.dtype)) + ", shape " +
                                              shape_string(info.shape) + ", expected I32 or I64 of rank " + std::to_string(rank));
  }
  IntTensor out;
  out.shape = info.shape;
  const std::vector<std::byte> raw = reader.read_raw(name, {info.dtype}, info.shape);
  const size_t width = dtype_size(info.dtype), count = raw.size() / width;
  out.values.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (width == 4) {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      out.values[i] = v;
    } else {
      std::memcpy(&out.values[i], raw.data() + 8 * i, 8);
    }
  }
  return out;
}

}  // namespace metrale::layers
