// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/text_table.hpp>

#include <algorithm>
#include <sstream>

namespace metrale {

std::string render_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  auto emit = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < header.size(); ++c) {
      const std::string empty;
      const std::string& text = c < cells.size() ? cells[c] : empty;
      out << text;
      if (c + 1 < header.size()) out << std::string(width[c] - text.size() + 2, ' ');
    }
    out << '\n';
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out.str();
}

}  // namespace metrale
