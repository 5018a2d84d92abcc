// SPDX-License-Identifier: MIT OR Apache-2.0
// StatePool (layers/state/state_pool.hpp) on the CPU backend: slots and block tables as the attn
// kernels read them, a clear refusal that changes nothing when the pool is full, blocks reused
// after release, and shapes the kernels refuse refused at construction; forks sharing blocks until
// one writes (copy on write), rollback, admission with reserved blocks, and recurrent state slots
// (zeroed, copied by a fork, restored from a checkpoint). The model-level checks (logits after a
// rollback or a fork) are test_decoder.cpp's.
#include "backend_support.hpp"

#include "state/sequence_batch.hpp"
#include "state/state_pool.hpp"

#include <metrale/status.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>

using metrale::layers::StatePool;
using metrale::layers::StatePoolShape;

namespace {

// Fills block `block` of every layer's K pool with `value` in each byte.
void fill_block(metrale::Backend& backend, const StatePool& pool, int32_t block, uint8_t value) {
  const uint64_t n = pool.shape().block_bytes();
  for (uint32_t l = 0; l < pool.shape().layers; ++l) backend.memset(pool.k_cache(l).offset(static_cast<size_t>(block) * n), value, n);
}

std::vector<uint8_t> k_block(metrale::Backend& backend, const StatePool& pool, int32_t block, uint32_t layer = 0) {
  const uint64_t n = pool.shape().block_bytes();
  std::vector<uint8_t> bytes(n);
  backend.copy_to_host(bytes.data(), pool.k_cache(layer).offset(static_cast<size_t>(block) * n), n);
  backend.synchronize();
  return bytes;
}

std::vector<uint8_t> state_bytes(metrale::Backend& backend, const StatePool& pool, uint32_t layer, uint32_t seq) {
  std::vector<uint8_t> bytes(pool.shape().recurrent.bytes);
  backend.copy_to_host(bytes.data(), pool.recurrent_state(layer, seq), bytes.size());
  backend.synchronize();
  return bytes;
}

}  // namespace

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
  CHECK_THROWS_WITH_AS(StatePool(backend, StatePoolShape{2, 96, 16, 4}), doctest::Contains("StatePool: head_dim must be 64, 128 or 256 (got 96)"),
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

TEST_CASE("StatePool forks share the parent's blocks and copy a shared block only when one of them writes into it") {
  auto& backend = *layers_test::cpu_backend();
  StatePool pool(backend, StatePoolShape{2, 64, 16, 8, 2});
  const uint32_t parent = pool.add_sequence();
  pool.append(parent, 20);  // block 0 full, block 1 holding 4 tokens
  const std::vector<int32_t> table(pool.block_table(parent).begin(), pool.block_table(parent).end());
  fill_block(backend, pool, table[1], 0x5a);
  const uint32_t free_before = pool.free_blocks();

  const uint32_t child = pool.fork(parent);
  CHECK(pool.length(child) == 20);
  CHECK(std::vector<int32_t>(pool.block_table(child).begin(), pool.block_table(child).end()) == table);
  CHECK(pool.free_blocks() == free_before);  // nothing copied
  CHECK(pool.block_refs(table[0]) == 2);
  CHECK(pool.block_refs(table[1]) == 2);

  // The child writes position 20, in the shared block 1: it gets its own copy of that block.
  CHECK(pool.blocks_to_append(child, 1) == 1);
  const auto slot = pool.append(child, 1);
  const int32_t own = pool.block_table(child)[1];
  CHECK(own != table[1]);
  CHECK(pool.block_table(child)[0] == table[0]);  // the full block stays shared
  CHECK(slot.at(0) == own * 16 + 4);
  CHECK(pool.free_blocks() == free_before - 1);
  CHECK(pool.block_refs(table[1]) == 1);
  CHECK(pool.block_refs(table[0]) == 2);
  CHECK(k_block(backend, pool, own, 0) == k_block(backend, pool, table[1], 0));  // the parent's 4 tokens came along
  CHECK(k_block(backend, pool, own, 1) == k_block(backend, pool, table[1], 1));
  // Diverging: the child's writes no longer reach the parent's block, and the parent writes in place.
  fill_block(backend, pool, own, 0x11);
  CHECK(k_block(backend, pool, table[1]).front() == 0x5a);
  CHECK(pool.blocks_to_append(parent, 1) == 0);
  CHECK(pool.append(parent, 1).at(0) == table[1] * 16 + 4);

  // Released in either order, every block comes back once.
  pool.release(parent);
  CHECK(pool.block_refs(table[0]) == 1);
  CHECK(pool.block_table(child)[0] == table[0]);
  pool.release(child);
  CHECK(pool.free_blocks() == 8);
  CHECK(pool.block_refs(table[0]) == 0);
}

TEST_CASE("StatePool rolls a sequence back by k tokens, freeing the blocks past its new length") {
  StatePool pool(*layers_test::cpu_backend(), StatePoolShape{2, 64, 16, 8});
  const uint32_t seq = pool.add_sequence();
  pool.append(seq, 40);  // three blocks
  const int32_t first = pool.block_table(seq)[0];
  CHECK(pool.rollback(seq, 0) == 0);
  CHECK(pool.rollback(seq, 30) == 0);  // no recurrent state: nothing to feed again
  CHECK(pool.length(seq) == 10);
  CHECK(pool.block_table(seq).size() == 1);
  CHECK(pool.block_table(seq)[0] == first);
  CHECK(pool.free_blocks() == 7);
  CHECK(pool.append(seq, 1).at(0) == first * 16 + 10);  // the next token overwrites position 10
  CHECK_THROWS_WITH_AS(pool.rollback(seq, 12), doctest::Contains("has 11 tokens; it cannot roll back 12"), metrale::Error);
  CHECK(pool.length(seq) == 11);
  // A fork rolled back leaves its parent's tokens alone.
  const uint32_t child = pool.fork(seq);
  pool.rollback(child, 11);
  CHECK(pool.length(child) == 0);
  CHECK(pool.block_refs(first) == 1);
  CHECK(pool.length(seq) == 11);
}

TEST_CASE("StatePool admits a sequence with reserved blocks, and a full pool refuses a new one without touching the running ones") {
  StatePool pool(*layers_test::cpu_backend(), StatePoolShape{1, 128, 16, 4});
  const uint32_t running = pool.add_sequence(40);  // three blocks reserved
  CHECK(pool.free_blocks() == 1);
  CHECK(pool.length(running) == 0);
  CHECK(pool.blocks_to_append(running, 48) == 0);
  pool.append(running, 30);
  const std::vector<int32_t> table(pool.block_table(running).begin(), pool.block_table(running).end());
  try {
    pool.add_sequence(20);
    FAIL("a pool with one free block admitted a sequence of two");
  } catch (const metrale::Error& e) {
    CHECK(e.status() == metrale::Status::out_of_memory);
    CHECK(std::string(e.what()).find("a new sequence of 20 tokens needs 2 blocks of block_size 16; 1 of 4 blocks are free") !=
          std::string::npos);
  }
  CHECK(pool.length(running) == 30);
  CHECK(std::vector<int32_t>(pool.block_table(running).begin(), pool.block_table(running).end()) == table);
  CHECK(pool.free_blocks() == 1);
  CHECK(pool.append(running, 18).size() == 18);  // its reservation still holds
  CHECK(pool.free_blocks() == 1);
  const uint32_t small = pool.add_sequence(16);
  CHECK(pool.free_blocks() == 0);
  CHECK(pool.append(small, 16).size() == 16);
}

TEST_CASE("StatePool keeps a recurrent state per sequence: zeroed, copied by a fork, restored by a rollback from its checkpoint") {
  auto& backend = *layers_test::cpu_backend();
  StatePoolShape shape{2, 64, 16, 8, 1};
  shape.recurrent = {2, 96, 2};
  StatePool pool(backend, shape);
  CHECK(shape.bytes() == 2 * 8 * uint64_t{2 * 16 * 64 * 2} + 2 * 2 * 2 * 96);
  const uint32_t a = pool.add_sequence();
  CHECK(pool.free_recurrent_slots() == 1);
  CHECK(state_bytes(backend, pool, 1, a) == std::vector<uint8_t>(96, 0));
  CHECK(pool.recurrent_state(0, a).address != pool.recurrent_state(1, a).address);

  // Five tokens in, the layers' state after them, a checkpoint; three tokens more change it.
  pool.append(a, 5);
  backend.memset(pool.recurrent_state(0, a), 7, 96);
  backend.memset(pool.recurrent_state(1, a), 9, 96);
  pool.checkpoint(a);
  pool.append(a, 3);
  backend.memset(pool.recurrent_state(0, a), 8, 96);

  // A fork takes the second slot with a copy of the state and of the checkpoint.
  const uint32_t b = pool.fork(a);
  CHECK(state_bytes(backend, pool, 0, b) == std::vector<uint8_t>(96, 8));
  CHECK(state_bytes(backend, pool, 1, b) == std::vector<uint8_t>(96, 9));
  CHECK_THROWS_WITH_AS(pool.add_sequence(), doctest::Contains("needs a recurrent state slot (96 bytes in each of 2 layers); all 2 slots are held"),
                       metrale::Error);
  CHECK_THROWS_AS(pool.fork(a), metrale::Error);
  CHECK(pool.length(a) == 8);

  // Rolling back 1 of the 3 tokens after the checkpoint: the state is the checkpoint's and the
  // caller feeds 2 tokens again.
  CHECK(pool.rollback(a, 1) == 2);
  CHECK(pool.length(a) == 5);
  CHECK(state_bytes(backend, pool, 0, a) == std::vector<uint8_t>(96, 7));
  CHECK(state_bytes(backend, pool, 0, b) == std::vector<uint8_t>(96, 8));  // the fork keeps its own
  CHECK_THROWS_WITH_AS(pool.rollback(b, 4), doctest::Contains("before its checkpoint at 5"), metrale::Error);
  CHECK(pool.rollback(b, 3) == 0);
  CHECK(state_bytes(backend, pool, 0, b) == std::vector<uint8_t>(96, 7));

  pool.release(a);
  const uint32_t c = pool.add_sequence();
  CHECK(state_bytes(backend, pool, 0, c) == std::vector<uint8_t>(96, 0));  // a reused slot starts at zero
  CHECK_THROWS_AS(pool.recurrent_state(2, c), metrale::Error);
  StatePoolShape no_slots{2, 64, 16, 8, 1};
  no_slots.recurrent = {1, 96, 0};
  CHECK_THROWS_AS(StatePool(backend, no_slots), metrale::Error);
}
