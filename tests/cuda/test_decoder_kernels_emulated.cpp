// SPDX-License-Identifier: MIT OR Apache-2.0
// The decoder's small CUDA kernels (kernel_src/norm.cu, rope.cu, embed.cu), compiled for the host
// against the CUDA emulation, bit for bit against the f32 mirror of their contracts
// (tests/support/decoder_mirror.hpp; rms_norm_zero_centred's in tests/cuda/hybrid_reference.hpp)
// on inputs that make it exact, at several block sizes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "decoder_mirror.hpp"
#include "hybrid_reference.hpp"
#include "metrale_cuda_emulation.hpp"

// The kernel sources themselves, as NVRTC sees them.
#include "embed.cu"
#include "norm.cu"
#include "rope.cu"

#include <algorithm>

namespace mirror = decoder_mirror;

namespace {

const __nv_bfloat16* bf(const std::vector<uint16_t>& v) { return reinterpret_cast<const __nv_bfloat16*>(v.data()); }
__nv_bfloat16* bf(std::vector<uint16_t>& v) { return reinterpret_cast<__nv_bfloat16*>(v.data()); }

constexpr uint32_t kM = 3, kH = 1000;
constexpr float kEps = 1e-6f;

}  // namespace

TEST_CASE("rms_norm: block-reduced f32 statistics, the bf16 cast before the weight; in place") {
  const auto x = mirror::eighths(size_t{kM} * kH, 1);
  const auto w = mirror::norm_weights(kH, 2);
  const auto want = mirror::rms_norm(x, w, kM, kH, kEps);
  for (const unsigned block : {256u, 96u}) {
    CAPTURE(block);
    std::vector<uint16_t> y(x.size(), 0xffff);
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { rms_norm(bf(x), bf(w), bf(y), kM, kH, kEps); });
    CHECK(y == want);
    std::vector<uint16_t> in_place = x;
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { rms_norm(bf(in_place), bf(w), bf(in_place), kM, kH, kEps); });
    CHECK(in_place == want);
  }
}

TEST_CASE("rms_norm_zero_centred: bf16(x · s · (1 + w)), nothing rounded before the weight; in place; any block") {
  const auto x = mirror::eighths(size_t{kM} * kH, 21);
  const auto w = hybrid_reference::uniform_bf16(kH, -0.75f, 0.75f, 22);  // the offsets from 1
  const auto want = hybrid_reference::rms_norm_zero_centred(x, w, kM, kH, kEps);
  const auto rough = mirror::scaled_rows(kM, kH, 23);  // sums of squares that round
  std::vector<uint16_t> rough_first;
  for (const unsigned block : {1u, 96u, 256u, 1024u}) {
    CAPTURE(block);
    std::vector<uint16_t> y(x.size() + kH, 0xffff);  // a grid one row wider than m writes nothing there
    emu::launch({kM + 1, 1, 1}, {block, 1, 1}, [&] { rms_norm_zero_centred(bf(x), bf(w), bf(y), kM, kH, kEps); });
    CHECK(std::equal(want.begin(), want.end(), y.begin()));
    CHECK(std::all_of(y.begin() + x.size(), y.end(), [](uint16_t v) { return v == 0xffff; }));
    std::vector<uint16_t> in_place = x;
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { rms_norm_zero_centred(bf(in_place), bf(w), bf(in_place), kM, kH, kEps); });
    CHECK(in_place == want);
    std::vector<uint16_t> r(rough.size(), 0xffff);
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { rms_norm_zero_centred(bf(rough), bf(w), bf(r), kM, kH, kEps); });
    if (rough_first.empty()) rough_first = r;
    CHECK(r == rough_first);  // the same bits at every block size
  }
}

TEST_CASE("rms_norm_residual: residual_out = bf16(x + residual), y its rms_norm; outputs over the inputs; add") {
  const auto x = mirror::eighths(size_t{kM} * kH, 3), residual = mirror::eighths(size_t{kM} * kH, 4);
  const auto w = mirror::norm_weights(kH, 5);
  const auto sum = mirror::add(x, residual);
  const auto want = mirror::rms_norm(sum, w, kM, kH, kEps);
  for (const unsigned block : {128u, 200u}) {
    CAPTURE(block);
    std::vector<uint16_t> y(x.size(), 0xffff), s(x.size(), 0xffff);
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { rms_norm_residual(bf(x), bf(residual), bf(w), bf(y), bf(s), kM, kH, kEps); });
    CHECK(s == sum);
    CHECK(y == want);
    std::vector<uint16_t> xs = x, rs = residual;
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { rms_norm_residual(bf(xs), bf(rs), bf(w), bf(xs), bf(rs), kM, kH, kEps); });
    CHECK(rs == sum);
    CHECK(xs == want);
    std::vector<uint16_t> added = x;
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { add(bf(added), bf(residual), bf(added), kM, kH); });
    CHECK(added == sum);
  }
}

