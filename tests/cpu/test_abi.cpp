// SPDX-License-Identifier: MIT OR Apache-2.0
// What is particular to the CPU plugin behind its C ABI: create()'s options (target tier, threads,
// pin) and their refusals, tier choice, device facts, the kernel set of manifests/cpu.json and the
// weight layouts it declares, its memory choices (64-byte alignment, mem_alloc(0) refused) and the
// messages of its refusals, and launch checks that know each kernel's arguments. The contract every
// plugin meets (handshake, table, statuses, memory and stream semantics, kernel-independent launch
// checks, manifest against list_kernels) is the conformance suite's: tests/plugin_cts. The thread
// pool under concurrent and sparse use, and pinning: test_pool.cpp.
#include "support.hpp"
#include "target.hpp"

#include <metrale/cpu_host_memory.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <map>
#include <set>
#include <thread>

using namespace cpu_test;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("device_count: one device, the host") {
  uint32_t count = 0;
  CHECK(plugin().table->device_count(&count, nullptr, 0) == METRALE_STATUS_OK);
  CHECK(count == 1);
}

// That list_kernels answers exactly the manifest's kernels and parameter types is the conformance
// suite's check; here, which kernels those are and the layouts they declare.
TEST_CASE("the manifest: the CPU kernel set, no tile variants, the weight layout of each family") {
  const nlohmann::json manifest = read_json(METRALE_CPU_TEST_MANIFEST);
  CHECK(manifest.at("backend") == "cpu");
  CHECK(manifest.at("library") == "libmetrale_cpu.so");
  CHECK(manifest.at("abi_version") == 1);
  CHECK(manifest.at("format_version") == "1.0");
  std::map<std::string, std::vector<std::string>> listed;
  for (const auto& module : manifest.at("modules"))
    for (const auto& kernel : module.at("kernels")) {
      std::vector<std::string> params;
      for (const auto& param : kernel.at("params")) params.push_back(param.at("type"));
      const std::string key = module.at("name").get<std::string>() + "/" + kernel.at("name").get<std::string>();
      CHECK_MESSAGE(listed.emplace(key, params).second, "listed twice: " << key);
      CHECK(!contains(key, "_p3"));
      CHECK(!contains(key, "m128"));
      CHECK(!contains(key, "n64"));
    }

  // The kernels that read quantized weights read the layout their family's repack produces
  // (docs/kernels.md); the 8-bit-activation families share their bf16 siblings' layouts.
  const std::map<std::string, std::string> layouts{
      {"w4a16", "cpu-native"},        {"w4a16_zp", "cpu-native-w4zp"}, {"w4a8", "cpu-native-w4zp"},
      {"w8a16", "cpu-native-w8"},     {"w8a8", "cpu-native-w8"},       {"fp8", "cpu-native-fp8"},
      {"w4afp8", "cpu-native-w4zp"},  {"bf16", "cpu-native-w16"},     {"f16", "cpu-native-w16"}};
  for (const auto& module : manifest.at("modules"))
    for (const auto& kernel : module.at("kernels")) {
      bool reads_weights = false;
      for (const auto& param : kernel.at("params")) {
        const std::string name = param.at("name");
        reads_weights = reads_weights || name.starts_with("qweight") || name == "weight" || name.starts_with("weight_");
      }
      const std::string family =
          module.at("name") == "moe" ? std::string("w4a16") : module.at("name").get<std::string>();
      // Outside the quantized families a `weight` is a plain bf16 vector (norm/*), no layout.
      reads_weights = reads_weights && layouts.contains(family);
      CAPTURE(kernel.at("name"));
      CHECK(kernel.value("weight_layout", std::string()) == (reads_weights ? layouts.at(family) : ""));
    }
  const std::set<std::string> expected{
      "w4a16/w4a16_gemv", "w4a16/w4a16_gemv_b8", "w4a16/w4a16_gemm_t", "w4a16/w4a16_gemm_t_k64",
      "w4a16/w4a16_repack", "act/silu_mul", "act/gelu_mul", "moe/router_gemm", "moe/topk_softmax", "moe/moe_gather",
      "moe/w4a16_grouped_gemm", "moe/moe_combine", "moe/moe_align",
      "w4a16_zp/w4a16_zp_gemv", "w4a16_zp/w4a16_zp_gemm", "w4a16_zp/w4a16_zp_grouped_gemm", "w4a16_zp/w4a16_zp_repack",
      "w8a16/w8a16_gemv", "w8a16/w8a16_gemm", "w8a16/w8a16_grouped_gemm", "w8a16/w8a16_repack",
      "fp8/fp8_gemv", "fp8/fp8_gemm", "fp8/fp8_grouped_gemm", "fp8/fp8_grouped_gemv", "fp8/fp8_repack",
      "fp8/fp8_gemv_a8", "fp8/fp8_gemm_a8", "fp8/fp8_grouped_gemm_a8", "fp8/fp8_gemv_a8_group128",
      "fp8/fp8_gemm_a8_group128", "fp8/fp8_grouped_gemm_a8_group128",
      "w4a8/w4a8_gemv", "w4a8/w4a8_gemm", "w4a8/w4a8_grouped_gemm", "w4a8/w4a8_repack",
      "w4afp8/w4afp8_gemm", "w4afp8/w4afp8_grouped_gemm", "w4afp8/w4afp8_repack",
      "bf16/bf16_gemv", "bf16/bf16_gemm", "bf16/bf16_grouped_gemm", "bf16/bf16_repack",
      "f16/f16_gemv", "f16/f16_gemm", "f16/f16_grouped_gemm", "f16/f16_repack",
      "w8a8/w8a8_gemv", "w8a8/w8a8_gemm", "w8a8/w8a8_grouped_gemm", "w8a8/w8a8_repack",
      "quant/quantize_int8", "quant/quantize_int8_bf16", "quant/quantize_fp8", "quant/quantize_fp8_bf16",
      "quant/quantize_fp8_group128", "quant/quantize_fp8_group128_bf16", "quant/quantize_int8_static_bf16",
      "quant/quantize_fp8_static_bf16", "quant/gather_k",
      "attn/kv_append", "attn/attn_decode", "attn/attn_decode_combine", "attn/attn_prefill", "attn/output_gate",

      "norm/rms_norm", "norm/rms_norm_residual", "norm/add", "norm/bias_add", "norm/rms_norm_zero_centred", "rope/rope",
      "rope/qk_norm_rope", "embed/embedding", "sample/argmax",
      "deltanet/conv_silu", "deltanet/delta_rule_chunked", "deltanet/delta_rule_recurrent", "deltanet/gated_norm"};
  std::set<std::string> names;
  for (const auto& [name, params] : listed) names.insert(name);
  CHECK(names == expected);

  // The build tree carries the manifest next to the module, naming it relatively.
  const std::filesystem::path built = std::filesystem::path(METRALE_CPU_TEST_BUILT_MANIFEST);
  CHECK(read_json(built) == manifest);
  CHECK(std::filesystem::exists(built.parent_path() / manifest.at("library").get<std::string>()));
}

