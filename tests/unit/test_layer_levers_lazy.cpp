// SPDX-License-Identifier: MIT OR Apache-2.0
// A program that never calls metrale::layers::register_levers(): the layers' entry points declare
// the layers' levers themselves before they read one, so it still works and still refuses bad values.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <layers/linear/selectors.hpp>
#include <metrale/levers.hpp>
#include <metrale/status.hpp>

#include "test_support.hpp"

using namespace metrale;
using metrale::testing::EnvGuard;

TEST_CASE("the selectors declare the layers' levers before reading them") {
  REQUIRE(find_lever("METRALE_W4A16_K64_MIN_K") == nullptr);  // nobody declared them yet
  {
    EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "abc"}});
    CHECK_THROWS_WITH_AS(layers::w4a16_k64_min_k(), doctest::Contains("METRALE_W4A16_K64_MIN_K=\"abc\""), Refusal);
  }
  const LeverSpec* spec = find_lever("METRALE_W4A16_K64_MIN_K");
  REQUIRE(spec != nullptr);
  CHECK(spec->declared_by == "layers");
  EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "100"}});
  CHECK(layers::w4a16_k64_min_k() == 100u);
  CHECK(find_lever("METRALE_NO_K64_N64") != nullptr);  // all of them, at once
}
