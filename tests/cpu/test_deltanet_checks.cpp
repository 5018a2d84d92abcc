// SPDX-License-Identifier: MIT OR Apache-2.0
// The deltanet module's launch checks (docs/kernels.md, "Module deltanet"; plugins/cpu/README.md):
// every pointer bounded (the states by the largest slot the runs name, the activations by the
// runs' last row), the runs table (no negative entry, no shared row or slot), the shapes
// (kernel_size 2..8, k_dim and v_dim 16..256, v_heads a multiple of k_heads, state_stride at
// least one slot), outputs apart from inputs; each refusal names the argument.
#include "support.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace cpu_test;

namespace {

bool says(Backend& b, const char* text) {
  const std::string error = b.last_error();
  INFO(error);
  return error.find(text) != std::string::npos;
}

// conv_silu over 3 channels, kernel_size 4, 2 slots of 10 floats: x and out 8 rows.
struct ConvArgs {
  Backend& b;
  uint64_t x, weight, states, runs, out;
  uint32_t n_runs = 2, channels = 3, taps = 4, stride = 10;
  explicit ConvArgs(Backend& backend)
      : b(backend), x(b.alloc(64)), weight(b.alloc(3 * 8 * 2)), states(b.alloc(2 * 10 * 4)),
        runs(b.upload(std::vector<int32_t>{0, 3, 1, 4, 4, 0})), out(b.alloc(8 * 3 * 2)) {}
  ~ConvArgs() {
    for (uint64_t a : {x, weight, states, runs, out}) b.free(a);
  }
  metrale_status launch() {
    Args args;
    args.ptr(x).ptr(weight).ptr(states).ptr(runs).ptr(out).u32(n_runs).u32(channels).u32(taps).u32(stride);
    return b.launch(b.kernel("deltanet", "conv_silu"), {n_runs, 1}, args);
  }
  void set_runs(const std::vector<int32_t>& table) {
    REQUIRE(b.table().copy_to_device(b.raw(), runs, table.data(), table.size() * 4, 0) == METRALE_STATUS_OK);
  }
};

// The delta rule over k_heads 1, v_heads 2, k_dim = v_dim 16, 2 slots of 512 floats: 6 rows.
struct DeltaArgs {
  Backend& b;
  const char* kernel;
  uint64_t qkv, a, bb, a_log, dt, states, runs, out;
  uint32_t n_runs = 2, k_heads = 1, v_heads = 2, k_dim = 16, v_dim = 16, stride = 512;
  DeltaArgs(Backend& backend, const char* name)
      : b(backend), kernel(name), qkv(b.upload(std::vector<uint16_t>(6 * 64, 0))), a(b.upload(std::vector<uint16_t>(12, 0))),
        bb(b.upload(std::vector<uint16_t>(12, 0))), a_log(b.upload(std::vector<float>(2, 0.0f))),
        dt(b.upload(std::vector<float>(2, 0.0f))), states(b.upload(std::vector<float>(2 * 512, 0.0f))),
        runs(b.upload(std::vector<int32_t>{0, 2, 1, 3, 3, 0})), out(b.alloc(6 * 32 * 2)) {}
  ~DeltaArgs() {
    for (uint64_t x : {qkv, a, bb, a_log, dt, states, runs, out}) b.free(x);
  }
  metrale_status launch() {
    Args args;
    args.ptr(qkv).ptr(a).ptr(bb).ptr(a_log).ptr(dt).ptr(states).ptr(runs).ptr(out);
    args.u32(n_runs).u32(k_heads).u32(v_heads).u32(k_dim).u32(v_dim).u32(stride);
    return b.launch(b.kernel("deltanet", kernel), {n_runs, v_heads}, args);
  }
  void set_runs(const std::vector<int32_t>& table) {
    REQUIRE(b.table().copy_to_device(b.raw(), runs, table.data(), table.size() * 4, 0) == METRALE_STATUS_OK);
  }
};

constexpr metrale_status kBad = METRALE_STATUS_INVALID_ARGUMENT;

}  // namespace

