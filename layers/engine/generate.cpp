// SPDX-License-Identifier: MIT OR Apache-2.0
#include "engine/generate.hpp"

#include "core/numeric.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <chrono>

namespace metrale::layers {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void check_prompts(const std::vector<std::vector<int32_t>>& prompts, uint32_t vocab) {
  if (prompts.empty()) throw Error(Status::invalid_argument, "generate: no prompt");
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty()) throw Error(Status::invalid_argument, "generate: prompt " + std::to_string(p) + " is empty");
    for (size_t i = 0; i < prompts[p].size(); ++i) {
      const int32_t id = prompts[p][i];
      if (id < 0 || static_cast<uint32_t>(id) >= vocab) {
        throw Error(Status::invalid_argument, "generate: prompt " + std::to_string(p) + " position " + std::to_string(i) +
                                                  ": id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                                  std::to_string(vocab - 1) + ")");
      }
    }
  }
}

// Blocks a sequence of `tokens` tokens takes.
uint64_t blocks_for(uint64_t tokens, uint32_t block_size) { return (tokens + block_size - 1) / block_size; }

std::vector<float> to_f32(Backend& backend, DevicePtr bf16, size_t count) {
  std::vector<uint16_t> bits(count);
  backend.copy_to_host(bits.data(), bf16, count * 2);
  backend.synchronize();
  std::vector<float> out(count);
  bf16_to_f32(bits, out);
  return out;
}

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());  // the first of equal maxima
}

// Decode steps after the prefill: one row per sequence per step, `next` the ids to feed.
void decode(Backend& backend, DecoderModel& model, StatePool& cache, const std::vector<uint32_t>& seqs, std::vector<int32_t>& next,
            const GenerateOptions& o, GenerateResult& r) {
  const size_t B = seqs.size();
  const uint32_t vocab = model.config().vocab_size;
  std::vector<SequenceRows> runs;
  for (uint32_t s : seqs) runs.push_back(SequenceRows{s, 1});
  std::vector<uint32_t> all_rows(B);
  for (uint32_t i = 0; i < B; ++i) all_rows[i] = i;
  DeviceBuffer ids(backend, B * 4);
  for (uint32_t step = 1; step < o.max_new_tokens; ++step) {
    std::vector<int32_t> positions(B);
    for (size_t p = 0; p < B; ++p) positions[p] = static_cast<int32_t>(cache.length(seqs[p]));
    SequenceBatch kv(backend, cache, runs, positions);
    ids.upload(std::span<const int32_t>(next));
    const DevicePtr hidden = model.forward(kv, ids.ptr());
    const std::vector<float> l = to_f32(backend, model.logits(hidden, static_cast<uint32_t>(B), all_rows), B * size_t{vocab});
    for (size_t p = 0; p < B; ++p) {
      const std::span<const float> row(l.data() + p * vocab, vocab);
      next[p] = argmax(row);
      r.generated[p].push_back(next[p]);
      r.logits[p].insert(r.logits[p].end(), row.begin(), row.end());
    }
    r.decode_tokens += B;
    if (o.progress) o.progress("decode", static_cast<double>(step + 1) / o.max_new_tokens);
  }
}

// The cache's shape: --kv-tokens, else every sequence's blocks as the cache will hand them out.
// Error(out_of_memory) naming the sizes when the prompts and new tokens do not fit.
StatePoolShape sized_cache(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o) {
  uint64_t needed_blocks = 0, longest = 0, total = 0;
  for (const auto& p : prompts) {
    const uint64_t tokens = p.size() + o.max_new_tokens - 1;
    needed_blocks += blocks_for(tokens, o.block_size);
    longest = std::max<uint64_t>(longest, p.size());
    total += tokens;
  }
  const StatePoolShape shape = model.cache_shape(o.kv_tokens ? o.kv_tokens : needed_blocks * o.block_size, o.block_size);
  const uint64_t capacity = shape.capacity_tokens();
  if (longest > capacity) {
    throw Error(Status::out_of_memory, "generate: a prompt of " + std::to_string(longest) + " tokens is longer than the KV cache (" +
                                           std::to_string(capacity) + " tokens: " + std::to_string(shape.num_blocks) +
                                           " blocks of " + std::to_string(o.block_size) + ")");
  }
  if (needed_blocks > shape.num_blocks) {
    throw Error(Status::out_of_memory, "generate: " + std::to_string(prompts.size()) + " prompt(s) and " +
                                           std::to_string(o.max_new_tokens) + " new tokens each need " + std::to_string(total) +
                                           " tokens in " + std::to_string(needed_blocks) + " blocks of " +
                                           std::to_string(o.block_size) + ", but the KV cache holds " + std::to_string(capacity) +
                                           " tokens (" + std::to_string(shape.num_blocks) + " blocks)");
  }
  return shape;
}

}  // namespace

