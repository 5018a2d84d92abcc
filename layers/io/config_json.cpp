// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/config_json.hpp"

#include "io/safetensors_header.hpp"  // display_name

#include <metrale/json_file.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

namespace metrale::layers::config_json {

using Json = nlohmann::json;

void error(const std::string& source, const std::string& what) { throw Error(Status::invalid_argument, source + ": " + what); }

namespace {

// What a found value is, for "found ...": null reads "null", not "null null".
std::string found_text(const Json& value) { return value.is_null() ? "null" : describe_json(value); }

}  // namespace

std::string value_text(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) {
    size_t cut = 57;  // between UTF-8 sequences
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

Object::Object(const Json& value, std::string file, std::string path, std::string_view what)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {
  if (!value.is_object()) {
    error(path_.empty() ? file_ : file_ + ": " + path_, "expected " + std::string(what) + ", found " + found_text(value));
  }
}

std::string Object::field(std::string_view key) const {
  const std::string shown = display_name(key);
  if (path_.empty()) return shown;
  return key.empty() ? path_ : path_ + "." + shown;
}

std::string Object::where(std::string_view key) const {
  const std::string f = field(key);
  return f.empty() ? file_ : file_ + ": " + f;
}

const Json* Object::find(std::string_view key) const {
  auto it = value_->find(key);
  return it == value_->end() || it->is_null() ? nullptr : &*it;
}

void Object::malformed(std::string_view key, std::string_view expected, const Json* found) const {
  throw Error(Status::invalid_argument,
              where(key) + ": expected " + std::string(expected) + ", found " + (found ? found_text(*found) : "nothing"));
}

void Object::unsupported(std::string_view key, const Json& found, std::string_view supported) const {
  throw Refusal(where(key) + " = " + value_text(found) + " is not supported: " + std::string(supported));
}

std::optional<int64_t> Object::integer(std::string_view key, int64_t min, int64_t max) const {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  std::optional<int64_t> value;
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) value = static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  }
  if (!value || *value < min || *value > max) malformed(key, "an integer from " + std::to_string(min) + " to " + std::to_string(max), v);
  return value;
}

std::optional<uint32_t> Object::u32(std::string_view key) const {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  const auto value = json_unsigned(*v);
  if (!value || *value > std::numeric_limits<uint32_t>::max()) malformed(key, "a non-negative integer below 2^32", v);
  return static_cast<uint32_t>(*value);
}

std::optional<bool> Object::boolean(std::string_view key) const {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) malformed(key, "true or false", v);
  return v->get<bool>();
}

std::optional<double> Object::number(std::string_view key) const {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number() || !std::isfinite(v->get<double>())) malformed(key, "a number", v);
  return v->get<double>();
}

std::optional<std::string> Object::string(std::string_view key) const {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) malformed(key, "a string", v);
  return v->get<std::string>();
}

std::optional<std::string> Object::lower_string(std::string_view key) const {
  auto s = string(key);
  if (s) std::transform(s->begin(), s->end(), s->begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::vector<std::string> Object::strings(std::string_view key) const {
  std::vector<std::string> out;
  const Json* v = find(key);
  if (!v) return out;
  if (!v->is_array()) malformed(key, "an array of strings", v);
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) malformed(std::string(key) + "[" + std::to_string(i) + "]", "a string", &(*v)[i]);
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::vector<uint32_t> Object::u32s(std::string_view key) const {
  std::vector<uint32_t> out;
  const Json* v = find(key);
  if (!v) return out;
  if (!v->is_array()) malformed(key, "an array of non-negative integers", v);
  for (size_t i = 0; i < v->size(); ++i) {
    const auto value = json_unsigned((*v)[i]);
    if (!value || *value > std::numeric_limits<uint32_t>::max()) {
      malformed(std::string(key) + "[" + std::to_string(i) + "]", "a non-negative integer below 2^32", &(*v)[i]);
    }
    out.push_back(static_cast<uint32_t>(*value));
  }
  return out;
}

std::optional<Object> Object::object(std::string_view key, std::string_view what) const {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  return Object(*v, file_, field(key), what);
}

std::vector<std::pair<std::string, Object>> Object::objects(std::string_view what) const {
  std::vector<std::pair<std::string, Object>> out;
  for (const auto& [name, value] : value_->items()) out.emplace_back(name, Object(value, file_, field(name), what));
  return out;
}

std::vector<std::pair<std::string, std::string>> Object::strings_by_key(std::string_view what) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : value_->items()) {
    if (!value.is_string()) malformed(name, what, &value);
    out.emplace_back(name, value.get<std::string>());
  }
  return out;
}

}  // namespace metrale::layers::config_json
