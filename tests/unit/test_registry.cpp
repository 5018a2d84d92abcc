// SPDX-License-Identifier: MIT OR Apache-2.0
// Discovery order, shadowing, disable globs, selection, lookups and the typed launch, against
// the test plugins of tests/abi and manifests the tests write into temp dirs.
#include <doctest/doctest.h>

#include <metrale/names.hpp>
#include <metrale/registry.hpp>
#include <metrale/target.hpp>

#include "test_support.hpp"

using namespace metrale;
using namespace metrale::testing;
namespace fs = std::filesystem;

namespace {


nlohmann::json fill_module() {
  return nlohmann::json::array({{{"name", "fill"},
                                 {"params", {{{"name", "out"}, {"type", "ptr"}},
                                             {{"name", "n"}, {"type", "u32"}},
                                             {{"name", "value"}, {"type", "f32"}}}}}});
}

fs::path write_manifest(const fs::path& file, const std::string& backend, const std::string& variant, int priority) {
  return write_file(file, manifest_json(backend, fault_plugin(variant), priority, {{"test", fill_module()}}).dump(2));
}

// No lever from the developer's shell may leak into these tests.
const std::initializer_list<std::pair<std::string, std::optional<std::string>>> kClean{
    {"METRALE_MANIFESTS", std::nullopt},        {"METRALE_ADD_MANIFESTS", std::nullopt},
    {"METRALE_PLUGIN_PATH", std::nullopt},      {"METRALE_BACKEND", std::nullopt},
    {"METRALE_BACKENDS_DISABLE", std::nullopt}};

const RegistryEntry& entry_for(const Registry& registry, const fs::path& manifest) {
  for (const auto& entry : registry.entries())
    if (fs::equivalent(entry.manifest_path, manifest)) return entry;
  FAIL("no entry for " << manifest);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("discovery order: ADD_MANIFESTS, PLUGIN_PATH dirs, user data dir, installed dir") {
  EnvGuard clean(kClean);
  TempDir dir;
  auto added = write_manifest(dir / "added/a.json", "fault", "good", 1);
  auto path1 = write_manifest(dir / "path1/b.json", "alt", "alt", 1);
  auto path2 = write_manifest(dir / "path2/c.json", "c", "good", 1);
  auto user = write_manifest(dir / "xdg/metrale/plugins/d.json", "d", "good", 1);
  auto installed = write_manifest(dir / "installed/e.json", "e", "good", 1);
  EnvGuard env({{"METRALE_ADD_MANIFESTS", added.string()},
                {"METRALE_PLUGIN_PATH", (dir / "path1").string() + ":" + (dir / "path2").string()},
                {"XDG_DATA_HOME", (dir / "xdg").string()}});
  DiscoveryOptions options;
  options.installed_dirs = {dir / "installed"};
  auto files = discover_manifest_files(options);
  REQUIRE(files.size() == 5);
  CHECK(files[0].first == added);
  CHECK(files[0].second == ManifestOrigin::added);
  CHECK(files[1].first == path1);
  CHECK(files[2].first == path2);
  CHECK(files[2].second == ManifestOrigin::plugin_path);
  CHECK(files[3].first == user);
  CHECK(files[3].second == ManifestOrigin::user_data);
  CHECK(files[4].first == installed);
  CHECK(files[4].second == ManifestOrigin::installed);

  SUBCASE("METRALE_MANIFESTS replaces discovery") {
    EnvGuard only({{"METRALE_MANIFESTS", installed.string()}});
    auto explicit_files = discover_manifest_files(options);
    REQUIRE(explicit_files.size() == 1);
    CHECK(explicit_files[0].first == installed);
    CHECK(explicit_files[0].second == ManifestOrigin::explicit_list);
  }
}

TEST_CASE("the first manifest naming a backend wins; later ones are reported as shadowed") {
  EnvGuard clean(kClean);
  TempDir dir;
  auto first = write_manifest(dir / "one/fault.json", "fault", "good", 1);
  auto second = write_manifest(dir / "two/fault.json", "fault", "good", 50);
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{first, second};
  auto registry = Registry::discover(options);
  CHECK(entry_for(registry, first).state == EntryState::loaded);
  const auto& shadowed = entry_for(registry, second);
  CHECK(shadowed.state == EntryState::shadowed);
  CHECK(shadowed.reason.find("already provided") != std::string::npos);
  CHECK(registry.select()->manifest().path == first);  // the shadowed priority 50 does not count
}

TEST_CASE("selection: priority, METRALE_BACKEND, refusals that list what exists, disable globs") {
  EnvGuard clean(kClean);
  TempDir dir;
  auto low = write_manifest(dir / "fault.json", "fault", "good", 5);
  auto high = write_manifest(dir / "alt.json", "alt", "alt", 20);
  auto down = write_manifest(dir / "down.json", "down", "unavailable", 90);
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{low, high, down};
  {
    auto registry = Registry::discover(options);
    CHECK(registry.select()->name() == "alt");  // "down" outranks it but is unavailable
    CHECK(entry_for(registry, down).state == EntryState::unavailable);
    CHECK(entry_for(registry, down).reason.find("no device of this kind") != std::string::npos);
    EnvGuard pick({{"METRALE_BACKEND", "fault"}});
    CHECK(registry.select()->name() == "fault");
  }
  {
    auto registry = Registry::discover(options);
    EnvGuard pick({{"METRALE_BACKEND", "nosuch"}});
    try {
      registry.select();
      FAIL("expected a refusal");
    } catch (const Refusal& e) {
      std::string message = e.what();
      CHECK(message.find("METRALE_BACKEND=nosuch") != std::string::npos);
      CHECK(message.find("fault (loaded)") != std::string::npos);
      CHECK(message.find("alt (loaded)") != std::string::npos);
    }
  }
  {
    auto registry = Registry::discover(options);
    EnvGuard pick({{"METRALE_BACKEND", "down"}});
    CHECK_THROWS_WITH_AS(registry.select(), doctest::Contains("no device of this kind"), Refusal);
  }
  {
    EnvGuard disable({{"METRALE_BACKENDS_DISABLE", "x*,a?t"}});
    auto registry = Registry::discover(options);
    CHECK(entry_for(registry, high).state == EntryState::disabled);
    CHECK(registry.select()->name() == "fault");
    EnvGuard pick({{"METRALE_BACKEND", "alt"}});
    CHECK_THROWS_WITH_AS(registry.select(), doctest::Contains("METRALE_BACKENDS_DISABLE"), Refusal);
  }
}

TEST_CASE("glob_match") {
  CHECK(glob_match("*", ""));
  CHECK(glob_match("cu*", "cuda"));
  CHECK(glob_match("c?da", "cuda"));
  CHECK(glob_match("*a*a", "banana"));
  CHECK_FALSE(glob_match("cu*", "cpu"));
  CHECK_FALSE(glob_match("?", ""));
  CHECK_FALSE(glob_match("cpu", "cpu2"));
  const std::vector<std::string> globs{"cu*", "vendor"};
  CHECK(glob_match_any(globs, "cuda"));
  CHECK(glob_match_any(globs, "vendor"));
  CHECK_FALSE(glob_match_any(globs, "cpu"));
  CHECK_FALSE(glob_match_any({}, "cpu"));
}

TEST_CASE("target_satisfies: versioned targets by number, tiers by the manifest's ladder") {
  CHECK(target_satisfies("sm_90", "sm_80"));
  CHECK(target_satisfies("sm_90a", "sm_90"));
  CHECK(target_satisfies("sm_100", "sm_90"));
  CHECK_FALSE(target_satisfies("sm_80", "sm_90"));
  CHECK(target_satisfies("sm_90a", "sm_90a"));
  CHECK_FALSE(target_satisfies("sm_100", "sm_90a"));  // arch-specific features do not carry forward
  CHECK_FALSE(target_satisfies("sm_90", "sm_90a"));
  CHECK(target_satisfies("sm_103", "sm_100f"));
  CHECK(target_satisfies("sm_100a", "sm_100f"));
  CHECK_FALSE(target_satisfies("sm_120", "sm_100f"));  // another major: family features differ
  CHECK_FALSE(target_satisfies("sm_90", "sm_100f"));
  CHECK(target_satisfies("gfx_11", "gfx_10"));         // any letters: the syntax is generic
  CHECK_FALSE(target_satisfies("gfx_90", "sm_80"));    // but the letters must match
  CHECK_FALSE(target_satisfies("x86-avx512", "x86-avx2"));  // no ladder: equal or not
  const std::vector<TargetTier> tiers{{"x86-base", {"sse2"}}, {"x86-avx2", {"avx2", "fma"}}, {"x86-avx512", {"avx512f"}}};
  CHECK(target_satisfies("x86-avx512", "x86-avx2", tiers));
  CHECK(target_satisfies("x86-avx2", "x86-avx2", tiers));
  CHECK_FALSE(target_satisfies("x86-avx2", "x86-avx512", tiers));
  CHECK_FALSE(target_satisfies("x86-avx2", "sm_80", tiers));
  CHECK(target_satisfies("sm_90", "sm_80", tiers));  // a ladder does not change versioned targets
  auto features = target_features("x86-avx2", tiers);
  CHECK(features == std::vector<std::string>{"sse2", "avx2", "fma"});
  CHECK(target_features("x86-avx2", {}).empty());
  CHECK(target_features("sm_90", tiers).empty());
}

TEST_CASE("lookups: gating by target, signature check, not-provided reason, typed launch") {
  EnvGuard clean(kClean);
  TempDir dir;
  auto hopper_only = w4a16_kernel("w4a16_gemm_t_p3");
  hopper_only["min_target"] = "sm_90";
  auto make = [&](const std::string& target, const std::string& variant) {
    auto json = manifest_json("fault", fault_plugin(variant), 1,
                              {{"test", fill_module()}, {"w4a16", nlohmann::json::array({hopper_only, w4a16_kernel("w4a16_gemm_t")})}});
    json["targets"] = {target};
    DiscoveryOptions options;
    options.manifests = std::vector<fs::path>{write_file(dir / (target + variant + ".json"), json.dump())};
    return Registry::discover(options);
  };

  SUBCASE("a kernel requiring sm_90 is null on sm_80 and resolved on sm_90") {
    auto ampere = make("sm_80", "good");
    auto backend = ampere.select();
    CHECK_FALSE(backend->try_kernel("w4a16", "w4a16_gemm_t_p3"));
    auto row = backend->audit().snapshot().back();
    CHECK(row.outcome == LookupOutcome::null_handle);
    CHECK(row.reason == "gated: requires target sm_90; this device is sm_80");
    auto hopper = make("sm_90", "good");
    CHECK(hopper.select()->try_kernel("w4a16", "w4a16_gemm_t_p3"));
  }

  SUBCASE("kernel() errors say why; try_kernel() returns null") {
    auto registry = make("sm_80", "good");
    auto backend = registry.select();
    CHECK_THROWS_WITH_AS(backend->kernel("w4a16", "nosuch"), doctest::Contains("lists w4a16_gemm_t_p3, w4a16_gemm_t"),
                         Error);
    CHECK_THROWS_WITH_AS(backend->kernel("nomodule", "x"), doctest::Contains("no module 'nomodule'"), Error);
    const std::array<metrale_param_type, 2> wrong{METRALE_PARAM_PTR, METRALE_PARAM_U32};
    try {
      backend->kernel("w4a16", "w4a16_gemm_t", wrong);
      FAIL("expected a signature error");
    } catch (const Error& e) {
      CHECK(e.status() == Status::incompatible);
      CHECK(std::string(e.what()).find("caller expects (ptr, u32), manifest declares (ptr, ptr, ptr, ptr, u32, u32, u32)") !=
            std::string::npos);
    }
    CHECK_FALSE(backend->try_kernel("w4a16", "nosuch"));
  }

  SUBCASE("listed but not provided: cross-check at load, reason at lookup") {
    auto registry = make("sm_90", "listed_not_provided");
    const auto& entry = registry.entries().front();
    REQUIRE(entry.state == EntryState::loaded);
    REQUIRE(entry.cross_check.size() == 2);  // the last kernel of each module
    CHECK(entry.cross_check[0].find("listed in the manifest but the plugin does not provide it") != std::string::npos);
    CHECK_FALSE(registry.select()->try_kernel("w4a16", "w4a16_gemm_t"));
    CHECK(registry.select()->audit().snapshot().back().reason.find("in manifest, but the plugin did not provide it") !=
          std::string::npos);
  }

  SUBCASE("provided but not listed: cross-check says unreachable") {
    auto registry = make("sm_90", "extra_kernel");
    const auto& entry = registry.entries().front();
    REQUIRE(entry.cross_check.size() == 1);
    CHECK(entry.cross_check[0].find("extra/unlisted_kernel") != std::string::npos);
    CHECK(entry.cross_check[0].find("not listed in the manifest") != std::string::npos);
  }

  SUBCASE("typed launch packs arguments and checks them against the manifest") {
    auto registry = make("sm_80", "good");
    auto backend = registry.select();
    auto fill = backend->kernel("test", "fill");
    constexpr uint32_t n = 1000;
    DevicePtr out = backend->alloc(n * sizeof(float));
    backend->launch(fill, LaunchShape{{(n + 255) / 256, 1, 1}, {256, 1, 1}, 0, 0}, out, n, 2.5f);
    std::vector<float> host(n);
    backend->copy_to_host(host.data(), out, n * sizeof(float));
    CHECK(std::all_of(host.begin(), host.end(), [](float v) { return v == 2.5f; }));
    CHECK_THROWS_WITH_AS(backend->launch(fill, LaunchShape{}, out, n, 2.5), doctest::Contains("argument 2 (value) is f64"),
                         Error);
    CHECK_THROWS_WITH_AS(backend->launch(fill, LaunchShape{}, out, n), doctest::Contains("launched with 2 arguments"), Error);
    CHECK_THROWS_AS(backend->launch(KernelHandle{12345}, LaunchShape{}, out), Error);
    backend->free(out);
  }
}

TEST_CASE("resolve() returns why a try lookup failed, the outcome and the row it wrote") {
  EnvGuard clean(kClean);
  TempDir dir;
  auto hopper_only = w4a16_kernel("w4a16_gemm_t_p3");
  hopper_only["min_target"] = "sm_90";
  auto make = [&](const std::string& variant) {
    auto json = manifest_json("fault", fault_plugin(variant), 1,
                              {{"test", fill_module()}, {"w4a16", nlohmann::json::array({hopper_only, w4a16_kernel("w4a16_gemm_t")})}});
    json["targets"] = {"sm_80"};
    DiscoveryOptions options;
    options.manifests = std::vector<fs::path>{write_file(dir / (variant + ".json"), json.dump())};
    return Registry::discover(options);
  };
  auto registry = make("good");
  auto backend = registry.select();
  const Backend::LookupRequest plain;
  // Each reason as the audit row states it, and the row is the one just written.
  auto missed = [&](std::string_view module, std::string_view name, const Backend::LookupRequest& request) {
    Backend::Resolution r = backend->resolve(module, name, request);
    CHECK_FALSE(r);
    CHECK_FALSE(r.handle);
    CHECK(r.outcome == LookupOutcome::null_handle);
    CHECK(r.sequence == backend->audit().last_sequence());
    CHECK(r.reason == backend->audit().snapshot().back().reason);
    return r.reason;
  };
  CHECK(missed("nomodule", "x", plain).starts_with("not in manifest: the fault manifest has no module 'nomodule'"));
  CHECK(missed("w4a16", "nosuch", plain) == "not in manifest: module 'w4a16' lists w4a16_gemm_t_p3, w4a16_gemm_t");
  CHECK(missed("w4a16", "w4a16_gemm_t_p3", plain) == "gated: requires target sm_90; this device is sm_80");
  const std::array<metrale_param_type, 2> wrong{METRALE_PARAM_PTR, METRALE_PARAM_U32};
  Backend::LookupRequest mismatched;
  mismatched.expected = wrong;
  CHECK(missed("w4a16", "w4a16_gemm_t", mismatched) ==
        "signature differs: caller expects (ptr, u32), manifest declares (ptr, ptr, ptr, ptr, u32, u32, u32)");

  Backend::Resolution found = backend->resolve("w4a16", "w4a16_gemm_t", plain);
  CHECK(found);
  CHECK(found.outcome == LookupOutcome::resolved);
  CHECK(found.reason == "provided");
  CHECK(found.handle == backend->try_kernel("w4a16", "w4a16_gemm_t"));  // the wrappers agree
  CHECK(found.sequence + 1 == backend->audit().last_sequence());

  auto unprovided = make("listed_not_provided");
  Backend::Resolution absent = unprovided.select()->resolve("w4a16", "w4a16_gemm_t", plain);
  CHECK(absent.outcome == LookupOutcome::null_handle);
  CHECK(absent.reason.starts_with("in manifest, but the plugin did not provide it"));

  // A require lookup still throws, a refused one too, each naming the reason.
  Backend::LookupRequest required;
  required.kind = LookupKind::require;
  CHECK_THROWS_WITH_AS(backend->resolve("w4a16", "w4a16_gemm_t_p3", required), doctest::Contains("gated: requires"), Error);
  Backend::LookupRequest refused;
  refused.refuse_because = "asked for explicitly";
  CHECK_THROWS_WITH_AS(backend->resolve("w4a16", "nosuch", refused), doctest::Contains("asked for explicitly: "), Refusal);
  CHECK(backend->audit().snapshot().back().outcome == LookupOutcome::refused);
}

TEST_CASE("a lookup's lever and annotations land on its row as given") {
  EnvGuard clean(kClean);
  TempDir dir;
  auto registry = discover_manifest(dir, manifest_json("fault", fault_plugin("good"), 1, {{"test", fill_module()}}));
  auto backend = registry.select();
  Backend::LookupRequest request;
  request.lever = "METRALE_X=1";
  request.annotations = {{"tier", "int8/w4a8", true}, {"tier_note", "why", false}};
  const Backend::Resolution r = backend->resolve("test", "fill", request);
  const AuditRow row = backend->audit().snapshot().back();
  CHECK(row.sequence == r.sequence);
  CHECK(row.lever == "METRALE_X=1");
  CHECK(row.annotations == request.annotations);
  REQUIRE(row.annotation("tier"));
  CHECK(*row.annotation("tier") == "int8/w4a8");
  CHECK_FALSE(row.annotation("nosuch"));
  // The next lookup of the same kernel without them has none: nothing is carried over.
  backend->try_kernel("test", "fill");
  CHECK(backend->audit().snapshot().back().annotations.empty());
}

TEST_CASE("audit JSON has the documented shape") {
  AuditLog log;
  AuditRow row;
  row.site = Site{"layers/x.cpp", 7, "f"};
  row.backend = "cpu";
  row.target = "cpu-x86_64-avx2";
  row.module = "w4a16";
  row.kernel = "w4a16_gemm_t";
  row.outcome = LookupOutcome::resolved;
  row.reason = "provided";
  row.handle = 3;
  log.append(row);
  row.lever = "METRALE_NO_K64_N64=1";
  row.outcome = LookupOutcome::null_handle;
  log.append(row);
  auto json = nlohmann::json::parse(render_audit_json(log.snapshot()));
  REQUIRE(json.is_array());
  REQUIRE(json.size() == 2);
  for (const char* key : {"sequence", "site", "backend", "target", "module", "kernel", "kind", "outcome", "reason",
                          "lever", "handle"})
    CHECK(json[0].contains(key));
  CHECK(json[0]["sequence"] == 1);
  CHECK(json[0]["site"]["line"] == 7);
  CHECK(json[0]["kind"] == "try");
  CHECK(json[0]["lever"].is_null());
  CHECK(json[1]["lever"] == "METRALE_NO_K64_N64=1");
  CHECK(json[1]["outcome"] == "null");
  CHECK(json[0]["annotations"] == nlohmann::json::object());
  CHECK(json[0]["pinned"] == nlohmann::json::array());
  auto table = render_audit_table(log.snapshot());
  CHECK(table.find("layers/x.cpp:7 f") != std::string::npos);
  CHECK(table.find("annotations") == std::string::npos);  // no row has any: no column

  row.annotations = {{"tier", "int8/w4a8", true}, {"tier_note", "w4a8: int8 activations (m/config.json)", false}};
  log.append(row);
  json = nlohmann::json::parse(render_audit_json(log.snapshot()));
  CHECK(json[2]["annotations"] ==
        nlohmann::json{{"tier", "int8/w4a8"}, {"tier_note", "w4a8: int8 activations (m/config.json)"}});
  CHECK(json[2]["pinned"] == nlohmann::json::array({"tier"}));
  table = render_audit_table(log.snapshot());
  CHECK(table.find("annotations") != std::string::npos);
  CHECK(table.find("tier=int8/w4a8; tier_note=w4a8: int8 activations (m/config.json)") != std::string::npos);
}
