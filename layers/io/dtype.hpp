// SPDX-License-Identifier: MIT OR Apache-2.0
// The element types a safetensors file names ("BF16", "F32", ...). Public: an activation file
// says which one it held (io/activation_io.hpp); the safetensors reader checks tensors by them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace metrale::layers {

enum class Dtype { boolean, u8, i8, i16, u16, f16, bf16, i32, u32, f32, f64, i64, u64, f8_e4m3, f8_e5m2 };

std::string_view dtype_name(Dtype dtype) noexcept;  // "F16", "BF16", "I32"...
std::optional<Dtype> dtype_from_name(std::string_view name) noexcept;
size_t dtype_size(Dtype dtype) noexcept;

}  // namespace metrale::layers
