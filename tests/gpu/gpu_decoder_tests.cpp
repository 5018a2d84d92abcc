// SPDX-License-Identifier: MIT OR Apache-2.0
// The decoder's small CUDA kernels (modules norm, rope, embed) on a real GPU: qk_norm_rope bit for
// bit against rms_norm then rope, and the conformance cases of tools/conformance/decoder_cases.cpp,
// against the double-precision reference with the contract's rounding points. The refusal of an id outside the table traps, which leaves the
// context unusable, so it runs last. Suite 'gpu'; exits 77 with one line when no CUDA device is
// usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "conformance/conformance.hpp"
#include "core/device_buffer.hpp"
#include "gpu_support.hpp"
#include "reference/reference.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

using namespace metrale;
using layers::DeviceBuffer;

namespace {

std::shared_ptr<Backend> g_cuda;

}  // namespace

// Before the conformance cases, whose last one traps (doctest runs the cases in file order).
TEST_CASE("qk_norm_rope gives the bits of rms_norm on q's and k's head rows (a block of head_dim), then rope") {
  Backend& b = *g_cuda;
  constexpr uint32_t t = 37, q_heads = 64, kv_heads = 8, head_dim = 128;
  constexpr float eps = 1e-6f, scaling = 1.0f;
  const uint32_t q_rows = t * q_heads, k_rows = t * kv_heads;
  const std::vector<uint16_t> q = layers::synthetic_activations(q_rows, head_dim, 1);
  const std::vector<uint16_t> k = layers::synthetic_activations(k_rows, head_dim, 2);
  const std::vector<uint16_t> q_weight = layers::synthetic_activations(1, head_dim, 3);
  const std::vector<uint16_t> k_weight = layers::synthetic_activations(1, head_dim, 4);
  std::vector<int32_t> positions(t);
  for (uint32_t i = 0; i < t; ++i) positions[i] = static_cast<int32_t>(i * 3541);
  std::vector<float> inv_freq(head_dim / 2);
  for (uint32_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(1e6, -2.0 * i / head_dim));
  DeviceBuffer dqw(b, head_dim * 2), dkw(b, head_dim * 2), dp(b, t * 4), df(b, inv_freq.size() * 4);
  dqw.upload(std::span<const uint16_t>(q_weight));
  dkw.upload(std::span<const uint16_t>(k_weight));
  dp.upload(std::span<const int32_t>(positions));
  df.upload(std::span<const float>(inv_freq));
  const auto run = [&](bool fused, uint32_t block) {
    DeviceBuffer dq(b, q.size() * 2), dk(b, k.size() * 2);
    dq.upload(std::span<const uint16_t>(q));
    dk.upload(std::span<const uint16_t>(k));
    LaunchShape shape;
    shape.block = {block, 1, 1};
    shape.grid = {t, 1, 1};
    if (fused) {
      b.launch(b.kernel("rope", "qk_norm_rope"), shape, dq.ptr(), dk.ptr(), dqw.ptr(), dkw.ptr(), dp.ptr(), df.ptr(), t,
               q_heads, kv_heads, head_dim, eps, scaling);
    } else {
      LaunchShape rows = shape;
      rows.grid = {q_rows, 1, 1};
      b.launch(b.kernel("norm", "rms_norm"), rows, dq.ptr(), dqw.ptr(), dq.ptr(), q_rows, head_dim, eps);
      rows.grid = {k_rows, 1, 1};
      b.launch(b.kernel("norm", "rms_norm"), rows, dk.ptr(), dkw.ptr(), dk.ptr(), k_rows, head_dim, eps);
      b.launch(b.kernel("rope", "rope"), shape, dq.ptr(), dk.ptr(), dp.ptr(), df.ptr(), t, q_heads, kv_heads, head_dim,
               scaling);
    }
    b.synchronize();
    return std::pair{dq.download<uint16_t>(q.size()), dk.download<uint16_t>(k.size())};
  };
  const auto composed = run(false, head_dim);
  CHECK(composed.first != q);
  for (const uint32_t block : {256u, 128u, 96u, 32u}) {
    CAPTURE(block);
    const auto fused = run(true, block);
    CHECK(fused.first == composed.first);
    CHECK(fused.second == composed.second);
  }
}

TEST_CASE("norm, rope and embed kernels match the reference on the GPU, then an out-of-range id fails the launch") {
  std::vector<conformance::Case> last;
  size_t ran = 0;
  for (const conformance::Case& c : conformance::decoder_cases()) {
    if (c.variant == "out_of_range") {
      last.push_back(c);
      continue;
    }
    const conformance::CaseResult r = conformance::run_case(*g_cuda, c);
    CAPTURE(c.name);
    CHECK_MESSAGE(r.outcome == conformance::Outcome::passed, r.detail);
    ran += r.outcome == conformance::Outcome::passed;
  }
  CHECK(ran > 0);
  REQUIRE(last.size() == 1);
  const conformance::CaseResult r = conformance::run_case(*g_cuda, last.front());
  CHECK_MESSAGE(r.outcome == conformance::Outcome::passed, r.detail);
}

int main(int argc, char** argv) {
  static Registry registry = gpu_test::discover_cuda();
  g_cuda = gpu_test::cuda_backend_or_explain(registry);
  if (!g_cuda) return 77;
  std::printf("CUDA backend on %s (%s)\n", g_cuda->device_name().c_str(), g_cuda->target().c_str());
  doctest::Context context(argc, argv);
  const int rc = context.run();
  g_cuda.reset();
  return rc;
}
