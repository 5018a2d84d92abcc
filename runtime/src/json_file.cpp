// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/json_file.hpp>
#include <metrale/regular_file.hpp>
#include <metrale/status.hpp>

#include "json_reader.hpp"

namespace metrale {

nlohmann::json parse_json(std::string_view text, std::string_view source) {
  auto result = json_text::read_json_as<nlohmann::json>(text);
  const std::string where(source);
  if (result.error) {
    throw Error(Status::invalid_argument, where + ": not valid JSON (line " + std::to_string(result.error->line) +
                                              ", column " + std::to_string(result.error->column) +
                                              "): " + result.error->reason);
  }
  if (!result.duplicates.empty()) {
    const auto& [pointer, key] = result.duplicates.front();
    throw Error(Status::invalid_argument, where + ": " + pointer + ": key " + json_text::quote_short(key) +
                                              " appears twice in one object");
  }
  return std::move(result.root);
}

nlohmann::json read_json_file(const std::filesystem::path& file, std::string_view what, std::size_t max_bytes) {
  return parse_json(read_regular_file(file, what, max_bytes), file.string());
}

std::string describe_json(const nlohmann::json& value) {
  if (value.is_structured()) return value.is_object() ? "an object" : "an array";
  if (value.is_null()) return "null";
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) {
    size_t cut = 37;  // between UTF-8 sequences
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return std::string(value.type_name()) + " " + text;
}

std::optional<uint64_t> json_unsigned(const nlohmann::json& value) noexcept {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  return std::nullopt;
}

}  // namespace metrale
