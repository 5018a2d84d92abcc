// SPDX-License-Identifier: MIT OR Apache-2.0
// What manifests declare beyond kernels, through the registry and the test plugins of tests/abi:
// levers (declared, validated, passed to create()), target tiers (gating), and plugin extensions
// (Registry::extension, with or without an instance).
#include <doctest/doctest.h>

#include <metrale/levers.hpp>
#include <metrale/registry.hpp>

#include "test_support.hpp"

using namespace metrale;
using namespace metrale::testing;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {


Json fill_module() {
  return Json::array({{{"name", "fill"},
                       {"params", {{{"name", "out"}, {"type", "ptr"}},
                                   {{"name", "n"}, {"type", "u32"}},
                                   {{"name", "value"}, {"type", "f32"}}}}}});
}

Json lever(const std::string& name, const std::string& option, const std::string& type) {
  return {{"name", name}, {"option", option}, {"type", type}, {"default", "(none)"}, {"meaning", "For tests."}};
}

// A manifest of the fault plugin `variant` (whose backend name it must carry) with `levers`.
fs::path write_manifest(const TempDir& dir, const std::string& backend, const std::string& variant, Json levers,
                        const std::string& file = "") {
  Json json = manifest_json(backend, fault_plugin(variant), 1, {{"test", fill_module()}});
  if (!levers.empty()) json["levers"] = std::move(levers);
  return write_file(dir / (file.empty() ? backend + ".json" : file), json.dump(2));
}

Registry discover(const std::vector<fs::path>& manifests) {
  DiscoveryOptions options;
  options.manifests = manifests;
  return Registry::discover(options);
}

const std::initializer_list<std::pair<std::string, std::optional<std::string>>> kClean{
    {"METRALE_BACKEND", std::nullopt}, {"METRALE_BACKENDS_DISABLE", std::nullopt}};

}  // namespace

TEST_CASE("a manifest's levers are declared, validated and passed to create() as options or the device index") {
  EnvGuard clean(kClean);
  TempDir dir;
  Json mode = lever("METRALE_TEST_FAULT_MODE", "mode", "choice");
  mode["choices"] = {"fast", "slow"};
  const fs::path manifest = write_manifest(
      dir, "fault", "good",
      {lever("METRALE_TEST_FAULT_TARGET", "target", "string"), mode,
       lever("METRALE_TEST_FAULT_DEVICE", "device_index", "u32")});
  {
    EnvGuard env({{"METRALE_TEST_FAULT_TARGET", "x86-avx2"}, {"METRALE_TEST_FAULT_MODE", "fast"},
                  {"METRALE_TEST_FAULT_DEVICE", "3"}});
    const Registry registry = discover({manifest});
    const auto backend = registry.select();
    CHECK(backend->target() == "x86-avx2");
    CHECK(backend->device_name() == "fault test device #3 target=x86-avx2 mode=fast");
    const LeverSpec* spec = find_lever("METRALE_TEST_FAULT_MODE");
    REQUIRE(spec != nullptr);
    CHECK(spec->declared_by == "backend fault");
    CHECK(fs::path(spec->declared_in) == fs::absolute(manifest).lexically_normal());
    CHECK(spec->type == LeverType::choice);
  }
  {
    EnvGuard env({{"METRALE_TEST_FAULT_TARGET", std::nullopt}, {"METRALE_TEST_FAULT_MODE", std::nullopt},
                  {"METRALE_TEST_FAULT_DEVICE", std::nullopt}});
    CHECK(discover({manifest}).select()->device_name() == "fault test device");  // unset: nothing passed
  }
  {
    EnvGuard env({{"METRALE_TEST_FAULT_MODE", "medium"}});
    const std::string expected = "METRALE_TEST_FAULT_MODE=\"medium\" is not valid: expected one of fast, slow "
                                 "(lever declared by backend fault in manifest " +
                                 fs::absolute(manifest).lexically_normal().string() + ")";
    CHECK_THROWS_WITH_AS(discover({manifest}), doctest::Contains(expected.c_str()), Refusal);
    CHECK_THROWS_AS(validate_levers(), Refusal);  // start-up validation sees it too
  }
}

