// SPDX-License-Identifier: MIT OR Apache-2.0
// Tier selection on a backend that lacks a family (docs/quantization.md, "Selection"): the CPU
// backend through a copy of its manifest with modules or kernels removed. A default tier falls
// back to bf16 activations with audit rows whose tier notes name the missing kernel; an explicit one
// (flag or lever) is a Refusal naming the flag or lever, the kernel and the backend. The same for
// METRALE_FP8_MOE_GROUPED_DECODE without fp8/fp8_grouped_gemv.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <layers/core/levers.hpp>
#include <layers/ffn/dense_ffn.hpp>
#include <layers/ffn/moe.hpp>
#include <layers/deltanet/deltanet.hpp>
#include <metrale/registry.hpp>
#include <metrale/status.hpp>

#include "test_support.hpp"

#include <fstream>

using namespace metrale;
using namespace metrale::layers;
namespace fs = std::filesystem;

namespace {

// The CPU manifest without `modules`, and without `kernels` ("module/name") of the others.
struct Trimmed {
  Registry registry;
  std::shared_ptr<Backend> backend;
};

Trimmed trimmed_cpu(const testing::TempDir& dir, const std::vector<std::string>& modules,
                    const std::vector<std::string>& kernels = {}) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(CPU_MANIFEST));
  manifest["library"] = (fs::path(CPU_MANIFEST).parent_path() / manifest["library"].get<std::string>()).string();
  auto& list = manifest["modules"];
  for (auto it = list.begin(); it != list.end();) {
    const std::string name = (*it)["name"];
    if (std::find(modules.begin(), modules.end(), name) != modules.end()) {
      it = list.erase(it);
      continue;
    }
    auto& ks = (*it)["kernels"];
    for (auto k = ks.begin(); k != ks.end();) {
      const bool drop = std::find(kernels.begin(), kernels.end(), name + "/" + (*k)["name"].get<std::string>()) != kernels.end();
      k = drop ? ks.erase(k) : std::next(k);
    }
    ++it;
  }
  DiscoveryOptions options;
  options.manifests = std::vector<fs::path>{testing::write_file(dir / "cpu.json", manifest.dump())};
  Trimmed t{Registry::discover(options), nullptr};
  t.backend = t.registry.find("cpu");
  REQUIRE(t.backend);
  return t;
}

DenseFfnKernels resolve_dense(Backend& b, WeightFormat format, const ActivationRequest& activations) {
  return DenseFfnLayer::resolve(b, "ffn", 256, 384, Activation::silu, "test", DenseFfnTier{format, false, activations});
}

std::string refusal_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Refusal& e) {
    return e.what();
  }
  FAIL("no Refusal");
  return {};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a default int8 tier falls back to bf16 where w4a8/w8a8 are missing; the audit rows say why") {
  register_levers();
  testing::TempDir dir;
  auto cpu = trimmed_cpu(dir, {"w4a8", "w8a8"});
  for (auto format : {WeightFormat::w4_zp, WeightFormat::w8_zp}) {
    CAPTURE(weight_format_name(format));
    const std::string kernel = format == WeightFormat::w4_zp ? "w4a8/w4a8_gemm" : "w8a8/w8a8_gemm";
    const uint64_t before = cpu.backend->audit().last_sequence();
    const auto k = resolve_dense(*cpu.backend, format, ActivationRequest{ActivationQuant::int8, false, "m/config.json", {}});
    CHECK(k.projections.activations == ActivationQuant::bf16);
    CHECK(k.projections.family() == (format == WeightFormat::w4_zp ? KernelFamily::w4a16_zp : KernelFamily::w8a16));
    CHECK(has(k.projections.tier, "int8 activations (m/config.json) fell back to bf16: " + kernel + " on backend 'cpu': "
                                  "not in manifest"));
    // The abandoned attempt's rows carry the tier they were looked up under; the rows after the
    // fall back the tier the set ended at, with the note saying why.
    const std::string tried = format == WeightFormat::w4_zp ? "int8/w4a8" : "int8/w8a8";
    const std::string ended = format == WeightFormat::w4_zp ? "bf16/w4a16_zp" : "bf16/w8a16";
    bool noted = false, ended_noted = false;
    for (const auto& row : cpu.backend->audit().snapshot()) {
      if (row.sequence <= before || !row.annotation("tier")) continue;
      CAPTURE(row.kernel);
      if (row.module + "/" + row.kernel == kernel) {
        CHECK(row.outcome == LookupOutcome::null_handle);
        CHECK(*row.annotation("tier") == tried);
        CHECK(*row.annotation("tier_note") == std::string(kernel.substr(0, 4)) + ": int8 activations (m/config.json)");
        noted = true;
      } else if (*row.annotation("tier") == ended) {
        CHECK(*row.annotation("tier_note") == k.projections.tier);
        ended_noted = true;
      }
      CHECK((row.annotations.size() == 2 && !row.annotations[1].pinned && row.annotations[0].pinned));
    }
    CHECK(noted);
    CHECK(ended_noted);
  }
}

