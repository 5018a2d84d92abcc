// SPDX-License-Identifier: MIT OR Apache-2.0
// kernel_src/attn.cu compiled for the host against the CUDA emulation of tests/cuda/emulation
// and checked against the double reference of layers/reference/attention.hpp: kv_append's bytes
// (slots outside the pool skipped, nothing written out of bounds), attn_decode +
// attn_decode_combine over several sequences with scattered blocks (lengths 1, ragged, several
// 512-token splits; MHA, GQA 4 and 8, MQA; head_dim 64, 128 and 256), attn_prefill (tensor cores)
// after past tokens at cache block sizes 1 to 256, under each thread schedule and block sizes that
// do and do not divide the work, a partial warp, and its traps.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "reference/attention.hpp"

#include "hybrid_reference.hpp"

#include "metrale_emulated_ptx.hpp"

// The kernel source itself, as NVRTC sees it.
#include "attn.cu"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace {


// kPartition (512, the contract's split) comes from attn.cu.
unsigned ceil_div(unsigned a, unsigned b) { return (a + b - 1) / b; }

uint16_t to_bf16(double value) {  // nearest, ties to even, of a finite double via the exact float
  const float f = static_cast<float>(value);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
double bf16_value(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t count, double amplitude) {
  std::uniform_real_distribution<double> dist(-amplitude, amplitude);
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = to_bf16(dist(rng));
  return out;
}

const __nv_bfloat16* bf(const std::vector<uint16_t>& v) { return reinterpret_cast<const __nv_bfloat16*>(v.data()); }
__nv_bfloat16* bf(std::vector<uint16_t>& v) { return reinterpret_cast<__nv_bfloat16*>(v.data()); }

struct Shape {
  uint32_t head_dim, q_heads, kv_heads, block_size;
};

// Sequences with their blocks scattered through a pool with spare blocks, filled by kv_append.
struct Cache {
  Shape s;
  uint32_t num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> tables;
  std::vector<uint16_t> k_pool, v_pool;
  std::vector<int32_t> slots;
  std::vector<uint16_t> k, v;  // the appended rows [tokens][kv_heads][head_dim]

  Cache(std::mt19937_64& rng, const Shape& shape, const std::vector<uint32_t>& lengths, unsigned threads) : s(shape) {
    num_blocks = metrale::layers::paged_blocks_needed(lengths, s.block_size) + 2;
    std::vector<int32_t> order(num_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const size_t pool = size_t{num_blocks} * s.kv_heads * s.block_size * s.head_dim;
    k_pool = random_bf16(rng, pool, 1.0);
    v_pool = random_bf16(rng, pool, 1.0);
    metrale::layers::PagedTables laid = metrale::layers::paged_tables(lengths, s.block_size, order);
    max_blocks = laid.max_blocks;
    tables = std::move(laid.tables);
    slots = std::move(laid.slots);
    const auto tokens = static_cast<uint32_t>(slots.size());
    k = random_bf16(rng, size_t{tokens} * s.kv_heads * s.head_dim, 1.0);
    v = random_bf16(rng, size_t{tokens} * s.kv_heads * s.head_dim, 1.5);
    emu::launch({tokens, 1, 1}, {threads, 1, 1}, [&] {
      kv_append(bf(k), bf(v), slots.data(), bf(k_pool), bf(v_pool), tokens, s.kv_heads, s.head_dim, s.block_size,
                num_blocks);
    });
  }
  metrale::layers::PagedKvView view() const { return {k_pool, v_pool, s.kv_heads, s.head_dim, s.block_size}; }
};

float scale_of(const Shape& s) { return static_cast<float>(1.0 / std::sqrt(double(s.head_dim))); }

size_t violations(const std::vector<uint16_t>& got, const metrale::layers::ReferenceOutput& ref) {
  REQUIRE(got.size() == ref.value.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += !(std::fabs(bf16_value(got[i]) - ref.value[i]) <= ref.bound[i]);
  return bad;
}

const std::pair<emu::Schedule, unsigned> kRegimes[] = {
    {emu::Schedule::round_robin, 128}, {emu::Schedule::lowest_first, 96}, {emu::Schedule::highest_first, 32}};

}  // namespace

TEST_CASE("kv_append places every row at its slot and skips slots outside the pool") {
  std::mt19937_64 rng(3);
  const Shape s{64, 4, 2, 16};
  Cache cache(rng, s, {21, 3}, 128);
  for (size_t t = 0; t < cache.slots.size(); ++t) {
    const auto slot = static_cast<uint32_t>(cache.slots[t]);
    for (uint32_t h = 0; h < s.kv_heads; ++h)
      for (uint32_t d = 0; d < s.head_dim; ++d) {
        const size_t at = ((size_t{slot / s.block_size} * s.kv_heads + h) * s.block_size + slot % s.block_size) * s.head_dim + d;
        CHECK(cache.k_pool[at] == cache.k[(t * s.kv_heads + h) * s.head_dim + d]);
        CHECK(cache.v_pool[at] == cache.v[(t * s.kv_heads + h) * s.head_dim + d]);
      }
  }
  // Slots past the pool and negative ones write nothing: pools followed by a guard block stay
  // as they were, guard included.
  const std::vector<int32_t> bad{static_cast<int32_t>(cache.num_blocks * s.block_size), -1};
  const auto rows = random_bf16(rng, 2 * s.kv_heads * s.head_dim, 1.0);
  const size_t guard = size_t{s.kv_heads} * s.block_size * s.head_dim;
  std::vector<uint16_t> k_guarded(cache.k_pool.size() + 2 * guard, 0x7fc1), v_guarded = k_guarded;
  const auto k_before = k_guarded, v_before = v_guarded;
  emu::launch({2, 1, 1}, {128, 1, 1}, [&] {
    kv_append(bf(rows), bf(rows), bad.data(), bf(k_guarded) + guard, bf(v_guarded) + guard, 2, s.kv_heads, s.head_dim,
              s.block_size, cache.num_blocks);
  });
  CHECK(k_guarded == k_before);
  CHECK(v_guarded == v_before);
}

TEST_CASE("attn_decode + attn_decode_combine match the reference under every schedule") {
  struct Case {
    Shape shape;
    std::vector<uint32_t> lengths;
  };
  const Case cases[] = {
      {{128, 8, 8, 16}, {1, 17, 100}},
      {{128, 16, 4, 16}, {1300, 5, 513}},
      {{64, 16, 2, 32}, {1025, 31, 1}},
      {{64, 8, 1, 8}, {700, 64}},
      {{256, 4, 2, 16}, {1, 530}},  // Qwen3.5's gated attention heads
  };
  for (const auto& [schedule, threads] : kRegimes) {
    emu::set_schedule(schedule);
    for (const Case& c : cases) {
      CAPTURE(c.shape.head_dim);
      CAPTURE(c.shape.q_heads);
      CAPTURE(c.shape.kv_heads);
      CAPTURE(threads);
      std::mt19937_64 rng(c.shape.q_heads * 17 + threads);
      const Shape& s = c.shape;
      Cache cache(rng, s, c.lengths, threads);
      const auto seqs = static_cast<uint32_t>(c.lengths.size());
      const uint32_t partitions = ceil_div(cache.max_blocks * s.block_size, kPartition);
      const auto q = random_bf16(rng, size_t{seqs} * s.q_heads * s.head_dim, 3.0);
      const std::vector<int32_t> context(c.lengths.begin(), c.lengths.end());
      std::vector<float> partials(size_t{seqs} * s.q_heads * partitions * (s.head_dim + 2), NAN);
      std::vector<uint16_t> out(size_t{seqs} * s.q_heads * s.head_dim, 0xffff);
      emu::launch({partitions, seqs * s.kv_heads, 1}, {threads, 1, 1}, [&] {
        attn_decode(bf(q), bf(cache.k_pool), bf(cache.v_pool), cache.tables.data(), context.data(), partials.data(), seqs,
                    s.q_heads, s.kv_heads, s.head_dim, s.block_size, cache.max_blocks, cache.num_blocks, scale_of(s));
      });
      emu::launch({s.q_heads, seqs, 1}, {threads, 1, 1}, [&] {
        attn_decode_combine(partials.data(), context.data(), bf(out), seqs, s.q_heads, s.head_dim, partitions);
      });
      const auto ref = metrale::layers::reference_paged_attention(q, seqs, s.q_heads, cache.view(), cache.tables,
                                                                  cache.max_blocks, c.lengths, scale_of(s));
      CHECK(violations(out, ref) == 0);
    }
  }
  emu::set_schedule(emu::Schedule::round_robin);
}

struct PrefillCase {
  Shape shape;
  uint32_t m, past;
};

// attn_prefill of one case with `threads` per block, checked against the reference.
void check_prefill(const PrefillCase& c, unsigned threads) {
  CAPTURE(c.shape.head_dim);
  CAPTURE(c.shape.q_heads);
  CAPTURE(c.shape.kv_heads);
  CAPTURE(c.shape.block_size);
  CAPTURE(c.m);
  CAPTURE(c.past);
  CAPTURE(threads);
  std::mt19937_64 rng(c.m * 5 + c.past + threads);
  const Shape& s = c.shape;
  Cache cache(rng, s, {c.past + c.m}, threads);
  const auto q = random_bf16(rng, size_t{c.m} * s.q_heads * s.head_dim, 3.0);
  std::vector<uint16_t> out(size_t{c.m} * s.q_heads * s.head_dim, 0xffff);
  emu::launch({ceil_div(c.m, 64), s.kv_heads, 1}, {threads, 1, 1}, [&] {
    attn_prefill(bf(q), bf(cache.k_pool), bf(cache.v_pool), cache.tables.data(), bf(out), c.m, c.past, s.q_heads,
                 s.kv_heads, s.head_dim, s.block_size, cache.num_blocks, scale_of(s));
  });
  std::vector<int32_t> tables;
  std::vector<uint32_t> context;
  for (uint32_t i = 0; i < c.m; ++i) {
    tables.insert(tables.end(), cache.tables.begin(), cache.tables.end());
    context.push_back(c.past + i + 1);
  }
  const auto ref = metrale::layers::reference_paged_attention(q, c.m, s.q_heads, cache.view(), tables, cache.max_blocks,
                                                              context, scale_of(s));
  CHECK(violations(out, ref) == 0);
}

TEST_CASE("attn_prefill matches the reference for chunks after past tokens") {
  const PrefillCase cases[] = {
      {{128, 16, 4, 16}, 1, 37},
      {{128, 16, 4, 16}, 7, 40},
      {{64, 16, 2, 32}, 64, 20},
      {{64, 8, 1, 8}, 70, 3},
      {{128, 8, 2, 1}, 33, 30},    // one position per cache block
      {{64, 4, 4, 256}, 130, 290},  // three row blocks; the chunk crosses a cache block
      {{128, 16, 2, 64}, 20, 0},    // no past: row i sees positions 0 .. i
      {{256, 4, 2, 16}, 70, 9},     // head_dim 256: chunks of 16 positions, O in two sweeps
      {{256, 2, 1, 1}, 17, 40},
  };
  for (const auto& [schedule, threads] : kRegimes) {
    emu::set_schedule(schedule);
    for (const PrefillCase& c : cases) check_prefill(c, threads);
  }
  emu::set_schedule(emu::Schedule::round_robin);
}

TEST_CASE("attn_prefill: threads past the last whole warp only load; fewer than a warp or another head_dim trap") {
  check_prefill({{128, 16, 4, 16}, 70, 5}, 100);
  check_prefill({{64, 8, 1, 8}, 40, 9}, 40);
  check_prefill({{256, 4, 2, 8}, 40, 3}, 100);
  std::mt19937_64 rng(1);
  for (const auto& [shape, threads] : {std::pair<Shape, unsigned>{{128, 4, 4, 16}, 16}, {{96, 4, 4, 16}, 128}}) {
    CAPTURE(threads);
    Cache cache(rng, shape, {20}, 128);
    const auto q = random_bf16(rng, size_t{20} * shape.q_heads * shape.head_dim, 1.0);
    std::vector<uint16_t> out(q.size(), 0xffff);
    CHECK_THROWS_WITH_AS(emu::launch({1, shape.kv_heads, 1}, {threads, 1, 1},
                                     [&] {
                                       attn_prefill(bf(q), bf(cache.k_pool), bf(cache.v_pool), cache.tables.data(),
                                                    bf(out), 20, 0, shape.q_heads, shape.kv_heads, shape.head_dim,
                                                    shape.block_size, cache.num_blocks, 0.1f);
                                     }),
                         doctest::Contains("__trap"), std::runtime_error);
    CHECK(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == 0xffff; }));
  }
}

