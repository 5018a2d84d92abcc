// SPDX-License-Identifier: MIT OR Apache-2.0
#include "json_text.hpp"

namespace metrale::json_text {

std::string pointer_token(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string child(const std::string& pointer, std::string_view key) {
  return pointer + "/" + pointer_token(key);
}

std::string child(const std::string& pointer, std::size_t index) {
  return pointer + "/" + std::to_string(index);
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one (overlongs and
// surrogates included), so messages never carry bytes that break a later JSON dump.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    return 1;
  }
  std::size_t len = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) {
    return 0;
  }
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char min = k == 1 ? lo : 0x80;
    const unsigned char max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) {
      return 0;
    }
  }
  return len;
}

// Keeps valid UTF-8, replaces invalid bytes with '?'.
std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_sequence_length(s, i);
    if (len == 0) {
      out += '?';
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

// A string as JSON would spell it, so hidden characters (a trailing newline) show up.
std::string quote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Shortens long found-values in messages, cutting only between UTF-8 sequences.
std::string quote_short(std::string_view s) {
  constexpr std::size_t kMax = 60;
  if (s.size() <= kMax) {
    return quote(s);
  }
  std::size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return quote(s.substr(0, cut)) + "...";
}

// "found <this>" in messages.
std::string describe(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return v.get<bool>() ? "boolean true" : "boolean false";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "number " + v.dump();
    case Json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      return s.empty() ? std::string("an empty string") : "string " + quote_short(s);
    }
    case Json::value_t::array:
      return v.empty() ? std::string("an empty array") : std::string("an array");
    case Json::value_t::object:
      return "an object";
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return "an unexpected value";
}

}  // namespace metrale::json_text
