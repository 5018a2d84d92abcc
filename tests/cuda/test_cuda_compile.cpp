// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale_cuda_compile (cuda_compile.h), the entry point behind `metrale compile`: every module
// compiles with NVRTC for sm_80, sm_89 (the FP8 kernels) and sm_90 without a driver, every
// manifest kernel is in the CUBIN with its parameter list, and the report carries time, size,
// registers and cache hits.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "cuda_test_support.hpp"

#include "test_support.hpp"

#include <memory>

using namespace metrale::cuda_test;
using metrale::testing::TempDir;

namespace {

struct Progress {
  std::vector<std::string> events;
  static void callback(void* user, const metrale_cuda_module_report* report, int32_t finished) {
    static_cast<Progress*>(user)->events.push_back(std::string(finished ? "end " : "start ") + report->module);
  }
};

struct Compile {
  metrale_status status = METRALE_STATUS_INTERNAL;
  std::string error;
  std::unique_ptr<metrale_cuda_compile_result, metrale_cuda_compile_free_fn> result{nullptr, Plugin::get().compile_free};
  Progress progress;
  LogCapture log;

  Compile(const char* target, std::vector<const char*> modules = {}, const char* cache = nullptr) {
    const std::string manifest = read_text(METRALE_TEST_CUDA_MANIFEST);
    const char* dirs[] = {METRALE_TEST_KERNEL_SRC};
    metrale_cuda_compile_request request{};
    request.struct_size = sizeof(request);
    request.target = target;
    request.manifest_json = manifest.c_str();
    request.manifest_path = METRALE_TEST_CUDA_MANIFEST;
    request.kernel_source_dirs = dirs;
    request.kernel_source_dir_count = 1;
    request.cache_dir = cache;
    request.modules = modules.empty() ? nullptr : modules.data();
    request.module_count = static_cast<uint32_t>(modules.size());
    request.user = this;
    request.log = [](void* user, metrale_log_level level, const char* message) {
      LogCapture::callback(&static_cast<Compile*>(user)->log, level, message);
    };
    request.progress = [](void* user, const metrale_cuda_module_report* report, int32_t finished) {
      Progress::callback(&static_cast<Compile*>(user)->progress, report, finished);
    };
    char buffer[4096] = {};
    metrale_cuda_compile_result* raw = nullptr;
    status = Plugin::get().compile(&request, &raw, buffer, sizeof(buffer));
    result.reset(raw);
    error = buffer;
  }
  const metrale_cuda_module_report* module(const std::string& name) const {
    for (uint32_t i = 0; i < result->module_count; ++i) {
      if (result->modules[i].module == name) return &result->modules[i];
    }
    return nullptr;
  }
};

}  // namespace

namespace {

// The FP8-activation kernels (min_target sm_89): in modules that compile, but gated on sm_80.
bool gated_on(const std::string& kernel, const std::string& target) {
  const bool fp8 = kernel.starts_with("fp8_gemm_a8") || kernel.starts_with("fp8_grouped_gemm_a8") ||
                   kernel.starts_with("quantize_fp8");
  return fp8 && target == "sm_80";
}

}  // namespace

TEST_CASE("every module compiles for sm_80 and sm_90; w4a16_v3, w4afp8 and the FP8-activation kernels are gated on sm_80") {
  for (const char* target : {"sm_80", "sm_90"}) {
    CAPTURE(target);
    Compile compile(target);
    REQUIRE_MESSAGE(compile.status == METRALE_STATUS_OK, compile.error);
    CHECK(std::string(compile.result->target) == target);
    CHECK(std::string(compile.result->cache_dir).empty());
    REQUIRE(compile.result->module_count == 20);
    size_t kernels = 0;
    size_t gated = 0;
    for (uint32_t i = 0; i < compile.result->module_count; ++i) {
      const auto& m = compile.result->modules[i];
      CAPTURE(m.module);
      INFO(m.message);
      if (std::string(m.module) == "w4a16_v3" && std::string(target) == "sm_80") {
        CHECK(m.outcome == METRALE_CUDA_MODULE_GATED);
        CHECK(std::string(m.message).find("w4a16_gemm_t_m128_v3: sm_90") != std::string::npos);
        continue;
      }
      if (std::string(m.module) == "w4afp8" && std::string(target) == "sm_80") {
        CHECK(m.outcome == METRALE_CUDA_MODULE_GATED);
        CHECK(std::string(m.message).find("w4afp8_gemm: sm_89") != std::string::npos);
        continue;
      }
      CHECK(m.outcome == METRALE_CUDA_MODULE_COMPILED);
      CHECK(m.status == METRALE_STATUS_OK);
      CHECK(m.is_cubin == 1);
      CHECK(m.image_bytes > 1000);
      CHECK(m.seconds > 0);
      CHECK(std::string(m.source_path).ends_with(".cu"));
      for (uint32_t j = 0; j < m.kernel_count; ++j) {
        const auto& k = m.kernels[j];
        CAPTURE(k.name);
        ++kernels;
        if (gated_on(k.name, target)) {  // in a compiled module, but not offered on this target
          CHECK(std::string(k.problem) == "gated: requires sm_89");
          ++gated;
          continue;
        }
        CHECK(std::string(k.problem).empty());  // present in the CUBIN with the manifest's parameters
        CHECK(k.registers > 0);
        CHECK(k.registers <= 255);
        CHECK(k.spill_store_bytes >= 0);
        if (k.spill_store_bytes > 0 || k.spill_load_bytes > 0) {
          WARN_MESSAGE(false, k.name << " spills " << k.spill_store_bytes << "/" << k.spill_load_bytes << " bytes on " << target);
        }
      }
    }
    CHECK(kernels == (std::string(target) == "sm_80" ? 69u : 72u));
    CHECK(gated == (std::string(target) == "sm_80" ? 9u : 0u));
    CHECK(compile.progress.events.size() == 40);
    CHECK(compile.progress.events.front() == "start w4a16");
    CHECK(compile.progress.events.back() == "end deltanet");
  }
}

