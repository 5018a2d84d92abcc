// SPDX-License-Identifier: MIT OR Apache-2.0
// The lexical rules of manifests, shared with manifests/manifest.schema.json (keep the two in
// step; tests/manifest checks that they agree): names, paths, checksums, the format version and
// JSON numbers as integers. Internal to the runtime; pure functions.
#pragma once

#include "json_text.hpp"

#include <optional>
#include <string_view>

namespace metrale::manifest_detail {

// [A-Za-z_][A-Za-z0-9_]*
bool is_identifier(std::string_view s);
// [a-z][a-z0-9_-]{0,31}
bool is_backend_name(std::string_view s);
// METRALE_[A-Z0-9_]+
bool is_lever_name(std::string_view s);
// "xxh3-64:" and 16 lowercase hex digits.
bool is_checksum(std::string_view s);
// Any '/'-separated component equal to "..": checked on the text, exactly as the schema's
// pattern does, so "a..b" and "..a" are fine.
bool has_dotdot_component(std::string_view s);
bool is_absolute_text(std::string_view s);

// "MAJOR.MINOR", decimal, no sign and no leading zeros.
struct FormatVersion {
  std::string_view major_text;
  unsigned long long major = 0;
  bool major_overflow = false;
  int minor = 0;  // clamped to INT_MAX: a huge minor is still "newer than 0"
};
std::optional<FormatVersion> parse_format_version(std::string_view s);

// JSON numbers are mathematical values: 3.0 and 3e0 are the integer 3 (as in JSON Schema).
enum class IntegerKind { not_integer, integer };
struct IntegerValue {
  IntegerKind kind = IntegerKind::not_integer;
  bool fits = false;   // within long long
  long long value = 0;
};
IntegerValue integer_value(const json_text::Json& v);

}  // namespace metrale::manifest_detail
