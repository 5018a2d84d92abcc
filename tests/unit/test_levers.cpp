// SPDX-License-Identifier: MIT OR Apache-2.0
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <layers/core/levers.hpp>
#include <metrale/levers.hpp>
#include <metrale/status.hpp>

#include "test_support.hpp"

#include <thread>

using namespace metrale;
using namespace metrale::testing;

namespace {

// Levers this test program declares for itself, as a library would.
const std::vector<LeverSpec>& test_specs() {
  static const std::vector<LeverSpec> specs{
      {"METRALE_TEST_COUNT", LeverType::u32, "3", "A count for tests.", {}, false, "tests"},
      {"METRALE_TEST_SWITCH", LeverType::flag, "0", "A switch for tests.", {}, false, "tests"},
      {"METRALE_TEST_MODE", LeverType::choice, "a", "A mode for tests.", {"a", "b"}, false, "tests",
       "/somewhere/test.json"},
  };
  return specs;
}

struct Declared {
  Declared() {
    layers::register_levers();
    register_levers(test_specs());
  }
};
const Declared declared;

}  // namespace

TEST_CASE("the runtime, the layers and a library each declare their own levers") {
  for (const char* name : {"METRALE_BACKEND", "METRALE_LOG", "METRALE_BACKENDS_DISABLE", "METRALE_MANIFESTS"}) {
    const LeverSpec* spec = find_lever(name);
    REQUIRE_MESSAGE(spec != nullptr, name);
    CHECK(spec->declared_by == "runtime");
  }
  for (const char* name : {"METRALE_W4A16_K64_MIN_K", "METRALE_NO_W4A16_K64", "METRALE_W4A16_VARIANT",
                           "METRALE_NO_TGEMM_PIPELINE3", "METRALE_NO_K64_PIPELINE3", "METRALE_NO_K64_N64"}) {
    const LeverSpec* spec = find_lever(name);
    REQUIRE_MESSAGE(spec != nullptr, name);
    CHECK(spec->declared_by == "layers");
    CHECK_FALSE(spec->meaning.empty());
  }
  CHECK(find_lever("METRALE_NO_TGEMM_PIPELINE3")->type == LeverType::presence);
  CHECK(find_lever("METRALE_NO_TGEMM_PIPELINE3")->meaning.find("0 included") != std::string_view::npos);
  // No backend's levers without a manifest that declares them.
  CHECK(find_lever("METRALE_CPU_THREADS") == nullptr);
  CHECK(find_lever("METRALE_TEST_MODE")->declared_in == "/somewhere/test.json");
  // Documentation order: the runtime's first.
  CHECK(lever_specs().front().declared_by == "runtime");
}

TEST_CASE("register_levers is idempotent and refuses a second, different declaration") {
  const size_t before = lever_specs().size();
  register_levers(test_specs());
  layers::register_levers();
  CHECK(lever_specs().size() == before);

  LeverSpec other = test_specs()[0];
  other.type = LeverType::string;
  other.declared_by = "another library";
  CHECK_THROWS_WITH_AS(register_levers(std::span(&other, 1)),
                       doctest::Contains("METRALE_TEST_COUNT declared by another library is already declared by "
                                         "tests as a u32 lever, not a string one"),
                       Error);
  CHECK(lever_conflict(other).value_or("").find("already declared by tests") != std::string::npos);
  CHECK_FALSE(lever_conflict(test_specs()[0]));
  CHECK(find_lever("METRALE_TEST_COUNT")->type == LeverType::u32);

  // All or nothing: a batch with one conflict declares none of its levers.
  const LeverSpec fresh{"METRALE_TEST_FRESH", LeverType::flag, "0", "Fresh.", {}, false, "tests"};
  const std::vector<LeverSpec> batch{fresh, other};
  CHECK_THROWS_AS(register_levers(batch), Error);
  CHECK(find_lever("METRALE_TEST_FRESH") == nullptr);

  for (const LeverSpec& bad : {LeverSpec{"NOT_METRALE", LeverType::flag, "0", "x", {}, false, "tests"},
                               LeverSpec{"METRALE_TEST_NOBODY", LeverType::flag, "0", "x", {}, false, ""},
                               LeverSpec{"METRALE_TEST_NOCHOICE", LeverType::choice, "a", "x", {}, false, "tests"}})
    CHECK_THROWS_AS(register_levers(std::span(&bad, 1)), Error);
}

