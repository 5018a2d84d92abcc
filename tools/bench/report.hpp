// SPDX-License-Identifier: MIT OR Apache-2.0
// The whole of a `metrale bench GLOB` run as one value: the shapes (a model preset's projections or
// an explicit n and k, for each m), the backends (each one named, else the selected one), every
// matching variant of each run (bench.hpp) and the dispositions counted, and that report as the
// JSON `metrale bench --json` prints. The CLI renders it as text, CSV or JSON (cli/cmd_bench.cpp);
// the Python package returns it as objects (metrale.bench, docs/python.md).
#pragma once

#include "bench/bench.hpp"

#include <metrale/registry.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace metrale::bench {

inline constexpr const char* kDefaultBenchModel = "qwen3-32b";
inline const std::vector<uint32_t> kDefaultBenchMs{1, 8, 64};

// The verification budget, in words.
extern const std::string kBudget;

struct ReportRequest {
  std::string glob;
  std::vector<std::string> backends;  // empty: the selected backend (METRALE_BACKEND or the highest priority)
  std::string model;                  // a preset or config.json; empty (and no n, k): kDefaultBenchModel
  std::vector<uint32_t> ms;           // empty: kDefaultBenchMs
  uint32_t n = 0, k = 0;              // an explicit shape: both or neither, and not with `model`
  std::string baseline;
  Options run;
  // Optional: told when each backend's bench starts (0) and ends (1).
  std::function<void(const std::string& stage, double fraction)> progress;
};

struct Report {
  std::string shape_source;  // "model qwen3-32b", "--n 4096 --k 4096"
  std::vector<Row> rows;
  std::array<size_t, 4> counts{};  // by Disposition
  bool baseline_found = true;
  std::string verify_text;
  // One line per backend with no matching variant ("backend 'cpu': no ... matches ...; it has: ...").
  std::string unmatched;
  size_t count(Disposition d) const { return counts[static_cast<size_t>(d)]; }
};

// Runs the request. Throws Error(invalid_argument) for contradictory shape options, a Refusal for a
// backend named that is not loaded, and Error(not_found) when no backend has a matching variant.
Report run_report(const Registry& registry, const ReportRequest& request);
// The command that reruns one row alone.
std::string rerun_command(const Row& row, const Options& run);
// `metrale bench --json`'s document.
nlohmann::json report_json(const Report& report, const ReportRequest& request);

}  // namespace metrale::bench
