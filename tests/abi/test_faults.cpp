// SPDX-License-Identifier: MIT OR Apache-2.0
// Each fault plugin and each bad manifest yields one precise line (file, field or symbol, what was
// expected), and the real CPU backend still loads and computes in the same process.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <metrale/registry.hpp>

#include "test_support.hpp"

#include <cmath>

using namespace metrale;
using namespace metrale::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kCpuManifest = fs::path(CPU_PLUGIN_DIR) / "cpu.json";

nlohmann::json one_kernel_modules() {
  return nlohmann::json::array({{{"name", "w4a16"}, {"kernels", nlohmann::json::array({w4a16_kernel("w4a16_gemm_t")})}}});
}

nlohmann::json manifest_for(const fs::path& library) {
  return {{"format_version", "1.0"}, {"backend", "fault"}, {"library", library.string()},
          {"abi_version", 1},        {"priority", 50},     {"modules", one_kernel_modules()}};
}

// Discovers [bad manifest, the real CPU manifest]; checks the bad entry and that CPU still works.
RegistryEntry check_with_cpu(const fs::path& bad_manifest) {
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{bad_manifest, kCpuManifest};
  auto registry = Registry::discover(options);
  REQUIRE(registry.entries().size() == 2);
  RegistryEntry bad = registry.entries()[0];
  CHECK(bad.state != EntryState::loaded);
  CHECK(bad.reason.find('\n') == std::string::npos);  // one line

  auto cpu = registry.select();
  REQUIRE(cpu->name() == "cpu");
  // Real work on the CPU backend: silu(g) * u over a few values.
  auto silu_mul = cpu->kernel("act", "silu_mul");
  const uint32_t m = 1, i = 4;
  std::vector<uint16_t> gate_up(2 * i);
  auto bf16 = [](float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return static_cast<uint16_t>(bits >> 16);  // exact for these small values
  };
  const float g[4] = {1.0f, -2.0f, 0.5f, 0.0f};
  for (uint32_t j = 0; j < i; ++j) gate_up[j] = bf16(g[j]), gate_up[i + j] = bf16(2.0f);
  DevicePtr in = cpu->alloc(gate_up.size() * 2), out = cpu->alloc(i * 2);
  cpu->copy_to_device(in, gate_up.data(), gate_up.size() * 2);
  cpu->launch(silu_mul, LaunchShape{{1, m, 1}, {256, 1, 1}, 0, 0}, in, out, m, i);
  std::vector<uint16_t> result(i);
  cpu->copy_to_host(result.data(), out, i * 2);
  for (uint32_t j = 0; j < i; ++j) {
    uint32_t bits = uint32_t{result[j]} << 16;
    float got;
    std::memcpy(&got, &bits, 4);
    float want = 2.0f * g[j] / (1.0f + std::exp(-g[j]));
    CHECK(got == doctest::Approx(want).epsilon(0.01));
  }
  cpu->free(in);
  cpu->free(out);
  return bad;
}

}  // namespace

TEST_CASE("fault plugins: one precise line each, CPU unaffected") {
  TempDir dir;
  struct Case {
    std::string variant;
    EntryState state;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases{
      {"no_entry", EntryState::failed, {"libfault_no_entry.so", "no exported symbol metrale_plugin_entry"}},
      {"abi_too_new", EntryState::failed, {"handshake refused", "speaks ABI 99", "this runtime speaks 1..1"}},
      {"abi_too_old", EntryState::failed, {"handshake refused", "speaks ABI 0"}},
      {"create_fails", EntryState::failed, {"create() failed (internal)", "FAULT_CREATE_FAILS"}},
      {"create_throws", EntryState::failed, {"create() let an exception escape the C ABI"}},
      {"null_table", EntryState::failed, {"null function table"}},
      {"table_version_lies", EntryState::failed, {"table says ABI 2 but the handshake chose 1"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.variant);
    auto file = write_file(dir / (c.variant + ".json"), manifest_for(fault_plugin(c.variant)).dump());
    auto bad = check_with_cpu(file);
    CHECK(bad.state == c.state);
    for (const auto& word : c.words) CHECK_MESSAGE(bad.reason.find(word) != std::string::npos, bad.reason);
  }
}

TEST_CASE("library problems: missing, not an ELF, checksum pin") {
  TempDir dir;
  auto missing = write_file(dir / "missing.json", manifest_for(dir / "libnothere.so").dump());
  auto bad = check_with_cpu(missing);
  CHECK(bad.reason.find("libnothere.so") != std::string::npos);
  CHECK(bad.reason.find("/library): file does not exist") != std::string::npos);

  auto text = write_file(dir / "libtext.so", "this is not a shared object\n");
  auto not_elf = write_file(dir / "notelf.json", manifest_for(text).dump());
  bad = check_with_cpu(not_elf);
  CHECK(bad.reason.find("not an ELF shared object") != std::string::npos);

  auto pinned = manifest_for(fault_plugin("good"));
  pinned["library_checksum"] = "xxh3-64:0000000000000000";
  bad = check_with_cpu(write_file(dir / "pinned.json", pinned.dump()));
  CHECK(bad.reason.find("does not match the manifest's pin xxh3-64:0000000000000000") != std::string::npos);
}

TEST_CASE("bad manifests are invalid entries naming file and pointer; CPU unaffected") {
  TempDir dir;
  auto no_backend = manifest_for(fault_plugin("good"));
  no_backend.erase("backend");
  auto bad = check_with_cpu(write_file(dir / "nobackend.json", no_backend.dump()));
  CHECK(bad.state == EntryState::invalid);
  CHECK(bad.reason.find("nobackend.json") != std::string::npos);
  CHECK(bad.reason.find("backend") != std::string::npos);

  bad = check_with_cpu(write_file(dir / "broken.json", "{\"format_version\": \"1.0\", "));
  CHECK(bad.state == EntryState::invalid);
  CHECK(bad.reason.find("broken.json") != std::string::npos);

  auto future = manifest_for(fault_plugin("good"));
  future["format_version"] = "2.0";
  bad = check_with_cpu(write_file(dir / "future.json", future.dump()));
  CHECK(bad.state == EntryState::skipped);

  auto escaping = manifest_for(fault_plugin("good"));
  escaping["library"] = "../../libfault_good.so";
  bad = check_with_cpu(write_file(dir / "escape.json", escaping.dump()));
  CHECK(bad.state == EntryState::invalid);
  CHECK(bad.reason.find("/library") != std::string::npos);
}
