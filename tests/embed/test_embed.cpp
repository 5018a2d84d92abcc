// SPDX-License-Identifier: MIT OR Apache-2.0
// The embedding API (layers/embed.hpp, docs/embedding.md) on the CPU backend: open_runtime refuses
// a bad lever value; an EmbeddedFfn opened from a LayerRequest gives what the layers give on host
// rows and into the caller's device buffers, checks its arguments, reports what it was opened
// from and its activation tier in `metrale run`'s order, keeps the audit rows of its build and
// obeys METRALE_LOCK. The tests link the in-tree library and compare with its internals.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "test_support.hpp"

#include <layers/compose.hpp>
#include <layers/core/device_buffer.hpp>
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

LayerRequest synthetic(const char* model, uint64_t seed) {
  LayerRequest request;
  request.model = model;
  request.seed = seed;
  return request;
}

// What the layers give without the embedding API: build, upload, forward, copy back.
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

// A checkpoint's layer declaring `activations`, with synthetic weights (no files).
LoadedCheckpoint declaring(DeclaredActivations activations) {
  LoadedCheckpoint checkpoint;
  checkpoint.config = *preset_config("small-dense");
  checkpoint.weights = synthetic_ffn_weights(checkpoint.config, 7);
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

TEST_CASE("EmbeddedFfn gives the layers' output on host rows and into device buffers") {
  for (const char* preset : {"small-dense", "small-moe"}) {
    CAPTURE(preset);
    const ModelConfig config = *preset_config(preset);
    const uint32_t m = 5;
    const std::vector<uint16_t> x = synthetic_activations(m, config.hidden_size, 8);
    const std::vector<uint16_t> want = plain_forward(config, synthetic_ffn_weights(config, 7), x, m);

    EmbeddedFfn ffn(cpu_backend(), synthetic(preset, 7));
    CHECK(ffn.hidden_size() == config.hidden_size);
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
    const std::vector<PlanStep> plan = ffn.plan(m);
    REQUIRE_FALSE(plan.empty());
    CHECK(plan.front().step.starts_with("ffn."));

    // Moved, it is the same layer.
    EmbeddedFfn moved = std::move(ffn);
    CHECK(moved.forward_host(x, m) == want);
  }
}

TEST_CASE("EmbeddedFfn opens a file of the program's own weights as it opens a checkpoint") {
  const ModelConfig config = *preset_config("small-dense");
  const FfnWeights weights = synthetic_ffn_weights(config, 11);
  testing::TempDir dir;
  save_ffn_weights(weights, config, dir / "ffn.safetensors");
  LayerRequest request = synthetic("small-dense", 1);
  request.weights = (dir / "ffn.safetensors").string();
  EmbeddedFfn ffn(cpu_backend(), request);
  CHECK(ffn.info().weights_source == request.weights);
  CHECK(ffn.info().model == "preset small-dense");
  const std::vector<uint16_t> x = synthetic_activations(3, config.hidden_size, 8);
  CHECK(ffn.forward_host(x, 3) == plain_forward(config, weights, x, 3));
}

TEST_CASE("EmbeddedFfn checks its arguments") {
  CHECK_THROWS_AS(EmbeddedFfn(nullptr, synthetic("small-dense", 7)), Error);
  EmbeddedFfn ffn(cpu_backend(), synthetic("small-dense", 7));
  const uint32_t hidden = ffn.hidden_size();
  const std::vector<uint16_t> x(size_t{2} * hidden);
  try {
    ffn.forward_host(x, 3);
    FAIL("a row count that does not match the values must throw");
  } catch (const Error& e) {
    CHECK(e.status() == Status::invalid_argument);
    CHECK(std::string(e.what()).find("hidden_size " + std::to_string(hidden)) != std::string::npos);
  }
  CHECK_THROWS_AS(ffn.forward_host({}, 0), Error);
}

TEST_CASE("EmbeddedFfn's activation tier: asked, else the lever, else the checkpoint's, else bf16") {
  LayerRequest request = synthetic("small-dense", 7);
  const LayerInfo plain = EmbeddedFfn(cpu_backend(), request).info();
  CHECK(plain.activations == "bf16");
  CHECK(plain.activations_source == "default");
  CHECK(plain.weights_source == "synthetic (seed 7)");
  CHECK_FALSE(plain.layer);
  CHECK_FALSE(plain.tiers.empty());

  request.activations = TierAsk{"int8", "activations"};
  const LayerInfo asked = EmbeddedFfn(cpu_backend(), request).info();
  CHECK(asked.activations == "int8");
  CHECK(asked.activations_source == "activations int8");
  request.activations = TierAsk{"int3", "activations"};
  CHECK_THROWS_AS(EmbeddedFfn(cpu_backend(), request), Refusal);

  // A checkpoint's declaration is the default (the composition EmbeddedFfn opens it through).
  const OpenedLayer declared =
      open_layer(*cpu_backend(), checkpoint_source(declaring(DeclaredActivations::int8_dynamic_token)), LayerRequest{});
  CHECK(declared.activations.tier == ActivationQuant::int8);
  CHECK_FALSE(declared.activations.is_explicit);
  CHECK(declared.activations.source.find("ckpt/config.json") != std::string::npos);
  CHECK(open_layer(*cpu_backend(), checkpoint_source(declaring(DeclaredActivations::bf16)), LayerRequest{})
            .activations.tier == ActivationQuant::bf16);

  metrale::testing::EnvGuard lever{{"METRALE_ACTIVATION_QUANTIZATION", "int8"}};
  const LayerInfo by_lever = EmbeddedFfn(cpu_backend(), synthetic("small-dense", 7)).info();
  CHECK(by_lever.activations == "int8");
  CHECK(by_lever.activations_source.find("METRALE_ACTIVATION_QUANTIZATION") != std::string::npos);
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
  LayerRequest w8 = request;
  w8.weight_format = TierAsk{"int8", "weights"};
  CHECK_THROWS_AS(EmbeddedFfn(cpu_backend(), w8), Refusal);
  // A program's own weights in memory (in-tree only) go through the same composition, lock included.
  const ModelConfig config = *preset_config("small-dense");
  CHECK_NOTHROW(open_layer(backend, layer_source(config, synthetic_ffn_weights(config, 7)), LayerRequest{}));
  const SyntheticFormats int8_weights{.weights = WeightFormat::w8_zp, .experts = {}};
  CHECK_THROWS_AS(open_layer(backend, layer_source(config, synthetic_ffn_weights(config, 7, int8_weights)), LayerRequest{}),
                  Refusal);
}
