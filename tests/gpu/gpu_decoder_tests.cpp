// SPDX-License-Identifier: MIT OR Apache-2.0
// The decoder's small CUDA kernels (modules norm, rope, embed) on a real GPU: the conformance
// cases of tools/conformance/decoder_cases.cpp, against the double-precision reference with the
// contract's rounding points. The refusal of an id outside the table traps, which leaves the
// context unusable, so it runs last. Suite 'gpu'; exits 77 with one line when no CUDA device is
// usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "conformance/conformance.hpp"
#include "gpu_support.hpp"

#include <cstdio>

using namespace metrale;

namespace {

std::shared_ptr<Backend> g_cuda;

}  // namespace

TEST_CASE("norm, rope and embed kernels match the reference on the GPU, then an out-of-range id fails the launch") {
  std::vector<conformance::Case> last;
  size_t ran = 0;
  for (const conformance::Case& c : conformance::decoder_cases()) {
    if (c.variant == "out_of_range") {
      last.push_back(c);
      continue;
    }
    const conformance::CaseResult r = conformance::run_case(*g_cuda, c);
    CAPTURE(c.name);
    CHECK_MESSAGE(r.outcome == conformance::Outcome::passed, r.detail);
    ran += r.outcome == conformance::Outcome::passed;
  }
  CHECK(ran > 0);
  REQUIRE(last.size() == 1);
  const conformance::CaseResult r = conformance::run_case(*g_cuda, last.front());
  CHECK_MESSAGE(r.outcome == conformance::Outcome::passed, r.detail);
}

int main(int argc, char** argv) {
  static Registry registry = gpu_test::discover_cuda();
  g_cuda = gpu_test::cuda_backend_or_explain(registry);
  if (!g_cuda) return 77;
  std::printf("CUDA backend on %s (%s)\n", g_cuda->device_name().c_str(), g_cuda->target().c_str());
  doctest::Context context(argc, argv);
  const int rc = context.run();
  g_cuda.reset();
  return rc;
}