TEST_CASE("register_levers from several threads at once declares each lever once") {
  std::vector<LeverSpec> specs;
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) names.push_back("METRALE_TEST_THREADED_" + std::to_string(i));
  for (const auto& name : names) specs.push_back({name, LeverType::u32, "0", "Threaded.", {}, false, "tests"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { register_levers(specs); });
  for (auto& thread : threads) thread.join();
  size_t count = 0;
  for (const auto& spec : lever_specs()) count += spec.name.starts_with("METRALE_TEST_THREADED_");
  CHECK(count == names.size());
}

TEST_CASE("presence levers are on for any value, 0 and empty included") {
  for (const char* value : {"0", "1", "", "no"}) {
    EnvGuard env({{"METRALE_NO_K64_N64", value}});
    CHECK(lever_on("METRALE_NO_K64_N64"));
  }
  EnvGuard env({{"METRALE_NO_K64_N64", std::nullopt}});
  CHECK_FALSE(lever_on("METRALE_NO_K64_N64"));
}

TEST_CASE("bad values are refusals naming the variable, the value and who declared the lever") {
  {
    EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "12x"}});
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains("METRALE_W4A16_K64_MIN_K=\"12x\""), Refusal);
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains("(lever declared by layers)"), Refusal);
  }
  {
    EnvGuard env({{"METRALE_LOG", "loud"}});
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains("one of trace, debug, info, warn, error, off"), Refusal);
  }
  {
    EnvGuard env({{"METRALE_TEST_MODE", "c"}});
    CHECK_THROWS_WITH_AS(validate_levers(),
                         doctest::Contains("METRALE_TEST_MODE=\"c\" is not valid: expected one of a, b (lever declared "
                                           "by tests in manifest /somewhere/test.json)"),
                         Refusal);
    CHECK_THROWS_AS(lever_checked("METRALE_TEST_MODE"), Refusal);
  }
  for (const char* value : {"yes", "on", "true", "2", ""}) {
    EnvGuard env({{"METRALE_TEST_SWITCH", value}});
    const std::string expected = "METRALE_TEST_SWITCH=\"" + std::string(value) + "\" is not valid: expected 0 or 1";
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains(expected.c_str()), Refusal);
  }
  for (const char* value : {"0", "1"}) {
    EnvGuard env({{"METRALE_TEST_SWITCH", value}});
    CHECK_NOTHROW(validate_levers());
    CHECK(lever_on("METRALE_TEST_SWITCH") == (value[0] == '1'));
  }
  {
    EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "+7"}});
    CHECK(lever_u32("METRALE_W4A16_K64_MIN_K") == 7u);
  }
}

TEST_CASE("levers are read once and cached") {
  EnvGuard env({{"METRALE_TEST_COUNT", "3"}});
  CHECK(lever_u32("METRALE_TEST_COUNT") == 3u);
  setenv("METRALE_TEST_COUNT", "5", 1);  // a change after the first read is not seen
  CHECK(lever_u32("METRALE_TEST_COUNT") == 3u);
}

TEST_CASE("unknown METRALE_ variables are reported with the nearest known name, declared ones are not") {
  EnvGuard env({{"METRALE_NO_K64_N46", "1"}, {"METRALE_TEST_COUNT", "1"}, {"METRALE_TEST_COUNTT", "1"}});
  auto unknown = unknown_levers();
  auto find = [&](const char* name) {
    return std::find_if(unknown.begin(), unknown.end(), [&](const UnknownLever& u) { return u.name == name; });
  };
  REQUIRE(find("METRALE_NO_K64_N46") != unknown.end());
  CHECK(find("METRALE_NO_K64_N46")->nearest == "METRALE_NO_K64_N64");
  CHECK(find("METRALE_TEST_COUNT") == unknown.end());
  REQUIRE(find("METRALE_TEST_COUNTT") != unknown.end());
  CHECK(find("METRALE_TEST_COUNTT")->nearest == "METRALE_TEST_COUNT");
}

TEST_CASE("lever_note spells NAME=value") {
  EnvGuard env({{"METRALE_NO_K64_N64", "0"}});
  CHECK(lever_note("METRALE_NO_K64_N64") == "METRALE_NO_K64_N64=0");
  EnvGuard unset({{"METRALE_NO_K64_N64", std::nullopt}});
  CHECK(lever_note("METRALE_NO_K64_N64").empty());
}

TEST_CASE("lever type names round-trip") {
  for (auto type : {LeverType::presence, LeverType::flag, LeverType::u32, LeverType::string, LeverType::choice,
                    LeverType::path_list, LeverType::glob_list, LeverType::path, LeverType::kernel_map})
    CHECK(lever_type_from_name(lever_type_name(type)) == type);
  CHECK_FALSE(lever_type_from_name("bool"));
}
