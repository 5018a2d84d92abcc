// SPDX-License-Identifier: MIT OR Apache-2.0
// Certification means it: manifest/plugin disagreements and departures from docs/kernels.md are
// named failures; a layer path the manifest claims but that cannot be built, or that the layers
// had to fall back from, fails; only what the manifest does not list for the device is skipped
// (a listed kernel whose signature differs fails its cases); the coverage says what serves, what
// falls back and to what, and what cannot run; the verdict follows. Backends are the fault test
// plugin shaped by manifests written here, and the real CPU backend.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "conformance/certify.hpp"

#include <layers/core/levers.hpp>
#include <metrale/registry.hpp>

#include "test_support.hpp"

#include <fstream>
#include <map>

using namespace metrale;
using namespace metrale::conformance;
namespace fs = std::filesystem;

namespace {

nlohmann::json act_kernel(const std::string& name) {
  return {{"name", name},
          {"params", {{{"name", "gate_up"}, {"type", "ptr"}}, {{"name", "out"}, {"type", "ptr"}},
                      {{"name", "m"}, {"type", "u32"}}, {{"name", "i"}, {"type", "u32"}}}}};
}

nlohmann::json repack_kernel(const std::string& layout) {
  auto params = nlohmann::json::array();
  for (const char* p : {"qweight_in", "scales_in", "qweight_out", "scales_out"}) params.push_back({{"name", p}, {"type", "ptr"}});
  for (const char* p : {"n", "k", "count"}) params.push_back({{"name", p}, {"type", "u32"}});
  return {{"name", "w4a16_repack"}, {"params", params}, {"weight_layout", layout}};
}

struct Loaded {
  Registry registry;
  std::shared_ptr<Backend> backend;
};

Loaded load(const testing::TempDir& dir, const std::string& variant, const std::map<std::string, nlohmann::json>& modules,
            const std::string& target = "test-target") {
  auto json = testing::manifest_json("fault", testing::fault_plugin(variant), 1, modules);
  json["targets"] = {target};
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{testing::write_file(dir / (variant + target + ".json"), json.dump())};
  Loaded l{Registry::discover(options), nullptr};
  l.backend = l.registry.find("fault");
  REQUIRE(l.backend);
  return l;
}

const CoverageRow& row(const std::vector<CoverageRow>& rows, const std::string& path) {
  for (const auto& r : rows)
    if (r.path == path) return r;
  FAIL("no coverage row " << path);
  return rows.front();
}

const CaseResult* result(const std::vector<CaseResult>& results, const std::string& name) {
  for (const auto& r : results)
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("the CPU backend is consistent and serves every path") {
  layers::register_levers();
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{CPU_MANIFEST};
  auto registry = Registry::discover(options);
  auto cpu = registry.find("cpu");
  REQUIRE(cpu);
  for (const auto& r : manifest_checks(*cpu)) FAIL_CHECK(r.name << ": " << r.detail);
  const auto rows = coverage(*cpu);
  CHECK(rows.size() == 24);
  for (const auto& r : rows) CHECK_MESSAGE(r.status == PathStatus::serves, r.path << ": " << path_status_name(r.status) << " " << r.detail);
  CHECK(row(rows, "dense/decode").kernels.front() == "w4a16/w4a16_gemv");
  CHECK(row(rows, "moe/device_routing").kernels.front() == "moe/moe_align");
  CHECK(row(rows, "quant/act_order").kernels.front() == "quant/gather_k");
  CHECK(row(rows, "quant/bf16").kernels.front() == "bf16/bf16_gemv");
  CHECK(row(rows, "quant/f16").kernels.front() == "f16/f16_gemv");
  CHECK(row(rows, "decoder/qk_norm_rope").kernels.front() == "rope/qk_norm_rope");
  CHECK(row(rows, "decoder/bias").kernels.front() == "norm/bias_add");
  CHECK(row(rows, "engine/greedy").kernels.front() == "sample/argmax");
}

TEST_CASE("a backend that claims the decoder's kernels but cannot run them fails the decoder paths") {
  testing::TempDir dir;
  // The CPU manifest's own entries of the decoder's modules, on the fault plugin that provides
  // every listed kernel but each module's last: attn lists attn_prefill last.
  std::ifstream in(CPU_MANIFEST);
  const nlohmann::json cpu = nlohmann::json::parse(in);
  std::map<std::string, nlohmann::json> modules;
  for (const auto& m : cpu["modules"]) {
    const std::string name = m["name"];
    if (name == "attn" || name == "rope" || name == "norm" || name == "bf16" || name == "embed") modules[name] = m["kernels"];
  }
  REQUIRE(modules.size() == 5);
  REQUIRE(modules["attn"].back()["name"] == "attn_prefill");
  auto missing = load(dir, "listed_not_provided", modules);
  const auto rows = coverage(*missing.backend);
  const CoverageRow& attention = row(rows, "decoder/attention");
  CHECK(attention.status == PathStatus::fails);
  CHECK(attention.detail.find("attn/attn_prefill") != std::string::npos);
  CHECK(result(path_failures(rows), "path/decoder/attention"));
  // The skeleton-like case: nothing of the decoder listed, nothing claimed, no failure.
  auto plain = load(dir, "good", {{"act", nlohmann::json::array({act_kernel("silu_mul")})}});
  for (const char* path : {"decoder/attention", "decoder/layer"}) {
    CHECK(row(coverage(*plain.backend), path).status == PathStatus::cannot_run);
  }
}

TEST_CASE("manifest and plugin disagreeing: one named failure per kernel") {
  testing::TempDir dir;
  const auto modules = std::map<std::string, nlohmann::json>{
      {"w4a16", testing::w4a16_kernels({"w4a16_gemm_t_k64", "w4a16_gemv"})},
      {"act", nlohmann::json::array({act_kernel("silu_mul"), act_kernel("gelu_mul")})}};
  auto missing = load(dir, "listed_not_provided", modules);  // drops each module's last kernel
  auto checks = manifest_checks(*missing.backend);
  const CaseResult* gemv = result(checks, "manifest/agreement/w4a16/w4a16_gemv");
  REQUIRE(gemv);
  CHECK(gemv->outcome == Outcome::failed);
  CHECK(gemv->detail.find("listed in the manifest but the plugin does not provide it") != std::string::npos);
  CHECK(result(checks, "manifest/agreement/act/gelu_mul"));
  CHECK(checks.size() == 2);
  // The dense decode path is claimed (its kernels are listed) yet falls back: a failure.
  const auto rows = coverage(*missing.backend);
  CHECK(row(rows, "dense/decode").status == PathStatus::fails);
  CHECK(row(rows, "dense/decode").detail.find("the manifest lists w4a16/w4a16_gemv, but the layers fell back") != std::string::npos);
  CHECK(result(path_failures(rows), "path/dense/decode"));

  auto extra = load(dir, "extra_kernel", modules);
  checks = manifest_checks(*extra.backend);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].name == "manifest/agreement/extra/unlisted_kernel");
  CHECK(checks[0].detail.find("provided by the plugin but not listed") != std::string::npos);
}

