// SPDX-License-Identifier: MIT OR Apache-2.0
// The runtime's JSON reader: nlohmann's SAX parser feeding a DOM builder that also reports
// duplicate keys (nlohmann would silently keep the last, and so would most parsers: a duplicated
// key is almost always an editing mistake), refuses nesting deeper than kJsonMaxDepth (before
// building anything, so a megabyte of '[' costs no memory) and turns a syntax error into a line
// and column computed from the text itself. Internal to the runtime; metrale/json_file.hpp is the
// public face.
#pragma once

#include "json_text.hpp"

#include <metrale/json_file.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace metrale::json_text {

struct JsonSyntaxError {
  std::size_t byte = 0;    // 1-based position of the offending character
  std::size_t line = 0;    // 1-based
  std::size_t column = 0;  // 1-based, counting UTF-8 characters
  std::string reason;      // the parser's reason, without its own position prefix
};

template <class JsonT>
struct BasicJsonReadResult {
  JsonT root;
  // (JSON pointer, key) of every key that repeats one earlier in the same object.
  std::vector<std::pair<std::string, std::string>> duplicates;
  std::optional<JsonSyntaxError> error;  // set when the text is not valid JSON or nests too deeply
};
using JsonReadResult = BasicJsonReadResult<Json>;

// Parses `text` into JsonT (Json or nlohmann::json; instantiated for both). Never throws for
// malformed input (only for running out of memory).
template <class JsonT>
BasicJsonReadResult<JsonT> read_json_as(std::string_view text);
inline JsonReadResult read_json(std::string_view text) { return read_json_as<Json>(text); }

}  // namespace metrale::json_text
