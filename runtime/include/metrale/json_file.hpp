// SPDX-License-Identifier: MIT OR Apache-2.0
// Reading JSON that comes from outside the program (model configs, checkpoint indexes, locks,
// audits): bounded in size (the caller's cap, through metrale/regular_file.hpp) and in nesting
// (kJsonMaxDepth levels), a key repeated within one object refused, and every error a
// metrale::Error(invalid_argument) naming the source with a line and column or a JSON pointer.
// Manifests use the same reader (their problems are collected rather than thrown).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace metrale {

// Deeper documents are refused before anything is built: no file the runtime reads nests beyond
// a handful of levels, and a few megabytes of '[' would otherwise cost gigabytes.
inline constexpr std::size_t kJsonMaxDepth = 64;

// Parses `text`; `source` names it in messages ("config.json", a path).
//   "<source>: not valid JSON (line 3, column 7): syntax error while parsing object key - ..."
//   "<source>: not valid JSON (line 1, column 65): nested deeper than 64 levels"
//   "<source>: /weight_map/x: key \"x\" appears twice in one object"
nlohmann::json parse_json(std::string_view text, std::string_view source);

// read_regular_file(file, what, max_bytes), then parse_json with the file's path as the source.
nlohmann::json read_json_file(const std::filesystem::path& file, std::string_view what, std::size_t max_bytes);

// The value of a non-negative JSON integer, whichever way nlohmann stored it; nullopt for anything
// else. A float is never converted (1e300 to an integer type is undefined behaviour).
std::optional<uint64_t> json_unsigned(const nlohmann::json& value) noexcept;

// What a value is, for "found ..." in messages, short whatever its size: "number 1.9",
// "string \"abc\"" (cut at 40 bytes with "..."), "an object", "an array".
std::string describe_json(const nlohmann::json& value);

}  // namespace metrale