TEST_CASE("sm_89, the first target with E4M3 tensor cores, offers the FP8-activation kernels") {
  Compile compile("sm_89", {"fp8", "quant"});
  REQUIRE_MESSAGE(compile.status == METRALE_STATUS_OK, compile.error);
  REQUIRE(compile.result->module_count == 2);
  for (uint32_t i = 0; i < compile.result->module_count; ++i) {
    const auto& m = compile.result->modules[i];
    CAPTURE(m.module);
    CHECK(m.outcome == METRALE_CUDA_MODULE_COMPILED);
    for (uint32_t j = 0; j < m.kernel_count; ++j) {
      CAPTURE(m.kernels[j].name);
      CHECK(std::string(m.kernels[j].problem).empty());
      CHECK(m.kernels[j].registers > 0);
    }
  }
}

TEST_CASE("with a cache the second compile is a hit, and says so") {
  TempDir cache;
  const std::string dir = cache.path().string();
  Compile first("sm_86", {"moe"}, dir.c_str());
  REQUIRE_MESSAGE(first.status == METRALE_STATUS_OK, first.error);
  REQUIRE(first.result->module_count == 1);
  CHECK(first.result->modules[0].outcome == METRALE_CUDA_MODULE_COMPILED);
  CHECK(std::string(first.result->cache_dir) == (cache.path() / "cuda").string());
  Compile second("sm_86", {"moe"}, dir.c_str());
  REQUIRE(second.status == METRALE_STATUS_OK);
  const auto& hit = second.result->modules[0];
  CHECK(hit.outcome == METRALE_CUDA_MODULE_CACHED);
  CHECK(hit.image_bytes == first.result->modules[0].image_bytes);
  CHECK(hit.kernels[3].registers == first.result->modules[0].kernels[3].registers);  // from the cached log
}

TEST_CASE("requests that cannot run are refused with the reason") {
  Compile bad_target("sm_8x");
  CHECK(bad_target.status == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(bad_target.error.find("is not a CUDA target") != std::string::npos);
  Compile old_target("sm_50");
  CHECK(old_target.status == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(old_target.error.find("cannot compile for sm_50") != std::string::npos);
  Compile bad_module("sm_80", {"act", "nope"});
  CHECK(bad_module.status == METRALE_STATUS_NOT_FOUND);
  CHECK(bad_module.error.find("no module 'nope'") != std::string::npos);
  CHECK(bad_module.result == nullptr);
}

TEST_CASE("a module that fails to compile is reported; the others still compile") {
  TempDir override_dir;
  metrale::testing::write_file(override_dir / "act.cu", "#include \"metrale_common.cuh\"\nthis is not C++;\n");
  const std::string manifest = read_text(METRALE_TEST_CUDA_MANIFEST);
  const std::string override_path = override_dir.path().string();
  const char* dirs[] = {override_path.c_str(), METRALE_TEST_KERNEL_SRC};
  const char* modules[] = {"act", "moe"};
  metrale_cuda_compile_request request{};
  request.struct_size = sizeof(request);
  request.target = "sm_80";
  request.manifest_json = manifest.c_str();
  request.kernel_source_dirs = dirs;
  request.kernel_source_dir_count = 2;
  request.modules = modules;
  request.module_count = 2;
  metrale_cuda_compile_result* raw = nullptr;
  char error[512] = {};
  REQUIRE(Plugin::get().compile(&request, &raw, error, sizeof(error)) == METRALE_STATUS_OK);
  std::unique_ptr<metrale_cuda_compile_result, metrale_cuda_compile_free_fn> result(raw, Plugin::get().compile_free);
  REQUIRE(result->module_count == 2);
  CHECK(result->modules[0].outcome == METRALE_CUDA_MODULE_FAILED);
  CHECK(result->modules[0].status == METRALE_STATUS_INTERNAL);
  CHECK(std::string(result->modules[0].message).find(override_path + "/act.cu(2): error") != std::string::npos);
  CHECK(result->modules[1].outcome == METRALE_CUDA_MODULE_COMPILED);
}
