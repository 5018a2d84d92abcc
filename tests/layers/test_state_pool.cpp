// SPDX-License-Identifier: MIT OR Apache-2.0
// StatePool (layers/state/state_pool.hpp) on the CPU backend: slots and block tables as the attn
// kernels read them, a clear refusal that changes nothing when the pool is full, blocks reused
// after release, and shapes the kernels refuse refused at construction.
#include "backend_support.hpp"

#include "state/sequence_batch.hpp"
#include "state/state_pool.hpp"

#include <metrale/status.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>

using metrale::layers::StatePool;
using metrale::layers::StatePoolShape;

TEST_CASE("StatePool hands out blocks per sequence and maps positions to slots") {
  StatePool cache(*layers_test::cpu_backend(), StatePoolShape{2, 64, 16, 8});
  const uint32_t a = cache.add_sequence(), b = cache.add_sequence();
  const auto first = cache.append(a, 20);  // two blocks
  const auto other = cache.append(b, 5);
  const auto next = cache.append(a, 1);    // position 20: block 1, offset 4
  REQUIRE(first.size() == 20);
  REQUIRE(cache.block_table(a).size() == 2);
  REQUIRE(cache.block_table(b).size() == 1);
  for (uint32_t pos = 0; pos < 20; ++pos)
    CHECK(first[pos] == cache.block_table(a)[pos / 16] * 16 + static_cast<int32_t>(pos % 16));
  CHECK(next.at(0) == cache.block_table(a)[1] * 16 + 4);
  CHECK(other.at(4) == cache.block_table(b)[0] * 16 + 4);
  const std::set<int32_t> blocks{cache.block_table(a)[0], cache.block_table(a)[1], cache.block_table(b)[0]};
  CHECK(blocks.size() == 3);
  CHECK(cache.length(a) == 21);
  CHECK(cache.free_blocks() == 5);

  const uint32_t seqs[] = {b, a};
  const auto tables = cache.decode_tables(seqs);
  CHECK(tables.max_blocks == 2);
  CHECK(tables.context_lens == std::vector<int32_t>{5, 21});
  CHECK(tables.block_tables == std::vector<int32_t>{cache.block_table(b)[0], 0, cache.block_table(a)[0],
                                                    cache.block_table(a)[1]});
}

TEST_CASE("StatePool refuses when full, naming the sizes, and changes nothing; release frees the blocks") {
  StatePool cache(*layers_test::cpu_backend(), StatePoolShape{1, 128, 16, 4});
  const uint32_t a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, 50);  // all four blocks
  CHECK(cache.free_blocks() == 0);
  try {
    cache.append(b, 1);
    FAIL("a full cache accepted a token");
  } catch (const metrale::Error& e) {
    CHECK(e.status() == metrale::Status::out_of_memory);
    const std::string text = e.what();
    CHECK(text.find("asks for 1 tokens, which need 1 new blocks of block_size 16; 0 of 4 blocks are free") !=
          std::string::npos);
  }
  CHECK(cache.length(b) == 0);
  CHECK(cache.block_table(b).empty());
  CHECK_NOTHROW(cache.append(a, 14));  // the last block still has room for 64 - 50 tokens
  CHECK_THROWS_AS(cache.append(a, 1), metrale::Error);
  cache.release(a);
  CHECK(cache.free_blocks() == 4);
  CHECK_THROWS_AS(cache.length(a), metrale::Error);
  CHECK(cache.append(b, 64).size() == 64);
}

TEST_CASE("StatePool refuses shapes the attn kernels refuse") {
  auto& backend = *layers_test::cpu_backend();
  CHECK_THROWS_WITH_AS(StatePool(backend, StatePoolShape{2, 96, 16, 4}), doctest::Contains("head_dim must be 64 or 128"),
                       metrale::Error);
  CHECK_THROWS_WITH_AS(StatePool(backend, StatePoolShape{2, 64, 24, 4}), doctest::Contains("block_size must be a power of two"),
                       metrale::Error);
  CHECK_THROWS_AS(StatePool(backend, StatePoolShape{2, 64, 16, 0}), metrale::Error);
}

TEST_CASE("StatePool keeps one pair of pools per layer, sharing the block tables") {
  StatePool cache(*layers_test::cpu_backend(), StatePoolShape{2, 64, 16, 4, 3});
  std::set<uint64_t> pools;
  for (uint32_t l = 0; l < 3; ++l) {
    pools.insert(cache.k_cache(l).address);
    pools.insert(cache.v_cache(l).address);
  }
  CHECK(pools.size() == 6);
  CHECK(cache.shape().capacity_tokens() == 64);
  CHECK_THROWS_AS(StatePool(*layers_test::cpu_backend(), StatePoolShape{2, 64, 16, 4, 0}), metrale::Error);
}

TEST_CASE("SequenceBatch appends a batch's runs, builds decode tables, and refuses a batch that does not fit before appending") {
  using metrale::layers::SequenceBatch;
  using metrale::layers::SequenceRows;
  auto& backend = *layers_test::cpu_backend();
  StatePool cache(backend, StatePoolShape{2, 64, 16, 4, 2});
  const uint32_t a = cache.add_sequence(), b = cache.add_sequence();
  {
    const SequenceRows runs[] = {{a, 20}, {b, 3}};
    std::vector<int32_t> positions(23, 0);
    const SequenceBatch prefill(backend, cache, runs, positions);
    CHECK_FALSE(prefill.is_decode());
    REQUIRE(prefill.runs().size() == 2);
    CHECK(prefill.runs()[1].first_row == 20);
    CHECK(prefill.runs()[1].past == 0);
    CHECK(cache.length(a) == 20);
    CHECK(cache.free_blocks() == 1);
  }
  {
    const SequenceRows runs[] = {{b, 1}, {a, 1}};
    const std::vector<int32_t> positions{3, 20};
    const SequenceBatch decode(backend, cache, runs, positions);
    CHECK(decode.is_decode());
    CHECK(decode.max_blocks() == 2);
    CHECK(decode.partitions() == 1);
    CHECK(decode.runs()[1].past == 20);
  }
  // 13 more tokens of b need a second block, 12 of a a third: two blocks, one free.
  const SequenceRows too_many[] = {{b, 13}, {a, 12}};
  const std::vector<int32_t> positions(25, 0);
  try {
    SequenceBatch refused(backend, cache, too_many, positions);
    FAIL("a batch needing 2 blocks with 1 free was accepted");
  } catch (const metrale::Error& e) {
    CHECK(e.status() == metrale::Status::out_of_memory);
    const std::string what = e.what();
    CHECK(what.find("25 tokens") != std::string::npos);
    CHECK(what.find("2 new blocks of block_size 16") != std::string::npos);
    CHECK(what.find("1 of 4 blocks are free") != std::string::npos);
  }
  CHECK(cache.length(a) == 21);
  CHECK(cache.length(b) == 4);
  CHECK(cache.free_blocks() == 1);
  // One row per sequence but a sequence twice: not a decode step.
  const SequenceRows twice[] = {{a, 1}, {a, 1}};
  const std::vector<int32_t> two{21, 22};
  CHECK_FALSE(SequenceBatch(backend, cache, twice, two).is_decode());
  const SequenceRows empty_run[] = {{a, 0}};
  CHECK_THROWS_AS(SequenceBatch(backend, cache, empty_run, std::vector<int32_t>{}), metrale::Error);
}
