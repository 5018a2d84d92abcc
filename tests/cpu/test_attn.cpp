// SPDX-License-Identifier: MIT OR Apache-2.0
// The attn module on every tier this CPU has: kv_append places bytes exactly and refuses slots
// outside the pool; attn_decode + attn_decode_combine and attn_prefill agree with the double
// reference (layers/reference/attention.hpp) over a paged cache whose blocks are scattered
// through the pool: several sequences of different lengths (1, not multiples of block_size,
// long enough for several 512-token splits), GQA ratios 1, 3, 4, 5, 6, 8, 128 and MQA, head_dim 64,
// 128 and 256, block sizes 1 to 256, prefill chunks of 1 to 200 rows after past tokens.
#include "support.hpp"

#include "reference/attention.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace cpu_test;

namespace {

constexpr uint32_t kPartition = 512;  // attn_decode's split (docs/kernels.md)

std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t count, double amplitude) {
  std::uniform_real_distribution<double> dist(-amplitude, amplitude);
  std::vector<uint16_t> values(count);
  for (auto& v : values) v = to_bf16(dist(rng));
  return values;
}

struct Shape {
  uint32_t head_dim, q_heads, kv_heads, block_size;
};

std::string describe(const Shape& s) {
  std::ostringstream text;
  text << "head_dim=" << s.head_dim << " q_heads=" << s.q_heads << " kv_heads=" << s.kv_heads
       << " block_size=" << s.block_size;
  return text.str();
}

// Sequences of the given lengths in a pool with spare blocks, each sequence's blocks drawn at
// random from the pool (never contiguous by construction), filled through kv_append.
struct PagedCache {
  Shape shape;
  uint32_t num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> tables;  // [seqs][max_blocks]
  std::vector<uint16_t> k_pool, v_pool;
  uint64_t k_cache = 0, v_cache = 0;

  PagedCache(Backend& b, std::mt19937_64& rng, const Shape& s, const std::vector<uint32_t>& lengths) : shape(s) {
    num_blocks = metrale::layers::paged_blocks_needed(lengths, s.block_size) + 3;
    std::vector<int32_t> free(num_blocks);
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), rng);
    metrale::layers::PagedTables laid = metrale::layers::paged_tables(lengths, s.block_size, free);
    max_blocks = laid.max_blocks;
    tables = std::move(laid.tables);
    const size_t pool = size_t{num_blocks} * s.kv_heads * s.block_size * s.head_dim;
    k_pool = random_bf16(rng, pool, 1.0);  // stale contents where no token was written
    v_pool = random_bf16(rng, pool, 1.0);
    k_cache = b.upload(k_pool);
    v_cache = b.upload(v_pool);
    append(b, rng, laid.slots);
  }

  size_t element(uint32_t block, uint32_t head, uint32_t offset) const {
    return ((size_t{block} * shape.kv_heads + head) * shape.block_size + offset) * shape.head_dim;
  }

  // kv_append of random K and V rows at `slots`, mirrored into the host pools.
  void append(Backend& b, std::mt19937_64& rng, const std::vector<int32_t>& slots) {
    const auto tokens = static_cast<uint32_t>(slots.size());
    const size_t row = size_t{shape.kv_heads} * shape.head_dim;
    const auto k = random_bf16(rng, tokens * row, 1.0), v = random_bf16(rng, tokens * row, 1.5);
    for (uint32_t t = 0; t < tokens; ++t) {
      const auto slot = static_cast<uint32_t>(slots[t]);
      for (uint32_t h = 0; h < shape.kv_heads; ++h) {
        const size_t to = element(slot / shape.block_size, h, slot % shape.block_size);
        std::copy_n(k.begin() + t * row + h * shape.head_dim, shape.head_dim, k_pool.begin() + to);
        std::copy_n(v.begin() + t * row + h * shape.head_dim, shape.head_dim, v_pool.begin() + to);
      }
    }
    Args args;
    args.ptr(b.upload(k)).ptr(b.upload(v)).ptr(b.upload(slots)).ptr(k_cache).ptr(v_cache).u32(tokens);
    args.u32(shape.kv_heads).u32(shape.head_dim).u32(shape.block_size).u32(num_blocks);
    REQUIRE_MESSAGE(b.launch(b.kernel("attn", "kv_append"), {tokens, 1}, args) == METRALE_STATUS_OK, b.last_error());
  }

  metrale::layers::PagedKvView view() const {
    return {k_pool, v_pool, shape.kv_heads, shape.head_dim, shape.block_size};
  }
};