TEST_CASE("output_gate: bf16(x · bf16(sigmoid(gate))) bit for bit, in place; a grid past m writes nothing") {
  constexpr uint32_t m = 5, n = 300;
  const auto x = hybrid_reference::uniform_bf16(size_t{m} * n, -4.0f, 4.0f, 1);
  auto gate = hybrid_reference::uniform_bf16(size_t{m} * n, -10.0f, 10.0f, 2);
  gate[0] = 0;                                         // sigma 1/2
  gate[1] = hybrid_reference::to_bf16(100.0f);         // sigma 1
  gate[2] = hybrid_reference::to_bf16(-100.0f);        // sigma 0 (e^100 in f32 is +inf)
  const auto want = hybrid_reference::output_gate(x, gate);
  for (const unsigned block : {1u, 64u, 96u, 1024u}) {
    CAPTURE(block);
    std::vector<uint16_t> out(x.size() + n, 0xffff);
    emu::launch({m + 1, 1, 1}, {block, 1, 1}, [&] { output_gate(bf(x), bf(gate), bf(out), m, n); });
    CHECK(std::equal(want.begin(), want.end(), out.begin()));
    CHECK(std::all_of(out.begin() + x.size(), out.end(), [](uint16_t v) { return v == 0xffff; }));
    std::vector<uint16_t> in_place = x;
    emu::launch({m, 1, 1}, {block, 1, 1}, [&] { output_gate(bf(in_place), bf(gate), bf(in_place), m, n); });
    CHECK(in_place == want);
  }
}
