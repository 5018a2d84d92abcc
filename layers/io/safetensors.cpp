// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/safetensors.hpp"

#include "core/checked.hpp"
#include "core/numeric.hpp"

#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <utility>

namespace metrale::layers {

// Tensor bytes are little-endian on disk and are used in place.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& what) {
  throw Error(Status::invalid_argument, path.string() + ": " + what);
}

std::string accepted_list(std::initializer_list<Dtype> accepted) {
  std::string out;
  for (Dtype d : accepted) {
    if (!out.empty()) out += " or ";
    out += dtype_name(d);
  }
  return out;
}

// memcpy of a tensor's bytes into typed storage (an empty tensor has no storage to copy into).
template <class T>
std::vector<T> as_words(const std::vector<std::byte>& raw) {
  std::vector<T> out(raw.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), raw.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::filesystem::path path)
    : path_(std::move(path)), file_(path_, "safetensors file") {
  const uint64_t file_size = file_.size();
  if (file_size < 8) {
    bad(path_, "truncated: " + std::to_string(file_size) +
                   " bytes, but a safetensors file starts with an 8-byte little-endian header length");
  }
  std::array<std::byte, 8> length_bytes{};
  file_.read_at(0, length_bytes);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | std::to_integer<uint64_t>(length_bytes[static_cast<size_t>(i)]);
  // The length itself is not printed: in a file that is not a safetensors file, those are its
  // first 8 bytes.
  if (header_length > file_size - 8) {
    bad(path_, "the header length (the first 8 bytes) runs past the end of the file (" + std::to_string(file_size) +
                   " bytes): truncated or not a safetensors file");
  }
  if (header_length > kMaxHeaderBytes) {
    bad(path_, "the header length (the first 8 bytes) exceeds the " + size_limit_text(kMaxHeaderBytes) +
                   " a safetensors header may have");
  }
  std::string header(header_length, '\0');
  file_.read_at(8, std::as_writable_bytes(std::span(header)));
  data_start_ = 8 + header_length;
  SafetensorsHeader parsed = parse_safetensors_header(header, file_size - data_start_, path_.string());
  tensors_ = std::move(parsed.tensors);
  metadata_ = std::move(parsed.metadata);
}

bool SafetensorsReader::contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

const TensorInfo& SafetensorsReader::info(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw Error(Status::not_found, where(name) + "missing: the file has no tensor of that name (" +
                                       std::to_string(tensors_.size()) + " tensors in the file)");
  }
  return it->second;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

std::string SafetensorsReader::where(std::string_view tensor) const {
  return path_.string() + ": tensor '" + display_name(tensor) + "': ";
}

const TensorInfo& SafetensorsReader::checked_info(std::string_view name, std::initializer_list<Dtype> accepted,
                                                  const std::optional<std::vector<uint64_t>>& shape) const {
  const TensorInfo& t = info(name);
  if (std::find(accepted.begin(), accepted.end(), t.dtype) == accepted.end()) {
    throw Error(Status::invalid_argument, where(name) + "dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                                              accepted_list(accepted));
  }
  if (shape && *shape != t.shape) {
    throw Error(Status::invalid_argument, where(name) + "shape " + shape_string(t.shape) + ", expected " +
                                              shape_string(*shape));
  }
  return t;
}

std::span<const std::byte> SafetensorsReader::mapped(std::string_view name, std::initializer_list<Dtype> accepted,
                                                     std::optional<std::vector<uint64_t>> shape) const {
  const TensorInfo& t = checked_info(name, accepted, shape);
  return file_.mapping().subspan(data_start_ + t.begin, t.end - t.begin);
}

void SafetensorsReader::release_mapped(std::string_view name) const {
  const TensorInfo& t = info(name);
  file_.release_mapped(data_start_ + t.begin, t.end - t.begin);
}

std::vector<std::byte> SafetensorsReader::read_raw(std::string_view name, std::initializer_list<Dtype> accepted,
                                                   std::optional<std::vector<uint64_t>> shape) {
  const TensorInfo& t = checked_info(name, accepted, shape);
  std::vector<std::byte> out(t.end - t.begin);
  try {
    file_.read_at(data_start_ + t.begin, out);
  } catch (const Error&) {
    throw Error(Status::invalid_argument, where(name) + "could not read its " + std::to_string(out.size()) +
                                              " bytes (did the file change while open?)");
  }
  return out;
}

std::vector<uint32_t> SafetensorsReader::read_u32(std::string_view name, std::initializer_list<Dtype> accepted,
                                                  const std::vector<uint64_t>& shape) {
  return as_words<uint32_t>(read_raw(name, accepted, shape));
}

std::vector<uint16_t> SafetensorsReader::read_u16(std::string_view name, std::initializer_list<Dtype> accepted,
                                                  const std::vector<uint64_t>& shape) {
  return as_words<uint16_t>(read_raw(name, accepted, shape));
}

std::vector<float> SafetensorsReader::read_f32(std::string_view name, const std::vector<uint64_t>& shape) {
  const Dtype dtype = info(name).dtype;
  auto raw = read_raw(name, {Dtype::f32, Dtype::bf16, Dtype::f16}, shape);
  if (dtype == Dtype::f32) return as_words<float>(raw);
  std::vector<float> out(raw.size() / dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, raw.data() + 2 * i, 2);
    out[i] = dtype == Dtype::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  }
  return out;
}

void SafetensorsWriter::add(std::string name, Dtype dtype, std::vector<uint64_t> shape,
                            std::span<const std::byte> bytes) {
  const auto elements = checked_product(shape);
  const auto want = elements ? checked_mul<uint64_t>(*elements, dtype_size(dtype)) : std::nullopt;
  if (!want || bytes.size() != *want) {
    throw Error(Status::invalid_argument, "safetensors writer: tensor '" + name + "': " + std::to_string(bytes.size()) +
                                              " bytes given for " + std::string(dtype_name(dtype)) + " " +
                                              shape_string(shape));
  }
  if (name == "__metadata__") throw Error(Status::invalid_argument, "safetensors writer: '__metadata__' is reserved");
  for (const auto& e : entries_) {
    if (e.name == name) throw Error(Status::invalid_argument, "safetensors writer: tensor '" + name + "' added twice");
  }
  entries_.push_back(Entry{std::move(name), dtype, std::move(shape), bytes});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::filesystem::path temp = path;
  temp += ".partial";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(Status::invalid_argument, temp.string() + ": cannot open for writing");
    std::array<char, 8> length{};
    uint64_t n = text.size();
    for (size_t i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(length.data(), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& e : entries_) out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ignore;
      std::filesystem::remove(temp, ignore);
      throw Error(Status::invalid_argument, path.string() + ": write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) throw Error(Status::invalid_argument, path.string() + ": cannot move the written file into place: " + ec.message());
}

}  // namespace metrale::layers
