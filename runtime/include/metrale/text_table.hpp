// SPDX-License-Identifier: MIT OR Apache-2.0
// Aligned plain-text tables for human output (the CLI's and the audit's one renderer).
#pragma once

#include <string>
#include <vector>

namespace metrale {

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
std::string render_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace metrale
