// SPDX-License-Identifier: MIT OR Apache-2.0
#include "manifest_rules.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <system_error>

namespace metrale::manifest_detail {

using json_text::Json;

namespace {

bool is_version_number(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return s.size() == 1 || s.front() != '0';
}

}  // namespace

bool is_identifier(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (s.empty() || !alpha(s.front())) {
    return false;
  }
  return std::all_of(s.begin() + 1, s.end(), [&](char c) { return alpha(c) || digit(c); });
}

bool is_backend_name(std::string_view s) {
  if (s.empty() || s.size() > 32 || !(s.front() >= 'a' && s.front() <= 'z')) {
    return false;
  }
  return std::all_of(s.begin() + 1, s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

bool is_lever_name(std::string_view s) {
  constexpr std::string_view prefix = "METRALE_";
  if (s.size() <= prefix.size() || !s.starts_with(prefix)) {
    return false;
  }
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(prefix.size()), s.end(),
                     [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; });
}

bool is_checksum(std::string_view s) {
  constexpr std::string_view prefix = "xxh3-64:";
  if (s.size() != prefix.size() + 16 || s.substr(0, prefix.size()) != prefix) {
    return false;
  }
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(prefix.size()), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool has_dotdot_component(std::string_view s) {
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find('/', start);
    if (end == std::string_view::npos) end = s.size();
    if (s.substr(start, end - start) == "..") {
      return true;
    }
    start = end + 1;
  }
  return false;
}

bool is_absolute_text(std::string_view s) { return !s.empty() && s.front() == '/'; }

std::optional<FormatVersion> parse_format_version(std::string_view s) {
  const std::size_t dot = s.find('.');
  if (dot == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view major = s.substr(0, dot);
  const std::string_view minor = s.substr(dot + 1);
  if (!is_version_number(major) || !is_version_number(minor)) {
    return std::nullopt;
  }
  FormatVersion v;
  v.major_text = major;
  v.major_overflow =
      std::from_chars(major.data(), major.data() + major.size(), v.major).ec != std::errc{};
  unsigned long long minor_value = 0;
  const bool minor_overflow =
      std::from_chars(minor.data(), minor.data() + minor.size(), minor_value).ec != std::errc{};
  v.minor = (minor_overflow || minor_value > static_cast<unsigned long long>(INT_MAX))
                ? INT_MAX
                : static_cast<int>(minor_value);
  return v;
}

IntegerValue integer_value(const Json& v) {
  IntegerValue out;
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    out = {IntegerKind::integer, true, v.get<long long>()};
  } else if (v.is_number_unsigned()) {
    const auto u = v.get<unsigned long long>();
    out.kind = IntegerKind::integer;
    out.fits = u <= static_cast<unsigned long long>(LLONG_MAX);
    out.value = out.fits ? static_cast<long long>(u) : 0;
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::trunc(d) == d) {
      out.kind = IntegerKind::integer;
      // 2^63 is exactly representable; everything below it converts without overflow.
      out.fits = d >= -9223372036854775808.0 && d < 9223372036854775808.0;
      out.value = out.fits ? static_cast<long long>(d) : 0;
    }
  }
  return out;
}

}  // namespace metrale::manifest_detail
