// SPDX-License-Identifier: MIT OR Apache-2.0
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/levers.hpp>
#include <metrale/status.hpp>

#include "test_support.hpp"

using namespace metrale;
using namespace metrale::testing;

TEST_CASE("every lever of design.md section 7 is declared with a meaning") {
  for (const char* name : {"METRALE_W4A16_K64_MIN_K", "METRALE_NO_W4A16_K64", "METRALE_W4A16_VARIANT",
                           "METRALE_NO_TGEMM_PIPELINE3", "METRALE_NO_K64_PIPELINE3", "METRALE_NO_K64_N64",
                           "METRALE_BACKEND", "METRALE_LOG", "METRALE_BACKENDS_DISABLE", "METRALE_MANIFESTS"}) {
    const LeverSpec* spec = find_lever(name);
    REQUIRE_MESSAGE(spec != nullptr, name);
    CHECK_FALSE(spec->meaning.empty());
  }
  CHECK(find_lever("METRALE_NO_TGEMM_PIPELINE3")->type == LeverType::presence);
  CHECK(find_lever("METRALE_NO_TGEMM_PIPELINE3")->meaning.find("0 included") != std::string_view::npos);
}

TEST_CASE("presence levers are on for any value, 0 and empty included") {
  for (const char* value : {"0", "1", "", "no"}) {
    EnvGuard env({{"METRALE_NO_K64_N64", value}});
    CHECK(lever_on("METRALE_NO_K64_N64"));
  }
  EnvGuard env({{"METRALE_NO_K64_N64", std::nullopt}});
  CHECK_FALSE(lever_on("METRALE_NO_K64_N64"));
}

TEST_CASE("bad values are refusals naming the variable and the value") {
  {
    EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "12x"}});
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains("METRALE_W4A16_K64_MIN_K=\"12x\""), Refusal);
  }
  {
    EnvGuard env({{"METRALE_LOG", "loud"}});
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains("one of trace, debug, info, warn, error, off"), Refusal);
  }
  for (const char* value : {"yes", "on", "true", "2", ""}) {
    EnvGuard env({{"METRALE_CPU_PIN", value}});
    const std::string expected = "METRALE_CPU_PIN=\"" + std::string(value) + "\" is not valid: expected 0 or 1";
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains(expected.c_str()), Refusal);
  }
  for (const char* value : {"0", "1"}) {
    EnvGuard env({{"METRALE_CPU_PIN", value}});
    CHECK_NOTHROW(validate_levers());
    CHECK(lever_on("METRALE_CPU_PIN") == (value[0] == '1'));
  }
  {
    EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "+7"}});
    CHECK(lever_u32("METRALE_W4A16_K64_MIN_K") == 7u);
  }
}

TEST_CASE("levers are read once and cached") {
  EnvGuard env({{"METRALE_CPU_THREADS", "3"}});
  CHECK(lever_u32("METRALE_CPU_THREADS") == 3u);
  setenv("METRALE_CPU_THREADS", "5", 1);  // a change after the first read is not seen
  CHECK(lever_u32("METRALE_CPU_THREADS") == 3u);
}

TEST_CASE("unknown METRALE_ variables are reported with the nearest known name") {
  EnvGuard env({{"METRALE_NO_K64_N46", "1"}});
  auto unknown = unknown_levers();
  auto it = std::find_if(unknown.begin(), unknown.end(), [](const UnknownLever& u) { return u.name == "METRALE_NO_K64_N46"; });
  REQUIRE(it != unknown.end());
  CHECK(it->nearest == "METRALE_NO_K64_N64");
}

TEST_CASE("lever_note spells NAME=value") {
  EnvGuard env({{"METRALE_NO_K64_N64", "0"}});
  CHECK(lever_note("METRALE_NO_K64_N64") == "METRALE_NO_K64_N64=0");
  EnvGuard unset({{"METRALE_NO_K64_N64", std::nullopt}});
  CHECK(lever_note("METRALE_NO_K64_N64").empty());
}