TEST_CASE("an explicit int8 tier the backend lacks is a Refusal naming the flag or lever, the kernel and the backend") {
  register_levers();
  testing::TempDir dir;
  auto cpu = trimmed_cpu(dir, {"w4a8", "w8a8"});
  const std::string flag = refusal_of([&] {
    resolve_dense(*cpu.backend, WeightFormat::w8_zp, activation_request(TierAsk{"int8", "--activation-quantization"}));
  });
  CHECK(has(flag, "--activation-quantization int8 cannot be honoured for ffn: it needs w8a8/w8a8_gemm on backend 'cpu'"));
  testing::EnvGuard env{{"METRALE_ACTIVATION_QUANTIZATION", "int8"}};
  const std::string lever = refusal_of([&] {
    resolve_dense(*cpu.backend, WeightFormat::w4_zp, activation_request(TierAsk{}));
  });
  CHECK(has(lever, "METRALE_ACTIVATION_QUANTIZATION=int8 cannot be honoured for ffn: it needs w4a8/w4a8_gemm on backend 'cpu'"));
}

TEST_CASE("METRALE_FP8_MOE_GROUPED_DECODE without fp8_grouped_gemv: 1 refuses, unset falls back visibly, 0 skips it") {
  register_levers();
  testing::TempDir dir;
  auto cpu = trimmed_cpu(dir, {}, {"fp8/fp8_grouped_gemv"});
  const ModelConfig moe = parse_model_config({{"model_type", "test_moe"}, {"hidden_size", 256}, {"hidden_act", "silu"},
                                              {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 128}},
                                             "test moe");
  auto resolve = [&] { return MoeLayer::resolve(*cpu.backend, moe, {}, WeightFormat::fp8, false, {}); };
  auto rows_for = [&](uint64_t before) {
    size_t n = 0;
    for (const auto& row : cpu.backend->audit().snapshot()) n += row.sequence > before && row.kernel == "fp8_grouped_gemv";
    return n;
  };
  {
    testing::EnvGuard env{{"METRALE_FP8_MOE_GROUPED_DECODE", "1"}};
    const std::string refused = refusal_of([&] { resolve(); });
    CHECK(has(refused, "METRALE_FP8_MOE_GROUPED_DECODE=1 asks for the cross-row grouped FP8 MoE decode, "
                       "but backend 'cpu' lacks fp8/fp8_grouped_gemv: not in manifest: module 'fp8' lists "));
  }
  {
    testing::EnvGuard env{{"METRALE_FP8_MOE_GROUPED_DECODE", std::nullopt}};
    const uint64_t before = cpu.backend->audit().last_sequence();
    const MoeKernels k = resolve();
    CHECK_FALSE(k.experts.kernels().grouped_gemv);
    CHECK(k.grouped());  // the grouped GEMM serves the decode instead
    CHECK(rows_for(before) == 1);
  }
  {
    testing::EnvGuard env{{"METRALE_FP8_MOE_GROUPED_DECODE", "0"}};
    const uint64_t before = cpu.backend->audit().last_sequence();
    resolve();
    CHECK(rows_for(before) == 0);
  }
}

TEST_CASE("a backend without the deltanet module cannot build a DeltaNet layer (Error naming the kernel); a lever asking for a missing variant is a Refusal") {
  register_levers();
  testing::TempDir dir;
  DeltaNetConfig c;
  c.source = "test";
  c.hidden_size = 256;
  c.k_heads = 2;
  c.v_heads = 4;
  c.k_dim = c.v_dim = 64;
  {
    auto cpu = trimmed_cpu(dir, {"deltanet"});
    try {
      DeltaNetLayer::resolve(*cpu.backend, c, WeightFormat::bf16, false);
      FAIL("no error");
    } catch (const Refusal&) {
      FAIL("a missing kernel nobody asked for by name is not a refusal");
    } catch (const Error& e) {
      CHECK(has(e.what(), "deltanet/conv_silu"));
    }
  }
  testing::TempDir dir2;
  auto cpu = trimmed_cpu(dir2, {}, {"deltanet/delta_rule_chunked"});
  {
    testing::EnvGuard env{{"METRALE_DELTANET_PREFILL", "chunked"}};
    CHECK(has(refusal_of([&] { DeltaNetLayer::resolve(*cpu.backend, c, WeightFormat::bf16, false); }),
              "METRALE_DELTANET_PREFILL=chunked asks for deltanet/delta_rule_chunked"));
  }
  {
    testing::EnvGuard env{{"METRALE_DELTANET_PREFILL", "recurrent"}};
    const DeltaNetKernels k = DeltaNetLayer::resolve(*cpu.backend, c, WeightFormat::bf16, false);
    CHECK(cpu.backend->kernel_name(k.prefill) == "deltanet/delta_rule_recurrent");
  }
}
