// SPDX-License-Identifier: MIT OR Apache-2.0
// The performance targets of metrale-bench-layers (docs/perf.md): the worst figure per target
// among the rows each covers, on one thread count, beside what the roofline allows that row.
#pragma once

#include "bench_rows.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace metrale::bench {

// Ratio targets are ">=": the worst is the lowest; the launch targets (4) are "<=": a single
// measured value.
struct TargetRow {
  int target = 0;
  std::string label;
  unsigned threads = 0;
  std::string metric;      // the rates' JSON key, or the launch figure
  std::string comparison;  // ">=" or "<="
  double goal = 0;
  size_t rows = 0;                         // rates covered (launch: 1)
  std::optional<double> worst;             // nullopt: no row covered
  std::string worst_preset;                // ratio targets: the row with the worst figure
  std::string worst_variant;
  uint32_t worst_m = 0;
  uint32_t worst_context = 0;              // attention rows (Rate::context)
  std::optional<double> roofline_allows;   // the figure that row would have at its roofline
  bool ratio() const noexcept { return comparison == ">="; }
};

// Every target on one thread count.
std::vector<TargetRow> targets_of(const ThreadRun& run);
nlohmann::json target_json(const TargetRow& t);
// The summary table's cells: target, rows, worst, goal, worst at, roofline allows.
std::vector<std::string> target_cells(const TargetRow& t);

}  // namespace metrale::bench