TEST_CASE("create: options, refusals and warnings") {
  SUBCASE("unknown target value lists the valid ones") {
    Created c = try_create({{"target", "avx9000"}});
    CHECK(c.status == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(c.backend == nullptr);
    CHECK(contains(c.error, "avx9000"));
    CHECK(contains(c.error, "auto, avx512bf16, avx512, avx2, baseline"));
  }
  SUBCASE("bad thread counts") {
    for (const char* value : {"0", "-1", "abc", "2x", "", "100000"}) {
      Created c = try_create({{"threads", value}});
      INFO("threads='" << value << "': " << c.error);
      CHECK(c.status == METRALE_STATUS_INVALID_ARGUMENT);
      CHECK(contains(c.error, "threads"));
    }
  }
  SUBCASE("a bad pin value names the option and the valid values") {
    for (const char* value : {"", "2", "yes", "on", "true", "01", "1 "}) {
      Created c = try_create({{"pin", value}, {"threads", "2"}});
      INFO("pin='" << value << "': " << c.error);
      CHECK(c.status == METRALE_STATUS_INVALID_ARGUMENT);
      CHECK(c.backend == nullptr);
      CHECK(contains(c.error, std::string("option pin='") + value + "'"));
      CHECK(contains(c.error, "expected 0 or 1"));
    }
  }
  SUBCASE("an unknown key is logged as a warning and ignored") {
    HostLog log;
    Created c = try_create({{"colour", "blue"}, {"threads", "1"}}, &log);
    REQUIRE(c.status == METRALE_STATUS_OK);
    plugin().table->destroy(c.backend);
    bool warned = false;
    for (const LogLine& line : log.lines())
      warned |= line.level == METRALE_LOG_WARN && contains(line.text, "colour");
    CHECK(warned);
  }
  SUBCASE("each tier is granted exactly when the CPU has its features") {
    using metrale::cpu::Tier;
    const metrale::cpu::CpuFeatures have = metrale::cpu::detect_features();
    for (Tier tier : {Tier::baseline, Tier::avx2, Tier::avx512, Tier::avx512bf16}) {
      const std::string name = metrale::cpu::tier_option_name(tier);
      Created c = try_create({{"target", name}, {"threads", "1"}});
      const auto missing = metrale::cpu::missing_features(tier, have);
      INFO(name << ": " << c.error);
      if (missing.empty()) {
        REQUIRE(c.status == METRALE_STATUS_OK);
        metrale_device_info info{};
        info.struct_size = sizeof info;
        REQUIRE(plugin().table->device_info(c.backend, &info) == METRALE_STATUS_OK);
        CHECK(std::string(info.target) == metrale::cpu::tier_target(tier));
        plugin().table->destroy(c.backend);
      } else {
        CHECK(c.status == METRALE_STATUS_INCOMPATIBLE);
        for (const auto& feature : missing) CHECK(contains(c.error, feature));
      }
    }
    Backend automatic(Options{{"threads", "1"}});
    CHECK(automatic.target() == metrale::cpu::tier_target(metrale::cpu::best_tier(have)));
  }
}

TEST_CASE("tier choice against feature sets this machine may not have") {
  using namespace metrale::cpu;
  CpuFeatures none;
  none.detected = true;
  CpuFeatures avx2 = none;
  avx2.avx = avx2.avx2 = avx2.fma = avx2.f16c = true;
  CpuFeatures avx512 = avx2;
  avx512.avx512f = avx512.avx512bw = avx512.avx512vl = true;
  CpuFeatures bf16 = avx512;
  bf16.avx512bf16 = true;

  CHECK(best_tier(none) == Tier::baseline);
  CHECK(best_tier(avx2) == Tier::avx2);
  CHECK(best_tier(avx512) == Tier::avx512);
  CHECK(best_tier(bf16) == Tier::avx512bf16);
  CpuFeatures no_vl = bf16;
  no_vl.avx512vl = false;
  CHECK(best_tier(no_vl) == Tier::avx2);  // tiers are cumulative

  Tier chosen = Tier::baseline;
  std::string error;
  CHECK(choose_tier("avx512bf16", avx2, chosen, error) == METRALE_STATUS_INCOMPATIBLE);
  CHECK(contains(error, "avx512f, avx512bw, avx512vl, avx512bf16"));
  CHECK(contains(error, "best tier here is 'avx2'"));
  error.clear();
  CHECK(choose_tier("avx2", no_vl, chosen, error) == METRALE_STATUS_OK);
  CHECK(chosen == Tier::avx2);
  CHECK(choose_tier("baseline", bf16, chosen, error) == METRALE_STATUS_OK);
  CHECK(chosen == Tier::baseline);
  CHECK(choose_tier(nullptr, avx512, chosen, error) == METRALE_STATUS_OK);
  CHECK(chosen == Tier::avx512);
  CHECK(choose_tier("auto", none, chosen, error) == METRALE_STATUS_OK);
  CHECK(chosen == Tier::baseline);
  CHECK(choose_tier("AVX2", bf16, chosen, error) == METRALE_STATUS_INVALID_ARGUMENT);
  CpuFeatures undetected;
  CHECK(choose_tier("avx2", undetected, chosen, error) == METRALE_STATUS_INCOMPATIBLE);
  CHECK(contains(error, "detection failed"));

  // The int8 dot products: VNNI on the BF16 tier when the CPU has it, else the avx512 tier's.
  CpuFeatures vnni = bf16;
  vnni.avx512vnni = true;
  CHECK(int8_tier(Tier::avx512bf16, vnni) == Tier::avx512bf16);
  CHECK(int8_tier(Tier::avx512bf16, bf16) == Tier::avx512);
  CHECK(int8_tier(Tier::avx512, vnni) == Tier::avx512);
  CHECK(int8_tier(Tier::avx2, vnni) == Tier::avx2);
  CHECK(std::string(int8_dot_name(Tier::avx512bf16, vnni)) == "vpdpbusd");
  CHECK(std::string(int8_dot_name(Tier::avx512bf16, bf16)) == "vpmaddwd");
  CHECK(std::string(int8_dot_name(Tier::baseline, vnni)) == "scalar");
  // The FP8 decoder: VBMI table lookups on the BF16 tier when the CPU has them, else the avx512
  // tier's bodies.
  CpuFeatures vbmi = bf16;
  vbmi.avx512vbmi = true;
  CHECK(fp8_tier(Tier::avx512bf16, vbmi) == Tier::avx512bf16);
  CHECK(fp8_tier(Tier::avx512bf16, vnni) == Tier::avx512);
  CHECK(fp8_tier(Tier::avx2, vbmi) == Tier::avx2);
  CHECK(std::string(fp8_decode_name(Tier::avx512bf16, vbmi)) == "vpermi2b");
  CHECK(std::string(fp8_decode_name(Tier::avx512bf16, bf16)) == "vcvtph2ps");
  CHECK(std::string(fp8_decode_name(Tier::avx512, vbmi)) == "vcvtph2ps");
}

TEST_CASE("device_info reports the model, target, memory and the thread count") {
  Backend b(Options{{"threads", "3"}});
  metrale_device_info info{};
  info.struct_size = sizeof info;
  REQUIRE(b.table().device_info(b.raw(), &info) == METRALE_STATUS_OK);
  CHECK(std::string(info.name).size() > 0);
  CHECK(std::string(info.target).rfind("cpu-", 0) == 0);
  CHECK(info.memory_bytes > (uint64_t{64} << 20));
  CHECK(info.compute_units == 3);

  Backend automatic;
  REQUIRE(automatic.table().device_info(automatic.raw(), &info) == METRALE_STATUS_OK);
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(info.compute_units == static_cast<uint32_t>(CPU_COUNT(&set)));  // the CPUs we may use
}

TEST_CASE("get_kernel: NOT_FOUND lists what the module or the backend has") {
  Backend b;
  uint64_t handle = 123;
  CHECK(b.table().get_kernel(b.raw(), "w4a16", "w4a16_gemm_t_p3", &handle) == METRALE_STATUS_NOT_FOUND);
  const std::string error = b.last_error();
  CHECK(contains(error, "w4a16_gemm_t_p3"));
  CHECK(contains(error, "w4a16_gemv, w4a16_gemv_b8, w4a16_gemm_t, w4a16_gemm_t_k64"));
  CHECK(b.table().get_kernel(b.raw(), "w4a16_v2", "w4a16_gemm_t_m128_v2", &handle) ==
        METRALE_STATUS_NOT_FOUND);
  CHECK(contains(b.last_error(), "no module 'w4a16_v2'"));
}

// The memory semantics every plugin shares are the conformance suite's; here the CPU plugin's own
// choices (64-byte alignment, mem_alloc(0) and mem_free(0) refused) and what its messages say.
TEST_CASE("memory: 64-byte aligned; zero-byte allocations refused; messages say what is wrong") {
  Backend b;
  const auto& t = b.table();
  uint64_t a = 0, c = 0;
  REQUIRE(t.mem_alloc(b.raw(), 100, &a) == METRALE_STATUS_OK);
  REQUIRE(t.mem_alloc(b.raw(), 3, &c) == METRALE_STATUS_OK);
  CHECK(a % 64 == 0);
  CHECK(c % 64 == 0);
  uint64_t none = 1;
  CHECK(t.mem_alloc(b.raw(), 0, &none) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(none == 0);
  CHECK(t.mem_free(b.raw(), 0) == METRALE_STATUS_NOT_FOUND);
  CHECK(contains(b.last_error(), "0 is never an allocation"));

  std::vector<uint8_t> bytes(100), back(100);
  // One byte too far: the message says by how much and which allocation.
  CHECK(t.copy_to_device(b.raw(), a + 1, bytes.data(), 100, 0) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(contains(b.last_error(), "runs 1 bytes past the end"));
  CHECK(t.copy_to_host(b.raw(), back.data(), a + 200, 1, 0) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(contains(b.last_error(), "not inside any live allocation"));
  CHECK(t.mem_free(b.raw(), a + 8) == METRALE_STATUS_NOT_FOUND);
  CHECK(contains(b.last_error(), "inside an allocation but not at its start"));
  CHECK(t.mem_free(b.raw(), a) == METRALE_STATUS_OK);
  CHECK(t.mem_free(b.raw(), a) == METRALE_STATUS_NOT_FOUND);
  CHECK(contains(b.last_error(), "already freed"));
  CHECK(t.stream_destroy(b.raw(), 424242) == METRALE_STATUS_NOT_FOUND);
  CHECK(contains(b.last_error(), "stream 424242"));
  CHECK(t.mem_free(b.raw(), c) == METRALE_STATUS_OK);
}

// The host-memory extension (metrale/cpu_host_memory.h): the caller's memory taken as an
// allocation by copies, refused by mem_free, never freed by the plugin; overlaps refused.
TEST_CASE("host memory extension: register, use, refuse overlaps and mem_free, unregister") {
  Backend b;
  const auto& t = b.table();
  REQUIRE(static_cast<bool>(t.get_proc_address));
  void* const register_entry = t.get_proc_address(METRALE_CPU_HOST_REGISTER_NAME);
  void* const unregister_entry = t.get_proc_address(METRALE_CPU_HOST_UNREGISTER_NAME);
  REQUIRE(register_entry != nullptr);
  REQUIRE(unregister_entry != nullptr);
  const auto host_register = reinterpret_cast<metrale_cpu_host_register_fn>(register_entry);
  const auto host_unregister = reinterpret_cast<metrale_cpu_host_unregister_fn>(unregister_entry);

  std::vector<uint8_t> mine(256, 7), back(256);
  uint64_t address = 0;
  uint32_t registered = 0;
  REQUIRE(host_register(b.raw(), mine.data(), mine.size(), &address, &registered) == METRALE_STATUS_OK);
  CHECK(registered == 1);
  CHECK(address == reinterpret_cast<uint64_t>(mine.data()));  // no copy: the caller's own bytes
  CHECK(t.memset_device(b.raw(), address + 16, 9, 16, 0) == METRALE_STATUS_OK);
  CHECK(mine[15] == 7);
  CHECK(mine[16] == 9);
  CHECK(t.copy_to_host(b.raw(), back.data(), address, back.size(), 0) == METRALE_STATUS_OK);
  CHECK(back == mine);

  // A range inside it registers nothing; one running past its end is refused.
  uint64_t inner = 0;
  CHECK(host_register(b.raw(), mine.data() + 8, 8, &inner, &registered) == METRALE_STATUS_OK);
  CHECK(registered == 0);
  CHECK(inner == address + 8);
  CHECK(host_register(b.raw(), mine.data() + 200, 100, &inner, &registered) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(contains(b.last_error(), "runs past the end of the live allocation"));
  CHECK(host_register(b.raw(), nullptr, 8, &inner, &registered) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(contains(b.last_error(), "host is NULL"));

  CHECK(t.mem_free(b.raw(), address) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(contains(b.last_error(), "unregister it"));
  CHECK(host_unregister(b.raw(), address) == METRALE_STATUS_OK);
  CHECK(host_unregister(b.raw(), address) == METRALE_STATUS_NOT_FOUND);
  CHECK(contains(b.last_error(), "is not registered host memory"));
  CHECK(t.copy_to_host(b.raw(), back.data(), address, 1, 0) == METRALE_STATUS_INVALID_ARGUMENT);
  // An allocation of the plugin's own is never registered memory.
  const uint64_t own = b.alloc(64);
  CHECK(host_unregister(b.raw(), own) == METRALE_STATUS_NOT_FOUND);
  CHECK(t.mem_free(b.raw(), own) == METRALE_STATUS_OK);
}

// A w4a16_gemv problem (n = 64, k = 256) with zeroed inputs, whose launches the cases below break.
struct GemvLaunch {
  Backend b{Options{{"threads", "2"}}};
  const uint64_t gemv = b.kernel("w4a16", "w4a16_gemv");
  const uint32_t n = 64, k = 256;
  const uint64_t x = b.alloc(k * 2), q = b.alloc(n * k / 2), s = b.alloc(n * (k / 128) * 2),
                 y = b.alloc(n * 2);
  GemvLaunch() {
    for (auto [address, bytes] : {std::pair{x, k * 2}, std::pair{q, n * k / 2}, std::pair{s, n * (k / 128) * 2}})
      REQUIRE(b.table().memset_device(b.raw(), address, 0, bytes, 0) == METRALE_STATUS_OK);
  }
  Args w4(uint32_t m, uint32_t nn, uint32_t kk, uint64_t xp = 0) const {
    Args args;
    args.ptr(xp ? xp : x).ptr(q).ptr(s).ptr(y).u32(m).u32(nn).u32(kk);
    return args;
  }
};

TEST_CASE_FIXTURE(GemvLaunch, "launch errors name the problem: handle, arguments, grid and block") {
  SUBCASE("a correct launch") {
    Args args = w4(1, n, k);
    CHECK(b.launch(gemv, {1, 1}, args) == METRALE_STATUS_OK);
  }
  SUBCASE("wrong argument count") {
    Args args = w4(1, n, k);
    metrale_launch_config config{{1, 1, 1}, {128, 1, 1}, 0, 0};
    CHECK(b.table().launch(b.raw(), gemv, &config, args.data(), 6) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "takes 7 arguments (x, qweight, scales, y, m, n, k), got 6"));
  }
  SUBCASE("unknown handle") {
    Args args = w4(1, n, k);
    CHECK(b.launch(12345, {1, 1}, args) == METRALE_STATUS_NOT_FOUND);
    CHECK(contains(b.last_error(), "not a kernel handle"));
  }
  SUBCASE("CUDA's block limits; extra blocks") {
    Args args = w4(1, n, k);
    CHECK(b.launch(gemv, {1, 1}, args, 2048) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "exceeds the limits"));
    Args covered = w4(1, n, k);
    CHECK(b.launch(gemv, {5, 3}, covered) == METRALE_STATUS_OK);  // extra blocks clip
  }
  SUBCASE("grid too small for the problem") {
    const uint64_t q2 = b.upload(std::vector<uint8_t>(129 * k / 2)),
                   s2 = b.upload(std::vector<uint16_t>(129 * 2)), y2 = b.alloc(129 * 2);
    Args args;
    args.ptr(x).ptr(q2).ptr(s2).ptr(y2).u32(1).u32(129).u32(k);
    CHECK(b.launch(gemv, {2, 1}, args) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "does not cover"));
    CHECK(contains(b.last_error(), "(ceil(n/64), 1) = (3, 1, 1)"));
    CHECK(b.launch(gemv, {3, 1}, args) == METRALE_STATUS_OK);
  }
}

TEST_CASE_FIXTURE(GemvLaunch, "launch errors name the problem: shape rules, pointers, index buffers") {
  SUBCASE("shape rules") {
    Args two_rows = w4(2, n, k);
    CHECK(b.launch(gemv, {1, 1}, two_rows) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "m must be 1"));
    Args odd_k = w4(1, n, 200);
    CHECK(b.launch(gemv, {1, 1}, odd_k) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "multiple of 128"));
    Args nine = w4(9, n, k);
    CHECK(b.launch(b.kernel("w4a16", "w4a16_gemv_b8"), {1, 1}, nine) == METRALE_STATUS_INVALID_ARGUMENT);
  }
  SUBCASE("bad pointers") {
    uint64_t on_stack[64] = {};
    Args stray = w4(1, n, k, reinterpret_cast<uint64_t>(on_stack));
    CHECK(b.launch(gemv, {1, 1}, stray) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "argument 'x'"));
    CHECK(contains(b.last_error(), "not inside any live allocation"));
    Args shifted = w4(1, n, k, x + 2);
    CHECK(b.launch(gemv, {1, 1}, shifted) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "must hold 512 bytes (m*k bf16)"));
    Args null_x;
    null_x.ptr(0).ptr(q).ptr(s).ptr(y).u32(1).u32(n).u32(k);
    CHECK(b.launch(gemv, {1, 1}, null_x) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "null pointer"));
  }
  SUBCASE("index buffers are checked against their sources") {
    const uint32_t h = 8;
    const uint64_t src = b.alloc(4 * h * 2), rows = b.upload(std::vector<int32_t>{0, 3, 4}),
                   out = b.alloc(3 * h * 2);
    Args args;
    args.ptr(src).ptr(rows).ptr(out).u32(3).u32(h);
    CHECK(b.launch(b.kernel("moe", "moe_gather"), {3, 1}, args) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "rows[2] = 4 is not a row of 'x'"));
    const uint64_t offsets = b.upload(std::vector<int32_t>{0, 5, 2});
    Args grouped;
    grouped.ptr(x).ptr(q).ptr(s).ptr(offsets).ptr(y).u32(n).u32(k).u32(2);
    CHECK(b.launch(b.kernel("moe", "w4a16_grouped_gemm"), {1, 2}, grouped) ==
          METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "non-decreasing"));
  }
  SUBCASE("null argument array entries") {
    void* args[7] = {};
    metrale_launch_config config{{1, 1, 1}, {128, 1, 1}, 0, 0};
    CHECK(b.table().launch(b.raw(), gemv, &config, args, 7) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "argument 0 ('x') points to NULL"));
  }
}

