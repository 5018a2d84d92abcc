// SPDX-License-Identifier: MIT OR Apache-2.0
// The rows of one batch as every stateful layer of a model sees them (LayerBatch::state of
// core/layer.hpp): runs of consecutive rows, each run the next tokens of one sequence of a
// StatePool; their RoPE positions; the pool slots they are appended to; and the tables the attn
// kernels read. The caller makes one per batch (appending the rows to their sequences) and passes
// it to each layer; it owns the device copies, and the pool must outlive it.
//
// A batch whose runs are one row each, of distinct sequences, is a decode step (attn_decode over
// all of them in one launch); any other run is a prefill chunk (attn_prefill after that
// sequence's earlier tokens), so prompts and decode steps may share a batch. A run marked
// decode_shaped is computed as that many successive decode steps would compute it (speculative
// verification, docs/layers.md "Speculative decoding"): attn_decode with one query per row, row t
// of the run attending to the sequence's first past + t + 1 tokens, and the DeltaNet's recurrent
// rule (token by token) instead of its chunked form. Decode-shaped runs come first in a batch;
// they and the rows of a plain decode step are the batch's decode rows.
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
  bool decode_shaped = false;  // rows computed as successive decode steps (above)
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
  // over `runs`); Error(invalid_argument) otherwise, for a run of 0 rows, for a decode-shaped run
  // after one that is not, or for a decode-shaped run's sequence in another run too.
  SequenceBatch(Backend& backend, StatePool& pool, std::span<const SequenceRows> runs, std::span<const int32_t> positions);

  uint32_t rows() const noexcept { return rows_; }
  const StatePool& pool() const noexcept { return *pool_; }
  std::span<const Run> runs() const noexcept { return runs_; }
  DevicePtr positions() const noexcept { return positions_.ptr(); }        // i32 [rows]
  DevicePtr slot_mapping() const noexcept { return slots_.ptr(); }         // i32 [rows]

  // Decode steps: every run one row of its own sequence, or every run decode-shaped.
  bool is_decode() const noexcept { return decode_rows_ == rows_; }
  // The leading rows (of the leading runs) computed as decode steps: every row of a decode step,
  // else the rows of the decode-shaped runs (0 without any).
  uint32_t decode_rows() const noexcept { return decode_rows_; }
  uint32_t decode_runs() const noexcept { return decode_runs_; }
  // attn_decode's tables, one entry per decode row: its sequence's blocks and the tokens it sees.
  DevicePtr block_tables() const noexcept { return tables_.ptr(); }        // i32 [decode rows][max_blocks]
  DevicePtr context_lens() const noexcept { return context_lens_.ptr(); }  // i32 [decode rows]
  uint32_t max_blocks() const noexcept { return max_blocks_; }
  // attn_decode's splits of 512 tokens over the longest context.
  uint32_t partitions() const noexcept;
  // The recurrent layers' runs (docs/kernels.md, module deltanet): i32 [runs][3] of (first_row,
  // rows, recurrent slot); empty when the pool has no recurrent layers.
  DevicePtr recurrent_runs() const noexcept { return recurrent_runs_.ptr(); }

 private:
  void upload_recurrent_runs(Backend& backend, const StatePool& pool);
  // Sets decode_rows_ and decode_runs_ (checking the decode-shaped runs' order and sequences).
  void count_decode_rows(std::span<const SequenceRows> runs);
  // The block tables: [decode rows][max_blocks] for attn_decode, then each other run's own table.
  void upload_tables(Backend& backend, const StatePool& pool);
  StatePool* pool_;
  uint32_t rows_ = 0;
  uint32_t decode_rows_ = 0, decode_runs_ = 0;
  uint32_t max_blocks_ = 0;
  std::vector<Run> runs_;
  DeviceBuffer positions_, slots_, tables_, context_lens_, recurrent_runs_;
};

}  // namespace metrale::layers
