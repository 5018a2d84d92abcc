// SPDX-License-Identifier: MIT OR Apache-2.0
#include "json_reader.hpp"

#include <algorithm>
#include <type_traits>
#include <unordered_set>

namespace metrale::json_text {

namespace {

struct ParseError {
  std::size_t byte = 0;  // nlohmann's 1-based position of the offending character
  std::string message;
};

template <class JsonT>
class DomBuilder {
 public:
  using Json = JsonT;

  explicit DomBuilder(std::vector<std::pair<std::string, std::string>>& duplicates)
      : duplicates_(duplicates) {}

  bool null() { return place(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return place(Json(v)) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return place(Json(v)) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return place(Json(v)) != nullptr; }
  bool number_float(Json::number_float_t v, const Json::string_t& /*text*/) {
    return place(Json(v)) != nullptr;
  }
  bool string(Json::string_t& v) { return place(Json(std::move(v))) != nullptr; }
  bool binary(Json::binary_t& v) { return place(Json::binary(std::move(v))) != nullptr; }

  bool start_object(std::size_t /*elements*/) {
    frames_.push_back(Frame{place(Json::object()), {}, {}});
    return true;
  }
  bool key(Json::string_t& k) {
    Frame& top = frames_.back();
    // A map-backed object finds its own keys; the ordered (vector-backed) one keeps a set.
    bool repeated = false;
    if constexpr (kMapBacked) repeated = top.container->contains(k);
    else repeated = !top.keys.insert(k).second;
    if (repeated) duplicates_.emplace_back(child(container_pointer(), k), k);
    top.key = k;
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) {
    frames_.push_back(Frame{place(Json::array()), {}, {}});
    return true;
  }
  bool end_array() {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const Json::exception& ex) {
    error_ = ParseError{position, ex.what()};
    return false;
  }

  Json& root() { return root_; }
  const std::optional<ParseError>& error() const { return error_; }

 private:
  static constexpr bool kMapBacked = std::is_same_v<JsonT, nlohmann::json>;
  struct Frame {
    Json* container;
    std::string key;                      // member being filled (objects)
    std::unordered_set<std::string> keys; // members seen so far (objects, when not kMapBacked)
  };

  // Puts a finished or newly opened value where it belongs. Pointers to open containers stay
  // valid: only the innermost open container ever grows.
  Json* place(Json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = frames_.back();
    if (top.container->is_object()) {
      Json& slot = (*top.container)[top.key];
      slot = std::move(v);
      return &slot;
    }
    top.container->push_back(std::move(v));
    return &top.container->back();
  }

  // JSON pointer of the innermost open container.
  std::string container_pointer() const {
    std::string out;
    for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      out = f.container->is_object() ? child(out, f.key) : child(out, f.container->size() - 1);
    }
    return out;
  }

  Json root_;
  std::vector<Frame> frames_;
  std::optional<ParseError> error_;
  std::vector<std::pair<std::string, std::string>>& duplicates_;
};

// "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..." ->
// "syntax error ...": the position is computed by us, from the text itself.
std::string parser_reason(std::string_view what) {
  if (what.starts_with("[json.exception.")) {
    const std::size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  if (what.starts_with("parse error")) {
    const std::size_t colon = what.find(": ");
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
  }
  return sanitize_utf8(what);
}

// Line and column (both 1-based; the column counts UTF-8 characters) of a byte offset.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return {line, column};
}

// Byte offset of the first '[' or '{' that opens a level deeper than kJsonMaxDepth. Strings are
// skipped (escapes included); on text that is not JSON the parser reports its own error anyway.
std::optional<std::size_t> too_deep_at(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kJsonMaxDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace

template <class JsonT>
BasicJsonReadResult<JsonT> read_json_as(std::string_view text) {
  BasicJsonReadResult<JsonT> result;
  if (const auto deep = too_deep_at(text)) {
    const auto [line, column] = line_column(text, *deep);
    result.error = JsonSyntaxError{*deep + 1, line, column,
                                   "nested deeper than " + std::to_string(kJsonMaxDepth) + " levels"};
    return result;
  }
  DomBuilder<JsonT> builder(result.duplicates);
  if (!JsonT::sax_parse(text, &builder) || builder.error()) {
    const ParseError err = builder.error().value_or(ParseError{0, "unknown parser failure"});
    const auto [line, column] = line_column(text, err.byte == 0 ? 0 : err.byte - 1);
    result.error = JsonSyntaxError{err.byte, line, column, parser_reason(err.message)};
    return result;
  }
  result.root = std::move(builder.root());
  return result;
}

template BasicJsonReadResult<Json> read_json_as<Json>(std::string_view);
template BasicJsonReadResult<nlohmann::json> read_json_as<nlohmann::json>(std::string_view);

}  // namespace metrale::json_text