TEST_CASE("w4a16_repack: argument checks name the problem") {
  Backend b(Options{{"threads", "2"}});
  const uint64_t repack = b.kernel("w4a16", "w4a16_repack");
  const uint32_t n = 65, k = 256, count = 2;
  const size_t code_bytes = size_t{count} * n * k / 2, scale_bytes = size_t{count} * n * (k / 128) * 2;
  const uint64_t q_in = b.alloc(code_bytes), s_in = b.alloc(scale_bytes), q_out = b.alloc(code_bytes),
                 s_out = b.alloc(scale_bytes);
  for (auto [address, bytes] : {std::pair{q_in, code_bytes}, std::pair{s_in, scale_bytes}})
    REQUIRE(b.table().memset_device(b.raw(), address, 0, bytes, 0) == METRALE_STATUS_OK);
  auto args = [&](uint64_t qi, uint64_t si, uint64_t qo, uint64_t so, uint32_t nn, uint32_t kk, uint32_t c) {
    Args a;
    a.ptr(qi).ptr(si).ptr(qo).ptr(so).u32(nn).u32(kk).u32(c);
    return a;
  };
  SUBCASE("a correct launch covers (ceil(n/64), count)") {
    Args ok = args(q_in, s_in, q_out, s_out, n, k, count);
    CHECK(b.launch(repack, {2, 2}, ok) == METRALE_STATUS_OK);
    Args short_grid = args(q_in, s_in, q_out, s_out, n, k, count);
    CHECK(b.launch(repack, {2, 1}, short_grid) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "(ceil(n/64), count) = (2, 2, 1)"));
  }
  SUBCASE("shape rules") {
    Args no_rows = args(q_in, s_in, q_out, s_out, 0, k, count);
    CHECK(b.launch(repack, {2, 2}, no_rows) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "n must be at least 1"));
    Args no_matrices = args(q_in, s_in, q_out, s_out, n, k, 0);
    CHECK(b.launch(repack, {2, 2}, no_matrices) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "count must be at least 1"));
    Args odd_k = args(q_in, s_in, q_out, s_out, n, 200, count);
    CHECK(b.launch(repack, {2, 2}, odd_k) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "multiple of 128"));
  }
  SUBCASE("pointers: null, too small, aliasing") {
    Args null_out = args(q_in, s_in, 0, s_out, n, k, count);
    CHECK(b.launch(repack, {2, 2}, null_out) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "argument 'qweight_out' is a null pointer"));
    Args three = args(q_in, s_in, q_out, s_out, n, k, 3);
    CHECK(b.launch(repack, {2, 3}, three) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "argument 'qweight_in'"));
    CHECK(contains(b.last_error(), "count*n*k/8 u32"));
    Args in_place = args(q_in, s_in, q_in, s_out, n, k, count);
    CHECK(b.launch(repack, {2, 2}, in_place) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "'qweight_out'"));
    CHECK(contains(b.last_error(), "overlaps 'qweight_in'"));
    // Codes are 64x the scales' bytes: the scales' output fits inside the codes' input.
    Args scales_into_codes = args(q_in, s_in, q_out, q_in + 64, n, k, count);
    CHECK(b.launch(repack, {2, 2}, scales_into_codes) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "'scales_out'"));
    CHECK(contains(b.last_error(), "overlaps 'qweight_in'"));
    Args outputs_overlap = args(q_in, s_in, q_out, q_out + 64, n, k, count);
    CHECK(b.launch(repack, {2, 2}, outputs_overlap) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(contains(b.last_error(), "overlaps 'qweight_out'"));
  }
}

TEST_CASE("last_error is per thread") {
  Backend b;
  CHECK(b.table().mem_free(b.raw(), 0x40) == METRALE_STATUS_NOT_FOUND);
  const std::string mine = b.last_error();
  CHECK(contains(mine, "0x40"));
  std::string theirs = "unset";
  std::thread([&] { theirs = b.table().last_error(b.raw()); }).join();
  CHECK(theirs.empty());
  CHECK(b.last_error() == mine);
}
