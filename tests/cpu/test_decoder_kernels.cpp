// SPDX-License-Identifier: MIT OR Apache-2.0
// The decoder's small kernels (docs/kernels.md, modules norm, rope, embed, sample) on every tier, bit for
// bit against the f32 mirror of their contracts (tests/support/decoder_mirror.hpp), on inputs
// that make it exact. The double-precision comparison is the conformance cases'.
#include "support.hpp"

#include "../support/decoder_mirror.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

using namespace cpu_test;

namespace {

namespace mirror = decoder_mirror;

void require_ok(Backend& b, metrale_status status) { REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error()); }

constexpr uint32_t kM = 6, kH = 1000;  // H no multiple of 16: the partial sums' tail
constexpr float kEps = 1e-6f;

}  // namespace

TEST_CASE("norm/rms_norm: the f32 statistics, the bf16 cast before the weight, in place too, on every tier") {
  const auto x = mirror::eighths(size_t{kM} * kH, 7);
  const auto w = mirror::norm_weights(kH, 8);
  const auto want = mirror::rms_norm(x, w, kM, kH, kEps);
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dw = b.upload(w), dy = b.alloc(x.size() * 2);
    Args args;
    args.ptr(dx).ptr(dw).ptr(dy).u32(kM).u32(kH).f32(kEps);
    require_ok(b, b.launch(b.kernel("norm", "rms_norm"), {kM, 1}, args));
    CHECK(b.download<uint16_t>(dy, x.size()) == want);
    Args in_place;
    in_place.ptr(dx).ptr(dw).ptr(dx).u32(kM).u32(kH).f32(kEps);
    require_ok(b, b.launch(b.kernel("norm", "rms_norm"), {kM, 1}, in_place));
    CHECK(b.download<uint16_t>(dx, x.size()) == want);
    for (uint64_t a : {dx, dw, dy}) b.free(a);
  }
}

TEST_CASE("norm/rms_norm_residual: residual_out = bf16(x + residual), then its rms_norm; outputs over the inputs; norm/add") {
  const auto x = mirror::eighths(size_t{kM} * kH, 9), residual = mirror::eighths(size_t{kM} * kH, 10);
  const auto w = mirror::norm_weights(kH, 11);
  const auto sum = mirror::add(x, residual);
  const auto want = mirror::rms_norm(sum, w, kM, kH, kEps);
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dr = b.upload(residual), dw = b.upload(w);
    const uint64_t dy = b.alloc(x.size() * 2), ds = b.alloc(x.size() * 2);
    Args args;
    args.ptr(dx).ptr(dr).ptr(dw).ptr(dy).ptr(ds).u32(kM).u32(kH).f32(kEps);
    require_ok(b, b.launch(b.kernel("norm", "rms_norm_residual"), {kM, 1}, args));
    CHECK(b.download<uint16_t>(ds, x.size()) == sum);
    CHECK(b.download<uint16_t>(dy, x.size()) == want);
    // As a decoder runs it: the sum over the residual stream, the normalised rows over x.
    Args in_place;
    in_place.ptr(dx).ptr(dr).ptr(dw).ptr(dx).ptr(dr).u32(kM).u32(kH).f32(kEps);
    require_ok(b, b.launch(b.kernel("norm", "rms_norm_residual"), {kM, 1}, in_place));
    CHECK(b.download<uint16_t>(dr, x.size()) == sum);
    CHECK(b.download<uint16_t>(dx, x.size()) == want);
    // norm/add, the layers' fallback's first half: the same sum, here over x.
    const uint64_t x2 = b.upload(x), r2 = b.upload(residual);
    Args add;
    add.ptr(x2).ptr(r2).ptr(x2).u32(kM).u32(kH);
    require_ok(b, b.launch(b.kernel("norm", "add"), {kM, 1}, add));
    CHECK(b.download<uint16_t>(x2, x.size()) == sum);
    for (uint64_t a : {dx, dr, dw, dy, ds, x2, r2}) b.free(a);
  }
}

TEST_CASE("norm/bias_add: out = bf16(x + bias[j]) per row, rounded once, in place too, on every tier") {
  const auto x = mirror::spread(size_t{kM} * kH, 13), bias = mirror::spread(kH, 14);
  const auto want = mirror::bias_add(x, bias);
  size_t rounded = 0;  // the inputs make most f32 sums inexact in bf16
  for (size_t i = 0; i < x.size(); ++i)
    rounded += mirror::bf16_value(want[i]) != mirror::bf16_value(x[i]) + mirror::bf16_value(bias[i % kH]);
  REQUIRE(rounded > x.size() / 2);
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dbias = b.upload(bias), dout = b.alloc(x.size() * 2);
    Args args;
    args.ptr(dx).ptr(dbias).ptr(dout).u32(kM).u32(kH);
    require_ok(b, b.launch(b.kernel("norm", "bias_add"), {kM, 1}, args));
    CHECK(b.download<uint16_t>(dout, x.size()) == want);
    Args in_place;
    in_place.ptr(dx).ptr(dbias).ptr(dx).u32(kM).u32(kH);
    require_ok(b, b.launch(b.kernel("norm", "bias_add"), {kM, 1}, in_place));
    CHECK(b.download<uint16_t>(dx, x.size()) == want);
    CHECK(b.download<uint16_t>(dbias, bias.size()) == bias);
    for (uint64_t a : {dx, dbias, dout}) b.free(a);
  }
}

