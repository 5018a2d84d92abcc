// SPDX-License-Identifier: MIT OR Apache-2.0
// The attn module on a real GPU against the double reference of layers/reference/attention.hpp:
// a paged cache filled by kv_append with scattered blocks, decode over sequences up to 8k tokens
// (16 splits) with GQA 4 and MQA, prefill (tensor cores) of 1, 7 and 200 rows after past tokens,
// and at cache block sizes 1 and 256, head_dim 64, 128 threads; head_dim 256 (Qwen3.5's and
// Qwen3-Next's gated attention: 16 q heads, 2 kv heads) for decode and prefill. Suite 'gpu'; exits 77 with one
// line when no CUDA device is usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gpu_support.hpp"
#include "core/numeric.hpp"
#include "reference/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

using namespace metrale;
using metrale::gpu_test::DeviceBuffer;

namespace {

std::shared_ptr<Backend> g_cuda;
constexpr uint32_t kPartition = 512;  // attn_decode's split

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t count, double amplitude) {
  std::uniform_real_distribution<float> dist(static_cast<float>(-amplitude), static_cast<float>(amplitude));
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = layers::f32_to_bf16(dist(rng));
  return out;
}

struct Shape {
  uint32_t head_dim, q_heads, kv_heads, block_size;
};

struct Cache {
  Shape s;
  uint32_t num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> tables;
  std::vector<uint16_t> k_pool, v_pool;
  std::unique_ptr<DeviceBuffer> k_cache, v_cache;

  Cache(std::mt19937_64& rng, const Shape& shape, const std::vector<uint32_t>& lengths) : s(shape) {
    num_blocks = metrale::layers::paged_blocks_needed(lengths, s.block_size) + 2;
    std::vector<int32_t> order(num_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const size_t pool = size_t{num_blocks} * s.kv_heads * s.block_size * s.head_dim;
    k_pool = random_bf16(rng, pool, 1.0);
    v_pool = random_bf16(rng, pool, 1.0);
    k_cache = std::make_unique<DeviceBuffer>(*g_cuda, k_pool);
    v_cache = std::make_unique<DeviceBuffer>(*g_cuda, v_pool);
    metrale::layers::PagedTables laid = metrale::layers::paged_tables(lengths, s.block_size, order);
    max_blocks = laid.max_blocks;
    tables = std::move(laid.tables);
    const std::vector<int32_t>& slots = laid.slots;
    const auto tokens = static_cast<uint32_t>(slots.size());
    const size_t row = size_t{s.kv_heads} * s.head_dim;
    const auto k = random_bf16(rng, tokens * row, 1.0), v = random_bf16(rng, tokens * row, 1.5);
    for (uint32_t t = 0; t < tokens; ++t) {
      const auto slot = static_cast<uint32_t>(slots[t]);
      for (uint32_t h = 0; h < s.kv_heads; ++h) {
        const size_t to = metrale::layers::paged_element(slot, h, s.kv_heads, s.block_size, s.head_dim);
        std::copy_n(k.begin() + t * row + h * s.head_dim, s.head_dim, k_pool.begin() + to);
        std::copy_n(v.begin() + t * row + h * s.head_dim, s.head_dim, v_pool.begin() + to);
      }
    }
    DeviceBuffer dk(*g_cuda, k), dv(*g_cuda, v), ds(*g_cuda, slots);
    LaunchShape launch;
    launch.grid = {tokens, 1, 1};
    launch.block = {128, 1, 1};
    g_cuda->launch(g_cuda->kernel("attn", "kv_append"), launch, dk.ptr(), dv.ptr(), ds.ptr(), k_cache->ptr(),
                   v_cache->ptr(), tokens, s.kv_heads, s.head_dim, s.block_size, num_blocks);
    g_cuda->synchronize();
    CHECK(k_cache->download<uint16_t>(k_pool.size()) == k_pool);
  }
  layers::PagedKvView view() const { return {k_pool, v_pool, s.kv_heads, s.head_dim, s.block_size}; }
};

float scale_of(const Shape& s) { return static_cast<float>(1.0 / std::sqrt(double(s.head_dim))); }

void check(const std::vector<uint16_t>& got, const layers::ReferenceOutput& ref) {
  const layers::Comparison cmp = layers::compare_to_reference(got, ref);
  CHECK_MESSAGE(cmp.passed(), cmp.summary());
}

}  // namespace

