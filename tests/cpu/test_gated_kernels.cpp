// SPDX-License-Identifier: MIT OR Apache-2.0
// The hybrid models' small kernels (docs/kernels.md): norm/rms_norm_zero_centred, attn/output_gate
// and deltanet/gated_norm on every tier, bit for bit against the f32 mirror of their contracts
// (tests/support/decoder_mirror.hpp) on inputs that make it exact (rows of multiples of 1/8: the
// sums of squares are exact in any order), in place too; their launch checks.
#include "support.hpp"

#include "../support/decoder_mirror.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace cpu_test;

namespace {

namespace mirror = decoder_mirror;

void require_gated_ok(Backend& b, metrale_status status) { REQUIRE_MESSAGE(status == METRALE_STATUS_OK, b.last_error()); }

constexpr float kGatedEps = 1e-6f;

// Weights as the zero-centred norm stores them: offsets from 1 in (-0.75, 0.75).
std::vector<uint16_t> offsets(size_t count, uint64_t stream) {
  std::vector<uint16_t> w = mirror::norm_weights(count, stream);
  for (uint16_t& v : w) v = mirror::to_bf16(mirror::bf16_value(v) - 1.0f);
  return w;
}

bool says(Backend& b, const char* text) {
  INFO(b.last_error());
  return b.last_error().find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("norm/rms_norm_zero_centred: y = bf16(x * s * (1 + w)), no rounding before the weight, in place, every tier") {
  constexpr uint32_t kM = 7, kH = 1000;  // H no multiple of 16: the partial sums' tail
  const auto x = mirror::eighths(size_t{kM} * kH, 21);
  const auto w = offsets(kH, 22);
  const auto want = mirror::rms_norm_zero_centred(x, w, kM, kH, kGatedEps);
  CHECK(want != mirror::rms_norm(x, w, kM, kH, kGatedEps));  // the two norms differ on these rows
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dw = b.upload(w), dy = b.alloc(x.size() * 2);
    Args args;
    args.ptr(dx).ptr(dw).ptr(dy).u32(kM).u32(kH).f32(kGatedEps);
    require_gated_ok(b, b.launch(b.kernel("norm", "rms_norm_zero_centred"), {kM, 1}, args));
    CHECK(b.download<uint16_t>(dy, x.size()) == want);
    Args in_place;
    in_place.ptr(dx).ptr(dw).ptr(dx).u32(kM).u32(kH).f32(kGatedEps);
    require_gated_ok(b, b.launch(b.kernel("norm", "rms_norm_zero_centred"), {kM, 1}, in_place));
    CHECK(b.download<uint16_t>(dx, x.size()) == want);
    for (uint64_t a : {dx, dw, dy}) b.free(a);
  }
}

TEST_CASE("attn/output_gate: out = bf16(x * bf16(sigmoid(gate))), rounded at both points, in place, every tier") {
  constexpr uint32_t kM = 5, kN = 999;
  const auto x = mirror::spread(size_t{kM} * kN, 23), gate = mirror::eighths(size_t{kM} * kN, 24);
  const auto want = mirror::output_gate(x, gate);
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dg = b.upload(gate), dout = b.alloc(x.size() * 2);
    Args args;
    args.ptr(dx).ptr(dg).ptr(dout).u32(kM).u32(kN);
    require_gated_ok(b, b.launch(b.kernel("attn", "output_gate"), {kM, 1}, args));
    CHECK(b.download<uint16_t>(dout, x.size()) == want);
    Args in_place;
    in_place.ptr(dx).ptr(dg).ptr(dx).u32(kM).u32(kN);
    require_gated_ok(b, b.launch(b.kernel("attn", "output_gate"), {kM, 1}, in_place));
    CHECK(b.download<uint16_t>(dx, x.size()) == want);
    for (uint64_t a : {dx, dg, dout}) b.free(a);
  }
}

