// SPDX-License-Identifier: MIT OR Apache-2.0
// Small text helpers for messages about JSON documents: JSON pointers (RFC 6901), UTF-8
// sanitising, quoting, and "found <this>" descriptions. Internal to the runtime.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace metrale::json_text {

// ordered_json keeps members in document order, so problems come out in the order of the file.
using Json = nlohmann::ordered_json;

// RFC 6901: '~' becomes "~0" and '/' becomes "~1" inside a reference token.
std::string pointer_token(std::string_view key);
// `pointer` extended by an object key or an array index.
std::string child(const std::string& pointer, std::string_view key);
std::string child(const std::string& pointer, std::size_t index);
// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);
// Keeps valid UTF-8, replaces invalid bytes with '?'.
std::string sanitize_utf8(std::string_view s);
// A string as JSON would spell it, so hidden characters (a trailing newline) show up.
std::string quote(std::string_view s);
// quote(), shortened to about 60 bytes (cut between UTF-8 sequences) with "..." when longer.
std::string quote_short(std::string_view s);
// "found <this>" in messages: "number 3", "string \"x\"", "an empty array"...
std::string describe(const Json& v);

}  // namespace metrale::json_text