TEST_CASE("a documented kernel listed with another parameter list: a catalogue failure, and its cases fail") {
  testing::TempDir dir;
  auto gemv = testing::w4a16_kernel("w4a16_gemv");
  gemv["params"][6]["type"] = "i32";  // k: i32 — the fault plugin provides what the manifest lists
  auto l = load(dir, "good", {{"w4a16", nlohmann::json::array({gemv})}});
  const auto checks = manifest_checks(*l.backend);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].name == "manifest/catalogue/w4a16/w4a16_gemv");
  CHECK(checks[0].detail.find("parameter 7 is k: i32, documented k: u32") != std::string::npos);
  // A listed kernel the cases cannot use: FAIL, not SKIP.
  for (const auto& c : cases()) {
    if (c.kind != CaseKind::kernel || c.kernel != "w4a16_gemv") continue;
    const CaseResult r = run_case(*l.backend, c);
    CHECK_MESSAGE(r.outcome == Outcome::failed, r.name << ": " << r.detail);
    CHECK(r.detail.find("listed in the manifest but not usable: signature differs") != std::string::npos);
  }
}

TEST_CASE("a kernel gated by the device's target is skipped, as one not listed") {
  testing::TempDir dir;
  auto gemv = testing::w4a16_kernel("w4a16_gemv");
  gemv["min_target"] = "sm_90";
  auto l = load(dir, "good", {{"w4a16", nlohmann::json::array({gemv})}}, "sm_80");
  for (const auto& c : cases()) {
    if (c.kind != CaseKind::kernel || c.kernel != "w4a16_gemv") continue;
    const CaseResult r = run_case(*l.backend, c);
    CHECK(r.outcome == Outcome::skipped);
    CHECK(r.detail.find("requires target sm_90") != std::string::npos);
  }
  CHECK(manifest_checks(*l.backend).empty());
}

