// SPDX-License-Identifier: MIT OR Apache-2.0
// Reading config.json's fields, shared by config.cpp and config_moe.cpp (not installed): every
// error names the source and the key, and says what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace metrale::layers::config_json {

// Throws Error(invalid_argument) "<source>: <what>".
[[noreturn]] void error(const std::string& source, const std::string& what);
// `key` as a u32; nullopt when absent or null; an Error when not a non-negative integer < 2^32.
std::optional<uint32_t> u32(const nlohmann::json& doc, const std::string& source, const char* key);
// `key` as a string; nullopt when absent or null; an Error when not a string.
std::optional<std::string> string(const nlohmann::json& doc, const std::string& source, const char* key);

}  // namespace metrale::layers::config_json