float scale_of(const Shape& s) { return static_cast<float>(1.0 / std::sqrt(double(s.head_dim))); }

void check(const std::vector<uint16_t>& got, const metrale::layers::ReferenceOutput& ref, const std::string& what) {
  REQUIRE(got.size() == ref.value.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::fabs(bf16_value(got[i]) - ref.value[i]);
    if (!(error <= ref.bound[i])) ++bad;
    const double ratio = error / ref.bound[i];
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  INFO(what << ": worst [" << worst / ref.n << "][" << worst % ref.n << "] got " << bf16_value(got[worst]) << " want "
            << ref.value[worst] << " budget " << ref.bound[worst]);
  CHECK(bad == 0);
}

std::vector<uint16_t> run_decode(Backend& b, const PagedCache& cache, const std::vector<uint16_t>& q,
                                 const std::vector<uint32_t>& lengths) {
  const Shape& s = cache.shape;
  const auto seqs = static_cast<uint32_t>(lengths.size());
  const uint32_t partitions = ceil_div(cache.max_blocks * s.block_size, kPartition);
  const std::vector<int32_t> context(lengths.begin(), lengths.end());
  const uint64_t context_lens = b.upload(context);
  const uint64_t partials = b.alloc(size_t{seqs} * s.q_heads * partitions * (s.head_dim + 2) * 4);
  const uint64_t out = b.alloc(size_t{seqs} * s.q_heads * s.head_dim * 2);
  Args decode;
  decode.ptr(b.upload(q)).ptr(cache.k_cache).ptr(cache.v_cache).ptr(b.upload(cache.tables)).ptr(context_lens);
  decode.ptr(partials).u32(seqs).u32(s.q_heads).u32(s.kv_heads).u32(s.head_dim).u32(s.block_size);
  decode.u32(cache.max_blocks).u32(cache.num_blocks).f32(scale_of(s));
  REQUIRE_MESSAGE(b.launch(b.kernel("attn", "attn_decode"), {partitions, seqs * s.kv_heads}, decode) ==
                      METRALE_STATUS_OK,
                  b.last_error());
  Args combine;
  combine.ptr(partials).ptr(context_lens).ptr(out).u32(seqs).u32(s.q_heads).u32(s.head_dim).u32(partitions);
  REQUIRE_MESSAGE(b.launch(b.kernel("attn", "attn_decode_combine"), {s.q_heads, seqs}, combine) == METRALE_STATUS_OK,
                  b.last_error());
  return b.download<uint16_t>(out, size_t{seqs} * s.q_heads * s.head_dim);
}

std::vector<uint16_t> run_prefill(Backend& b, const PagedCache& cache, const std::vector<uint16_t>& q, uint32_t m,
                                  uint32_t past) {
  const Shape& s = cache.shape;
  const std::vector<int32_t> table(cache.tables.begin(), cache.tables.begin() + cache.max_blocks);
  const uint64_t out = b.alloc(size_t{m} * s.q_heads * s.head_dim * 2);
  Args args;
  args.ptr(b.upload(q)).ptr(cache.k_cache).ptr(cache.v_cache).ptr(b.upload(table)).ptr(out).u32(m).u32(past);
  args.u32(s.q_heads).u32(s.kv_heads).u32(s.head_dim).u32(s.block_size).u32(cache.num_blocks).f32(scale_of(s));
  REQUIRE_MESSAGE(b.launch(b.kernel("attn", "attn_prefill"), {ceil_div(m, 64), s.kv_heads}, args) == METRALE_STATUS_OK,
                  b.last_error());
  return b.download<uint16_t>(out, size_t{m} * s.q_heads * s.head_dim);
}

}  // namespace