TEST_CASE("a claimed path that cannot be built fails; paths fall back visibly; the rest cannot run") {
  testing::TempDir dir;
  // The deep-K GEMM reads layout "a", the repack writes "b": the layers refuse to build.
  auto k64 = testing::w4a16_kernel("w4a16_gemm_t_k64");
  k64["weight_layout"] = "a";
  auto broken = load(dir, "good", {{"w4a16", nlohmann::json::array({k64, repack_kernel("b")})},
                                   {"act", nlohmann::json::array({act_kernel("silu_mul")})}});
  auto rows = coverage(*broken.backend);
  const CoverageRow& prefill = row(rows, "dense/prefill");
  CHECK(prefill.status == PathStatus::fails);
  CHECK(prefill.detail.find("cannot be built") != std::string::npos);
  CHECK(prefill.detail.find("layout") != std::string::npos);
  CHECK(result(path_failures(rows), "path/dense/prefill"));

  auto plain = load(dir, "good", {{"w4a16", testing::w4a16_kernels({"w4a16_gemm_t_k64", "w4a16_gemv"})},
                                  {"act", nlohmann::json::array({act_kernel("gelu_mul")})}});
  rows = coverage(*plain.backend);
  CHECK(row(rows, "dense/decode").status == PathStatus::serves);
  const CoverageRow& batched = row(rows, "dense/batched");
  CHECK(batched.status == PathStatus::falls_back);
  CHECK(batched.kernels.front() == "w4a16/w4a16_gemm_t_k64");
  CHECK(batched.detail == "the manifest does not list w4a16/w4a16_gemv_b8");
  CHECK(row(rows, "act/silu").status == PathStatus::cannot_run);
  CHECK(row(rows, "act/gelu").status == PathStatus::serves);
  CHECK(row(rows, "moe/grouped").status == PathStatus::cannot_run);
  CHECK(row(rows, "quant/w4a8").detail == "the manifest does not list w4a8/w4a8_gemm");
  // Without sample/argmax the engine chooses greedy tokens on the host: a visible fallback.
  const CoverageRow& greedy = row(rows, "engine/greedy");
  CHECK(greedy.status == PathStatus::falls_back);
  CHECK(greedy.kernels.front() == "argmax on the host");
  CHECK(greedy.detail == "the manifest does not list sample/argmax");
  CHECK(path_failures(rows).empty());
}

TEST_CASE("the verdict: failures, nothing run, nothing claimed") {
  testing::TempDir dir;
  auto own = load(dir, "good", {{"mine", nlohmann::json::array({{{"name", "k"}, {"params", nlohmann::json::array()}}})}});
  std::vector<CaseResult> results;
  for (const auto& c : cases()) results.push_back(run_case(*own.backend, c));
  const Verdict nothing_claimed = verdict(*own.backend, results);
  CHECK(nothing_claimed.certified);
  CHECK(nothing_claimed.text.find("lists no kernel of docs/kernels.md") != std::string::npos);

  auto gemv = load(dir, "good", {{"w4a16", testing::w4a16_kernels({"w4a16_gemv"})}});
  results.clear();
  for (const auto& c : cases())
    if (c.kind == CaseKind::dense) results.push_back(run_case(*gemv.backend, c));
  const Verdict none_ran = verdict(*gemv.backend, results);
  CHECK_FALSE(none_ran.certified);
  CHECK(none_ran.text.find("ran no conformance case") != std::string::npos);
  results.push_back(CaseResult{"manifest/agreement/x/y", Outcome::failed, "", {}, std::nullopt});
  CHECK(verdict(*gemv.backend, results).text == "backend 'fault' FAILED 1 conformance case(s)");
}
