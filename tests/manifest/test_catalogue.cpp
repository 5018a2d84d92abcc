// SPDX-License-Identifier: MIT OR Apache-2.0
// The kernel catalogue built into the runtime: it is manifests/catalogue.json, the in-tree
// manifests agree with it, and each way a manifest can depart from docs/kernels.md (a renamed
// module, a misspelt kernel, a dropped or retyped parameter, an ABI the runtime does not speak) is
// one finding at its JSON pointer, naming what is documented.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/catalogue.hpp>
#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace metrale;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json gemv_manifest() {
  auto params = nlohmann::json::array();
  for (const char* p : {"x", "qweight", "scales", "y"}) params.push_back({{"name", p}, {"type", "ptr"}});
  for (const char* p : {"m", "n", "k"}) params.push_back({{"name", p}, {"type", "u32"}});
  auto act = nlohmann::json::array({{{"name", "gate_up"}, {"type", "ptr"}}, {{"name", "out"}, {"type", "ptr"}},
                                    {{"name", "m"}, {"type", "u32"}}, {{"name", "i"}, {"type", "u32"}}});
  return {{"format_version", "1.0"}, {"backend", "t"}, {"library", "/nowhere/libt.so"}, {"abi_version", 1},
          {"priority", 1},
          {"modules", {{{"name", "w4a16"}, {"kernels", {{{"name", "w4a16_gemv"}, {"params", params}}}}},
                       {{"name", "act"}, {"kernels", {{{"name", "silu_mul"}, {"params", act}}}}},
                       {{"name", "own"}, {"kernels", {{{"name", "anything"}, {"params", nlohmann::json::array()}}}}}}}};
}

std::vector<CatalogueFinding> findings_of(const nlohmann::json& doc) {
  ManifestResult parsed = parse_manifest("/tmp/t.json", doc.dump());
  REQUIRE_MESSAGE(parsed.manifest, (parsed.problems.empty() ? "" : parsed.problems[0].to_string()));
  return KernelCatalogue::documented().check(*parsed.manifest);
}

}  // namespace

TEST_CASE("the built-in catalogue is manifests/catalogue.json") {
  const auto file = KernelCatalogue::parse(read(CATALOGUE_JSON), CATALOGUE_JSON);
  const auto& built_in = KernelCatalogue::documented();
  REQUIRE(file.kernels().size() == built_in.kernels().size());
  for (size_t i = 0; i < file.kernels().size(); ++i) {
    CHECK(file.kernels()[i].module == built_in.kernels()[i].module);
    CHECK(file.kernels()[i].name == built_in.kernels()[i].name);
    CHECK(format_params(file.kernels()[i].params) == format_params(built_in.kernels()[i].params));
  }
  const CatalogueKernel* gemv = built_in.find("w4a16", "w4a16_gemv");
  REQUIRE(gemv);
  CHECK(format_params(gemv->params) == "(x: ptr, qweight: ptr, scales: ptr, y: ptr, m: u32, n: u32, k: u32)");
  CHECK(built_in.documents_module("moe"));
  CHECK_FALSE(built_in.documents_module("skeleton"));
}

TEST_CASE("the in-tree manifests agree with the catalogue") {
  for (const char* file : {CPU_MANIFEST, CUDA_MANIFEST}) {
    CAPTURE(file);
    ManifestResult parsed = load_manifest(file);
    REQUIRE(parsed.manifest);
    for (const auto& p : contract_problems(*parsed.manifest, file)) FAIL_CHECK(p.to_string());
  }
}

TEST_CASE("a manifest that departs from docs/kernels.md: one finding each, at its pointer") {
  CHECK(findings_of(gemv_manifest()).empty());  // own modules hold anything

  auto misspelt = gemv_manifest();
  misspelt["modules"][0]["kernels"][0]["name"] = "w4a16_gemvv";
  auto f = findings_of(misspelt);
  REQUIRE(f.size() == 1);
  CHECK(f[0].pointer == "/modules/0/kernels/0/name");
  CHECK(f[0].message.find("did you mean w4a16_gemv?") != std::string::npos);

  auto renamed = gemv_manifest();
  renamed["modules"][1]["name"] = "acts";
  f = findings_of(renamed);
  REQUIRE(f.size() == 1);
  CHECK(f[0].pointer == "/modules/1/name");
  CHECK(f[0].message == "silu_mul is documented in module act, not in module acts (a documented kernel keeps its module)");

  auto dropped = gemv_manifest();
  dropped["modules"][0]["kernels"][0]["params"].erase(6);
  f = findings_of(dropped);
  REQUIRE(f.size() == 1);
  CHECK(f[0].pointer == "/modules/0/kernels/0/params");
  CHECK(f[0].message.find("parameter 7 (k: u32) is missing") != std::string::npos);

  auto retyped = gemv_manifest();
  retyped["modules"][1]["kernels"][0]["params"][3]["type"] = "i32";
  f = findings_of(retyped);
  REQUIRE(f.size() == 1);
  CHECK(f[0].module == "act");
  CHECK(f[0].kernel == "silu_mul");
  CHECK(f[0].message.find("parameter 4 is i: i32, documented i: u32") != std::string::npos);

  auto renamed_param = gemv_manifest();
  renamed_param["modules"][0]["kernels"][0]["params"][2]["name"] = "scale";
  f = findings_of(renamed_param);
  REQUIRE(f.size() == 1);
  CHECK(f[0].message.find("parameter 3 is scale: ptr, documented scales: ptr") != std::string::npos);
}

TEST_CASE("contract problems: an ABI this runtime does not speak, then the catalogue's findings") {
  auto doc = gemv_manifest();
  doc["abi_version"] = METRALE_ABI_VERSION + 1;
  doc["modules"][0]["kernels"][0]["name"] = "w4a16_gemv_b9";
  ManifestResult parsed = parse_manifest("/tmp/t.json", doc.dump());
  REQUIRE(parsed.manifest);
  auto problems = contract_problems(*parsed.manifest, "given.json");
  REQUIRE(problems.size() == 2);
  CHECK(problems[0].to_string().find("given.json: /abi_version: plugin ABI 2 is not one this runtime speaks (1..1)") == 0);
  CHECK(problems[1].pointer == "/modules/0/kernels/0/name");
}

TEST_CASE("a malformed catalogue is an error naming its source and key") {
  CHECK_THROWS_WITH_AS(KernelCatalogue::parse("[]", "c.json"), "c.json: not a JSON object", Error);
  CHECK_THROWS_WITH_AS(KernelCatalogue::parse(R"({"modules": [{"name": "m", "kernels": [{"name": "k"}]}]})", "c.json"),
                       doctest::Contains("/modules/0/kernels/0: expected key \"params\""), Error);
  CHECK_THROWS_WITH_AS(
      KernelCatalogue::parse(R"({"modules": [{"name": "m", "kernels": [{"name": "k", "params": [{"name": "a", "type": "f16"}]}]}]})",
                             "c.json"),
      doctest::Contains("/params/0/type: unknown parameter type \"f16\""), Error);
}