TEST_CASE("a lever declared again: identically it is shared, otherwise the later manifest is invalid") {
  EnvGuard clean(kClean);
  TempDir dir;
  const fs::path first = write_manifest(dir, "fault", "good", {lever("METRALE_TEST_SHARED", "threads", "u32")});
  const fs::path same = write_manifest(dir, "alt", "alt", {lever("METRALE_TEST_SHARED", "threads", "u32")});
  const fs::path other = write_manifest(dir, "xor", "xor_layout", {lever("METRALE_TEST_SHARED", "threads", "flag")});
  const fs::path runtime = write_manifest(dir, "wrong", "wrong_gemv", {lever("METRALE_BACKEND", "backend", "u32")});
  EnvGuard env({{"METRALE_TEST_SHARED", "4"}});
  const Registry registry = discover({first, same, other, runtime});
  REQUIRE(registry.entries().size() == 4);
  for (const char* name : {"fault", "alt"}) CHECK(registry.find(name)->device_name() == "fault test device threads=4");
  const auto& conflict = registry.entries()[2];
  CHECK(conflict.state == EntryState::invalid);
  CHECK(conflict.reason == fs::absolute(other).lexically_normal().string() +
                               ": /levers/0/name: METRALE_TEST_SHARED is already declared by backend fault in "
                               "manifest " + fs::absolute(first).lexically_normal().string() +
                               " as a u32 lever, not a flag one (a lever may be declared again only identically)");
  CHECK(registry.entries()[3].state == EntryState::invalid);
  CHECK(registry.entries()[3].reason.find("METRALE_BACKEND is already declared by runtime") != std::string::npos);
  CHECK(find_lever("METRALE_TEST_SHARED")->type == LeverType::u32);
}

TEST_CASE("scan() declares levers, disabled backends' included, and loads nothing; shadowed manifests declare none") {
  EnvGuard clean(kClean);
  TempDir dir;
  const fs::path on = write_manifest(dir, "fault", "good", {lever("METRALE_TEST_SCANNED", "s", "string")});
  const fs::path shadowed = write_manifest(dir, "fault", "good", {lever("METRALE_TEST_SHADOWED", "s", "string")},
                                           "second.json");
  const fs::path off = write_manifest(dir, "alt", "alt", {lever("METRALE_TEST_DISABLED", "d", "string")});
  EnvGuard env({{"METRALE_BACKENDS_DISABLE", "alt"}});
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{on, shadowed, off};
  Registry registry = Registry::scan(options);
  CHECK(registry.entries()[0].state == EntryState::pending);
  CHECK(registry.entries()[1].state == EntryState::shadowed);
  CHECK(registry.entries()[2].state == EntryState::disabled);
  CHECK(registry.find("fault") == nullptr);
  CHECK(find_lever("METRALE_TEST_SCANNED") != nullptr);
  CHECK(find_lever("METRALE_TEST_DISABLED") != nullptr);
  CHECK(find_lever("METRALE_TEST_SHADOWED") == nullptr);
  CHECK_THROWS_WITH_AS(registry.extension("fault", "fault_answer"), doctest::Contains("before load()"), Error);
  registry.load();
  CHECK(registry.entries()[0].state == EntryState::loaded);
  CHECK(registry.find("fault") != nullptr);
}