TEST_CASE("kv_append writes each token's K and V rows into its slot and nothing else, on every tier") {
  for (const Shape& s : {Shape{64, 8, 2, 16}, Shape{256, 16, 2, 16}}) {
    for (const std::string& tier : supported_tiers()) {
      const std::string what = describe(s) + " on " + tier;
      INFO(what);
      Backend& b = tier_backend(tier);
      std::mt19937_64 rng(11);
      PagedCache cache(b, rng, s, {5});
      // Tokens in scattered, distinct slots of several blocks (the contract: one launch's slots are
      // distinct), including the pool's first and last slot.
      const std::vector<int32_t> slots{0, 17, 18, 50, static_cast<int32_t>(cache.num_blocks * s.block_size - 1), 40};
      REQUIRE(std::set<int32_t>(slots.begin(), slots.end()).size() == slots.size());
      cache.append(b, rng, slots);
      CHECK(b.download<uint16_t>(cache.k_cache, cache.k_pool.size()) == cache.k_pool);
      CHECK(b.download<uint16_t>(cache.v_cache, cache.v_pool.size()) == cache.v_pool);
    }
  }
}

TEST_CASE("kv_append refuses a slot outside the pool and writes nothing") {
  Backend& b = tier_backend("baseline");
  const Shape s{128, 4, 4, 16};
  std::mt19937_64 rng(12);
  PagedCache cache(b, rng, s, {20});
  const uint32_t slots_in_pool = cache.num_blocks * s.block_size;
  for (const int32_t bad : {static_cast<int32_t>(slots_in_pool), -1}) {
    CAPTURE(bad);
    const std::vector<int32_t> slots{3, bad};
    const auto rows = random_bf16(rng, 2 * s.kv_heads * s.head_dim, 1.0);
    Args args;
    args.ptr(b.upload(rows)).ptr(b.upload(rows)).ptr(b.upload(slots)).ptr(cache.k_cache).ptr(cache.v_cache).u32(2);
    args.u32(s.kv_heads).u32(s.head_dim).u32(s.block_size).u32(cache.num_blocks);
    CHECK(b.launch(b.kernel("attn", "kv_append"), {2, 1}, args) == METRALE_STATUS_INVALID_ARGUMENT);
    const std::string error = b.last_error();
    CHECK(error.find("slot_mapping[1] = " + std::to_string(bad)) != std::string::npos);
    CHECK(error.find("num_blocks*block_size = " + std::to_string(cache.num_blocks) + "*16") != std::string::npos);
    CHECK(b.download<uint16_t>(cache.k_cache, cache.k_pool.size()) == cache.k_pool);
  }
  // A pool smaller than num_blocks says so.
  Args args;
  const std::vector<int32_t> slots{0};
  const auto rows = random_bf16(rng, s.kv_heads * s.head_dim, 1.0);
  args.ptr(b.upload(rows)).ptr(b.upload(rows)).ptr(b.upload(slots)).ptr(cache.k_cache).ptr(cache.v_cache).u32(1);
  args.u32(s.kv_heads).u32(s.head_dim).u32(s.block_size).u32(cache.num_blocks + 1);
  CHECK(b.launch(b.kernel("attn", "kv_append"), {1, 1}, args) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("argument 'k_cache'") != std::string::npos);
}