TEST_CASE("deltanet/conv_silu's launch check: slots inside conv_states, runs apart, kernel_size 2..8, out apart") {
  Backend& b = tier_backend(supported_tiers().front());
  ConvArgs c(b);
  REQUIRE_MESSAGE(c.launch() == METRALE_STATUS_OK, b.last_error());
  c.set_runs({0, 3, 2, 4, 4, 0});  // slot 2 of an allocation of 2
  CHECK(c.launch() == kBad);
  CHECK(says(b, "argument 'conv_states'"));
  CHECK(says(b, "slot 2"));
  c.set_runs({0, 3, 1, 2, 4, 0});  // rows 0..2 and 2..5
  CHECK(c.launch() == kBad);
  CHECK(says(b, "overlap"));
  c.set_runs({0, 3, 1, 4, 4, 1});
  CHECK(c.launch() == kBad);
  CHECK(says(b, "share slot 1"));
  c.set_runs({0, 3, 1, 4, 8, 0});  // rows 4..11 of x, which holds 10 and a bit
  CHECK(c.launch() == kBad);
  CHECK(says(b, "argument 'x'"));
  c.set_runs({0, 3, -1, 4, 4, 0});
  CHECK(c.launch() == kBad);
  CHECK(says(b, "must not be negative"));
  c.set_runs({0, 3, 1, 4, 4, 0});
  for (const uint32_t taps : {1u, 9u}) {
    c.taps = taps;
    CHECK(c.launch() == kBad);
    CHECK(says(b, "kernel_size must be 2..8"));
  }
  c.taps = 4;
  c.stride = 8;  // under (4 - 1) * 3 = 9 floats
  CHECK(c.launch() == kBad);
  CHECK(says(b, "state_stride"));
  c.stride = 10;
  const uint64_t out = c.out;
  c.out = c.x + 6;  // over x
  CHECK(c.launch() == kBad);
  CHECK(says(b, "argument 'out'"));
  CHECK(says(b, "overlaps 'x'"));
  c.out = c.states;  // over the windows
  CHECK(c.launch() == kBad);
  CHECK(says(b, "overlaps 'conv_states'"));
  c.out = out;
  c.n_runs = 3;  // the runs table holds 2
  CHECK(c.launch() == kBad);
  CHECK(says(b, "argument 'runs'"));
  c.n_runs = 2;
  REQUIRE_MESSAGE(c.launch() == METRALE_STATUS_OK, b.last_error());
}

TEST_CASE("deltanet/delta_rule_*'s launch check: slots inside states, runs apart, shapes, outputs apart") {
  Backend& b = tier_backend(supported_tiers().front());
  for (const char* kernel : {"delta_rule_recurrent", "delta_rule_chunked"}) {
    CAPTURE(kernel);
    DeltaArgs d(b, kernel);
    REQUIRE_MESSAGE(d.launch() == METRALE_STATUS_OK, b.last_error());
    d.set_runs({0, 2, 2, 3, 3, 0});
    CHECK(d.launch() == kBad);
    CHECK(says(b, "argument 'states'"));
    d.set_runs({0, 2, 1, 1, 3, 0});
    CHECK(d.launch() == kBad);
    CHECK(says(b, "overlap"));
    d.set_runs({0, 2, 0, 3, 3, 0});
    CHECK(d.launch() == kBad);
    CHECK(says(b, "share slot 0"));
    d.set_runs({0, 2, 1, 3, 4, 0});  // rows 3..6 of 6
    CHECK(d.launch() == kBad);
    CHECK(says(b, "argument 'qkv'"));
    d.set_runs({0, 2, 1, 3, 3, 0});
    d.k_dim = 8;
    CHECK(d.launch() == kBad);
    CHECK(says(b, "k_dim must be 16..256"));
    d.k_dim = 16, d.v_dim = 512;
    CHECK(d.launch() == kBad);
    CHECK(says(b, "v_dim must be 16..256"));
    d.v_dim = 16, d.k_heads = 3;
    CHECK(d.launch() == kBad);
    CHECK(says(b, "multiple of k_heads"));
    d.k_heads = 1, d.stride = 511;
    CHECK(d.launch() == kBad);
    CHECK(says(b, "state_stride"));
    d.stride = 512;
    const uint64_t out = d.out;
    d.out = d.qkv;
    CHECK(d.launch() == kBad);
    CHECK(says(b, "overlaps 'qkv'"));
    d.out = d.states + 4 * 512;  // inside slot 1
    CHECK(d.launch() == kBad);
    CHECK(says(b, "argument 'out'"));
    d.out = out;
    const uint64_t a_log = d.a_log;
    d.a_log = d.a_log + 4;  // one float of two
    CHECK(d.launch() == kBad);
    CHECK(says(b, "argument 'a_log'"));
    d.a_log = a_log;
    REQUIRE_MESSAGE(d.launch() == METRALE_STATUS_OK, b.last_error());
  }
}