TEST_CASE("rope/rope: rotate_half pairs, f32 angles, bf16 cos/sin times the scaling, every product and sum rounded") {
  constexpr uint32_t t = 5, q_heads = 4, kv_heads = 2, head_dim = 64, half = head_dim / 2;
  constexpr float scaling = 1.25f;
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<uint16_t> q(size_t{t} * q_heads * head_dim), k(size_t{t} * kv_heads * head_dim);
  for (auto& v : q) v = to_bf16(unit(rng));
  for (auto& v : k) v = to_bf16(unit(rng));
  std::vector<float> inv_freq(half);
  for (uint32_t i = 0; i < half; ++i) inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / head_dim));
  const std::vector<int32_t> positions{0, 1, 77, 4096, 131071};
  const auto want_q = mirror::rope(q, positions, inv_freq, q_heads, head_dim, scaling);
  const auto want_k = mirror::rope(k, positions, inv_freq, kv_heads, head_dim, scaling);
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    Backend& b = tier_backend(tier);
    const uint64_t dq = b.upload(q), dk = b.upload(k), dp = b.upload(positions), df = b.upload(inv_freq);
    Args args;
    args.ptr(dq).ptr(dk).ptr(dp).ptr(df).u32(t).u32(q_heads).u32(kv_heads).u32(head_dim).f32(scaling);
    require_ok(b, b.launch(b.kernel("rope", "rope"), {t, 1}, args));
    CHECK(b.download<uint16_t>(dq, q.size()) == want_q);
    CHECK(b.download<uint16_t>(dk, k.size()) == want_k);
    for (uint64_t a : {dq, dk, dp, df}) b.free(a);
  }
}

TEST_CASE("rope/qk_norm_rope: the bits of rms_norm on q's and k's head rows, then rope, on every tier") {
  constexpr float scaling = 1.25f;
  struct Shape {
    uint32_t t, q_heads, kv_heads, head_dim;
  };
  // Many rows at head_dim 128: a sum of squares one ulp off changes some bf16 output only rarely.
  // 200 and 2: partial vectors of 16 in the sums and in the pairs.
  for (const auto [t, q_heads, kv_heads, head_dim] :
       {Shape{32, 32, 8, 128}, {5, 6, 2, 64}, {3, 4, 4, 80}, {2, 3, 2, 200}, {2, 3, 1, 2}}) {
    CAPTURE(head_dim);
    const uint32_t q_rows = t * q_heads, k_rows = t * kv_heads;
    std::vector<int32_t> positions(t);
    for (uint32_t i = 0; i < t; ++i) positions[i] = static_cast<int32_t>((i * 40961u) % 131072u);
    const auto q_weight = mirror::norm_weights(head_dim, 23), k_weight = mirror::norm_weights(head_dim, 24);
    const auto inv_freq = mirror::inv_freq(head_dim, 1e6);
    // Rows whose sums of squares round: the fused kernel must sum in rms_norm's order.
    const auto q = mirror::scaled_rows(q_rows, head_dim, 21), k = mirror::scaled_rows(k_rows, head_dim, 22);
    // Rows of eighths: the mirror of the contracts is exact.
    const auto exact_q = mirror::eighths(size_t{q_rows} * head_dim, 25), exact_k = mirror::eighths(size_t{k_rows} * head_dim, 26);
    const auto mirror_q = mirror::rope(mirror::rms_norm(exact_q, q_weight, q_rows, head_dim, kEps), positions, inv_freq,
                                       q_heads, head_dim, scaling);
    const auto mirror_k = mirror::rope(mirror::rms_norm(exact_k, k_weight, k_rows, head_dim, kEps), positions, inv_freq,
                                       kv_heads, head_dim, scaling);
    for (const std::string& tier : supported_tiers()) {
      CAPTURE(tier);
      Backend& b = tier_backend(tier);
      const uint64_t dqw = b.upload(q_weight), dkw = b.upload(k_weight), dp = b.upload(positions), df = b.upload(inv_freq);
      // Launches qk_norm_rope (fused) or rms_norm, rms_norm, rope on copies of q and k.
      const auto run = [&](const std::vector<uint16_t>& q_in, const std::vector<uint16_t>& k_in, bool fused) {
        const uint64_t dq = b.upload(q_in), dk = b.upload(k_in);
        if (fused) {
          Args args;
          args.ptr(dq).ptr(dk).ptr(dqw).ptr(dkw).ptr(dp).ptr(df).u32(t).u32(q_heads).u32(kv_heads).u32(head_dim).f32(kEps).f32(
              scaling);
          require_ok(b, b.launch(b.kernel("rope", "qk_norm_rope"), {t, 1}, args));
        } else {
          Args norm_q, norm_k, rotate;
          norm_q.ptr(dq).ptr(dqw).ptr(dq).u32(q_rows).u32(head_dim).f32(kEps);
          norm_k.ptr(dk).ptr(dkw).ptr(dk).u32(k_rows).u32(head_dim).f32(kEps);
          rotate.ptr(dq).ptr(dk).ptr(dp).ptr(df).u32(t).u32(q_heads).u32(kv_heads).u32(head_dim).f32(scaling);
          require_ok(b, b.launch(b.kernel("norm", "rms_norm"), {q_rows, 1}, norm_q));
          require_ok(b, b.launch(b.kernel("norm", "rms_norm"), {k_rows, 1}, norm_k));
          require_ok(b, b.launch(b.kernel("rope", "rope"), {t, 1}, rotate));
        }
        std::pair out{b.download<uint16_t>(dq, q_in.size()), b.download<uint16_t>(dk, k_in.size())};
        b.free(dq);
        b.free(dk);
        return out;
      };
      const auto [fused_q, fused_k] = run(q, k, true);
      const auto [composed_q, composed_k] = run(q, k, false);
      CHECK(fused_q != q);
      CHECK(fused_q == composed_q);
      CHECK(fused_k == composed_k);
      const auto [exact_fused_q, exact_fused_k] = run(exact_q, exact_k, true);
      CHECK(exact_fused_q == mirror_q);
      CHECK(exact_fused_k == mirror_k);
      for (uint64_t a : {dqw, dkw, dp, df}) b.free(a);
    }
  }
}

