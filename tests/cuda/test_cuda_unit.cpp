// SPDX-License-Identifier: MIT OR Apache-2.0
// The CUDA plugin's internals: target rules, the manifest catalog, the compile cache's format and
// its safety under concurrent writers, the CUBIN reader on real NVRTC output, ptxas' report.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "cuda_test_support.hpp"

#include "catalog.hpp"
#include "compile_cache.hpp"
#include "cubin.hpp"
#include "errors.hpp"
#include "nvrtc_compiler.hpp"
#include "targets.hpp"
#include "test_support.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace metrale::cuda;
using metrale::cuda_test::read_text;
using metrale::testing::TempDir;
using metrale::testing::write_file;
namespace fs = std::filesystem;

TEST_CASE("targets: parsing, device naming, gating") {
  CHECK(parse_target("sm_80") == Target{80, '\0'});
  CHECK(parse_target("sm_90a") == Target{90, 'a'});
  CHECK(parse_target("sm_100f") == Target{100, 'f'});
  CHECK_FALSE(parse_target("sm_8"));
  CHECK_FALSE(parse_target("compute_80"));
  CHECK_FALSE(parse_target("sm_80x"));
  CHECK_FALSE(parse_target("sm_"));
  CHECK(target_name(target_for_compute_capability(8, 6)) == "sm_86");
  CHECK(target_name(target_for_compute_capability(9, 0)) == "sm_90a");
  CHECK(target_name(target_for_compute_capability(12, 1)) == "sm_121a");
  const auto t = [](const char* s) { return *parse_target(s); };
  CHECK(target_satisfies(t("sm_90a"), t("sm_90")));
  CHECK(target_satisfies(t("sm_90a"), t("sm_80")));
  CHECK_FALSE(target_satisfies(t("sm_86"), t("sm_90")));
  CHECK(target_satisfies(t("sm_90a"), t("sm_90a")));
  CHECK_FALSE(target_satisfies(t("sm_90"), t("sm_90a")));   // not addressed as arch-specific
  CHECK_FALSE(target_satisfies(t("sm_100a"), t("sm_90a")));  // arch-specific does not carry over
  CHECK(target_satisfies(t("sm_103a"), t("sm_100f")));
  CHECK_FALSE(target_satisfies(t("sm_120a"), t("sm_100f")));
}

