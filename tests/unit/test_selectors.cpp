// SPDX-License-Identifier: MIT OR Apache-2.0
// Every branch of the section-7 selectors, against test backends shaped by their manifests.
#include <doctest/doctest.h>

#include <layers/linear/selectors.hpp>
#include <metrale/registry.hpp>

#include "test_support.hpp"

using namespace metrale;
using namespace metrale::testing;
namespace fs = std::filesystem;

namespace {

// A registry with one "fault" backend whose kernels are exactly `w4a16` (+ optional v2/v3 modules).
struct Shaped {
  TempDir dir;
  Registry registry;
  std::shared_ptr<Backend> backend;

  explicit Shaped(std::vector<std::string> w4a16, std::vector<std::string> v2 = {}, std::vector<std::string> v3 = {}) {
    std::map<std::string, nlohmann::json> modules{{"w4a16", w4a16_kernels(w4a16)}};
    if (!v2.empty()) modules["w4a16_v2"] = w4a16_kernels(v2);
    if (!v3.empty()) modules["w4a16_v3"] = w4a16_kernels(v3);
    registry = discover_manifest(dir, manifest_json("fault", fault_plugin("good"), 1, modules));
    backend = registry.find("fault");
    REQUIRE(backend);
  }
  std::vector<AuditRow> rows() const { return backend->audit().snapshot(); }
};

const std::vector<std::string> kAllGpu{"w4a16_gemm_t",     "w4a16_gemm_t_p3",     "w4a16_gemm_t_k64",
                                       "w4a16_gemm_t_k64_p3", "w4a16_gemm_t_k64_n64_p3"};
const std::vector<std::string> kCpuLike{"w4a16_gemm_t", "w4a16_gemm_t_k64"};

const std::initializer_list<std::pair<std::string, std::optional<std::string>>> kClean{
    {"METRALE_W4A16_K64_MIN_K", std::nullopt},    {"METRALE_NO_W4A16_K64", std::nullopt},
    {"METRALE_W4A16_VARIANT", std::nullopt},      {"METRALE_NO_TGEMM_PIPELINE3", std::nullopt},
    {"METRALE_NO_K64_PIPELINE3", std::nullopt},   {"METRALE_NO_K64_N64", std::nullopt}};

}  // namespace

TEST_CASE("w4a16_k64_min_k: explicit value, then the NO_W4A16_K64 flag, then 6144") {
  EnvGuard clean(kClean);
  CHECK(layers::w4a16_k64_min_k() == 6144);
  {
    EnvGuard env({{"METRALE_NO_W4A16_K64", "1"}});
    CHECK(layers::w4a16_k64_min_k() == 8192);
  }
  {
    EnvGuard env({{"METRALE_NO_W4A16_K64", "0"}});
    CHECK(layers::w4a16_k64_min_k() == 6144);
  }
  {
    EnvGuard env({{"METRALE_NO_W4A16_K64", "1"}, {"METRALE_W4A16_K64_MIN_K", "100"}});
    CHECK(layers::w4a16_k64_min_k() == 100);  // the explicit value wins over the flag
  }
  {
    EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "abc"}});
    CHECK_THROWS_AS(layers::w4a16_k64_min_k(), Refusal);
  }
  {
    EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "4294967296"}});  // one past u32
    CHECK_THROWS_AS(layers::w4a16_k64_min_k(), Refusal);
  }
  {
    EnvGuard env({{"METRALE_NO_W4A16_K64", "yes"}});
    CHECK_THROWS_AS(layers::w4a16_k64_min_k(), Refusal);
  }
}

TEST_CASE("w4a16_v2_kernel: null without lookup unless v2/v3; refusal when missing") {
  EnvGuard clean(kClean);
  Shaped with_v2(kCpuLike, {"w4a16_gemm_t_m128_v2"});
  Shaped without(kCpuLike);

  CHECK_FALSE(layers::w4a16_v2_kernel(*without.backend));
  {
    EnvGuard env({{"METRALE_W4A16_VARIANT", "v1"}});
    CHECK_FALSE(layers::w4a16_v2_kernel(*without.backend));
  }
  CHECK(without.rows().empty());  // no lookup, no row

  for (const char* variant : {"v2", "v3"}) {
    EnvGuard env({{"METRALE_W4A16_VARIANT", variant}});
    with_v2.backend->audit().clear();
    CHECK(layers::w4a16_v2_kernel(*with_v2.backend));
    auto rows = with_v2.rows();
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].kernel == "w4a16_gemm_t_m128_v2");
    CHECK(rows[0].outcome == LookupOutcome::resolved);
    CHECK(rows[0].lever == std::string("METRALE_W4A16_VARIANT=") + variant);

    try {
      layers::w4a16_v2_kernel(*without.backend);
      FAIL("expected a refusal");
    } catch (const Refusal& e) {
      std::string message = e.what();
      CHECK(message.find(std::string("METRALE_W4A16_VARIANT=") + variant) != std::string::npos);
      CHECK(message.find("w4a16_gemm_t_m128_v2") != std::string::npos);
      CHECK(message.find("backend fault") != std::string::npos);
    }
    CHECK(without.rows().back().outcome == LookupOutcome::refused);
  }
  {
    EnvGuard env({{"METRALE_W4A16_VARIANT", "v4"}});
    CHECK_THROWS_AS(layers::w4a16_v2_kernel(*with_v2.backend), Refusal);
  }
}