TEST_CASE("embed/embedding copies rows and refuses an id outside the table, naming it") {
  constexpr uint32_t t = 4, h = 48, vocab = 10;
  const auto table = mirror::eighths(size_t{vocab} * h, 12);
  Backend& b = tier_backend(supported_tiers().front());
  const uint64_t dt = b.upload(table), dout = b.alloc(size_t{t} * h * 2);
  const auto run = [&](const std::vector<int32_t>& ids) {
    const uint64_t di = b.upload(ids);
    Args args;
    args.ptr(dt).ptr(di).ptr(dout).u32(t).u32(h).u32(vocab);
    const metrale_status status = b.launch(b.kernel("embed", "embedding"), {t, 1}, args);
    b.free(di);
    return status;
  };
  require_ok(b, run({9, 0, 9, 3}));
  const auto got = b.download<uint16_t>(dout, size_t{t} * h);
  const int32_t ids[] = {9, 0, 9, 3};
  for (uint32_t r = 0; r < t; ++r)
    for (uint32_t j = 0; j < h; ++j) CHECK(got[size_t{r} * h + j] == table[size_t(ids[r]) * h + j]);
  CHECK(run({1, 2, 10, 3}) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error() ==
        "launch embed/embedding: ids[2] = 10 is not a token of the table (vocab=10: ids are 0..9)");
  CHECK(run({-1, 2, 3, 3}) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("ids[0] = -1") != std::string::npos);
  b.free(dt);
  b.free(dout);
}

TEST_CASE("sample/argmax: torch.argmax's choice per row (ties, first and last index, inf, NaN), on every tier") {
  // 1001: no multiple of any vector width; 64: the smallest the rows allow.
  for (const uint32_t vocab : {1001u, 64u}) {
    CAPTURE(vocab);
    const auto rows = mirror::argmax_rows(vocab, 31);
    for (const std::string& tier : supported_tiers()) {
      CAPTURE(tier);
      Backend& b = tier_backend(tier);
      const uint64_t dl = b.upload(rows.logits), di = b.upload(std::vector<int32_t>(rows.m, -7));
      Args args;
      args.ptr(dl).ptr(di).u32(rows.m).u32(vocab);
      require_ok(b, b.launch(b.kernel("sample", "argmax"), {rows.m, 1}, args));
      CHECK(b.download<int32_t>(di, rows.m) == rows.ids);
      CHECK(b.download<uint16_t>(dl, rows.logits.size()) == rows.logits);  // read only
      for (uint64_t a : {dl, di}) b.free(a);
    }
  }
}

