// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/safetensors_header.hpp"

#include "core/checked.hpp"

#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>

namespace metrale::layers {

namespace {

// The parser's reason without the header's bytes: nlohmann quotes the offending token ("last
// read: '...'", "number overflow parsing '...'"), and the header may not be a header at all.
std::string reason_without_text(const nlohmann::json::exception& ex) {
  if (ex.id == 406) return "a number too large to represent";
  std::string_view what = ex.what();
  if (what.starts_with("[json.exception.")) {
    if (const auto close = what.find("] "); close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  if (what.starts_with("parse error")) {
    if (const auto colon = what.find(": "); colon != std::string_view::npos) what.remove_prefix(colon + 2);
  }
  if (const auto token = what.find("; last read:"); token != std::string_view::npos) what = what.substr(0, token);
  return std::string(what);
}

// Streams the header into a SafetensorsHeader. Each event is checked against where the parser is
// (the top-level object, __metadata__, a tensor entry, its shape or data_offsets); anything else
// throws at once, so nesting never grows beyond three levels.
class HeaderBuilder {
 public:
  HeaderBuilder(const std::string& file, SafetensorsHeader& out) : file_(file), out_(out) {}

  bool null() { return unexpected("null"); }
  bool boolean(bool /*value*/) { return unexpected("a boolean"); }
  bool number_integer(int64_t /*value*/) { return unexpected("a negative number"); }
  bool number_float(double /*value*/, const std::string& /*text*/) { return unexpected("a number with a fraction"); }
  bool binary(nlohmann::json::binary_t& /*value*/) { return unexpected("binary data"); }
  bool number_unsigned(uint64_t value);
  bool string(std::string& value);
  bool start_object(size_t /*elements*/);
  bool key(std::string& key);
  bool end_object();
  bool start_array(size_t /*elements*/);
  bool end_array();
  bool parse_error(size_t position, const std::string& /*last_token*/, const nlohmann::json::exception& ex) {
    fail("the header is not valid JSON (at byte " + std::to_string(position) + " of the header): " +
         reason_without_text(ex));
  }

 private:
  enum class At { start, top, metadata, tensor, shape, offsets, done };
  enum class Field { none, dtype, shape, data_offsets };

  [[noreturn]] void fail(const std::string& what) const { throw Error(Status::invalid_argument, file_ + ": " + what); }
  [[noreturn]] void tensor_fail(const std::string& what) const {
    fail("tensor '" + display_name(tensor_.name) + "': " + what);
  }
  [[noreturn]] bool unexpected(const std::string& found) const;
  void finish_tensor();

  const std::string& file_;
  SafetensorsHeader& out_;
  At at_ = At::start;
  Field field_ = Field::none;
  std::string key_;        // the top-level or __metadata__ key whose value comes next
  bool metadata_seen_ = false;
  TensorInfo tensor_;      // the entry being read
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  std::vector<uint64_t> offsets_;
};

bool HeaderBuilder::unexpected(const std::string& found) const {
  switch (at_) {
    case At::start:
    case At::done:
      fail("the header must be a JSON object mapping tensor names to {dtype, shape, data_offsets}, found " + found);
    case At::top:
      if (key_ == "__metadata__") fail("__metadata__ must be an object of strings, found " + found);
      fail("tensor '" + display_name(key_) + "': the header entry must be an object {dtype, shape, data_offsets}, found " +
           found);
    case At::metadata: fail("__metadata__/" + display_name(key_) + " must be a string, found " + found);
    case At::shape: tensor_fail("shape entries must be non-negative integers, found " + found);
    case At::offsets: tensor_fail("data_offsets must be two non-negative integers [begin, end], found " + found);
    case At::tensor: break;
  }
  switch (field_) {
    case Field::dtype: tensor_fail("dtype must be a string such as \"F16\", found " + found);
    case Field::shape: tensor_fail("shape must be an array of non-negative integers, found " + found);
    default: tensor_fail("data_offsets must be two non-negative integers [begin, end], found " + found);
  }
}

bool HeaderBuilder::number_unsigned(uint64_t value) {
  if (at_ == At::shape) {
    if (tensor_.shape.size() == kMaxRank) tensor_fail("shape has more than " + std::to_string(kMaxRank) + " dimensions");
    tensor_.shape.push_back(value);
    return true;
  }
  if (at_ == At::offsets) {
    if (offsets_.size() == 2) tensor_fail("data_offsets must be two non-negative integers [begin, end], found more");
    offsets_.push_back(value);
    return true;
  }
  return unexpected("number " + std::to_string(value));
}

bool HeaderBuilder::string(std::string& value) {
  if (at_ == At::metadata) {
    out_.metadata.emplace(std::move(key_), std::move(value));
    return true;
  }
  if (at_ != At::tensor || field_ != Field::dtype) return unexpected("a string");
  const auto dtype = dtype_from_name(value);
  if (!dtype) tensor_fail("unknown dtype '" + display_name(value) + "'");
  tensor_.dtype = *dtype;
  has_dtype_ = true;
  field_ = Field::none;
  return true;
}

bool HeaderBuilder::start_object(size_t /*elements*/) {
  if (at_ == At::start) {
    at_ = At::top;
    return true;
  }
  if (at_ != At::top) return unexpected("an object");
  if (key_ == "__metadata__") {
    if (metadata_seen_) fail("__metadata__ appears twice in the header");
    metadata_seen_ = true;
    at_ = At::metadata;
    return true;
  }
  if (out_.tensors.contains(key_)) fail("tensor '" + display_name(key_) + "' appears twice in the header");
  tensor_ = TensorInfo{};
  tensor_.name = std::move(key_);
  has_dtype_ = has_shape_ = has_offsets_ = false;
  offsets_.clear();
  at_ = At::tensor;
  return true;
}

bool HeaderBuilder::key(std::string& key) {
  if (at_ == At::metadata) {
    if (out_.metadata.contains(key)) fail("__metadata__/" + display_name(key) + " appears twice");
    if (out_.metadata.size() == kMaxMetadataEntries) {
      fail("__metadata__ has more than " + std::to_string(kMaxMetadataEntries) + " entries");
    }
  } else if (at_ == At::tensor) {
    const bool seen = key == "dtype" ? has_dtype_ : key == "shape" ? has_shape_ : has_offsets_;
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      tensor_fail("unknown field '" + display_name(key) + "' (a tensor entry has dtype, shape and data_offsets)");
    }
    if (seen) tensor_fail("field '" + key + "' appears twice");
    field_ = key == "dtype" ? Field::dtype : key == "shape" ? Field::shape : Field::data_offsets;
    return true;
  }
  key_ = std::move(key);
  return true;
}

bool HeaderBuilder::start_array(size_t /*elements*/) {
  if (at_ != At::tensor || field_ == Field::none || field_ == Field::dtype) return unexpected("an array");
  at_ = field_ == Field::shape ? At::shape : At::offsets;
  return true;
}

bool HeaderBuilder::end_array() {
  if (at_ == At::shape) {
    has_shape_ = true;
  } else {
    if (offsets_.size() != 2) tensor_fail("data_offsets must be two non-negative integers [begin, end], found fewer");
    tensor_.begin = offsets_[0];
    tensor_.end = offsets_[1];
    has_offsets_ = true;
  }
  at_ = At::tensor;
  field_ = Field::none;
  return true;
}

bool HeaderBuilder::end_object() {
  if (at_ == At::tensor) {
    finish_tensor();
    at_ = At::top;
  } else {
    at_ = at_ == At::metadata ? At::top : At::done;
  }
  return true;
}

void HeaderBuilder::finish_tensor() {
  if (!has_dtype_) tensor_fail("missing string field 'dtype'");
  if (!has_shape_) tensor_fail("missing array field 'shape'");
  if (!has_offsets_) tensor_fail("missing field 'data_offsets' (two non-negative integers [begin, end])");
  const TensorInfo& t = tensor_;
  const std::string offsets = "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
  if (t.begin > t.end) tensor_fail(offsets + ": begin is after end");
  const std::string what = std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape);
  const auto elements = checked_product(t.shape);
  if (!elements) tensor_fail("shape " + shape_string(t.shape) + " overflows: more than 2^64 elements");
  const auto bytes = checked_mul<uint64_t>(*elements, dtype_size(t.dtype));
  if (!bytes) tensor_fail(what + " overflows: more than 2^64 bytes");
  if (t.end - t.begin != *bytes) {
    tensor_fail(offsets + " hold " + std::to_string(t.end - t.begin) + " bytes, but " + what + " needs " +
                std::to_string(*bytes));
  }
  out_.tensors.emplace(tensor_.name, std::move(tensor_));
}

// The reference rule: sorted by offsets, the tensors cover [0, data_size) exactly once.
void check_tiling(const SafetensorsHeader& header, uint64_t data_size, const std::string& file) {
  std::vector<const TensorInfo*> order;
  order.reserve(header.tensors.size());
  for (const auto& [name, info] : header.tensors) order.push_back(&info);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return std::pair(a->begin, a->end) < std::pair(b->begin, b->end); });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  const auto bad = [&](const std::string& what) { throw Error(Status::invalid_argument, file + ": " + what); };
  for (const TensorInfo* t : order) {
    if (t->begin < covered) {
      bad("tensors '" + display_name(previous->name) + "' and '" + display_name(t->name) + "' overlap: '" +
          display_name(t->name) + "' starts at byte " + std::to_string(t->begin) + " of the data section, before " +
          std::to_string(covered) + " where the first ends");
    }
    if (t->begin > covered) {
      bad("bytes " + std::to_string(covered) + " to " + std::to_string(t->begin) + " of the data section (before tensor '" +
          display_name(t->name) + "') belong to no tensor: tensors must cover the data section without gaps");
    }
    covered = t->end;
    previous = t;
  }
  if (covered < data_size) {
    bad("the last " + std::to_string(data_size - covered) + " bytes of the data section belong to no tensor");
  }
}

}  // namespace

std::string shape_string(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string display_name(std::string_view name) {
  if (name.size() <= 240) return std::string(name);
  // Cut between UTF-8 sequences: step back over continuation bytes.
  size_t head = 120, tail = name.size() - 100;
  while (head > 0 && (static_cast<unsigned char>(name[head]) & 0xC0) == 0x80) --head;
  while (tail < name.size() && (static_cast<unsigned char>(name[tail]) & 0xC0) == 0x80) ++tail;
  return std::string(name.substr(0, head)) + "..." + std::string(name.substr(tail));
}

uint64_t TensorInfo::elements() const noexcept { return checked_product(shape).value_or(0); }

SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_size, const std::string& file) {
  SafetensorsHeader header;
  HeaderBuilder builder(file, header);
  nlohmann::json::sax_parse(json, &builder);
  for (const auto& [name, t] : header.tensors) {
    if (t.end > data_size) {
      throw Error(Status::invalid_argument, file + ": tensor '" + display_name(name) + "': data_offsets [" +
                                                std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                                "] run past the end of the data section (" + std::to_string(data_size) +
                                                " bytes): file truncated");
    }
  }
  check_tiling(header, data_size, file);
  return header;
}

}  // namespace metrale::layers
