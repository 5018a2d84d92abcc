// SPDX-License-Identifier: MIT OR Apache-2.0
// Manifest validation: the lexical rules shared with manifests/manifest.schema.json (keep the
// two in step; tests/manifest checks that they agree) and the strict walk over a parsed document
// that names every problem by JSON pointer. Internal to the runtime; manifest.cpp reads the file.
#pragma once

#include <metrale/manifest.hpp>

#include <filesystem>
#include <string>

namespace metrale::manifest_detail {

// One problem about the whole document.
ManifestResult one_problem(const std::filesystem::path& file, std::string message);
// Parses and validates `text` as the manifest `file`: the manifest, or every problem found.
ManifestResult parse_and_validate(const std::filesystem::path& file, const std::string& text);

}  // namespace metrale::manifest_detail