TEST_CASE("sample/argmax's launch check: the bounds of logits and ids, no overlap, m and vocab at least 1") {
  Backend& b = tier_backend(supported_tiers().front());
  const uint64_t logits = b.alloc(4 * 100 * 2), ids = b.alloc(16);
  const auto launch = [&](uint64_t l, uint64_t i, uint32_t m, uint32_t vocab) {
    Args args;
    args.ptr(l).ptr(i).u32(m).u32(vocab);
    return b.launch(b.kernel("sample", "argmax"), {std::max(m, 1u), 1}, args);
  };
  CHECK(launch(logits, ids, 4, 100) == METRALE_STATUS_OK);
  CHECK(launch(logits, ids, 4, 101) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("argument 'logits'") != std::string::npos);
  CHECK(b.last_error().find("808 bytes (m*vocab bf16)") != std::string::npos);
  CHECK(launch(logits, ids, 5, 80) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("argument 'ids'") != std::string::npos);
  CHECK(b.last_error().find("20 bytes (m i32)") != std::string::npos);
  CHECK(launch(logits, logits + 8, 4, 90) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("overlap") != std::string::npos);
  CHECK(launch(logits, ids, 0, 100) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(launch(logits, ids, 4, 0) == METRALE_STATUS_INVALID_ARGUMENT);
  b.free(logits);
  b.free(ids);
}

TEST_CASE("the decoder kernels' launch checks name the argument and what was expected") {
  Backend& b = tier_backend(supported_tiers().front());
  const uint64_t small = b.alloc(64), big = b.alloc(size_t{1} << 16);
  Args norm;
  norm.ptr(big).ptr(small).ptr(big).u32(2).u32(256).f32(kEps);
  CHECK(b.launch(b.kernel("norm", "rms_norm"), {2, 1}, norm) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("argument 'weight'") != std::string::npos);
  CHECK(b.last_error().find("512 bytes (h bf16)") != std::string::npos);
  Args bad_eps;
  bad_eps.ptr(big).ptr(big).ptr(big).u32(2).u32(256).f32(std::nanf(""));
  CHECK(b.launch(b.kernel("norm", "rms_norm"), {2, 1}, bad_eps) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("eps must be a finite non-negative f32") != std::string::npos);
  Args short_bias;
  short_bias.ptr(big).ptr(small).ptr(big).u32(2).u32(256);
  CHECK(b.launch(b.kernel("norm", "bias_add"), {2, 1}, short_bias) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("argument 'bias'") != std::string::npos);
  CHECK(b.last_error().find("512 bytes (n bf16)") != std::string::npos);
  Args odd;
  odd.ptr(big).ptr(big).ptr(big).ptr(big).u32(1).u32(1).u32(1).u32(63).f32(1.0f);
  CHECK(b.launch(b.kernel("rope", "rope"), {1, 1}, odd) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error() == "launch rope/rope: head_dim must be even, 2..1024 (got head_dim=63)");
  // qk_norm_rope: (q, k, q_weight, k_weight, positions, inv_freq, t, q_heads, kv_heads, head_dim, eps, scaling);
  // the weights, positions and frequencies zeros.
  const uint64_t aux = b.upload(std::vector<uint16_t>(2048, 0));
  const auto fused = [&](uint64_t q, uint64_t k, uint64_t q_weight, uint32_t head_dim, float eps) {
    Args args;
    args.ptr(q).ptr(k).ptr(q_weight).ptr(aux).ptr(aux).ptr(aux).u32(2).u32(4).u32(2).u32(head_dim).f32(eps).f32(1.0f);
    return b.launch(b.kernel("rope", "qk_norm_rope"), {2, 1}, args);
  };
  const uint64_t q = big, k = big + 4096;  // q: 2 tokens · 4 heads · 128 bf16 = 2048 bytes
  CHECK(fused(q, k, aux, 128, kEps) == METRALE_STATUS_OK);
  CHECK(fused(q, k, aux, 63, kEps) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error() == "launch rope/qk_norm_rope: head_dim must be even, 2..1024 (got head_dim=63)");
  CHECK(fused(q, k, aux, 1026, kEps) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error() == "launch rope/qk_norm_rope: head_dim must be even, 2..1024 (got head_dim=1026)");
  CHECK(fused(q, k, aux, 128, -1.0f) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("eps must be a finite non-negative f32") != std::string::npos);
  CHECK(fused(q, k, small, 128, kEps) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("argument 'q_weight'") != std::string::npos);
  CHECK(b.last_error().find("256 bytes (head_dim bf16)") != std::string::npos);
  CHECK(fused(q, q + 2046, aux, 128, kEps) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("overlap; both are rotated in place") != std::string::npos);
  b.free(aux);
  b.free(small);
  b.free(big);
}
