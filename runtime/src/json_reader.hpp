// SPDX-License-Identifier: MIT OR Apache-2.0
// The runtime's JSON reader: nlohmann's SAX parser feeding a DOM builder that also reports
// duplicate keys (nlohmann would silently keep the last, and so would most parsers: a duplicated
// key is almost always an editing mistake) and turns a syntax error into a line and column
// computed from the text itself. Internal to the runtime.
#pragma once

#include "json_text.hpp"

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

struct JsonReadResult {
  Json root;
  // (JSON pointer, key) of every key that repeats one earlier in the same object.
  std::vector<std::pair<std::string, std::string>> duplicates;
  std::optional<JsonSyntaxError> error;  // set when the text is not valid JSON
};

// Parses `text`. Never throws for malformed input (only for running out of memory).
JsonReadResult read_json(std::string_view text);

}  // namespace metrale::json_text