TEST_CASE("catalog: the manifest's modules, and bad fields named by JSON pointer") {
  const Catalog catalog = Catalog::parse(read_text(METRALE_TEST_CUDA_MANIFEST), "cuda.json");
  REQUIRE(catalog.find("moe") != nullptr);
  REQUIRE(catalog.find("sample") != nullptr);
  CHECK(catalog.find("sample")->source == "sample.cu");
  REQUIRE(catalog.find("deltanet") != nullptr);
  CHECK(catalog.find("deltanet")->source == "deltanet.cu");
  CHECK(catalog.find("deltanet")->find("delta_rule_chunked") != nullptr);
  CHECK(catalog.find("attn")->find("output_gate") != nullptr);
  CHECK(catalog.find("norm")->find("rms_norm_zero_centred") != nullptr);
  CHECK(catalog.find("moe")->source == "moe.cu");
  const CatalogKernel* v3 = catalog.find("w4a16_v3")->find("w4a16_gemm_t_m128_v3");
  REQUIRE(v3 != nullptr);
  CHECK(v3->min_target == Target{90, '\0'});
  CHECK(v3->params.size() == 7);
  CHECK(catalog.descriptors().size() == 72);
  const CatalogKernel* a8 = catalog.find("fp8")->find("fp8_gemm_a8");
  REQUIRE(a8 != nullptr);
  CHECK(a8->min_target == Target{89, '\0'});
  CHECK(a8->params.size() == 8);
  CHECK_FALSE(catalog.find("quant")->find("quantize_int8")->min_target.has_value());
  CHECK_FALSE(catalog.find("quant")->find("quantize_int8_bf16")->min_target.has_value());
  CHECK(catalog.find("fp8")->find("fp8_gemm_a8_group128")->min_target == Target{89, '\0'});
  CHECK(catalog.find("quant")->find("quantize_fp8_group128_bf16")->min_target == Target{89, '\0'});

  const auto error_of = [](const std::string& json) {
    try {
      Catalog::parse(json, "m.json");
    } catch (const PluginError& e) {
      CHECK(e.status() == METRALE_STATUS_INVALID_ARGUMENT);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("{") .find("m.json: : not valid JSON") != std::string::npos);
  CHECK(error_of(R"({"modules": [{"name": "a", "kernels": []}]})") == "m.json: /modules/0/source: missing");
  CHECK(error_of(R"({"modules": [{"name": "a", "source": "a.cu", "kernels": [{"name": "k", "params": [{"type": "u16"}]}]}]})")
            .find("/modules/0/kernels/0/params/0/type: unknown parameter type \"u16\"") != std::string::npos);
  CHECK(error_of(R"({"modules": [{"name": "a", "source": "a.cu", "kernels": [{"name": "k", "params": [], "min_target": "hopper"}]}]})")
            .find("/modules/0/kernels/0/min_target") != std::string::npos);
}

namespace {

CacheEntry sample_entry(size_t size, char fill) {
  CacheEntry entry;
  entry.image.assign(size, std::byte{static_cast<unsigned char>(fill)});
  entry.log = "ptxas info : Used 32 registers";
  return entry;
}

}  // namespace

TEST_CASE("cache: round trip, keys, and every kind of damage is detected") {
  TempDir dir;
  metrale::cuda_test::LogCapture log;
  CompileCache cache(dir.path(), HostLog(&metrale::cuda_test::LogCapture::callback, &log));
  const CacheKey key = CacheKeyBuilder().add("a").add("bc").finish();
  CHECK(key != CacheKeyBuilder().add("ab").add("c").finish());  // fields are length-prefixed
  CHECK_FALSE(cache.load(key));
  CHECK(log.dump().empty());  // a plain miss is not a warning

  const CacheEntry entry = sample_entry(5000, 'q');
  REQUIRE(cache.store(key, entry));
  auto loaded = cache.load(key);
  REQUIRE(loaded);
  CHECK(loaded->image == entry.image);
  CHECK(loaded->log == entry.log);
  CHECK(loaded->is_cubin);
  CHECK(cache.entry_path(key).parent_path() == dir.path() / "cuda");

  const std::string good = read_text(cache.entry_path(key));
  const auto damaged = [&](std::string bytes, const char* reason) {
    CAPTURE(reason);
    write_file(cache.entry_path(key), bytes);
    log.clear();
    CHECK_FALSE(cache.load(key));
    CHECK(log.contains(METRALE_LOG_WARN, reason));
  };
  std::string flipped = good;
  flipped[good.size() - 10] ^= 1;
  damaged(flipped, "checksum mismatch");
  damaged(good.substr(0, good.size() - 1), "size mismatch");
  damaged(good + "x", "size mismatch");
  damaged(good.substr(0, 10), "truncated header");
  damaged("XXXXXXXX" + good.substr(8), "bad magic");
  // An entry renamed to another key's file is not that key's entry.
  const CacheKey other = CacheKeyBuilder().add("other").finish();
  write_file(cache.entry_path(other), good);
  log.clear();
  CHECK_FALSE(cache.load(other));
  CHECK(log.contains(METRALE_LOG_WARN, "holds key"));
}

TEST_CASE("cache: an entry that is a FIFO, a device, a directory or huge is a miss, then rebuilt") {
  TempDir dir;
  metrale::cuda_test::LogCapture log;
  CompileCache cache(dir.path(), HostLog(&metrale::cuda_test::LogCapture::callback, &log));
  const CacheKey key = CacheKeyBuilder().add("hostile").finish();
  const fs::path path = cache.entry_path(key);
  const CacheEntry entry = sample_entry(3000, 'h');
  fs::create_directories(path.parent_path());
  const auto miss_then_rebuilt = [&](const char* what) {
    CAPTURE(what);
    log.clear();
    CHECK_FALSE(cache.load(key));
    CHECK(log.contains(METRALE_LOG_WARN, path.string()));
    CHECK(log.contains(METRALE_LOG_WARN, what));
    REQUIRE(cache.store(key, entry));
    const auto loaded = cache.load(key);
    REQUIRE(loaded);
    CHECK(loaded->image == entry.image);
    fs::remove(path);
  };
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  miss_then_rebuilt("FIFO");
  fs::create_symlink("/dev/zero", path);
  miss_then_rebuilt("character device");
  fs::create_directory(path);
  miss_then_rebuilt("directory");
  // A sparse file far larger than any compiled module is not read.
  { std::ofstream(path, std::ios::binary) << "x"; }
  fs::resize_file(path, uint64_t{2} << 30);
  miss_then_rebuilt("larger than");

  // A directory that cannot be replaced (not empty): a clear warning, and no entry.
  fs::create_directories(path / "keep");
  log.clear();
  CHECK_FALSE(cache.store(key, entry));
  CHECK(log.contains(METRALE_LOG_WARN, path.string()));
  CHECK(log.contains(METRALE_LOG_WARN, "directory"));
}

TEST_CASE("cache: processes writing and reading one key at once never see a partial entry") {
  TempDir dir;
  const CacheKey key = CacheKeyBuilder().add("shared").finish();
  constexpr int kWriters = 4;
  constexpr int kRounds = 40;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: alternate writes of distinct valid entries with reads; exit 1 on a bad read.
      CompileCache cache(dir.path(), HostLog());
      for (int i = 0; i < kRounds; ++i) {
        if (!cache.store(key, sample_entry(20000 + static_cast<size_t>(w) * 1000, static_cast<char>('a' + w)))) _exit(2);
        const auto e = cache.load(key);
        if (!e) _exit(1);
        const auto first = e->image.front();
        for (const auto b : e->image) {
          if (b != first) _exit(1);
        }
        if (e->image.size() != 20000 + static_cast<size_t>(static_cast<char>(first) - 'a') * 1000) _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  // No temporary file is left behind.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path() / "cuda")) {
    CHECK(e.path().extension() == ".mcache");
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("CUBIN reader on real NVRTC output: kernels, parameters, registers, architecture") {
  ModuleCompiler compiler({{METRALE_TEST_KERNEL_SRC}, std::nullopt, HostLog()});
  const Catalog catalog = Catalog::parse(read_text(METRALE_TEST_CUDA_MANIFEST), "cuda.json");
  const CompiledModule compiled = compiler.compile(*catalog.find("moe"), Target{86, '\0'});
  REQUIRE(compiled.is_cubin);
  CHECK_FALSE(compiled.cache_used);
  REQUIRE(is_elf(compiled.image));
  CHECK(elf_image_size(compiled.image.data()) == compiled.image.size());
  const CubinInfo info = read_cubin(compiled.image);
  CHECK(info.machine == 190);
  CHECK(info.sm == 86);
  CHECK(info.kernels.size() == 6);
  const CubinKernel* grouped = info.find("w4a16_grouped_gemm");
  REQUIRE(grouped != nullptr);
  REQUIRE(grouped->params.size() == 8);
  const uint32_t sizes[] = {8, 8, 8, 8, 8, 4, 4, 4};
  const uint32_t offsets[] = {0, 8, 16, 24, 32, 40, 44, 48};
  for (size_t i = 0; i < 8; ++i) {
    CHECK(grouped->params[i].ordinal == i);
    CHECK(grouped->params[i].size == sizes[i]);
    CHECK(grouped->params[i].offset == offsets[i]);
  }
  CHECK(grouped->param_bytes == 52u);
  REQUIRE(grouped->registers);
  CHECK(*grouped->registers > 8);
  CHECK_FALSE(info.find("not_a_kernel"));
  for (const auto& kernel : catalog.find("moe")->kernels) CHECK(check_kernel(kernel, compiled).empty());

  SUBCASE("damaged images are rejected, not misread") {
    std::vector<std::byte> truncated(compiled.image.begin(), compiled.image.begin() + 200);
    CHECK_THROWS_AS(read_cubin(truncated), CubinError);
    std::vector<std::byte> text(64, std::byte{'x'});
    CHECK_THROWS_AS(read_cubin(text), CubinError);
    CHECK_FALSE(is_elf(text));
  }
}

TEST_CASE("ptxas report: registers, spills, stack and shared memory per entry function") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'alpha' for 'sm_80'\n"
      "ptxas info    : Function properties for alpha\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 46080 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compile time = 1.5 ms\n"
      "ptxas info    : Compiling entry function 'beta' for 'sm_80'\n"
      "ptxas info    : Function properties for beta\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 0 barriers\n";
  const auto stats = parse_ptxas_log(log);
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].name == "alpha");
  CHECK(stats[0].registers == 255u);
  CHECK(stats[0].stack_bytes == 16u);
  CHECK(stats[0].spill_store_bytes == 8u);
  CHECK(stats[0].spill_load_bytes == 12u);
  CHECK(stats[0].shared_bytes == 46080u);
  CHECK(stats[1].name == "beta");
  CHECK(stats[1].registers == 32u);
  CHECK_FALSE(stats[1].shared_bytes);
}
