// SPDX-License-Identifier: MIT OR Apache-2.0
// Weights reach the kernels in the layout the kernels read (docs/layers.md, "On the device: the backend's layout"): the layers run
// the backend's w4a16/w4a16_repack once at load, and refuse at build time a kernel whose
// manifest weight_layout the weights will not be in. The fault plugin's "fault-xor" layout (its
// repack XORs every code word, its w4a16_gemv undoes that) makes a skipped repack visible as
// wrong numbers; manifests whose kernels read a layout nothing produces must fail to build.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "ffn/ffn.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"  // the layer tests' helpers, with tests/support's

#include <metrale/status.hpp>

#include <optional>
#include <string>

using namespace metrale;
using namespace metrale::layers;
using layers_test::contains;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kFaultXorPattern = 0x9abcdef1u;  // kXorLayout of tests/abi/fault_plugin.cpp


// A w4a16-family kernel that reads `layout` (nullopt: no weight_layout, the canonical layout).
nlohmann::json w4a16_kernel_reading(const std::string& name, const std::optional<std::string>& layout) {
  nlohmann::json kernel = testing::w4a16_kernel(name);
  if (layout) kernel["weight_layout"] = *layout;
  return kernel;
}

nlohmann::json repack_kernel(const std::string& layout) {
  auto params = nlohmann::json::array();
  for (const char* p : {"qweight_in", "scales_in", "qweight_out", "scales_out"}) params.push_back({{"name", p}, {"type", "ptr"}});
  for (const char* p : {"n", "k", "count"}) params.push_back({{"name", p}, {"type", "u32"}});
  return {{"name", "w4a16_repack"}, {"params", params}, {"weight_layout", layout}};
}

// What a dense FFN needs from a backend: w4a16_gemv and the required deep-K GEMM reading
// `kernel_layout`, silu_mul, and w4a16_repack producing `repack_layout` when there is one.
nlohmann::json dense_manifest(const std::string& backend, const fs::path& library,
                              const std::optional<std::string>& kernel_layout,
                              const std::optional<std::string>& repack_layout) {
  auto w4a16 = nlohmann::json::array(
      {w4a16_kernel_reading("w4a16_gemv", kernel_layout), w4a16_kernel_reading("w4a16_gemm_t_k64", kernel_layout)});
  if (repack_layout) w4a16.push_back(repack_kernel(*repack_layout));
  auto act = nlohmann::json::array({{{"name", "silu_mul"},
                                     {"params", {{{"name", "gate_up"}, {"type", "ptr"}}, {{"name", "out"}, {"type", "ptr"}},
                                                 {{"name", "m"}, {"type", "u32"}}, {{"name", "i"}, {"type", "u32"}}}}}});
  return testing::manifest_json(backend, library, 1, {{"w4a16", w4a16}, {"act", act}});
}

// One row through `kernel` (w4a16_gemv) on `weights`, against the double-precision reference.
Comparison gemv_against_reference(Backend& b, KernelHandle gemv, const DeviceQuantMatrix& weights, const QuantMatrix& w) {
  const std::vector<uint16_t> x = synthetic_activations(1, w.k, 3);
  DeviceBuffer dx(b, x.size() * 2), dy(b, size_t{w.n} * 2);
  dx.upload(std::span<const uint16_t>(x));
  LaunchShape shape;
  shape.grid = {(w.n + 63) / 64, 1, 1};
  shape.block = {128, 1, 1};
  b.launch(gemv, shape, dx.ptr(), weights.qweight.ptr(), weights.scales.ptr(), dy.ptr(), uint32_t{1}, w.n, w.k);
  b.synchronize();
  return compare_to_reference(dy.download<uint16_t>(w.n), reference_projection(w.view(), x, 1));
}

}  // namespace

