// SPDX-License-Identifier: MIT OR Apache-2.0
// The CUDA plugin's JIT side against the fake driver, with real NVRTC: lazy module loads of real
// CUBINs, gating by target, kernels checked against the manifest, launch argument marshalling,
// the compile cache (hits, corruption) and kernel source overrides.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "cuda_test_support.hpp"

#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include <thread>

using namespace metrale::cuda_test;
using metrale::testing::TempDir;
using metrale::testing::write_file;

namespace {

// One cache for the cases that do not test the cache itself: each module compiles once here.
const std::string& shared_cache() {
  static TempDir dir;
  static const std::string path = dir.path().string();
  return path;
}

struct Fake {
  TempDir dir;
  fs::path log = dir / "driver.log";
  Env env;
  explicit Fake(const char* cc)
      : env{{"FAKECUDA_DEVICES", "1"}, {"FAKECUDA_CC", cc}, {"FAKECUDA_FAIL", std::nullopt},
            {"FAKECUDA_LOG", log.string()}, {"FAKECUDA_MEMORY", std::nullopt}} {}
  std::vector<Record> records(const std::string& kind) const {
    std::vector<Record> out;
    if (!fs::exists(log)) return out;
    for (auto& r : read_records(log)) {
      if (r.kind == kind) out.push_back(std::move(r));
    }
    return out;
  }
};

CreateOptions cached() {
  CreateOptions options;
  options.cache_dir = shared_cache();
  return options;
}

std::string hex(uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

size_t cache_entries(const fs::path& cache) {
  size_t n = 0;
  if (!fs::exists(cache / "cuda")) return 0;
  for (const auto& e : fs::directory_iterator(cache / "cuda")) n += e.path().extension() == ".mcache";
  return n;
}

}  // namespace

TEST_CASE("modules compile lazily, on the first lookup in them, and load a real CUBIN") {
  Fake fake("8.0");
  Instance instance(cached());
  REQUIRE_MESSAGE(instance.status == METRALE_STATUS_OK, instance.create_error);
  CHECK(fake.records("module_load").empty());  // nothing compiled at start-up

  uint64_t silu = 0;
  REQUIRE_MESSAGE(instance.kernel("act", "silu_mul", silu) == METRALE_STATUS_OK, instance.last_error());
  CHECK(silu != 0);
  auto loads = fake.records("module_load");
  REQUIRE(loads.size() == 1);
  CHECK(loads[0].name == "cubin");
  CHECK(loads[0].fields["sm"] == "80");
  CHECK(std::stoul(loads[0].fields["bytes"]) > 1000);
  CHECK(loads[0].fields["kernels"].find("silu_mul") != std::string::npos);
  CHECK(loads[0].fields["kernels"].find("gelu_mul") != std::string::npos);

  uint64_t gelu = 0;
  REQUIRE(instance.kernel("act", "gelu_mul", gelu) == METRALE_STATUS_OK);
  CHECK(gelu != silu);
  uint64_t again = 0;
  REQUIRE(instance.kernel("act", "silu_mul", again) == METRALE_STATUS_OK);
  CHECK(again == silu);
  CHECK(fake.records("module_load").size() == 1);  // same module: loaded once
  CHECK(fake.records("function").size() == 2);
}

TEST_CASE("the CUBIN is built for the device's own architecture") {
  Fake fake("9.0");
  Instance instance(cached());
  REQUIRE(instance.status == METRALE_STATUS_OK);
  uint64_t h = 0;
  REQUIRE_MESSAGE(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK, instance.last_error());
  const auto loads = fake.records("module_load");
  REQUIRE(loads.size() == 1);
  CHECK(loads.front().fields.at("sm") == "90");
}

TEST_CASE("a kernel requiring sm_90 is refused on sm_80 and provided on sm_90") {
  SUBCASE("sm_80: incompatible, with the reason, and nothing compiled") {
    Fake fake("8.0");
    Instance instance(cached());
    REQUIRE(instance.status == METRALE_STATUS_OK);
    uint64_t h = 0;
    CHECK(instance.kernel("w4a16_v3", "w4a16_gemm_t_m128_v3", h) == METRALE_STATUS_INCOMPATIBLE);
    CHECK(h == 0);
    CHECK(instance.last_error().find("requires sm_90; this device is sm_80") != std::string::npos);
    CHECK(fake.records("module_load").empty());
    // The sm_80 tier of the same family is there.
    CHECK(instance.kernel("w4a16_v2", "w4a16_gemm_t_m128_v2", h) == METRALE_STATUS_OK);
  }
  SUBCASE("sm_90: compiled for sm_90a and provided") {
    Fake fake("9.0");
    Instance instance(cached());
    REQUIRE(instance.status == METRALE_STATUS_OK);
    uint64_t h = 0;
    REQUIRE_MESSAGE(instance.kernel("w4a16_v3", "w4a16_gemm_t_m128_v3", h) == METRALE_STATUS_OK, instance.last_error());
    CHECK(h != 0);
    const auto loads = fake.records("module_load");
    REQUIRE(loads.size() == 1);
    CHECK(loads[0].fields.at("kernels") == "w4a16_gemm_t_m128_v3");
  }
}

TEST_CASE("within one module, the FP8 kernels are gated below sm_89 while the others load") {
  Fake fake("8.0");
  Instance instance(cached());
  REQUIRE(instance.status == METRALE_STATUS_OK);
  uint64_t h = 0;
  REQUIRE_MESSAGE(instance.kernel("quant", "quantize_int8", h) == METRALE_STATUS_OK, instance.last_error());
  CHECK(h != 0);
  uint64_t gated = 0;
  CHECK(instance.kernel("quant", "quantize_fp8", gated) == METRALE_STATUS_INCOMPATIBLE);
  CHECK(gated == 0);
  CHECK(instance.last_error().find("kernel quant/quantize_fp8 requires sm_89; this device is sm_80") != std::string::npos);
  CHECK(instance.kernel("fp8", "fp8_gemm_a8", gated) == METRALE_STATUS_INCOMPATIBLE);
  CHECK(instance.last_error().find("requires sm_89") != std::string::npos);
  const auto loads = fake.records("module_load");
  REQUIRE(loads.size() == 1);  // quant only: nothing is compiled for a gated kernel
  CHECK(loads[0].fields.at("kernels").find("quantize_int8") != std::string::npos);
}

TEST_CASE("unknown modules and kernels are not found, listing what exists") {
  Fake fake("8.0");
  Instance instance(cached());
  REQUIRE(instance.status == METRALE_STATUS_OK);
  uint64_t h = 0;
  CHECK(instance.kernel("nope", "x", h) == METRALE_STATUS_NOT_FOUND);
  CHECK(instance.last_error().find("modules: w4a16, w4a16_v2, w4a16_v3, act, moe, w4a16_zp, w8a16, fp8, quant, w4a8, "
                                   "w8a8, w4afp8, bf16, f16, attn, norm, rope, embed, sample, deltanet") != std::string::npos);
  CHECK(instance.kernel("act", "relu_mul", h) == METRALE_STATUS_NOT_FOUND);
  CHECK(instance.last_error().find("kernels: silu_mul, gelu_mul") != std::string::npos);
}

TEST_CASE("a manifest that promises more than the source has is caught against the CUBIN") {
  Fake fake("8.0");
  auto manifest = nlohmann::json::parse(read_text(METRALE_TEST_CUDA_MANIFEST));
  for (auto& module : manifest["modules"]) {
    if (module["name"] != "act") continue;
    auto extra = module["kernels"][0];
    extra["name"] = "swiglu_mul";
    module["kernels"].push_back(extra);
    module["kernels"][1]["params"].erase(3);  // gelu_mul loses its last parameter
  }
  CreateOptions options = cached();
  options.manifest_json = manifest.dump();
  Instance instance(options);
  REQUIRE(instance.status == METRALE_STATUS_OK);
  uint64_t h = 0;
  CHECK(instance.kernel("act", "swiglu_mul", h) == METRALE_STATUS_NOT_FOUND);
  CHECK(instance.last_error().find("has no kernel swiglu_mul (it has: ") != std::string::npos);
  CHECK(instance.kernel("act", "gelu_mul", h) == METRALE_STATUS_INCOMPATIBLE);
  CHECK(instance.last_error().find("gelu_mul takes 4 parameters") != std::string::npos);
  CHECK(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK);
}

TEST_CASE("launches hand the runtime's argument array to cuLaunchKernel unchanged") {
  Fake fake("8.0");
  Instance instance(cached());
  REQUIRE(instance.status == METRALE_STATUS_OK);
  const auto& t = instance.t();
  uint64_t x = 0, q = 0, s = 0, y = 0;
  for (uint64_t* p : {&x, &q, &s, &y}) REQUIRE(t.mem_alloc(instance.backend, 1 << 16, p) == METRALE_STATUS_OK);

  uint64_t gemm = 0;
  REQUIRE_MESSAGE(instance.kernel("w4a16", "w4a16_gemm_t_p3", gemm) == METRALE_STATUS_OK, instance.last_error());
  uint32_t m = 3, n = 300, k = 512;
  void* args[] = {&x, &q, &s, &y, &m, &n, &k};
  metrale_launch_config config{{3, 1, 1}, {128, 1, 1}, 0, 0};
  REQUIRE_MESSAGE(t.launch(instance.backend, gemm, &config, args, 7) == METRALE_STATUS_OK, instance.last_error());

  uint64_t stream = 0;
  REQUIRE(t.stream_create(instance.backend, &stream) == METRALE_STATUS_OK);
  uint64_t silu = 0;
  REQUIRE(instance.kernel("act", "silu_mul", silu) == METRALE_STATUS_OK);
  uint32_t rows = 5, cols = 2500;
  void* act_args[] = {&x, &y, &rows, &cols};
  metrale_launch_config act_config{{3, 5, 1}, {256, 1, 1}, 64 * 1024, stream};
  REQUIRE_MESSAGE(t.launch(instance.backend, silu, &act_config, act_args, 4) == METRALE_STATUS_OK, instance.last_error());

  const auto launches = fake.records("launch");
  REQUIRE(launches.size() == 2);
  CHECK(launches[0].name == "w4a16_gemm_t_p3");
  CHECK(launches[0].fields.at("grid") == "3,1,1");
  CHECK(launches[0].fields.at("block") == "128,1,1");
  CHECK(launches[0].fields.at("smem") == "0");
  CHECK(launches[0].fields.at("stream") == "0");
  CHECK(launches[0].fields.at("args") ==
        hex(x) + "," + hex(q) + "," + hex(s) + "," + hex(y) + ",0x3,0x12c,0x200");
  CHECK(launches[1].name == "silu_mul");
  CHECK(launches[1].fields.at("grid") == "3,5,1");
  CHECK(launches[1].fields.at("smem") == "65536");
  CHECK(launches[1].fields.at("stream") != "0");
  CHECK(launches[1].fields.at("args") == hex(x) + "," + hex(y) + ",0x5,0x9c4");
  // More than 48 KiB of dynamic shared memory needs the function's opt-in first.
  const auto attributes = fake.records("func_set_attribute");
  REQUIRE(attributes.size() == 1);
  CHECK(attributes[0].name == "silu_mul");
  CHECK(attributes[0].fields.at("max_dynamic_smem") == "65536");

  SUBCASE("a launch the kernel cannot take is refused before the driver") {
    CHECK(t.launch(instance.backend, gemm, &config, args, 6) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(instance.last_error().find("6 arguments given, the kernel takes 7") != std::string::npos);
    CHECK(t.launch(instance.backend, 999, &config, args, 7) == METRALE_STATUS_NOT_FOUND);
    metrale_launch_config empty{{0, 1, 1}, {128, 1, 1}, 0, 0};
    CHECK(t.launch(instance.backend, gemm, &empty, args, 7) == METRALE_STATUS_INVALID_ARGUMENT);
    metrale_launch_config bad_stream{{1, 1, 1}, {128, 1, 1}, 0, 4242};
    CHECK(t.launch(instance.backend, gemm, &bad_stream, args, 7) == METRALE_STATUS_NOT_FOUND);
    CHECK(fake.records("launch").size() == 2);
  }
}

TEST_CASE("module load and launch failures carry the CUDA error name; other modules keep working") {
  Fake fake("8.0");
  Instance instance(cached());
  REQUIRE(instance.status == METRALE_STATUS_OK);
  uint64_t h = 0;
  {
    Env fail{{"FAKECUDA_FAIL", "cuModuleLoadData=200"}};
    CHECK(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_INCOMPATIBLE);
    CHECK(instance.last_error().find("cuModuleLoadData failed for module 'act'") != std::string::npos);
    CHECK(instance.last_error().find("CUDA_ERROR_INVALID_IMAGE (200)") != std::string::npos);
  }
  // The broken module stays broken (no recompile per lookup); the others are unaffected.
  CHECK(instance.kernel("act", "gelu_mul", h) == METRALE_STATUS_INCOMPATIBLE);
  REQUIRE(instance.kernel("w4a16_v2", "w4a16_gemm_t_m128_v2", h) == METRALE_STATUS_OK);
  {
    Env fail{{"FAKECUDA_FAIL", "cuModuleGetFunction=500"}};
    uint64_t g = 0;
    CHECK(instance.kernel("moe", "moe_gather", g) == METRALE_STATUS_NOT_FOUND);
    CHECK(instance.last_error().find("cuModuleGetFunction(moe/moe_gather) failed: CUDA_ERROR_NOT_FOUND (500)") !=
          std::string::npos);
  }
  uint64_t p = 0;
  REQUIRE(instance.t().mem_alloc(instance.backend, 1 << 20, &p) == METRALE_STATUS_OK);
  uint32_t m = 1, n = 128, k = 128;
  void* args[] = {&p, &p, &p, &p, &m, &n, &k};
  metrale_launch_config config{{1, 1, 1}, {256, 1, 1}, 0, 0};
  {
    Env fail{{"FAKECUDA_FAIL", "cuLaunchKernel=719"}};
    CHECK(instance.t().launch(instance.backend, h, &config, args, 7) == METRALE_STATUS_INTERNAL);
    CHECK(instance.last_error() ==
          "cuLaunchKernel(w4a16_v2/w4a16_gemm_t_m128_v2) failed: CUDA_ERROR_LAUNCH_FAILED (719)");
  }
  CHECK(instance.t().launch(instance.backend, h, &config, args, 7) == METRALE_STATUS_OK);
}

TEST_CASE("compile cache: the second instance loads from disk") {
  TempDir cache;
  {
    Fake fake("8.0");
    CreateOptions options;
    options.cache_dir = cache.path().string();
    Instance instance(options);
    REQUIRE(instance.status == METRALE_STATUS_OK);
    uint64_t h = 0;
    REQUIRE_MESSAGE(instance.kernel("w4a16", "w4a16_gemv", h) == METRALE_STATUS_OK, instance.last_error());
    CHECK_FALSE(instance.log.contains(METRALE_LOG_DEBUG, "cache hit"));
  }
  CHECK(cache_entries(cache.path()) == 1);
  {
    Fake fake("8.0");
    CreateOptions options;
    options.cache_dir = cache.path().string();
    Instance instance(options);
    REQUIRE(instance.status == METRALE_STATUS_OK);
    uint64_t h = 0;
    REQUIRE(instance.kernel("w4a16", "w4a16_gemv", h) == METRALE_STATUS_OK);
    CHECK(instance.log.contains(METRALE_LOG_DEBUG, "cache hit"));
    CHECK(instance.log.contains(METRALE_LOG_INFO, "compile cache hit"));
    CHECK(fake.records("module_load").size() == 1);  // the cached CUBIN reaches the driver
  }
  SUBCASE("another target is another entry") {
    Fake fake("8.6");
    CreateOptions options;
    options.cache_dir = cache.path().string();
    Instance instance(options);
    uint64_t h = 0;
    REQUIRE(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK);
    CHECK(cache_entries(cache.path()) == 2);
  }
}

TEST_CASE("a corrupt or truncated cache entry is detected, warned about and rebuilt") {
  TempDir cache;
  CreateOptions options;
  options.cache_dir = cache.path().string();
  {
    Fake fake("8.0");
    Instance instance(options);
    uint64_t h = 0;
    REQUIRE(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK);
  }
  REQUIRE(cache_entries(cache.path()) == 1);
  const fs::path entry = fs::directory_iterator(cache.path() / "cuda")->path();
  const std::string good = read_text(entry);

  const std::vector<std::pair<std::string, std::string>> damage = {
      {"flipped byte", [&] {
         std::string bad = good;
         bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x40);
         return bad;
       }()},
      {"truncated", good.substr(0, good.size() - 100)},
      {"truncated header", good.substr(0, 20)},
      {"not an entry", std::string(good.size(), 'x')},
  };
  for (const auto& [what, bytes] : damage) {
    CAPTURE(what);
    write_file(entry, bytes);
    Fake fake("8.0");
    Instance instance(options);
    uint64_t h = 0;
    REQUIRE_MESSAGE(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK, instance.last_error());
    CHECK(instance.log.contains(METRALE_LOG_WARN, "is corrupt"));
    CHECK(instance.log.contains(METRALE_LOG_WARN, "rebuilding"));
    CHECK_FALSE(instance.log.contains(METRALE_LOG_DEBUG, "cache hit"));
    const auto loads = fake.records("module_load");
    REQUIRE(loads.size() == 1);
    CHECK(loads[0].name == "cubin");  // a good image, never the damaged bytes
    CHECK(read_text(entry).size() > 1000);  // rewritten whole
  }
  // And the rebuilt entry is a plain hit again.
  Fake fake("8.0");
  Instance instance(options);
  uint64_t h = 0;
  REQUIRE(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK);
  CHECK(instance.log.contains(METRALE_LOG_DEBUG, "cache hit"));
  CHECK_FALSE(instance.log.contains(METRALE_LOG_WARN, "corrupt"));
}

TEST_CASE("an override source directory: NVRTC's message names the file and line; the rest works") {
  TempDir override_dir;
  // act.cu missing a ';' on line 7, which NVRTC reports at line 8; the header still comes
  // from kernel_src.
  write_file(override_dir / "act.cu",
             "// a kernel developer's edit\n"
             "#include \"metrale_common.cuh\"\n"
             "extern \"C\" __global__ void silu_mul(const __nv_bfloat16* g, __nv_bfloat16* o, unsigned m, unsigned i) {\n"
             "  o[0] = g[0];\n"
             "}\n"
             "extern \"C\" __global__ void gelu_mul(const __nv_bfloat16* g, __nv_bfloat16* o, unsigned m, unsigned i) {\n"
             "  o[0] = g[0]\n"
             "}\n");
  Fake fake("8.0");
  CreateOptions options = cached();
  options.source_dirs = {override_dir.path().string(), METRALE_TEST_KERNEL_SRC};
  Instance instance(options);
  REQUIRE(instance.status == METRALE_STATUS_OK);
  uint64_t h = 0;
  CHECK(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_INTERNAL);
  const std::string error = instance.last_error();
  CHECK(error.find("NVRTC could not compile module 'act'") != std::string::npos);
  CHECK(error.find((override_dir / "act.cu").string() + "(8): error") != std::string::npos);
  CHECK(error.find("-arch=sm_80") != std::string::npos);
  CHECK(error.find("metrale_common.cuh = " + std::string(METRALE_TEST_KERNEL_SRC)) != std::string::npos);
  CHECK(instance.log.contains(METRALE_LOG_WARN, "NVRTC could not compile module 'act'"));
  // Modules the override does not touch still come from kernel_src and work.
  CHECK(instance.kernel("moe", "moe_gather", h) == METRALE_STATUS_OK);
  CHECK(instance.kernel("act", "gelu_mul", h) == METRALE_STATUS_INTERNAL);
}

TEST_CASE("edits to a source or to a header it includes change the cache key") {
  TempDir cache;
  TempDir override_dir;
  const std::string act = read_text(fs::path(METRALE_TEST_KERNEL_SRC) / "act.cu");
  const std::string common = read_text(fs::path(METRALE_TEST_KERNEL_SRC) / "metrale_common.cuh");
  CreateOptions options;
  options.cache_dir = cache.path().string();
  options.source_dirs = {override_dir.path().string(), METRALE_TEST_KERNEL_SRC};
  const auto lookup = [&] {
    Fake fake("8.0");
    Instance instance(options);
    uint64_t h = 0;
    REQUIRE_MESSAGE(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK, instance.last_error());
    return instance.log.contains(METRALE_LOG_DEBUG, "cache hit");
  };
  CHECK_FALSE(lookup());
  CHECK(lookup());
  write_file(override_dir / "act.cu", act + "\n// edited\n");
  CHECK_FALSE(lookup());
  CHECK(lookup());
  write_file(override_dir / "metrale_common.cuh", common + "\n// edited\n");
  CHECK_FALSE(lookup());
  CHECK(cache_entries(cache.path()) == 3);
}

TEST_CASE("a device newer than NVRTC gets PTX for the newest architecture NVRTC knows") {
  Fake fake("13.0");
  Instance instance(cached());
  REQUIRE(instance.status == METRALE_STATUS_OK);
  CHECK(std::string(instance.device().target) == "sm_130");
  uint64_t h = 0;
  REQUIRE_MESSAGE(instance.kernel("act", "silu_mul", h) == METRALE_STATUS_OK, instance.last_error());
  const auto loads = fake.records("module_load");
  REQUIRE(loads.size() == 1);
  CHECK(loads[0].name == "ptx");
}

TEST_CASE("lookups from many threads compile a module once and agree on handles") {
  Fake fake("8.0");
  Instance instance(cached());
  REQUIRE(instance.status == METRALE_STATUS_OK);
  std::vector<uint64_t> handles(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < handles.size(); ++i) {
    threads.emplace_back([&, i] { instance.kernel("moe", i % 2 ? "moe_combine" : "router_gemm", handles[i]); });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < handles.size(); ++i) {
    CHECK(handles[i] != 0);
    CHECK(handles[i] == handles[i % 2]);
  }
  CHECK(fake.records("module_load").size() == 1);
}
