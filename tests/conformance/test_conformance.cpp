// SPDX-License-Identifier: MIT OR Apache-2.0
// Runs the conformance suite on every loaded backend. Exit 77 (skipped) when discovery loaded no
// backend at all (only unavailable ones, e.g. CUDA without a driver). Options before doctest's:
//   --cases=GLOB              run only the cases whose name matches one such glob ('*' any run);
//                             repeatable
//   --skip-if-best-cpu-tier   exit 77 when METRALE_CPU_TARGET names the tier this CPU gets without
//                             it: the plain run already covers that tier
// Run it on a fault plugin with METRALE_MANIFESTS=<its manifest>: a wrong kernel fails here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "conformance/certify.hpp"

#include <layers/core/levers.hpp>

#include <metrale/names.hpp>
#include <metrale/registry.hpp>

#include "target.hpp"  // the CPU backend's tier choice

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

std::vector<std::shared_ptr<metrale::Backend>> g_backends;
std::vector<std::string> g_filters;  // empty: every case

bool selected(const std::string& name) { return g_filters.empty() || metrale::glob_match_any(g_filters, name); }

// A --cases glob that matches no case would quietly narrow the run: name it and fail.
bool every_filter_matches() {
  const auto all = metrale::conformance::cases();
  bool ok = true;
  for (const auto& g : g_filters) {
    if (std::none_of(all.begin(), all.end(), [&](const auto& c) { return metrale::glob_match(g, c.name); })) {
      std::fprintf(stderr, "--cases=%s matches no conformance case\n", g.c_str());
      ok = false;
    }
  }
  return ok;
}

// Whether METRALE_CPU_TARGET asks for the tier the CPU backend would choose anyway.
bool forced_tier_is_best() {
  const char* forced = std::getenv("METRALE_CPU_TARGET");
  if (!forced) return false;
  using namespace metrale::cpu;
  return std::strcmp(forced, tier_option_name(best_tier(detect_features()))) == 0;
}

}  // namespace

TEST_CASE("every loaded backend is consistent and builds every layer path its manifest claims") {
  using namespace metrale::conformance;
  for (const auto& backend : g_backends) {
    CAPTURE(backend->name());
    auto failures = manifest_checks(*backend);
    for (auto& r : path_failures(coverage(*backend))) failures.push_back(std::move(r));
    for (const auto& r : failures) FAIL_CHECK(r.name << ": " << r.detail);
  }
}

TEST_CASE("every loaded backend passes the conformance cases it does not skip") {
  using namespace metrale::conformance;
  const auto all = cases();
  for (const auto& backend : g_backends) {
    CAPTURE(backend->name());
    std::vector<CaseResult> results;
    for (const auto& c : all) {
      if (!selected(c.name)) continue;
      results.push_back(run_case(*backend, c));
      const CaseResult& r = results.back();
      CHECK_MESSAGE(r.outcome != Outcome::failed, r.name << ": " << r.detail);
    }
    std::cout << "== backend " << backend->name() << " (" << backend->target() << ")\n" << render_results(results);
    // A suite that skipped everything has tested nothing.
    CHECK_MESSAGE(summarize(results).passed > 0, "backend " << backend->name() << " ran no case");
  }
}

int main(int argc, char** argv) {
  std::vector<char*> rest{argv[0]};
  bool skip_if_best_tier = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--cases=", 8) == 0) {
      g_filters.emplace_back(argv[i] + 8);
    } else if (std::strcmp(argv[i], "--skip-if-best-cpu-tier") == 0) {
      skip_if_best_tier = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (skip_if_best_tier && forced_tier_is_best()) {
    std::printf("METRALE_CPU_TARGET=%s is the tier this CPU gets without it: the test 'conformance' runs "
                "that tier; skipped\n", std::getenv("METRALE_CPU_TARGET"));
    return 77;
  }
  if (!every_filter_matches()) return 1;
  metrale::layers::register_levers();  // before discovery, as every program using the layers does
  static metrale::Registry registry = metrale::Registry::discover();
  for (const auto& e : registry.entries()) {
    if (e.state == metrale::EntryState::loaded && e.instance) g_backends.push_back(e.instance);
  }
  if (g_backends.empty()) {
    std::fprintf(stderr, "no backend loaded; conformance skipped. Discovery found:\n");
    for (const auto& e : registry.entries()) {
      std::fprintf(stderr, "  %s: %s %s\n", e.manifest_path.c_str(), metrale::entry_state_name(e.state), e.reason.c_str());
    }
    return 77;
  }
  doctest::Context context(static_cast<int>(rest.size()), rest.data());
  return context.run();
}
