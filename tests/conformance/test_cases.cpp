// SPDX-License-Identifier: MIT OR Apache-2.0
// The case list covers what the issue asks of it, for the k64 threshold this process sees.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "conformance/conformance.hpp"
#include "linear/selectors.hpp"

#include <algorithm>
#include <set>
#include <utility>

using namespace metrale::conformance;

TEST_CASE("the conformance cases cover rows, odd N, both sides of the k64 switch and MoE routing") {
  const auto all = cases();
  std::set<std::string> names;
  for (const auto& c : all) CHECK_MESSAGE(names.insert(c.name).second, "duplicate case " << c.name);

  const uint32_t min_k = metrale::layers::w4a16_k64_min_k();
  std::set<uint32_t> dispatch_rows;
  bool below = false, above = false, odd_n = false;
  for (const auto& c : all) {
    if (c.kind != CaseKind::dispatch) continue;
    dispatch_rows.insert(c.m);
    below |= c.k < min_k;
    above |= c.k >= min_k;
    odd_n |= c.n % 2 == 1;
  }
  CHECK(dispatch_rows == std::set<uint32_t>{1, 3, 8, 9, 64, 200});
  CHECK(above);
  CHECK(below == (min_k > 128));
  CHECK(odd_n);

  // Every w4a16 kernel is exercised at the rows it accepts, and only those.
  for (const char* kernel : {"w4a16_gemv", "w4a16_gemv_b8", "w4a16_gemm_t", "w4a16_gemm_t_k64", "w4a16_gemm_t_p3",
                             "w4a16_gemm_t_k64_p3", "w4a16_gemm_t_k64_n64_p3", "w4a16_gemm_t_m128_v2", "w4a16_gemm_t_m128_v3"}) {
    CAPTURE(kernel);
    std::set<uint32_t> rows;
    for (const auto& c : all)
      if (c.kind == CaseKind::kernel && c.kernel == kernel) rows.insert(c.m);
    REQUIRE(!rows.empty());
    const uint32_t max_m = std::string(kernel) == "w4a16_gemv" ? 1 : std::string(kernel) == "w4a16_gemv_b8" ? 8 : 200;
    CHECK(*rows.rbegin() == max_m);
  }

  // MoE: uneven routing with idle experts on both expert paths, renormalisation on and off, a
  // shared expert; and the top-k ties case.
  bool uneven_grouped = false, uneven_per_expert = false, no_renorm = false, shared = false, ties = false;
  for (const auto& c : all) {
    if (c.kind == CaseKind::topk_ties) ties = true;
    if (c.kind != CaseKind::moe) continue;
    if (c.routing == Routing::uneven) (c.moe_options.use_grouped_kernel ? uneven_grouped : uneven_per_expert) = true;
    no_renorm |= !c.config.norm_topk_prob;
    shared |= c.config.shared_expert_intermediate_size > 0;
  }
  CHECK(uneven_grouped);
  CHECK(uneven_per_expert);
  CHECK(no_renorm);
  CHECK(shared);
  CHECK(ties);

  // Unquantized bf16 and f16 weights: dense and MoE, decode and prefill rows, bf16 activations.
  for (const auto format : {metrale::layers::WeightFormat::bf16, metrale::layers::WeightFormat::f16}) {
    std::set<std::pair<CaseKind, uint32_t>> seen;
    for (const auto& c : all)
      if (c.formats.weights == format && c.activations == metrale::layers::ActivationQuant::bf16) seen.insert({c.kind, c.m});
    CAPTURE(static_cast<int>(format));
    CHECK(seen.contains({CaseKind::dense, 1}));
    CHECK(seen.contains({CaseKind::dense, 40}));
    CHECK(seen.contains({CaseKind::moe, 1}));
    CHECK(seen.contains({CaseKind::moe, 40}));
  }
}

TEST_CASE("the sample/argmax cases cover a vocab no multiple of a vector width and a real one, several rows") {
  std::set<uint32_t> vocabs;
  for (const auto& c : cases())
    if (c.module == "sample" && c.kernel == "argmax" && c.m >= 6) vocabs.insert(c.n);  // 6: every edge row once
  CHECK(vocabs == std::set<uint32_t>{1001, 151936});
}

TEST_CASE("the deltanet cases cover decode steps and prefill runs, runs past a chunk and under a window, both kernels") {
  std::set<std::string> kernels;
  bool decode = false, past_chunk = false, under_window = false;
  for (const auto& c : cases()) {
    if (c.module != "deltanet" && c.kernel != "rms_norm_zero_centred" && c.kernel != "output_gate") continue;
    kernels.insert(c.module + "/" + c.kernel);
    const auto& runs = c.attn_lengths;
    decode |= c.kernel == "delta_rule_recurrent" && runs.size() > 1 &&
              std::all_of(runs.begin(), runs.end(), [](uint32_t r) { return r == 1; });
    past_chunk |= c.kernel == "delta_rule_chunked" && std::any_of(runs.begin(), runs.end(), [](uint32_t r) { return r > 128; });
    under_window |= c.kernel == "conv_silu" && std::any_of(runs.begin(), runs.end(), [&](uint32_t r) { return r + 1 < c.k; });
  }
  CHECK(kernels == std::set<std::string>{"norm/rms_norm_zero_centred", "attn/output_gate", "deltanet/conv_silu",
                                         "deltanet/delta_rule_recurrent", "deltanet/delta_rule_chunked", "deltanet/gated_norm"});
  CHECK(decode);
  CHECK(past_chunk);
  CHECK(under_window);
}

TEST_CASE("the attn cases cover the paged cache's edges, every head grouping and prefill after past tokens") {
  constexpr uint32_t kPartition = 512;  // attn_decode's split
  std::set<uint32_t> ratios, head_dims, prefill_rows;
  bool length_one = false, ragged = false, split = false, several = false, past = false;
  for (const auto& c : cases()) {
    if (c.kind != CaseKind::attn_decode && c.kind != CaseKind::attn_prefill) continue;
    CAPTURE(c.name);
    REQUIRE(c.attn.kv_heads > 0);
    REQUIRE(c.attn.q_heads % c.attn.kv_heads == 0);
    ratios.insert(c.attn.kv_heads == 1 ? 0 : c.attn.q_heads / c.attn.kv_heads);  // 0: MQA
    head_dims.insert(c.attn.head_dim);
    if (c.kind == CaseKind::attn_prefill) {
      prefill_rows.insert(c.m);
      past |= c.attn_lengths.at(0) > 0;
      continue;
    }
    several |= c.attn_lengths.size() > 1;
    for (uint32_t len : c.attn_lengths) {
      length_one |= len == 1;
      ragged |= len % c.attn.block_size != 0;
      split |= len > 2 * kPartition;
    }
  }
  CHECK(ratios == std::set<uint32_t>{0, 1, 4, 8});
  CHECK(head_dims == std::set<uint32_t>{64, 128});
  CHECK(prefill_rows.contains(1));
  CHECK(prefill_rows.contains(7));
  CHECK(prefill_rows.contains(64));
  CHECK(past);
  CHECK(length_one);
  CHECK(ragged);
  CHECK(split);
  CHECK(several);
}