TEST_CASE("attn_decode + attn_decode_combine match the reference on every tier") {
  struct Case {
    Shape shape;
    std::vector<uint32_t> lengths;
  };
  const Case cases[] = {
      {{128, 8, 8, 16}, {1, 17, 100, 33}},             // GQA ratio 1 (MHA)
      {{128, 32, 8, 16}, {1300, 5, 512, 513}},         // ratio 4; 3 splits, a split boundary
      {{64, 16, 2, 32}, {2049, 31, 1}},                // ratio 8, 5 splits
      {{64, 8, 1, 8}, {700, 64}},                      // MQA
      {{128, 4, 1, 256}, {257, 1024, 3}},              // MQA with the largest blocks
      // GQA ratios that are not a multiple of the AVX-512 bodies' 4 heads per pass, and blocks
      // smaller than their 16-position chunks (rows copied one by one):
      {{128, 24, 4, 1}, {70, 517}},                    // ratio 6, one token per block
      {{64, 12, 4, 4}, {33, 1025, 16}},                // ratio 3, blocks of 4
      {{128, 10, 2, 16}, {1, 600, 47}},                // ratio 5
      // head_dim 256 (Qwen3.5's and Qwen3-Next's gated attention: 16 q heads over 2 kv heads),
      // MQA with the largest blocks, and 128 q heads per kv head (walked 64 at a time).
      {{256, 16, 2, 16}, {1, 600, 47}},
      {{256, 4, 1, 256}, {257, 1030}},
      {{256, 128, 1, 32}, {3, 530}},
  };
  for (const Case& c : cases) {
    for (const std::string& tier : supported_tiers()) {
      const std::string what = describe(c.shape) + " on " + tier;
      INFO(what);
      Backend& b = tier_backend(tier);
      std::mt19937_64 rng(c.shape.q_heads * 131 + c.lengths[0]);
      const PagedCache cache(b, rng, c.shape, c.lengths);
      const auto seqs = static_cast<uint32_t>(c.lengths.size());
      const auto q = random_bf16(rng, size_t{seqs} * c.shape.q_heads * c.shape.head_dim, 3.0);
      const auto ref = metrale::layers::reference_paged_attention(q, seqs, c.shape.q_heads, cache.view(), cache.tables,
                                                                  cache.max_blocks, c.lengths, scale_of(c.shape));
      check(run_decode(b, cache, q, c.lengths), ref, what);
    }
  }
}

TEST_CASE("attn_prefill matches the reference for chunks after past tokens, on every tier") {
  struct Case {
    Shape shape;
    uint32_t m, past;
  };
  const Case cases[] = {
      {{128, 32, 8, 16}, 1, 37},   // ratio 4, one row (the decode shape through prefill)
      {{128, 32, 8, 16}, 7, 300},  // past not a multiple of block_size
      {{64, 16, 2, 32}, 64, 100},  // ratio 8, one full row tile
      {{64, 8, 1, 8}, 130, 5},     // MQA, three row tiles, the last partial
      {{128, 8, 8, 16}, 64, 0},    // ratio 1, no past
      // Several 32-position tiles and 16-row groups, chunks that end inside a tile, blocks of 1
      // and 256, GQA ratios 3, 5 and 6:
      {{128, 32, 8, 16}, 200, 0},
      {{128, 24, 4, 1}, 40, 3},
      {{64, 12, 4, 256}, 100, 200},
      {{128, 10, 2, 16}, 33, 511},
      // head_dim 256: Qwen3-Next's heads, blocks of 256 (widened in pieces), 128 q heads per kv head.
      {{256, 16, 2, 16}, 70, 33},
      {{256, 8, 1, 256}, 100, 200},
      {{256, 128, 1, 16}, 5, 40},
  };
  for (const Case& c : cases) {
    for (const std::string& tier : supported_tiers()) {
      const std::string what = describe(c.shape) + " m=" + std::to_string(c.m) + " past=" + std::to_string(c.past) +
                               " on " + tier;
      INFO(what);
      Backend& b = tier_backend(tier);
      std::mt19937_64 rng(c.m * 7 + c.past);
      const PagedCache cache(b, rng, c.shape, {c.past + c.m});
      const auto q = random_bf16(rng, size_t{c.m} * c.shape.q_heads * c.shape.head_dim, 3.0);
      std::vector<int32_t> tables;
      std::vector<uint32_t> context;
      for (uint32_t i = 0; i < c.m; ++i) {
        tables.insert(tables.end(), cache.tables.begin(), cache.tables.begin() + cache.max_blocks);
        context.push_back(c.past + i + 1);
      }
      const auto ref = metrale::layers::reference_paged_attention(q, c.m, c.shape.q_heads, cache.view(), tables,
                                                                  cache.max_blocks, context, scale_of(c.shape));
      check(run_prefill(b, cache, q, c.m, c.past), ref, what);
    }
  }
}