TEST_CASE("attn_decode + attn_decode_combine on the GPU") {
  const std::pair<Shape, std::vector<uint32_t>> cases[] = {
      {{128, 32, 8, 16}, {8192, 1, 4000, 513}},
      {{64, 16, 1, 32}, {3000, 17}},
      {{256, 16, 2, 16}, {4100, 1, 700}},
  };
  for (const auto& [s, lengths] : cases) {
    CAPTURE(s.q_heads);
    CAPTURE(s.kv_heads);
    std::mt19937_64 rng(s.q_heads);
    const Cache cache(rng, s, lengths);
    const auto seqs = static_cast<uint32_t>(lengths.size());
    const uint32_t partitions = ceil_div(cache.max_blocks * s.block_size, kPartition);
    const auto q = random_bf16(rng, size_t{seqs} * s.q_heads * s.head_dim, 3.0);
    const std::vector<int32_t> context(lengths.begin(), lengths.end());
    DeviceBuffer dq(*g_cuda, q), dt(*g_cuda, cache.tables), dc(*g_cuda, context);
    DeviceBuffer partials(*g_cuda, size_t{seqs} * s.q_heads * partitions * (s.head_dim + 2) * 4);
    DeviceBuffer out(*g_cuda, size_t{seqs} * s.q_heads * s.head_dim * 2);
    LaunchShape launch;
    launch.grid = {partitions, seqs * s.kv_heads, 1};
    launch.block = {128, 1, 1};
    g_cuda->launch(g_cuda->kernel("attn", "attn_decode"), launch, dq.ptr(), cache.k_cache->ptr(), cache.v_cache->ptr(),
                   dt.ptr(), dc.ptr(), partials.ptr(), seqs, s.q_heads, s.kv_heads, s.head_dim, s.block_size,
                   cache.max_blocks, cache.num_blocks, scale_of(s));
    launch.grid = {s.q_heads, seqs, 1};
    g_cuda->launch(g_cuda->kernel("attn", "attn_decode_combine"), launch, partials.ptr(), dc.ptr(), out.ptr(), seqs,
                   s.q_heads, s.head_dim, partitions);
    check(out.download<uint16_t>(size_t{seqs} * s.q_heads * s.head_dim),
          layers::reference_paged_attention(q, seqs, s.q_heads, cache.view(), cache.tables, cache.max_blocks, lengths,
                                            scale_of(s)));
  }
}

TEST_CASE("attn_prefill on the GPU") {
  struct Case {
    Shape s;
    uint32_t m, past, threads;
  };
  const Case cases[] = {{{128, 32, 8, 16}, 1, 37, 64},   {{128, 32, 8, 16}, 7, 300, 64},
                        {{128, 32, 8, 16}, 200, 1000, 64}, {{128, 8, 2, 1}, 70, 33, 128},
                        {{64, 16, 2, 256}, 300, 700, 128}, {{256, 16, 2, 16}, 200, 1000, 128},
                        {{256, 16, 2, 16}, 7, 3, 64}};
  for (const auto& [s, m, past, threads] : cases) {
    CAPTURE(s.head_dim);
    CAPTURE(s.block_size);
    CAPTURE(m);
    CAPTURE(past);
    std::mt19937_64 rng(m + past);
    const Cache cache(rng, s, {past + m});
    const auto q = random_bf16(rng, size_t{m} * s.q_heads * s.head_dim, 3.0);
    DeviceBuffer dq(*g_cuda, q), dt(*g_cuda, cache.tables), out(*g_cuda, q.size() * 2);
    LaunchShape launch;
    launch.grid = {ceil_div(m, 64), s.kv_heads, 1};
    launch.block = {threads, 1, 1};
    g_cuda->launch(g_cuda->kernel("attn", "attn_prefill"), launch, dq.ptr(), cache.k_cache->ptr(), cache.v_cache->ptr(),
                   dt.ptr(), out.ptr(), m, past, s.q_heads, s.kv_heads, s.head_dim, s.block_size, cache.num_blocks,
                   scale_of(s));
    std::vector<int32_t> tables;
    std::vector<uint32_t> context;
    for (uint32_t i = 0; i < m; ++i) {
      tables.insert(tables.end(), cache.tables.begin(), cache.tables.end());
      context.push_back(past + i + 1);
    }
    check(out.download<uint16_t>(q.size()),
          layers::reference_paged_attention(q, m, s.q_heads, cache.view(), tables, cache.max_blocks, context, scale_of(s)));
  }
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
