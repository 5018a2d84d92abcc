// SPDX-License-Identifier: MIT OR Apache-2.0
// The interface a block of a decoder layer implements (docs/layers.md, "Layers"): it is built once
// (open_layer, layers/compose.hpp), then runs forward over a batch of rows and describes the
// kernels it takes for m rows. A block that keeps per-sequence state (attention's KV cache) gets
// that state with each batch (LayerBatch::state). Blocks are not reentrant: one forward at a time per
// block (their scratch buffers are their own).
#pragma once

#include <metrale/backend.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace metrale::layers {

class SequenceBatch;  // state/sequence_batch.hpp: the rows' sequences and their state in a StatePool

// m rows of bf16 [m, hidden] in device memory of the block's backend; `state` is the batch's
// sequences for a stateful block (attention: the pool's KV slots and tables for those rows), null
// for stateless blocks (the FFN). The caller makes it for each batch and owns it, and owns the
// sequences' state behind it: never the block, so one block serves many sequences and a sequence
// outlives any one batch.
struct LayerBatch {
  DevicePtr x;
  uint32_t m = 0;
  const SequenceBatch* state = nullptr;
};

// One launch of a block's forward pass for m rows, as `metrale run` prints it.
struct PlanStep {
  std::string step;    // "ffn.gate_up", "ffn.act", "ffn.router"...
  std::string kernel;  // "w4a16/w4a16_gemv_b8"
  std::string why;     // "m=3 <= 8: batched GEMV tier"
  std::array<uint32_t, 3> grid{1, 1, 1};
};

class Layer {
 public:
  virtual ~Layer() = default;
  // bf16 [m, hidden] out, in memory the block owns (valid until its next forward), or the batch's
  // own rows for a block that passes them through; asynchronous on `stream`.
  virtual DevicePtr forward(const LayerBatch& batch, uint64_t stream = 0) = 0;
  // The launches forward takes for m rows, in order.
  virtual std::vector<PlanStep> plan(uint32_t m) const = 0;
};

}  // namespace metrale::layers