TEST_CASE("attn_decode and attn_prefill refuse block tables, lengths and shapes outside the contract") {
  Backend& b = tier_backend("baseline");
  const Shape s{64, 8, 2, 16};
  std::mt19937_64 rng(5);
  PagedCache cache(b, rng, s, {40, 3});
  const auto q = random_bf16(rng, 2 * s.q_heads * s.head_dim, 1.0);
  const uint64_t partials = b.alloc(2 * s.q_heads * 1 * (s.head_dim + 2) * 4);
  const auto decode = [&](std::vector<int32_t> tables, std::vector<int32_t> lengths, uint32_t head_dim,
                          uint32_t q_heads) {
    Args args;
    args.ptr(b.upload(q)).ptr(cache.k_cache).ptr(cache.v_cache).ptr(b.upload(tables)).ptr(b.upload(lengths));
    args.ptr(partials).u32(2).u32(q_heads).u32(s.kv_heads).u32(head_dim).u32(s.block_size).u32(cache.max_blocks);
    args.u32(cache.num_blocks).f32(0.125f);
    const metrale_status status = b.launch(b.kernel("attn", "attn_decode"), {1, 4}, args);
    return status == METRALE_STATUS_OK ? std::string("ok") : b.last_error();
  };
  std::vector<int32_t> tables = cache.tables;
  CHECK(decode(tables, {40, 3}, 64, 8) == "ok");
  tables[1 * cache.max_blocks + 0] = static_cast<int32_t>(cache.num_blocks);  // the block sequence 1 uses
  CHECK(decode(tables, {40, 3}, 64, 8).find("block_tables[1][0] = " + std::to_string(cache.num_blocks) +
                                             " is not a block of the pool") != std::string::npos);
  // Entries past a sequence's context are never read, so need no valid block.
  tables = cache.tables;
  tables[1 * cache.max_blocks + 2] = -7;
  CHECK(decode(tables, {40, 3}, 64, 8) == "ok");
  CHECK(decode(cache.tables, {40, 0}, 64, 8).find("context_lens[1] = 0 must be 1..max_blocks*block_size = 48") !=
        std::string::npos);
  CHECK(decode(cache.tables, {49, 3}, 64, 8).find("context_lens[0] = 49") != std::string::npos);
  CHECK(decode(cache.tables, {40, 3}, 96, 8).find("head_dim must be 64, 128 or 256 (got head_dim=96)") !=
        std::string::npos);
  CHECK(decode(cache.tables, {40, 3}, 64, 7).find("q_heads must be a positive multiple of kv_heads") !=
        std::string::npos);
  // Prefill: the table must cover past + m tokens.
  const uint64_t out = b.alloc(2 * s.q_heads * s.head_dim * 2);
  Args args;
  const std::vector<int32_t> short_table(cache.tables.begin(), cache.tables.begin() + 2);
  args.ptr(b.upload(q)).ptr(cache.k_cache).ptr(cache.v_cache).ptr(b.upload(short_table)).ptr(out).u32(2).u32(31);
  args.u32(s.q_heads).u32(s.kv_heads).u32(s.head_dim).u32(s.block_size).u32(cache.num_blocks).f32(0.125f);
  CHECK(b.launch(b.kernel("attn", "attn_prefill"), {1, 2}, args) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(b.last_error().find("argument 'block_table'") != std::string::npos);
  CHECK(b.last_error().find("ceil((past+m)/block_size) = 3 i32") != std::string::npos);
}