TEST_CASE("bias_add: out = bf16(x + bias[j]) per row, rounded once; in place") {
  const auto x = mirror::spread(size_t{kM} * kH, 8), bias = mirror::spread(kH, 9);
  const auto want = mirror::bias_add(x, bias);
  for (const unsigned block : {256u, 96u}) {
    CAPTURE(block);
    std::vector<uint16_t> out(x.size(), 0xffff);
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { bias_add(bf(x), bf(bias), bf(out), kM, kH); });
    CHECK(out == want);
    std::vector<uint16_t> in_place = x;
    emu::launch({kM, 1, 1}, {block, 1, 1}, [&] { bias_add(bf(in_place), bf(bias), bf(in_place), kM, kH); });
    CHECK(in_place == want);
  }
}

TEST_CASE("rope: rotate_half in bf16 on q and k, cos/sin of f32 angles times the scaling") {
  constexpr uint32_t t = 4, q_heads = 4, kv_heads = 2, head_dim = 128;
  constexpr float scaling = 1.125f;
  const auto q = mirror::eighths(size_t{t} * q_heads * head_dim, 6), k = mirror::eighths(size_t{t} * kv_heads * head_dim, 7);
  std::vector<float> inv_freq(head_dim / 2);
  for (uint32_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(1e6f, -2.0f * static_cast<float>(i) / head_dim);
  const std::vector<int32_t> positions{0, 3, 8191, 131071};
  const auto want_q = mirror::rope(q, positions, inv_freq, q_heads, head_dim, scaling);
  const auto want_k = mirror::rope(k, positions, inv_freq, kv_heads, head_dim, scaling);
  for (const unsigned block : {128u, 80u}) {
    CAPTURE(block);
    std::vector<uint16_t> gq = q, gk = k;
    emu::launch({t, 1, 1}, {block, 1, 1},
                [&] { rope(bf(gq), bf(gk), positions.data(), inv_freq.data(), t, q_heads, kv_heads, head_dim, scaling); });
    CHECK(gq == want_q);
    CHECK(gk == want_k);
  }
  std::vector<uint16_t> gq = q, gk = k;
  CHECK_THROWS_WITH_AS(emu::launch({t, 1, 1}, {64, 1, 1},
                                   [&] { rope(bf(gq), bf(gk), positions.data(), inv_freq.data(), t, q_heads, kv_heads, 127, 1.f); }),
                       doctest::Contains("__trap"), std::runtime_error);
}

TEST_CASE("qk_norm_rope: the bits of rms_norm (a block of at least head_dim) on q's and k's head rows, then rope") {
  constexpr float scaling = 1.125f;
  struct Shape {
    uint32_t t, q_heads, kv_heads, head_dim, norm_block;  // norm_block: rms_norm's, at least head_dim
  };
  // 48 heads of 128: two passes over the squares; head_dim 80 pads its squares to 128 and its
  // rms_norm block (96) is no power of two; 1024: four rows a pass.
  for (const auto [t, q_heads, kv_heads, head_dim, norm_block] :
       {Shape{2, 40, 8, 128, 128}, {3, 4, 2, 80, 96}, {2, 3, 1, 2, 32}, {1, 6, 2, 1024, 1024}}) {
    CAPTURE(head_dim);
    const uint32_t q_rows = t * q_heads, k_rows = t * kv_heads;
    const auto inv_freq = mirror::inv_freq(head_dim, 1e6);
    std::vector<int32_t> positions(t);
    for (uint32_t i = 0; i < t; ++i) positions[i] = static_cast<int32_t>(i * 40961u % 131072u);
    const auto q_weight = mirror::norm_weights(head_dim, 9), k_weight = mirror::norm_weights(head_dim, 10);
    const auto fused = [&](std::vector<uint16_t> gq, std::vector<uint16_t> gk, unsigned block) {
      emu::launch({t, 1, 1}, {block, 1, 1}, [&] {
        qk_norm_rope(bf(gq), bf(gk), bf(q_weight), bf(k_weight), positions.data(), inv_freq.data(), t, q_heads, kv_heads,
                     head_dim, kEps, scaling);
      });
      return std::pair{gq, gk};
    };
    // Rows whose sums of squares round: the same bits need the same order of the same operations.
    std::vector<uint16_t> q = mirror::scaled_rows(q_rows, head_dim, 11), k = mirror::scaled_rows(k_rows, head_dim, 12);
    std::vector<uint16_t> composed_q = q, composed_k = k;
    emu::launch({q_rows, 1, 1}, {norm_block, 1, 1},
                [&] { rms_norm(bf(composed_q), bf(q_weight), bf(composed_q), q_rows, head_dim, kEps); });
    emu::launch({k_rows, 1, 1}, {norm_block, 1, 1},
                [&] { rms_norm(bf(composed_k), bf(k_weight), bf(composed_k), k_rows, head_dim, kEps); });
    emu::launch({t, 1, 1}, {128, 1, 1}, [&] {
      rope(bf(composed_q), bf(composed_k), positions.data(), inv_freq.data(), t, q_heads, kv_heads, head_dim, scaling);
    });
    // Rows of eighths: the mirror of the contracts is exact.
    const auto exact_q = mirror::eighths(size_t{q_rows} * head_dim, 13), exact_k = mirror::eighths(size_t{k_rows} * head_dim, 14);
    const auto want_q = mirror::rope(mirror::rms_norm(exact_q, q_weight, q_rows, head_dim, kEps), positions, inv_freq,
                                     q_heads, head_dim, scaling);
    const auto want_k = mirror::rope(mirror::rms_norm(exact_k, k_weight, k_rows, head_dim, kEps), positions, inv_freq,
                                     kv_heads, head_dim, scaling);
    for (const unsigned block : {256u, 80u, 32u}) {
      CAPTURE(block);
      const auto [got_q, got_k] = fused(q, k, block);
      CHECK(got_q == composed_q);
      CHECK(got_k == composed_k);
      const auto [exact_got_q, exact_got_k] = fused(exact_q, exact_k, block);
      CHECK(exact_got_q == want_q);
      CHECK(exact_got_k == want_k);
    }
  }
  std::vector<uint16_t> q = mirror::eighths(4 * 63, 15), k = q, w = mirror::norm_weights(63, 16);
  const std::vector<int32_t> positions{0, 1};
  const std::vector<float> inv_freq(32, 1.0f);
  CHECK_THROWS_WITH_AS(emu::launch({2, 1, 1}, {64, 1, 1},
                                   [&] {
                                     qk_norm_rope(bf(q), bf(k), bf(w), bf(w), positions.data(), inv_freq.data(), 2, 2, 2, 63,
                                                  kEps, 1.f);
                                   }),
                       doctest::Contains("__trap"), std::runtime_error);
}

TEST_CASE("embedding: rows copied by id; an id outside the table traps with nothing written") {
  constexpr uint32_t t = 5, h = 300, vocab = 7;
  const auto table = mirror::eighths(size_t{vocab} * h, 8);
  std::vector<int32_t> ids{6, 0, 6, 2, 5};
  std::vector<uint16_t> out(size_t{t} * h, 0xffff);
  emu::launch({t, 1, 1}, {128, 1, 1}, [&] { embedding(bf(table), ids.data(), bf(out), t, h, vocab); });
  for (uint32_t r = 0; r < t; ++r)
    CHECK(std::equal(out.begin() + r * h, out.begin() + (r + 1) * h, table.begin() + size_t(ids[r]) * h));
  for (const int bad : {7, -1}) {
    CAPTURE(bad);
    ids[3] = bad;
    std::vector<uint16_t> untouched(size_t{t} * h, 0xffff);
    CHECK_THROWS_WITH_AS(emu::launch({t, 1, 1}, {128, 1, 1}, [&] { embedding(bf(table), ids.data(), bf(untouched), t, h, vocab); }),
                         doctest::Contains("__trap"), std::runtime_error);
    CHECK(std::all_of(untouched.begin(), untouched.end(), [](uint16_t v) { return v == 0xffff; }));
  }
}