GenerateResult generate_greedy(Backend& backend, DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const GenerateOptions& o) {
  const uint32_t vocab = model.config().vocab_size;
  check_prompts(prompts, vocab);
  if (o.max_new_tokens == 0) throw Error(Status::invalid_argument, "generate: max_new_tokens must be at least 1");
  if (o.prefill_chunk == 0) throw Error(Status::invalid_argument, "generate: prefill_chunk must be at least 1");
  GenerateResult r;
  r.cache = sized_cache(model, prompts, o);
  StatePool cache(backend, r.cache);
  const size_t B = prompts.size();
  r.generated.assign(B, {});
  r.logits.assign(B, {});
  if (o.prompt_logits) r.prompt_logits.assign(B, {});
  std::vector<uint32_t> seqs;
  DeviceBuffer ids;
  std::vector<int32_t> next(B);

  // Prefill, prompt by prompt, chunk by chunk.
  const auto prefill_start = Clock::now();
  for (size_t p = 0; p < B; ++p) {
    seqs.push_back(cache.add_sequence());
    const auto& prompt = prompts[p];
    const std::string stage = "prefill prompt " + std::to_string(p) + " (" + std::to_string(prompt.size()) + " tokens)";
    for (size_t first = 0; first < prompt.size(); first += o.prefill_chunk) {
      const auto rows = static_cast<uint32_t>(std::min<size_t>(o.prefill_chunk, prompt.size() - first));
      std::vector<int32_t> positions(rows);
      for (uint32_t i = 0; i < rows; ++i) positions[i] = static_cast<int32_t>(first + i);
      const SequenceRows run{seqs[p], rows};
      SequenceBatch kv(backend, cache, std::span(&run, 1), positions);
      ids.ensure(backend, size_t{rows} * 4);
      ids.upload(std::span<const int32_t>(prompt.data() + first, rows));
      const DevicePtr hidden = model.forward(kv, ids.ptr());
      const bool last = first + rows == prompt.size();
      std::vector<uint32_t> wanted;
      if (o.prompt_logits) {
        for (uint32_t i = 0; i < rows; ++i) wanted.push_back(i);
      } else if (last) {
        wanted.push_back(rows - 1);
      }
      if (!wanted.empty()) {
        const std::vector<float> l = to_f32(backend, model.logits(hidden, rows, wanted), wanted.size() * size_t{vocab});
        if (o.prompt_logits) r.prompt_logits[p].insert(r.prompt_logits[p].end(), l.begin(), l.end());
        if (last) {
          const std::span<const float> row(l.data() + (wanted.size() - 1) * size_t{vocab}, vocab);
          next[p] = argmax(row);
          r.generated[p].push_back(next[p]);
          r.logits[p].insert(r.logits[p].end(), row.begin(), row.end());
        }
      }
      if (o.progress) o.progress(stage, static_cast<double>(first + rows) / static_cast<double>(prompt.size()));
      r.prefill_tokens += rows;
    }
  }
  backend.synchronize();
  r.prefill_seconds = seconds_since(prefill_start);

  const auto decode_start = Clock::now();
  decode(backend, model, cache, seqs, next, o, r);
  r.decode_seconds = seconds_since(decode_start);
  return r;
}

}  // namespace metrale::layers