TEST_CASE("w4a16_v3_kernel: only v3 looks up; refusal when missing") {
  EnvGuard clean(kClean);
  Shaped with_v3(kCpuLike, {}, {"w4a16_gemm_t_m128_v3"});
  Shaped without(kCpuLike);
  {
    EnvGuard env({{"METRALE_W4A16_VARIANT", "v2"}});
    CHECK_FALSE(layers::w4a16_v3_kernel(*without.backend));
    CHECK(without.rows().empty());
  }
  EnvGuard env({{"METRALE_W4A16_VARIANT", "v3"}});
  CHECK(layers::w4a16_v3_kernel(*with_v3.backend));
  CHECK_THROWS_AS(layers::w4a16_v3_kernel(*without.backend), Refusal);
}

TEST_CASE("tgemm_kernel: p3 first, plain fallback, the lever skips p3 whatever its value") {
  EnvGuard clean(kClean);
  Shaped gpu(kAllGpu);
  Shaped cpu(kCpuLike);

  auto p3 = layers::tgemm_kernel(*gpu.backend);
  CHECK(gpu.backend->kernel_name(p3) == "w4a16/w4a16_gemm_t_p3");
  CHECK(gpu.rows().size() == 1);

  auto plain = layers::tgemm_kernel(*cpu.backend);
  CHECK(cpu.backend->kernel_name(plain) == "w4a16/w4a16_gemm_t");
  auto rows = cpu.rows();
  REQUIRE(rows.size() == 2);  // the visible fallback: p3 null, then plain resolved
  CHECK(rows[0].kernel == "w4a16_gemm_t_p3");
  CHECK(rows[0].outcome == LookupOutcome::null_handle);
  CHECK(rows[0].reason.find("not in manifest") != std::string::npos);
  CHECK(rows[1].outcome == LookupOutcome::resolved);

  for (const char* value : {"0", "1", ""}) {
    EnvGuard env({{"METRALE_NO_TGEMM_PIPELINE3", value}});
    gpu.backend->audit().clear();
    auto chosen = layers::tgemm_kernel(*gpu.backend);
    CHECK(gpu.backend->kernel_name(chosen) == "w4a16/w4a16_gemm_t");
    auto only = gpu.rows();
    REQUIRE(only.size() == 1);
    CHECK(only[0].lever == std::string("METRALE_NO_TGEMM_PIPELINE3=") + value);
  }

  Shaped none({"w4a16_gemv"});
  CHECK_FALSE(layers::tgemm_kernel(*none.backend));
}

TEST_CASE("tgemm_probe_ok excludes kimi_k3 and kimi_linear only") {
  CHECK_FALSE(layers::tgemm_probe_ok("kimi_k3"));
  CHECK_FALSE(layers::tgemm_probe_ok("kimi_linear"));
  CHECK(layers::tgemm_probe_ok("qwen3"));
  CHECK(layers::tgemm_probe_ok(""));
}

TEST_CASE("k64_kernel: p3 first, then the plain kernel is required") {
  EnvGuard clean(kClean);
  Shaped gpu(kAllGpu);
  Shaped cpu(kCpuLike);
  CHECK(gpu.backend->kernel_name(layers::k64_kernel(*gpu.backend)) == "w4a16/w4a16_gemm_t_k64_p3");
  CHECK(cpu.backend->kernel_name(layers::k64_kernel(*cpu.backend)) == "w4a16/w4a16_gemm_t_k64");
  REQUIRE(cpu.rows().size() == 2);
  CHECK(cpu.rows()[1].kind == LookupKind::require);
  {
    EnvGuard env({{"METRALE_NO_K64_PIPELINE3", "0"}});
    gpu.backend->audit().clear();
    CHECK(gpu.backend->kernel_name(layers::k64_kernel(*gpu.backend)) == "w4a16/w4a16_gemm_t_k64");
    CHECK(gpu.rows().size() == 1);
  }
  Shaped missing({"w4a16_gemm_t"});
  CHECK_THROWS_AS(layers::k64_kernel(*missing.backend), Error);
  CHECK(missing.rows().back().outcome == LookupOutcome::error);
}

