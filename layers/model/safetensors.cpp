// SPDX-License-Identifier: MIT OR Apache-2.0
#include "safetensors.hpp"

#include "numeric.hpp"

#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace metrale::layers {

// Tensor bytes are little-endian on disk and are used in place.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

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

// Hugging Face's own reader refuses headers above 100 MB; a bigger one is not a real file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

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

std::string shape_string(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

uint64_t TensorInfo::elements() const noexcept {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

SafetensorsReader::SafetensorsReader(std::filesystem::path path) : path_(std::move(path)) {
  std::error_code ec;
  file_size_ = std::filesystem::file_size(path_, ec);
  if (ec) throw Error(Status::not_found, path_.string() + ": cannot open safetensors file: " + ec.message());
  stream_.open(path_, std::ios::binary);
  if (!stream_) throw Error(Status::not_found, path_.string() + ": cannot open safetensors file for reading");
  if (file_size_ < 8) {
    bad(path_, "truncated: " + std::to_string(file_size_) +
                   " bytes, but a safetensors file starts with an 8-byte little-endian header length");
  }
  std::array<unsigned char, 8> length_bytes{};
  stream_.read(reinterpret_cast<char*>(length_bytes.data()), 8);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | length_bytes[static_cast<size_t>(i)];
  if (header_length > file_size_ - 8) {
    bad(path_, "header length " + std::to_string(header_length) + " runs past the end of the file (" +
                   std::to_string(file_size_) + " bytes; at most " + std::to_string(file_size_ - 8) +
                   " are available): truncated or not a safetensors file");
  }
  if (header_length > kMaxHeaderBytes) {
    bad(path_, "header length " + std::to_string(header_length) + " exceeds the 100 MB limit");
  }
  std::string header(header_length, '\0');
  stream_.read(header.data(), static_cast<std::streamsize>(header_length));
  if (!stream_) bad(path_, "could not read the " + std::to_string(header_length) + "-byte header");
  data_start_ = 8 + header_length;
  const uint64_t data_size = file_size_ - data_start_;

  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(header);
  } catch (const nlohmann::json::parse_error& e) {
    bad(path_, std::string("header is not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) bad(path_, "header must be a JSON object mapping tensor names to {dtype, shape, data_offsets}");

  for (const auto& [name, value] : doc.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) bad(path_, "__metadata__ must be an object of strings");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) bad(path_, "__metadata__/" + key + " must be a string");
        metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    auto tensor_bad = [&](const std::string& what) { bad(path_, "tensor '" + name + "': " + what); };
    if (!value.is_object()) tensor_bad("header entry must be an object");
    TensorInfo info;
    info.name = name;
    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) tensor_bad("missing string field 'dtype'");
    auto parsed = dtype_from_name(dtype->get<std::string>());
    if (!parsed) tensor_bad("unknown dtype '" + dtype->get<std::string>() + "'");
    info.dtype = *parsed;
    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) tensor_bad("missing array field 'shape'");
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) tensor_bad("shape entries must be non-negative integers");
      info.shape.push_back(d.get<uint64_t>());
    }
    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      tensor_bad("missing field 'data_offsets' (two non-negative integers [begin, end])");
    }
    info.begin = (*offsets)[0].get<uint64_t>();
    info.end = (*offsets)[1].get<uint64_t>();
    if (info.begin > info.end) tensor_bad("data_offsets begin " + std::to_string(info.begin) + " is after end " + std::to_string(info.end));
    uint64_t elements = 1;
    for (uint64_t d : info.shape) {
      if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / d) tensor_bad("shape overflows");
      elements *= d;
    }
    const uint64_t want = elements * dtype_size(info.dtype);
    if (info.end - info.begin != want) {
      tensor_bad("data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "] hold " +
                 std::to_string(info.end - info.begin) + " bytes, but " + std::string(dtype_name(info.dtype)) + " " +
                 shape_string(info.shape) + " needs " + std::to_string(want));
    }
    if (info.end > data_size) {
      tensor_bad("data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                 "] run past the end of the data section (" + std::to_string(data_size) + " bytes): file truncated");
    }
    tensors_.emplace(name, std::move(info));
  }

  // Tensors must not overlap (the format forbids it, and an overlap means a corrupt header).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, info] : tensors_) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end && by_offset[i]->begin != by_offset[i]->end) {
      bad(path_, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");
    }
  }
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
  return path_.string() + ": tensor '" + std::string(tensor) + "': ";
}

std::vector<std::byte> SafetensorsReader::read_raw(std::string_view name, std::initializer_list<Dtype> accepted,
                                                   std::optional<std::vector<uint64_t>> shape) {
  const TensorInfo& t = info(name);
  if (std::find(accepted.begin(), accepted.end(), t.dtype) == accepted.end()) {
    throw Error(Status::invalid_argument, where(name) + "dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                                              accepted_list(accepted));
  }
  if (shape && *shape != t.shape) {
    throw Error(Status::invalid_argument, where(name) + "shape " + shape_string(t.shape) + ", expected " +
                                              shape_string(*shape));
  }
  std::vector<std::byte> out(t.end - t.begin);
  stream_.clear();
  stream_.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
  stream_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!stream_) throw Error(Status::invalid_argument, where(name) + "could not read its " + std::to_string(out.size()) + " bytes");
  return out;
}

std::vector<uint32_t> SafetensorsReader::read_u32(std::string_view name, std::initializer_list<Dtype> accepted,
                                                  const std::vector<uint64_t>& shape) {
  auto raw = read_raw(name, accepted, shape);
  std::vector<uint32_t> out(raw.size() / 4);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::vector<uint16_t> SafetensorsReader::read_u16(std::string_view name, std::initializer_list<Dtype> accepted,
                                                  const std::vector<uint64_t>& shape) {
  auto raw = read_raw(name, accepted, shape);
  std::vector<uint16_t> out(raw.size() / 2);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::vector<float> SafetensorsReader::read_f32(std::string_view name, const std::vector<uint64_t>& shape) {
  const Dtype dtype = info(name).dtype;
  auto raw = read_raw(name, {Dtype::f32, Dtype::bf16, Dtype::f16}, shape);
  std::vector<float> out(raw.size() / dtype_size(dtype));
  if (dtype == Dtype::f32) {
    std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, raw.data() + 2 * i, 2);
    out[i] = dtype == Dtype::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  }
  return out;
}

void SafetensorsWriter::add(std::string name, Dtype dtype, std::vector<uint64_t> shape,
                            std::span<const std::byte> bytes) {
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  if (bytes.size() != elements * dtype_size(dtype)) {
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
