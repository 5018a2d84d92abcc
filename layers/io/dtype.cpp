// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/dtype.hpp"

#include <array>

namespace metrale::layers {

namespace {

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeEntry, 15> kDtypes{{
    {Dtype::boolean, "BOOL", 1}, {Dtype::u8, "U8", 1},     {Dtype::i8, "I8", 1},
    {Dtype::i16, "I16", 2},      {Dtype::u16, "U16", 2},   {Dtype::f16, "F16", 2},
    {Dtype::bf16, "BF16", 2},    {Dtype::i32, "I32", 4},   {Dtype::u32, "U32", 4},
    {Dtype::f32, "F32", 4},      {Dtype::f64, "F64", 8},   {Dtype::i64, "I64", 8},
    {Dtype::u64, "U64", 8},      {Dtype::f8_e4m3, "F8_E4M3", 1}, {Dtype::f8_e5m2, "F8_E5M2", 1},
}};

}  // namespace

std::string_view dtype_name(Dtype dtype) noexcept {
  for (const auto& e : kDtypes) if (e.dtype == dtype) return e.name;
  return "?";
}

std::optional<Dtype> dtype_from_name(std::string_view name) noexcept {
  for (const auto& e : kDtypes) if (e.name == name) return e.dtype;
  return std::nullopt;
}

size_t dtype_size(Dtype dtype) noexcept {
  for (const auto& e : kDtypes) if (e.dtype == dtype) return e.size;
  return 0;
}

}  // namespace metrale::layers
