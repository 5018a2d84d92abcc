// SPDX-License-Identifier: MIT OR Apache-2.0
// The manifest keys that move backend knowledge out of the runtime: "levers" (METRALE_* variables
// a backend takes, passed to create()) and "target_tiers" (its target ladder). Strict, with one
// problem per mistake at its JSON pointer.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/manifest.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

using namespace metrale;
using Json = nlohmann::ordered_json;

namespace {

Json doc() {
  return Json::parse(R"json({
    "format_version": "1.0", "backend": "x", "library": "libx.so", "abi_version": 1, "priority": 1,
    "target_tiers": [ {"target": "x-base", "features": ["sse2"]}, {"target": "x-high"} ],
    "levers": [
      {"name": "METRALE_X_DRIVER", "option": "driver", "type": "path", "default": "libx.so", "meaning": "Driver."},
      {"name": "METRALE_X_DEVICE", "option": "device_index", "type": "u32", "default": "0", "meaning": "Device."},
      {"name": "METRALE_X_TIER", "option": "tier", "type": "choice", "default": "auto", "meaning": "Tier.",
       "choices": ["auto", "low"], "path": false}
    ],
    "modules": []
  })json");
}

ManifestResult parse(const Json& json) { return parse_manifest("/m/x.json", json.dump()); }

Json with(Json json, const std::string& pointer, Json value) {
  json[Json::json_pointer(pointer)] = std::move(value);
  return json;
}

Json without(Json json, const std::string& pointer) {
  const Json::json_pointer p(pointer);
  json[p.parent_pointer()].erase(p.back());
  return json;
}

// Rejected with exactly one problem, at `pointer`, whose message holds `words`.
void check_single(const Json& json, const std::string& pointer, const std::vector<std::string>& words) {
  const ManifestResult r = parse(json);
  std::string all;
  for (const auto& p : r.problems) all += p.to_string() + "\n";
  INFO("problems:\n", all);
  CHECK_FALSE(r.manifest.has_value());
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].pointer == pointer);
  for (const auto& w : words) {
    CAPTURE(w);
    CHECK(r.problems[0].message.find(w) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("levers and target tiers are read into the manifest") {
  const ManifestResult r = parse(doc());
  REQUIRE(r.manifest);
  const Manifest& m = *r.manifest;
  REQUIRE(m.levers.size() == 3);
  CHECK(m.levers[0].name == "METRALE_X_DRIVER");
  CHECK(m.levers[0].option == "driver");
  CHECK(m.levers[0].type == LeverType::path);
  CHECK(m.levers[0].path_like);  // type path: a path lever unless it says otherwise
  CHECK(m.levers[1].option == kDeviceIndexOption);
  CHECK_FALSE(m.levers[1].path_like);
  CHECK(m.levers[2].choices == std::vector<std::string>{"auto", "low"});
  CHECK(m.levers[2].default_text == "auto");
  CHECK(m.levers[2].meaning == "Tier.");
  REQUIRE(m.target_tiers.size() == 2);
  CHECK(m.target_tiers[0].target == "x-base");
  CHECK(m.target_tiers[0].features == std::vector<std::string>{"sse2"});
  CHECK(m.target_tiers[1].features.empty());
  CHECK(parse(with(doc(), "/levers/1/path", true)).manifest->levers[1].path_like);
  CHECK(parse(without(without(doc(), "/levers"), "/target_tiers")).manifest);  // both optional
}

TEST_CASE("each wrong lever or tier value is one problem at its pointer") {
  struct Case {
    std::string pointer;
    Json value;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases{
      {"/levers", Json::object(), {"expected an array of lever objects", "found an object"}},
      {"/levers/0", "METRALE_X", {"expected an object (a lever)", "found string"}},
      {"/levers/0/name", "METRALE_", {"expected a lever name: METRALE_ followed by at least one of A-Z 0-9 _"}},
      {"/levers/0/name", "METRALE_x", {"expected a lever name"}},
      {"/levers/0/name", "X_DRIVER", {"expected a lever name"}},
      {"/levers/0/option", "a-b", {"expected a create() option key", "found string \"a-b\""}},
      {"/levers/0/type", "path_list", {"expected one of presence, flag, u32, string, choice, path"}},
      {"/levers/0/type", 3, {"expected one of presence, flag, u32, string, choice, path", "found number 3"}},
      {"/levers/0/default", "", {"expected a non-empty string", "empty string"}},
      {"/levers/0/meaning", Json::array(), {"expected a non-empty string"}},
      {"/levers/2/path", "no", {"expected true or false", "found string \"no\""}},
      {"/levers/2/choices", Json::array(), {"expected a non-empty array of distinct non-empty strings"}},
      {"/levers/2/choices", "auto", {"expected a non-empty array of distinct non-empty strings"}},
      {"/levers/2/choices/1", "", {"expected a non-empty string"}},
      {"/levers/2/choices/1", "auto", {"duplicate choice \"auto\"", "first listed at /levers/2/choices/0"}},
      {"/levers/0/choices", Json::array({"a"}), {"choices are allowed only on a lever of type choice; this one is path"}},
      {"/levers/1/type", "string", {"option \"device_index\" selects the device: expected type u32", "\"string\""}},
      {"/levers/1/name", "METRALE_X_DRIVER", {"duplicate lever name \"METRALE_X_DRIVER\"", "first declared at /levers/0"}},
      {"/levers/2/option", "driver", {"duplicate option \"driver\"", "first declared at /levers/0"}},
      {"/target_tiers", "x-base", {"expected an array of target tier objects, lowest first"}},
      {"/target_tiers/0", 1, {"expected an object (a target tier"}},
      {"/target_tiers/0/target", "", {"expected a non-empty target string"}},
      {"/target_tiers/1/target", "x-base", {"duplicate target \"x-base\"", "first listed at /target_tiers/0"}},
      {"/target_tiers/0/features", "sse2", {"expected an array of strings"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.pointer);
    CAPTURE(c.value.dump());
    check_single(with(doc(), c.pointer, c.value), c.pointer, c.words);
  }
}

TEST_CASE("missing and unknown lever keys") {
  for (const std::string key : {"name", "option", "type", "default", "meaning"}) {
    CAPTURE(key);
    check_single(without(doc(), "/levers/0/" + key), "/levers/0", {"missing required key \"" + key + "\""});
  }
  check_single(without(doc(), "/levers/2/choices"), "/levers/2",
               {"missing required key \"choices\"", "a lever of type choice lists its choices"});
  check_single(without(doc(), "/target_tiers/0/target"), "/target_tiers/0", {"missing required key \"target\""});
  check_single(with(doc(), "/levers/0/optoin", "x"), "/levers/0/optoin", {"unknown key", "did you mean \"option\"?"});
  check_single(with(doc(), "/target_tiers/0/feature", Json::array()), "/target_tiers/0/feature",
               {"unknown key", "did you mean \"features\"?"});
  // A newer minor ignores unknown keys, but not the rules between known ones.
  Json newer = with(with(doc(), "/format_version", "1.1"), "/levers/0/optoin", "x");
  CHECK(parse(newer).manifest);
  check_single(with(newer, "/levers/1/type", "flag"), "/levers/1/type", {"expected type u32"});
}
