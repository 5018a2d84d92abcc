// SPDX-License-Identifier: MIT OR Apache-2.0
// Activations in and out of safetensors files (`metrale run --input / --output`): one 2-D tensor
// [m, width]. The layers run bf16 activations, so inputs given as F32 or F16 are rounded to bf16
// (nearest, ties to even) on the way in; outputs are written as BF16. docs/layers.md.
#pragma once

#include "io/dtype.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

struct Activations {
  uint32_t rows = 0;
  uint32_t width = 0;
  std::vector<uint16_t> bf16;  // [rows][width]
  Dtype source_dtype = Dtype::bf16;  // as stored in the file
};

// Reads tensor `name` of `path`: BF16, F16 or F32, shape [m, width] with m >= 1. Throws
// Error(not_found) for a missing file or tensor and Error(invalid_argument) for a wrong dtype
// or shape, naming the file, the tensor and what was expected.
Activations read_activations(const std::filesystem::path& path, std::string_view name, uint32_t width);

// An integer tensor (token ids, positions, sequence numbers): I32 or I64, of rank `rank`, its
// values as i64. nullopt when the file has no tensor `name`; Error(invalid_argument) naming the
// file and tensor for another dtype or rank.
struct IntTensor {
  std::vector<uint64_t> shape;
  std::vector<int64_t> values;
};
std::optional<IntTensor> read_int_tensor(const std::filesystem::path& path, std::string_view name, size_t rank);

// Writes `values` as tensor `name`, BF16 [rows, width], with string metadata.
void write_activations(const std::filesystem::path& path, std::string_view name, std::span<const uint16_t> values,
                       uint32_t rows, uint32_t width, const std::map<std::string, std::string>& metadata = {});

}  // namespace metrale::layers
