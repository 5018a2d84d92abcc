// SPDX-License-Identifier: MIT OR Apache-2.0
// Safetensors (the Hugging Face format): an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}), then
// the raw little-endian tensor bytes; offsets are relative to the end of the header.
//
// The reader opens only a regular file (metrale/regular_file.hpp: a FIFO or a device is refused
// before a byte is read), validates the whole header when it opens it (safetensors_header.hpp:
// size cap, truncation, overflow-checked sizes, exact tiling of the data section) and reads
// tensors on demand, so a multi-gigabyte checkpoint is never read whole. Every error is a
// metrale::Error naming the file, the tensor and what was expected.
#pragma once

#include "io/safetensors_header.hpp"

#include <metrale/regular_file.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

class SafetensorsReader {
 public:
  // Opens and validates the header. Throws Error(not_found) when the file cannot be opened and
  // Error(invalid_argument) for anything malformed or not a regular file.
  explicit SafetensorsReader(std::filesystem::path path);

  const std::filesystem::path& path() const noexcept { return path_; }
  bool contains(std::string_view name) const;
  // Throws Error(not_found) naming the file and tensor.
  const TensorInfo& info(std::string_view name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  // The raw bytes of `name`, after checking its dtype is one of `accepted` and (when given) its
  // shape equals `shape`.
  std::vector<std::byte> read_raw(std::string_view name, std::initializer_list<Dtype> accepted,
                                  std::optional<std::vector<uint64_t>> shape = std::nullopt);
  // The bytes of `name`, checked as read_raw checks them, in place in the file's read-only mapping
  // (read from disk as they are touched; valid while the reader lives).
  std::span<const std::byte> mapped(std::string_view name, std::initializer_list<Dtype> accepted,
                                    std::optional<std::vector<uint64_t>> shape = std::nullopt) const;
  // Gives back the mapped pages of `name` that were touched (they would be read again).
  void release_mapped(std::string_view name) const;
  // Bytes read from the file so far (the header and read_raw's), not the mapping's.
  uint64_t bytes_read() const noexcept { return file_.bytes_read(); }
  // Typed reads with the checks above.
  std::vector<uint32_t> read_u32(std::string_view name, std::initializer_list<Dtype> accepted,
                                 const std::vector<uint64_t>& shape);
  std::vector<uint16_t> read_u16(std::string_view name, std::initializer_list<Dtype> accepted,
                                 const std::vector<uint64_t>& shape);
  // F32, BF16 or F16 converted to f32.
  std::vector<float> read_f32(std::string_view name, const std::vector<uint64_t>& shape);

  // "<file>: tensor '<name>': " — the start of every message about a tensor (long names shortened).
  std::string where(std::string_view tensor) const;

 private:
  const TensorInfo& checked_info(std::string_view name, std::initializer_list<Dtype> accepted,
                                 const std::optional<std::vector<uint64_t>>& shape) const;

  std::filesystem::path path_;
  RegularFile file_;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  // `bytes` must stay alive until write(); its size must equal elements(shape) * dtype_size.
  void add(std::string name, Dtype dtype, std::vector<uint64_t> shape, std::span<const std::byte> bytes);
  template <class T>
  void add(std::string name, Dtype dtype, std::vector<uint64_t> shape, std::span<const T> values) {
    add(std::move(name), dtype, std::move(shape), std::as_bytes(values));
  }
  void set_metadata(std::string key, std::string value);
  // Writes to a temporary file beside `path` and renames it into place, so a failed write
  // never leaves a half-written file under the final name.
  void write(const std::filesystem::path& path) const;

 private:
  struct Entry {
    std::string name;
    Dtype dtype;
    std::vector<uint64_t> shape;
    std::span<const std::byte> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace metrale::layers
