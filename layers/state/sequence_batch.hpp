// SPDX-License-Identifier: MIT OR Apache-2.0
// The rows of one batch as every stateful layer of a model sees them (LayerBatch::state of
// core/layer.hpp): runs of consecutive rows, each run the next tokens of one sequence of a
// StatePool; their RoPE positions; the pool slots they are appended to; and the tables the attn
// kernels read. The caller makes one per batch (appending the rows to their sequences) and passes
// it to each layer; it owns the device copies, and the pool must outlive it.
//
// A batch whose runs are one row each, of distinct sequences, is a decode step (attn_decode over
// all of them in one launch); any other run is a prefill chunk (attn_prefill after that
// sequence's earlier tokens), so prompts and decode steps may share a batch.
#pragma once

#include "state/state_pool.hpp"

#include "core/device_buffer.hpp"
#include "core/layer.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace metrale::layers {

// The next `rows` rows of a batch are the next tokens of pool sequence `sequence`.
struct SequenceRows {
  uint32_t sequence = 0;
  uint32_t rows = 0;
};

class SequenceBatch {
 public:
  struct Run {
    uint32_t sequence = 0;
    uint32_t first_row = 0, rows = 0;
    uint32_t past = 0;        // the sequence's tokens before this run
    DevicePtr block_table;    // i32, the sequence's blocks after the append
  };

  // Appends every run's rows to its sequence (StatePool::append). When the pool cannot take them
  // all, throws Error(out_of_memory) naming the tokens, the blocks they need, the blocks free and
  // block_size, before anything is appended. `positions` has one entry per row (the rows' sum
  // over `runs`); Error(invalid_argument) otherwise, or for a run of 0 rows.
  SequenceBatch(Backend& backend, StatePool& pool, std::span<const SequenceRows> runs, std::span<const int32_t> positions);

  uint32_t rows() const noexcept { return rows_; }
  const StatePool& pool() const noexcept { return *pool_; }
  std::span<const Run> runs() const noexcept { return runs_; }
  DevicePtr positions() const noexcept { return positions_.ptr(); }        // i32 [rows]
  DevicePtr slot_mapping() const noexcept { return slots_.ptr(); }         // i32 [rows]

  // Decode steps: every run one row of its own sequence.
  bool is_decode() const noexcept { return decode_; }
  DevicePtr block_tables() const noexcept { return tables_.ptr(); }        // i32 [runs][max_blocks]
  DevicePtr context_lens() const noexcept { return context_lens_.ptr(); }  // i32 [runs]
  uint32_t max_blocks() const noexcept { return max_blocks_; }
  // attn_decode's splits of 512 tokens over the longest context.
  uint32_t partitions() const noexcept;
  // The recurrent layers' runs (docs/kernels.md, module deltanet): i32 [runs][3] of (first_row,
  // rows, recurrent slot); empty when the pool has no recurrent layers.
  DevicePtr recurrent_runs() const noexcept { return recurrent_runs_.ptr(); }

 private:
  void upload_recurrent_runs(Backend& backend, const StatePool& pool);
  StatePool* pool_;
  uint32_t rows_ = 0;
  bool decode_ = false;
  uint32_t max_blocks_ = 0;
  std::vector<Run> runs_;
  DeviceBuffer positions_, slots_, tables_, context_lens_, recurrent_runs_;
};

}  // namespace metrale::layers