TEST_CASE("k64_n64_kernel: null without lookup when the lever is set, else a try") {
  EnvGuard clean(kClean);
  Shaped gpu(kAllGpu);
  Shaped cpu(kCpuLike);
  CHECK(layers::k64_n64_kernel(*gpu.backend));
  CHECK_FALSE(layers::k64_n64_kernel(*cpu.backend));
  CHECK(cpu.rows().size() == 1);
  EnvGuard env({{"METRALE_NO_K64_N64", "0"}});
  gpu.backend->audit().clear();
  CHECK_FALSE(layers::k64_n64_kernel(*gpu.backend));
  CHECK(gpu.rows().empty());
}

TEST_CASE("k64_n64_wins: ceil(n/128) * ceil(m/64) <= 64") {
  CHECK(layers::k64_n64_wins(1, 1));
  CHECK(layers::k64_n64_wins(512, 1024));      // 8 * 8 = 64
  CHECK_FALSE(layers::k64_n64_wins(513, 1024));  // 8 * 9 = 72
  CHECK_FALSE(layers::k64_n64_wins(512, 1025));  // 9 * 8 = 72
  CHECK(layers::k64_n64_wins(64, 8192));       // 64 * 1
  CHECK_FALSE(layers::k64_n64_wins(65, 8192));  // 64 * 2
  CHECK_FALSE(layers::k64_n64_wins(UINT32_MAX, UINT32_MAX));  // no overflow into a small product
}

TEST_CASE("choose_tile_gemm: K threshold, then the N64 twin when it wins") {
  EnvGuard clean(kClean);
  layers::TileGemmKernels k{{1}, {2}, {3}};
  CHECK(layers::choose_tile_gemm(k, 64, 1024, 6143).value == 1);
  CHECK(layers::choose_tile_gemm(k, 64, 1024, 6144).value == 3);
  CHECK(layers::choose_tile_gemm(k, 4096, 8192, 8192).value == 2);
  k.k64_n64 = {};
  CHECK(layers::choose_tile_gemm(k, 64, 1024, 6144).value == 2);
  EnvGuard env({{"METRALE_W4A16_K64_MIN_K", "128"}});
  CHECK(layers::choose_tile_gemm(k, 64, 1024, 128).value == 2);
}

TEST_CASE("the audit row's site is the selector's caller") {
  EnvGuard clean(kClean);
  Shaped cpu(kCpuLike);
  uint32_t line = __LINE__ + 1;
  layers::tgemm_kernel(*cpu.backend);
  auto rows = cpu.rows();
  REQUIRE_FALSE(rows.empty());
  CHECK(rows[0].site.line == line);
  CHECK(rows[0].site.file.find("test_selectors.cpp") != std::string::npos);
}

TEST_CASE("selectors carry the caller's notes: its lever after their own, its annotations, on every row") {
  EnvGuard clean(kClean);
  Shaped cpu(kCpuLike);
  const layers::LookupNotes notes{"METRALE_SITE=1", {{"tier", "bf16/w4a16", true}, {"tier_note", "why", false}}};
  const auto site = std::source_location::current();
  layers::tgemm_kernel(*cpu.backend, site, notes);
  {
    EnvGuard env({{"METRALE_NO_K64_PIPELINE3", "1"}});
    layers::k64_kernel(*cpu.backend, site, notes);
  }
  const auto rows = cpu.rows();
  REQUIRE(rows.size() == 3);  // tgemm p3 (null), tgemm, k64 (the lever skips p3)
  for (const auto& row : rows) {
    CAPTURE(row.kernel);
    // The k64 site adds its own pinned threshold after the caller's annotations.
    auto want = notes.annotations;
    if (row.kernel.starts_with("w4a16_gemm_t_k64")) want.push_back({"w4a16_k64_min_k", "6144", true});
    CHECK(row.annotations == want);
  }
  CHECK(rows[0].lever == "METRALE_SITE=1");
  CHECK(rows[2].lever == "METRALE_NO_K64_PIPELINE3=1, METRALE_SITE=1");
  // Without notes, nothing is added.
  cpu.backend->audit().clear();
  layers::tgemm_kernel(*cpu.backend);
  for (const auto& row : cpu.rows()) {
    CHECK(row.annotations.empty());
    CHECK(row.lever.empty());
  }
}
