// SPDX-License-Identifier: MIT OR Apache-2.0
// The conformance suite discriminates: the same test plugin passes with a correct w4a16_gemv and
// fails, on exactly the cases that ran that kernel, with one that skips the last 8 codes of K.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "conformance/conformance.hpp"

#include <metrale/registry.hpp>

#include "test_support.hpp"

using namespace metrale;
using namespace metrale::conformance;
namespace fs = std::filesystem;

namespace {

std::vector<CaseResult> run_all(const fs::path& manifest, const std::string& backend_name) {
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{manifest};
  auto registry = Registry::discover(options);
  auto backend = registry.find(backend_name);
  REQUIRE(backend);
  std::vector<CaseResult> results;
  for (const auto& c : cases()) results.push_back(run_case(*backend, c));
  return results;
}

bool ran_gemv(const CaseResult& r) {
  return std::find(r.kernels.begin(), r.kernels.end(), "w4a16/w4a16_gemv") != r.kernels.end();
}

}  // namespace

TEST_CASE("a correct w4a16_gemv passes the cases that use it") {
  testing::TempDir dir;
  auto json = testing::manifest_json("fault", testing::fault_plugin("good"), 1,
                                     {{"w4a16", nlohmann::json::array({testing::w4a16_kernel("w4a16_gemv")})}});
  auto results = run_all(testing::write_file(dir / "good.json", json.dump()), "fault");
  auto summary = summarize(results);
  CHECK(summary.passed > 0);
  CHECK(summary.failed == 0);
  for (const auto& r : results) CHECK_MESSAGE(r.outcome != Outcome::failed, r.name << ": " << r.detail);
}

TEST_CASE("a wrong w4a16_gemv fails every case that ran it") {
  auto results = run_all(WRONG_GEMV_MANIFEST, "wrong");
  size_t gemv_cases = 0;
  for (const auto& r : results) {
    if (r.outcome == Outcome::skipped || !ran_gemv(r)) continue;
    ++gemv_cases;
    CHECK_MESSAGE(r.outcome == Outcome::failed, r.name << " passed on a wrong kernel: " << r.detail);
  }
  CHECK(gemv_cases > 0);
  CHECK(summarize(results).failed == gemv_cases);
}
