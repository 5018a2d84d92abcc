// SPDX-License-Identifier: MIT OR Apache-2.0
#include "state/sequence_batch.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <set>
#include <string>

namespace metrale::layers {

namespace {

// attn_decode's split (docs/kernels.md, "Module attn").
constexpr uint32_t kDecodeSplitTokens = 512;


}  // namespace

SequenceBatch::SequenceBatch(Backend& backend, StatePool& pool, std::span<const SequenceRows> runs, std::span<const int32_t> positions)
    : pool_(&pool) {
  // Everything is checked, and the blocks counted, before the first append.
  uint64_t rows = 0, blocks = 0, tokens = 0;
  for (const SequenceRows& run : runs) {
    if (run.rows == 0) throw Error(Status::invalid_argument, "SequenceBatch: a run of sequence " + std::to_string(run.sequence) + " has 0 rows");
    rows += run.rows;
  }
  if (rows != positions.size()) {
    throw Error(Status::invalid_argument, "SequenceBatch: " + std::to_string(positions.size()) + " positions for " +
                                              std::to_string(rows) + " rows");
  }
  rows_ = static_cast<uint32_t>(rows);
  count_decode_rows(runs);
  // A sequence may have several runs: count its blocks over all of them.
  std::vector<std::pair<uint32_t, uint64_t>> added;  // sequence, tokens
  for (const SequenceRows& run : runs) {
    auto it = std::find_if(added.begin(), added.end(), [&](const auto& a) { return a.first == run.sequence; });
    if (it == added.end()) {
      added.emplace_back(run.sequence, run.rows);
    } else if (pool.shape().recurrent.layers > 0) {
      // The recurrent kernels continue one slot per run (the runs table names each slot once).
      throw Error(Status::invalid_argument, "SequenceBatch: sequence " + std::to_string(run.sequence) +
                                                " has two runs in one batch; its recurrent state continues one run at a time");
    } else {
      it->second += run.rows;
    }
  }
  const uint64_t bs = pool.shape().block_size;
  for (const auto& [seq, count] : added) {
    blocks += pool.blocks_to_append(seq, static_cast<uint32_t>(count));
    tokens += count;
  }
  if (blocks > pool.free_blocks()) {
    throw Error(Status::out_of_memory,
                "KV cache full: the batch adds " + std::to_string(tokens) + " tokens to " + std::to_string(added.size()) +
                    " sequence(s), which need " + std::to_string(blocks) + " new blocks of block_size " + std::to_string(bs) +
                    "; " + std::to_string(pool.free_blocks()) + " of " + std::to_string(pool.shape().num_blocks) +
                    " blocks are free (the cache holds " + std::to_string(pool.shape().capacity_tokens()) + " tokens)");
  }
  std::vector<int32_t> slots;
  slots.reserve(rows_);
  uint32_t first = 0;
  for (const SequenceRows& run : runs) {
    Run r;
    r.sequence = run.sequence;
    r.first_row = first;
    r.rows = run.rows;
    r.past = pool.length(run.sequence);
    const std::vector<int32_t> s = pool.append(run.sequence, run.rows);
    slots.insert(slots.end(), s.begin(), s.end());
    runs_.push_back(r);
    first += run.rows;
  }
  upload_tables(backend, pool);
  if (pool.shape().recurrent.layers > 0) upload_recurrent_runs(backend, pool);
  positions_ = device_copy(backend, std::vector<int32_t>(positions.begin(), positions.end()));
  slots_ = device_copy(backend, slots);
}

void SequenceBatch::count_decode_rows(std::span<const SequenceRows> runs) {
  std::set<uint32_t> sequences;
  bool one_row_each = !runs.empty();
  for (const SequenceRows& run : runs) one_row_each = one_row_each && run.rows == 1 && sequences.insert(run.sequence).second;
  if (one_row_each) {
    decode_rows_ = rows_;
    decode_runs_ = static_cast<uint32_t>(runs.size());
    return;
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].decode_shaped) continue;
    if (i != decode_runs_) {
      throw Error(Status::invalid_argument, "SequenceBatch: the decode-shaped run of sequence " + std::to_string(runs[i].sequence) +
                                                " follows a run that is not; decode-shaped runs come first");
    }
    for (size_t j = 0; j < runs.size(); ++j) {
      if (j != i && runs[j].sequence == runs[i].sequence) {
        throw Error(Status::invalid_argument, "SequenceBatch: sequence " + std::to_string(runs[i].sequence) +
                                                  " has a decode-shaped run and another run in one batch");
      }
    }
    ++decode_runs_;
    decode_rows_ += runs[i].rows;
  }
}

void SequenceBatch::upload_tables(Backend& backend, const StatePool& pool) {
  // Each run's table as it stands after the whole batch's appends (a longer table is harmless:
  // the kernels read only the entries their context reaches). Decode row t of a run sees the
  // sequence's first past + t + 1 tokens, as the t-th of successive decode steps would.
  std::vector<uint32_t> seqs;
  std::vector<int32_t> lens;
  for (uint32_t i = 0; i < decode_runs_; ++i) {
    for (uint32_t t = 0; t < runs_[i].rows; ++t) {
      seqs.push_back(runs_[i].sequence);
      lens.push_back(static_cast<int32_t>(runs_[i].past + t + 1));
    }
  }
  StatePool::DecodeTables d = pool.decode_tables(seqs);
  max_blocks_ = d.max_blocks;
  std::vector<int32_t> tables = std::move(d.block_tables);
  std::vector<size_t> offsets;
  for (uint32_t i = 0, row = 0; i < runs_.size(); ++i) {
    if (i < decode_runs_) {
      offsets.push_back(size_t{row} * max_blocks_);
      row += runs_[i].rows;
      continue;
    }
    offsets.push_back(tables.size());
    const auto t = pool.block_table(runs_[i].sequence);
    tables.insert(tables.end(), t.begin(), t.end());
  }
  tables_ = device_copy(backend, tables);
  context_lens_ = device_copy(backend, lens);
  for (size_t i = 0; i < runs_.size(); ++i) runs_[i].block_table = tables_.at(offsets[i] * sizeof(int32_t));
}

void SequenceBatch::upload_recurrent_runs(Backend& backend, const StatePool& pool) {
  // The deltanet kernels' runs table: (first_row, rows, recurrent slot), one run per sequence
  // (checked before the appends).
  std::vector<int32_t> recurrent;
  for (const Run& r : runs_) {
    recurrent.insert(recurrent.end(), {static_cast<int32_t>(r.first_row), static_cast<int32_t>(r.rows),
                                       pool.recurrent_slot(r.sequence)});
  }
  recurrent_runs_ = device_copy(backend, recurrent);
}

uint32_t SequenceBatch::partitions() const noexcept {
  const uint64_t tokens = uint64_t{max_blocks_} * pool_->shape().block_size;
  return static_cast<uint32_t>((tokens + kDecodeSplitTokens - 1) / kDecodeSplitTokens);
}

}  // namespace metrale::layers