TEST_CASE("target_tiers gate min_target and cpu_features by the manifest's ladder") {
  EnvGuard clean(kClean);
  TempDir dir;
  auto needs = [](const std::string& name, const std::string& key, Json value) {
    Json kernel = w4a16_kernel(name);
    kernel[key] = std::move(value);
    return kernel;
  };
  Json json = manifest_json("fault", fault_plugin("good"), 1,
                            {{"w4a16", Json::array({needs("on_avx2", "min_target", "x86-avx2"),
                                                    needs("on_avx512", "min_target", "x86-avx512"),
                                                    needs("with_fma", "cpu_features", Json::array({"sse2", "fma"})),
                                                    needs("with_512f", "cpu_features", Json::array({"avx512f"}))})}});
  json["targets"] = {"x86-avx2"};  // the fault plugin's device reports the first
  json["target_tiers"] = Json::array({{{"target", "x86-base"}, {"features", {"sse2"}}},
                                      {{"target", "x86-avx2"}, {"features", {"avx2", "fma"}}},
                                      {{"target", "x86-avx512"}, {"features", {"avx512f"}}}});
  const Registry registry = discover({write_file(dir / "tiers.json", json.dump())});
  const auto backend = registry.select();
  CHECK(backend->try_kernel("w4a16", "on_avx2"));
  CHECK_FALSE(backend->try_kernel("w4a16", "on_avx512"));
  CHECK(backend->audit().snapshot().back().reason == "gated: requires target x86-avx512; this device is x86-avx2");
  CHECK(backend->try_kernel("w4a16", "with_fma"));
  CHECK_FALSE(backend->try_kernel("w4a16", "with_512f"));
  CHECK(backend->audit().snapshot().back().reason ==
        "gated: requires cpu_features avx512f that target x86-avx2 lacks (manifest /target_tiers)");
}

TEST_CASE("extensions: offered by loaded and unavailable backends, precise errors otherwise") {
  EnvGuard clean(kClean);
  TempDir dir;
  const fs::path good = write_manifest(dir, "alt", "alt", {});
  const fs::path down = write_manifest(dir, "down", "unavailable", {});
  const fs::path failing = write_manifest(dir, "fault", "create_fails", {});
  using Answer = uint32_t (*)();
  Extension kept;
  {
    const Registry registry = discover({good, down, failing});
    for (const char* backend : {"alt", "down"}) {
      CAPTURE(backend);
      const Extension answer = registry.extension(backend, "fault_answer");
      CHECK(answer.as<Answer>()() == 42u);
      CHECK(answer.manifest.backend == backend);
    }
    CHECK(registry.entries()[1].state == EntryState::unavailable);
    const std::string unknown = "extension 'no_such_thing' of backend 'alt': plugin " + fault_plugin("alt").string();
    CHECK_THROWS_WITH_AS(registry.extension("alt", "no_such_thing"), doctest::Contains(unknown.c_str()), Error);
    CHECK_THROWS_WITH_AS(registry.extension("nosuch", "fault_answer"),
                         doctest::Contains("no manifest names the backend. Backends: alt (loaded)"), Refusal);
    REQUIRE(registry.entries()[2].state == EntryState::failed);
    CHECK_THROWS_WITH_AS(registry.extension("fault", "fault_answer"),
                         doctest::Contains("cannot be used (failed: create() failed"), Refusal);
    kept = registry.extension("alt", "fault_answer");
  }
  CHECK(kept.as<Answer>()() == 42u);  // the extension keeps its library loaded

  {
    EnvGuard env({{"METRALE_BACKENDS_DISABLE", "al*"}});
    const Registry registry = discover({good});
    CHECK_THROWS_WITH_AS(registry.extension("alt", "fault_answer"),
                         doctest::Contains("the backend is disabled by METRALE_BACKENDS_DISABLE=al*"), Refusal);
  }
}

TEST_CASE("a version-1 table that ends before get_proc_address loads and offers no extensions") {
  EnvGuard clean(kClean);
  TempDir dir;
  const Registry registry = discover({write_manifest(dir, "fault", "short_table", {})});
  REQUIRE(registry.entries()[0].state == EntryState::loaded);
  try {
    registry.extension("fault", "fault_answer");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.status() == Status::unimplemented);
    CHECK(std::string(e.what()).find("offers no extensions (its function table has no get_proc_address)") !=
          std::string::npos);
  }
}
