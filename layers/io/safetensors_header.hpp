// SPDX-License-Identifier: MIT OR Apache-2.0
// The JSON header of a safetensors file, parsed and validated without building a JSON document:
// a streaming (SAX) parser fills the tensor table directly, so memory stays a small multiple of
// the header (itself capped at kMaxHeaderBytes), and anything a safetensors header cannot hold —
// deeper nesting, unknown fields, a shape of more than kMaxRank dimensions — stops the parse at once.
//
// Validation follows the reference implementation: each tensor's byte size is its element count
// times its dtype size (overflow-checked), and the tensors, sorted by offset, tile the data
// section exactly — no gap, no overlap (a zero-size tensor cannot hide one), nothing after the
// last. Messages name the file and the tensor and never quote the header's bytes beyond names.
#pragma once

#include "io/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

// "[2, 3]"
std::string shape_string(std::span<const uint64_t> shape);

// A tensor name as messages show it: names over 240 bytes keep their head and tail around "...".
std::string display_name(std::string_view name);

// The reference reader refuses headers above 100 MB; a bigger one is not a real file.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// Dimensions of one tensor. PyTorch tensors have far fewer; the cap bounds a hostile shape.
inline constexpr size_t kMaxRank = 64;
// Entries of __metadata__ (real files carry a handful).
inline constexpr size_t kMaxMetadataEntries = 4096;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::u8;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // relative to the start of the data section
  uint64_t end = 0;
  // The product of the shape (validated not to overflow when read from a header).
  uint64_t elements() const noexcept;
};

struct SafetensorsHeader {
  std::map<std::string, TensorInfo, std::less<>> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses and validates `json`, the header of `file` whose data section holds data_size bytes.
// Throws Error(invalid_argument) "<file>: tensor '<name>': <what was expected>".
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_size, const std::string& file);

}  // namespace metrale::layers
