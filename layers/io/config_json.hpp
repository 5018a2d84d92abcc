// SPDX-License-Identifier: MIT OR Apache-2.0
// Checked access to the JSON files a checkpoint brings (config.json, its quantization_config,
// quantize_config.json, *.safetensors.index.json), shared by every reader of them (not installed).
// No reader touches a JSON value directly: it asks an Object for a field of a type, and a value of
// another type is an Error(invalid_argument) naming the file, the field's path and what was
// expected:
//
//   config.json: quantization_config.config_groups.group_0: expected an object (a quantization
//   scheme), found number 5
//
// A value the reader understands but metrale does not run is a Refusal naming the field and its
// value (unsupported()).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace metrale::layers::config_json {

// Throws Error(invalid_argument) "<source>: <what>".
[[noreturn]] void error(const std::string& source, const std::string& what);

// The value of a field for a message: its JSON text (invalid UTF-8 replaced), cut at 60 bytes.
std::string value_text(const nlohmann::json& value);

// One JSON object of a file, read field by field. Holds a pointer into the document, which must
// outlive it. A null field counts as absent everywhere.
class Object {
 public:
  // `file` names the file in messages, `path` the object's field path in it ("" for the whole
  // document). Throws Error "<file>: <path>: expected <what>, found <value>" unless `value` is
  // an object.
  Object(const nlohmann::json& value, std::string file, std::string path, std::string_view what = "an object");

  const std::string& file() const noexcept { return file_; }
  const std::string& path() const noexcept { return path_; }
  // "<file>: <path>.<key>" ("<file>: <key>" at the top, "<file>: <path>" without a key).
  std::string where(std::string_view key = {}) const;
  // The field's path within the file: "<path>.<key>".
  std::string field(std::string_view key) const;

  // The raw value of `key`, for comparisons only; nullptr when absent.
  const nlohmann::json* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  size_t size() const noexcept { return value_->size(); }

  // Error: "<where(key)>: expected <expected>, found <what found is>" (found null: "nothing").
  [[noreturn]] void malformed(std::string_view key, std::string_view expected, const nlohmann::json* found) const;
  // Refusal: "<where(key)> = <value> is not supported: <supported>".
  [[noreturn]] void unsupported(std::string_view key, const nlohmann::json& found, std::string_view supported) const;

  // Each typed read: nullopt when the field is absent, an Error when it holds another type.
  std::optional<int64_t> integer(std::string_view key, int64_t min, int64_t max) const;
  std::optional<uint32_t> u32(std::string_view key) const;  // 0 .. 2^32 - 1
  std::optional<bool> boolean(std::string_view key) const;
  std::optional<double> number(std::string_view key) const;  // any finite JSON number
  std::optional<std::string> string(std::string_view key) const;
  // A string compared case-insensitively where tools differ in case ("GEMM" / "gemm").
  std::optional<std::string> lower_string(std::string_view key) const;
  std::vector<std::string> strings(std::string_view key) const;  // absent: empty
  std::vector<uint32_t> u32s(std::string_view key) const;        // absent: empty
  // A nested object; `what` says what it is for the message ("an object (the weight scheme)").
  std::optional<Object> object(std::string_view key, std::string_view what = "an object") const;
  // Every member, each of which must be an object / a string.
  std::vector<std::pair<std::string, Object>> objects(std::string_view what) const;
  std::vector<std::pair<std::string, std::string>> strings_by_key(std::string_view what) const;

 private:
  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

}  // namespace metrale::layers::config_json