TEST_CASE("the layers load weights through the backend's repack: a dense FFN on the fault-xor layout is right") {
  testing::TempDir dir;
  auto registry = testing::discover_manifest(dir, dense_manifest("xor", testing::fault_plugin("xor_layout"), "fault-xor", "fault-xor"));
  auto b = registry.find("xor");
  REQUIRE(b);
  const ModelConfig c = *preset_config("small-dense");
  const FfnWeights w = synthetic_ffn_weights(c, 7);
  uint64_t before = 0;
  for (const auto& row : b->audit().snapshot()) before = std::max(before, row.sequence);

  FfnComponent ffn = FfnComponent::build(*b, c, w);
  REQUIRE(ffn.dense());
  CHECK(ffn.dense()->kernels().projections.kernels().repack);
  bool repack_row = false;
  for (const auto& row : b->audit().snapshot()) {
    if (row.sequence <= before || row.kernel != "w4a16_repack") continue;
    repack_row = true;
    CHECK(row.outcome == LookupOutcome::resolved);
    CHECK(contains(row.site.file, "layers/ffn/"));
  }
  CHECK(repack_row);

  const std::vector<uint16_t> x = synthetic_activations(1, c.hidden_size, 11);
  DeviceBuffer dx(*b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  const DevicePtr y = ffn.forward(dx.ptr(), 1);
  b->synchronize();
  std::vector<uint16_t> got(x.size());
  b->copy_to_host(got.data(), y, got.size() * 2);
  const Comparison cmp = compare_to_reference(got, reference_ffn(w, c, x, 1));
  CHECK_MESSAGE(cmp.passed(), cmp.summary());
}

TEST_CASE("weights that skipped the repack are wrong on that layout, and the layers refuse them before a launch") {
  testing::TempDir dir;
  auto registry = testing::discover_manifest(dir, dense_manifest("xor", testing::fault_plugin("xor_layout"), "fault-xor", "fault-xor"));
  auto b = registry.find("xor");
  REQUIRE(b);
  const QuantMatrix w = synthetic_w4a16("ffn.gate_up", 77, 256, 5);
  const KernelHandle gemv = b->kernel("w4a16", "w4a16_gemv");
  CHECK(weight_layout_of(*b, gemv) == "fault-xor");

  const DeviceQuantMatrix packed = DeviceQuantMatrix::upload(*b, w);
  CHECK(packed.layout == "fault-xor");
  CHECK(packed.qweight.bytes() == w.qweight_bytes());  // same sizes, whatever the layout
  CHECK(packed.scales.bytes() == w.scales_bytes());
  const auto words = packed.qweight.download<uint32_t>(w.qweight.size());
  size_t repacked = 0;
  for (size_t i = 0; i < words.size(); ++i) repacked += words[i] == (w.qweight[i] ^ kFaultXorPattern);
  CHECK(repacked == words.size());
  CHECK(packed.scales.download<uint16_t>(w.scales.size()) == w.scales);
  CHECK_NOTHROW(require_weight_layout(*b, gemv, packed.layout));
  const Comparison right = gemv_against_reference(*b, gemv, packed, w);
  CHECK_MESSAGE(right.passed(), right.summary());

  // The canonical bytes, as a loader that skipped the repack would hand them over.
  const DeviceQuantMatrix raw = DeviceQuantMatrix::upload(*b, w, KernelHandle{});
  CHECK(raw.layout == kCanonicalW4a16Layout);
  try {
    require_weight_layout(*b, gemv, raw.layout);
    FAIL("require_weight_layout accepted canonical weights for a fault-xor kernel");
  } catch (const Error& e) {
    CHECK(e.status() == Status::incompatible);
  }
  const Comparison wrong = gemv_against_reference(*b, gemv, raw, w);
  CHECK_MESSAGE(!wrong.passed(), "a kernel reading fault-xor gave right results on canonical bytes: " << wrong.summary());
}

TEST_CASE("kernels reading a layout the weights will not be in: the build fails naming kernel and layouts") {
  struct Case {
    std::string what;
    std::string variant;
    std::string backend;  // the name the variant describes itself with
    std::optional<std::string> kernel_layout;
    std::optional<std::string> repack_layout;
    std::string expected;  // the layout the kernel reads
    std::string actual;    // the layout the weights would be in
  };
  const std::vector<Case> cases{
      {"no repack kernel", "good", "fault", "fault-xor", std::nullopt, "fault-xor", std::string(kCanonicalW4a16Layout)},
      {"a repack into another layout", "xor_layout", "xor", "other-layout", "fault-xor", "other-layout", "fault-xor"},
      {"canonical kernels behind a repack", "xor_layout", "xor", std::nullopt, "fault-xor", std::string(kCanonicalW4a16Layout),
       "fault-xor"},
  };
  const ModelConfig c = *preset_config("small-dense");
  const FfnWeights w = synthetic_ffn_weights(c, 9);
  for (const Case& k : cases) {
    CAPTURE(k.what);
    testing::TempDir dir;
    auto registry = testing::discover_manifest(dir, dense_manifest(k.backend, testing::fault_plugin(k.variant), k.kernel_layout, k.repack_layout));
    auto b = registry.find(k.backend);
    REQUIRE(b);
    auto check_error = [&](const Error& e) {
      const std::string message = e.what();
      CHECK(e.status() == Status::incompatible);
      CHECK_MESSAGE(contains(message, "w4a16/w4a16_gemv"), message);
      CHECK_MESSAGE(contains(message, "reads its weights in layout '" + k.expected + "'"), message);
      CHECK_MESSAGE(contains(message, "the weights are in layout '" + k.actual + "'"), message);
      CHECK_MESSAGE(contains(message, "w4a16/w4a16_repack with \"weight_layout\": \"" + k.expected + "\""), message);
    };
    try {
      FfnComponent::build(*b, c, w);
      FAIL("the FFN was built");
    } catch (const Error& e) {
      check_error(e);
    }
    // `metrale audit --model` resolves through the same code and says the same.
    try {
      build_ffn_for_audit(*b, c);
      FAIL("build_ffn_for_audit accepted the backend");
    } catch (const Error& e) {
      check_error(e);
    }
  }
}