TEST_CASE("deltanet/gated_norm: y = bf16(w * bf16(x * s) * silu(z)) per head row, in place, every tier") {
  constexpr uint32_t kRows = 9, kDim = 128;  // 3 tokens of 3 value heads
  const auto x = mirror::eighths(size_t{kRows} * kDim, 25), z = mirror::spread(size_t{kRows} * kDim, 26);
  std::vector<float> w;
  for (uint16_t v : mirror::norm_weights(kDim, 27)) w.push_back(mirror::bf16_value(v) + 0x1p-12f);  // no bf16
  const auto want = mirror::gated_norm(x, z, w, kRows, kDim, kGatedEps);
  for (const std::string& tier : supported_tiers()) {
    CAPTURE(tier);
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dz = b.upload(z), dw = b.upload(w), dy = b.alloc(x.size() * 2);
    Args args;
    args.ptr(dx).ptr(dz).ptr(dw).ptr(dy).u32(kRows).u32(kDim).f32(kGatedEps);
    require_gated_ok(b, b.launch(b.kernel("deltanet", "gated_norm"), {kRows, 1}, args));
    CHECK(b.download<uint16_t>(dy, x.size()) == want);
    Args in_place;
    in_place.ptr(dx).ptr(dz).ptr(dw).ptr(dx).u32(kRows).u32(kDim).f32(kGatedEps);
    require_gated_ok(b, b.launch(b.kernel("deltanet", "gated_norm"), {kRows, 1}, in_place));
    CHECK(b.download<uint16_t>(dx, x.size()) == want);
    for (uint64_t a : {dx, dz, dw, dy}) b.free(a);
  }
}

TEST_CASE("the launch checks of rms_norm_zero_centred, output_gate and gated_norm: bounds, in place only, eps") {
  Backend& b = tier_backend(supported_tiers().front());
  const uint64_t big = b.alloc(size_t{1} << 14), small = b.alloc(64);
  const auto norm = [&](uint64_t x, uint64_t w, uint64_t y, float eps) {
    Args args;
    args.ptr(x).ptr(w).ptr(y).u32(2).u32(256).f32(eps);
    return b.launch(b.kernel("norm", "rms_norm_zero_centred"), {2, 1}, args);
  };
  CHECK(norm(big, big + 4096, big, kGatedEps) == METRALE_STATUS_OK);
  CHECK(norm(big, small, big, kGatedEps) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(says(b, "argument 'weight'"));
  CHECK(norm(big, big + 4096, big + 2, kGatedEps) == METRALE_STATUS_INVALID_ARGUMENT);  // y over x, shifted
  CHECK(says(b, "overlaps x"));
  CHECK(norm(big, big + 4096, big + 4000, kGatedEps) == METRALE_STATUS_INVALID_ARGUMENT);  // y over the weight
  CHECK(says(b, "overlaps 'weight'"));
  CHECK(norm(big, big + 4096, big, -1.0f) == METRALE_STATUS_INVALID_ARGUMENT);
  const auto gate = [&](uint64_t x, uint64_t g, uint64_t out, uint32_t m) {
    Args args;
    args.ptr(x).ptr(g).ptr(out).u32(m).u32(100);
    return b.launch(b.kernel("attn", "output_gate"), {m, 1}, args);
  };
  CHECK(gate(big, big + 4096, big, 4) == METRALE_STATUS_OK);
  CHECK(gate(big, small, big, 4) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(says(b, "argument 'gate'"));
  CHECK(gate(big, big + 4096, big + 4096, 4) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(says(b, "overlaps 'gate'"));
  const auto gated = [&](uint64_t x, uint64_t z, uint64_t w, uint64_t y) {
    Args args;
    args.ptr(x).ptr(z).ptr(w).ptr(y).u32(3).u32(64).f32(kGatedEps);
    return b.launch(b.kernel("deltanet", "gated_norm"), {3, 1}, args);
  };
  CHECK(gated(big, big + 4096, big + 8192, big) == METRALE_STATUS_OK);
  CHECK(gated(big, big + 4096, small, big) == METRALE_STATUS_INVALID_ARGUMENT);  // 64 floats
  CHECK(says(b, "256 bytes (dim f32)"));
  CHECK(gated(big, big + 4096, big + 8192, big + 4096) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(says(b, "overlaps 'z'"));
  b.free(big);
  b.free(small);
}
