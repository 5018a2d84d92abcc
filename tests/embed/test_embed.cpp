// SPDX-License-Identifier: MIT OR Apache-2.0
// The embedding shortcuts (layers/embed.hpp, docs/embedding.md) on the CPU backend: open_runtime
// refuses a bad lever value, EmbeddedFfn gives what FfnComponent gives on host rows and into the
// caller's device buffers, checks its arguments and keeps the audit rows of its build;
// checkpoint_activations follows `metrale run`'s order.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "test_support.hpp"

#include <layers/embed.hpp>
#include <layers/reference/reference.hpp>

#include <metrale/lock.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <string>

using namespace metrale;
using namespace metrale::layers;

namespace {

DiscoveryOptions cpu_only() {
  DiscoveryOptions options;
  options.manifests = std::vector<std::filesystem::path>{CPU_MANIFEST};
  return options;
}

std::shared_ptr<Backend> cpu_backend() {
  static Registry registry = open_runtime(cpu_only());
  return registry.find("cpu");
}

// What the layers give without the shortcut: build, upload, forward, copy back.
std::vector<uint16_t> plain_forward(const ModelConfig& config, const FfnWeights& weights,
                                    const std::vector<uint16_t>& x, uint32_t m) {
  Backend& backend = *cpu_backend();
  FfnComponent ffn = FfnComponent::build(backend, config, weights);
  DeviceBuffer dx(backend, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  const DevicePtr y = ffn.forward(dx.ptr(), m);
  std::vector<uint16_t> out(x.size());
  backend.copy_to_host(out.data(), y, out.size() * 2);
  backend.synchronize();
  return out;
}

LoadedCheckpoint declaring(DeclaredActivations activations) {
  LoadedCheckpoint checkpoint;
  checkpoint.quant.activations = activations;
  checkpoint.quant.source = "ckpt/config.json: quantization_config";
  return checkpoint;
}

}  // namespace

TEST_CASE("open_runtime loads the manifests it is given and refuses a bad lever value") {
  REQUIRE(cpu_backend() != nullptr);
  CHECK(cpu_backend()->name() == "cpu");
  metrale::testing::EnvGuard bad{{"METRALE_W4A16_K64_MIN_K", "lots"}};
  CHECK_THROWS_AS(open_runtime(cpu_only()), Refusal);
}

TEST_CASE("EmbeddedFfn gives FfnComponent's output on host rows and into device buffers") {
  for (const char* preset : {"small-dense", "small-moe"}) {
    CAPTURE(preset);
    const ModelConfig config = *preset_config(preset);
    const FfnWeights weights = synthetic_ffn_weights(config, 7);
    const uint32_t m = 5;
    const std::vector<uint16_t> x = synthetic_activations(m, config.hidden_size, 8);
    const std::vector<uint16_t> want = plain_forward(config, weights, x, m);

    EmbeddedFfn ffn(cpu_backend(), config, weights);
    CHECK(ffn.forward_host(x, m) == want);
    CHECK(ffn.forward_host(std::span(x).first(config.hidden_size), 1) ==
          std::vector<uint16_t>(want.begin(), want.begin() + config.hidden_size));

    DeviceBuffer dx(ffn.backend(), x.size() * 2);
    DeviceBuffer dy(ffn.backend(), x.size() * 2);
    dx.upload(std::span<const uint16_t>(x));
    ffn.forward_into(dx.ptr(), m, dy.ptr());
    CHECK(dy.download<uint16_t>(x.size()) == want);

    // The build's lookups, and only this backend's.
    REQUIRE_FALSE(ffn.build_audit().empty());
    CHECK(std::all_of(ffn.build_audit().begin(), ffn.build_audit().end(),
                      [](const AuditRow& row) { return row.backend == "cpu"; }));
    CHECK(std::any_of(ffn.build_audit().begin(), ffn.build_audit().end(),
                      [](const AuditRow& row) { return row.outcome == LookupOutcome::resolved; }));
  }
}

TEST_CASE("EmbeddedFfn checks its arguments") {
  const ModelConfig config = *preset_config("small-dense");
  const FfnWeights weights = synthetic_ffn_weights(config, 7);
  CHECK_THROWS_AS(EmbeddedFfn(nullptr, config, weights), Error);
  EmbeddedFfn ffn(cpu_backend(), config, weights);
  const std::vector<uint16_t> x = synthetic_activations(2, config.hidden_size, 8);
  try {
    ffn.forward_host(x, 3);
    FAIL("a row count that does not match the values must throw");
  } catch (const Error& e) {
    CHECK(e.status() == Status::invalid_argument);
    CHECK(std::string(e.what()).find("hidden_size " + std::to_string(config.hidden_size)) != std::string::npos);
  }
  CHECK_THROWS_AS(ffn.forward_host({}, 0), Error);
}

TEST_CASE("checkpoint_activations: asked, else the lever, else the checkpoint, else bf16") {
  const ActivationRequest asked = checkpoint_activations(declaring(DeclaredActivations::bf16), "int8");
  CHECK(asked.tier == ActivationQuant::int8);
  CHECK(asked.is_explicit);
  CHECK_THROWS_AS(checkpoint_activations(declaring(DeclaredActivations::bf16), "int3"), Refusal);

  const ActivationRequest declared = checkpoint_activations(declaring(DeclaredActivations::int8_dynamic_token));
  CHECK(declared.tier == ActivationQuant::int8);
  CHECK_FALSE(declared.is_explicit);
  CHECK(declared.source.find("ckpt/config.json") != std::string::npos);
  CHECK(checkpoint_activations(declaring(DeclaredActivations::fp8_dynamic_token)).tier == ActivationQuant::fp8);
  CHECK(checkpoint_activations(declaring(DeclaredActivations::bf16)).tier == ActivationQuant::bf16);

  metrale::testing::EnvGuard lever{{"METRALE_ACTIVATION_QUANTIZATION", "bf16"}};
  const ActivationRequest by_lever = checkpoint_activations(declaring(DeclaredActivations::int8_dynamic_token));
  CHECK(by_lever.tier == ActivationQuant::bf16);
  CHECK(by_lever.is_explicit);
}

TEST_CASE("EmbeddedFfn obeys METRALE_LOCK: the same build starts, another tier or backend is a Refusal") {
  Backend& backend = *cpu_backend();
  LayerRequest request;
  request.model = "small-dense";
  EmbeddedFfn first(cpu_backend(), request);
  testing::TempDir dir;
  const auto lock = dir / "lock.json";
  write_lock(lock, backend, first.build_audit());
  testing::EnvGuard env({{"METRALE_LOCK", lock.string()}});
  CHECK_NOTHROW(EmbeddedFfn(cpu_backend(), request));
  LayerRequest int8 = request;
  int8.activations = TierAsk{"int8", "activations"};
  try {
    EmbeddedFfn refused(cpu_backend(), int8);
    FAIL("a build under another activation tier than the lock's started");
  } catch (const Refusal& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("METRALE_LOCK=" + lock.string()) != std::string::npos);
    CHECK(what.find("layers/ffn/dense_ffn.cpp:") != std::string::npos);
    CHECK(what.find("bf16/w4a16 in the lock, int8/w4a8 in the current configuration") != std::string::npos);
  }
  // The program's own weights go through the same composition, lock included.
  const ModelConfig config = *preset_config("small-dense");
  const FfnWeights weights = synthetic_ffn_weights(config, 7);
  CHECK_NOTHROW(EmbeddedFfn(cpu_backend(), config, weights));
  CHECK_THROWS_AS(EmbeddedFfn(cpu_backend(), config, synthetic_ffn_weights(config, 7, SyntheticFormats{.weights = WeightFormat::w8_zp, .experts = {}})),
                  Refusal);
}
