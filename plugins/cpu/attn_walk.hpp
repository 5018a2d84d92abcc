// SPDX-License-Identifier: MIT OR Apache-2.0
// How the SIMD tiers' attention walks a paged KV cache, with no instructions of its own (so every
// tier's TU includes it; internal linkage as kernels.hpp says): the rows of one kv head, 16
// positions (a "chunk") at a time; the chunk to prefetch; and attn_decode's division of a split
// among launch blocks, its walk over kv heads and chunks, its scratch and its P.V pass over the
// walk (the tier's chunk_values for each chunk).
#pragma once

#include "attn_calls.hpp"
#include "numeric.hpp"

#include <cstring>
#include <optional>
#include <type_traits>

namespace metrale::cpu {
namespace {

struct AttnWalk {
  static constexpr uint32_t kChunk = 16;  // positions per step: one score vector

  // The rows of one kv head of one sequence in a paged pool.
  struct PagedRows {
    const uint16_t* pool;
    const int32_t* table;
    KvShape kv;
    uint32_t head;
    const uint16_t* row(uint32_t pos) const {
      return pool + kv.at(static_cast<uint32_t>(table[pos / kv.block_size]), head, pos % kv.block_size);
    }
    // Positions [t0, t0 + 16), rows of `d` elements: in place when one cache block holds them
    // and all lie below `end`; otherwise copied to `stage` ([16][d]), rows from `end` on zero.
    const uint16_t* chunk(uint32_t t0, uint32_t end, uint16_t* stage, uint32_t d) const {
      if (kv.block_size >= kChunk && t0 + kChunk <= end) return row(t0);
      for (uint32_t i = 0; i < kChunk; ++i) {
        if (t0 + i < end)
          std::memcpy(stage + size_t{i} * d, row(t0 + i), size_t{d} * 2);
        else
          std::memset(stage + size_t{i} * d, 0, size_t{d} * 2);
      }
      return stage;
    }
    // The chunk of positions [t0, t0 + 16) where one cache block holds it contiguously (16 rows
    // of `d`; the part below `end`), else null: the address the decode prefetches.
    const char* chunk_address(uint32_t t0, uint32_t end) const {
      return kv.block_size >= kChunk && t0 < end ? reinterpret_cast<const char*>(row(t0)) : nullptr;
    }
  };

  // Part `part` of `parts` of a chunk (16 rows of D bf16) into L2 (locality 1: the L1's few fill
  // buffers would cap the lines in flight), spread over the loop that reads the current chunk
  // rather than in one burst. Always inlined: GCC 12 finds a function whose only effect is
  // prefetching "pure" and drops the calls to it.
  template <uint32_t D>
  [[gnu::always_inline]] static void prefetch_part(const char* chunk, uint32_t part, uint32_t parts) {
    if (chunk == nullptr) return;
    constexpr uint32_t kBytes = kChunk * D * 2;
    for (uint32_t at = part * kBytes / parts; at < (part + 1) * kBytes / parts; at += 64) __builtin_prefetch(chunk + at, 0, 1);
  }

  // f(std::integral_constant<uint32_t, D>) for the cache's head_dim D, 64, 128 or 256
  // (attn_table.cpp admits no other).
  template <class F>
  static void with_head_dim(uint32_t head_dim, const F& f) {
    if (head_dim == 64)
      f(std::integral_constant<uint32_t, 64>{});
    else if (head_dim == 128)
      f(std::integral_constant<uint32_t, 128>{});
    else
      f(std::integral_constant<uint32_t, 256>{});
  }

  // f(std::integral_constant<uint32_t, HB>) for the HB = min(4, heads) of one block of heads.
  template <class F>
  static void with_heads(uint32_t heads, const F& f) {
    switch (heads >= 4 ? 4 : heads) {
      case 4: f(std::integral_constant<uint32_t, 4>{}); break;
      case 3: f(std::integral_constant<uint32_t, 3>{}); break;
      case 2: f(std::integral_constant<uint32_t, 2>{}); break;
      default: f(std::integral_constant<uint32_t, 1>{}); break;
    }
  }

  // The kv heads one block walks together: a power-of-two divisor of kv_heads keeping its q
  // heads at most 32 (scratch), halved while fewer than 8 blocks of the launch would have work,
  // so that short contexts still spread over the threads.
  static uint32_t heads_per_block(const DecodeCall& c) {
    const uint32_t group = c.q_heads / c.kv.kv_heads;
    uint32_t heads = 1;
    while (c.kv.kv_heads % (2 * heads) == 0 && 2 * heads * group <= 32) heads *= 2;
    while (heads > 1 && uint64_t{c.partitions()} * c.seqs * (c.kv.kv_heads / heads) < 8) heads /= 2;
    return heads;
  }

  // One block's share of attn_decode: split `bx` of sequence `seq` for kv heads [head0, head0 +
  // heads). Its K walk (then its V walk) goes span by span (max(block_size, 16) positions), every
  // head of a span before the next span: a cache block holds its heads side by side, so the walk
  // reads one sequential stream instead of one 4 KiB piece per block and head, a pattern that
  // reads at about 0.75 of the sequential rate even with prefetching (AMD EPYC, Zen 5).
  struct DecodeWork {
    // Split `bx` (n > 0 positions from bx * 512) of sequence `seq`, kv heads [head0, head0 + heads).
    DecodeWork(const DecodeCall& call, uint32_t seq, uint32_t bx, uint32_t first, uint32_t count, uint32_t positions)
        : c(&call), table(call.block_tables + size_t{seq} * call.max_blocks), seq(seq), split(bx), head0(first), heads(count),
          group(call.q_heads / call.kv.kv_heads), begin(bx * kAttnPartition), end(begin + positions), n(positions),
          chunks((positions + kChunk - 1) / kChunk),
          span_chunks(call.kv.block_size > kChunk ? call.kv.block_size / kChunk : 1),
          total((chunks + span_chunks - 1) / span_chunks * span_chunks * heads) {}
    const DecodeCall* c;
    const int32_t* table;
    uint32_t seq, split, head0, heads, group, begin, end, n, chunks, span_chunks;
    uint32_t total;  // pieces (one head's chunk) of the walk, the last span's whole
    // The q heads walked per kv head are [q0, q0 + group) of its full_group (a slice: see slices).
    uint32_t q0 = 0;
    uint32_t full_group = group;
    DecodeWork slice(uint32_t first_q, uint32_t count) const {
      DecodeWork w = *this;
      w.q0 = first_q;
      w.group = count;
      return w;
    }
    // Piece i: its head (from head0) and chunk; false where the chunk lies past the split.
    bool piece(uint32_t i, uint32_t& head, uint32_t& chunk) const {
      const uint32_t per_span = span_chunks * heads, r = i % per_span;
      head = r / span_chunks;
      chunk = i / per_span * span_chunks + r % span_chunks;
      return chunk < chunks;
    }
    PagedRows rows(const uint16_t* pool, uint32_t head) const { return {pool, table, c->kv, head0 + head}; }
    // What to prefetch for step i of the K walk followed by the V walk: null past both, or where
    // the piece is not one contiguous chunk.
    const char* ahead(uint32_t i) const {
      uint32_t head = 0, chunk = 0;
      if (i >= 2 * total || !piece(i % total, head, chunk)) return nullptr;
      return rows(i < total ? c->k_cache : c->v_cache, head).chunk_address(begin + chunk * kChunk, end);
    }
    // f(rows, head, chunk, next) for each piece of the K walk (`values` false) or the V walk: the
    // chunk's rows (in place or staged), its head (from head0) and chunk, and the chunk `ahead`
    // steps on to prefetch beside it (the K walk's last steps prefetch the V walk's first pieces;
    // it also prefetches its own first `ahead` at once).
    template <uint32_t D, uint32_t kAheadSteps, class F>
    void walk(bool values, uint16_t* stage, const F& f) const {
      if (!values)
        for (uint32_t i = 0; i < kAheadSteps; ++i) prefetch_part<D>(ahead(i), 0, 1);
      for (uint32_t i = 0; i < total; ++i) {
        uint32_t head = 0, chunk = 0;
        if (!piece(i, head, chunk)) continue;
        const char* next = ahead((values ? total : 0) + i + kAheadSteps);
        f(rows(values ? c->v_cache : c->k_cache, head).chunk(begin + chunk * kChunk, end, stage, D), head, chunk, next);
      }
    }
    // The walk's q heads (head0 * group on), their rows of q, and where each writes its record.
    uint32_t query_heads() const { return heads * group; }
    const uint16_t* query_rows() const {
      return c->q + (size_t{seq} * c->q_heads + head0 * full_group + q0) * c->kv.head_dim;
    }
    void record_addresses(float** records) const {
      for (uint32_t r = 0; r < query_heads(); ++r)
        records[r] = c->partials + ((size_t{seq} * c->q_heads + head0 * full_group + q0 + r) * c->partitions() + split) *
                                       partial_stride(c->kv.head_dim);
    }
  };

  // f(w) for each slice of `work` whose q heads fit one block's scratch (DecodeScratch) at head_dim
  // D: the whole walk at D <= 128; at 256 at most 64 q heads at a time (a group of up to 128 heads
  // would overrun it), each slice walking the cache again. A walk of several kv heads has at most
  // 32 q heads (heads_per_block), so only a single kv head's group is ever sliced.
  template <uint32_t D, class F>
  static void slices(const DecodeWork& work, const F& f) {
    constexpr uint32_t kRows = D > 128 ? 64 : 128;
    if (work.group <= kRows) return f(work);
    for (uint32_t q0 = 0; q0 < work.group; q0 += kRows) f(work.slice(q0, min_u32(kRows, work.group - q0)));
  }

  // scores [heads * group][512] = scale * q.k over the split, K read once for the whole group, by
  // the tier's chunk_partials and chunk_scores.
  template <class Tier, uint32_t D>
  static void key_scores(const DecodeWork& w, const typename Tier::Query* q, float* scores, float* partial,
                         uint16_t* stage) {
    w.walk<D, Tier::kAhead>(false, stage, [&](const uint16_t* k, uint32_t head, uint32_t ch, const char* next) {
      for (uint32_t g = 0; g < w.group; g += 4) {
        const uint32_t heads = min_u32(4, w.group - g), row = head * w.group + g;
        with_heads(heads, [&](auto hb) {
          Tier::template chunk_partials<D, decltype(hb)::value>(q + size_t{row} * D, k, partial, g == 0 ? next : nullptr);
        });
        for (uint32_t h = 0; h < heads; ++h)
          Tier::chunk_scores(partial, h, w.c->scale, scores + size_t{row + h} * kAttnPartition + ch * kChunk);
      }
    });
  }

  // acc [heads * group][D] (the tier's dim order) = the probabilities in `probs` x V over the
  // split, by the tier's chunk_values.
  template <class Tier, uint32_t D>
  static void value_sums(const DecodeWork& w, const float* probs, float* acc, uint16_t* stage) {
    w.walk<D, Tier::kAhead>(true, stage, [&](const uint16_t* v, uint32_t head, uint32_t ch, const char* next) {
      const uint32_t count = min_u32(kChunk, w.n - ch * kChunk);
      for (uint32_t g = 0; g < w.group; g += 4) {
        const uint32_t row = head * w.group + g;
        with_heads(w.group - g, [&](auto hb) {
          Tier::template chunk_values<D, decltype(hb)::value>(acc + size_t{row} * D,
                                                              probs + size_t{row} * kAttnPartition + ch * kChunk, v,
                                                              count, g == 0 ? next : nullptr);
        });
      }
    });
  }

  // attn_decode's scratch for a walk of `rows` q heads, on a tier of L-lane vectors: q f32
  // [rows][D] and the P.V accumulators f32 [rows][D] (in the tier's dim order), the scores then
  // probabilities f32 [rows][512], the partial dot products f32 [4 heads][16 positions][L], a
  // staged chunk [16][D] and the records' addresses.
  template <uint32_t D, uint32_t L>
  struct DecodeScratch {
    DecodeScratch(unsigned char* scratch, uint32_t rows)
        : q(scratch_at<float>(scratch, 0)), scores(q + size_t{rows} * D), acc(scores + size_t{rows} * kAttnPartition),
          partial(acc + size_t{rows} * D), stage(reinterpret_cast<uint16_t*>(partial + 4 * kChunk * L)),
          records(reinterpret_cast<float**>(stage + kChunk * D)) {}
    float* q;
    float* scores;
    float* acc;
    float* partial;
    uint16_t* stage;
    float** records;
  };

  // The share of attn_decode's block (bx, by): none where the block of an earlier head walks its kv
  // head (heads_per_block) or the split starts past the sequence's context.
  static std::optional<DecodeWork> block_work(const DecodeCall& c, uint32_t bx, uint32_t by) {
    const uint32_t per_block = heads_per_block(c);
    const uint32_t seq = by / c.kv.kv_heads, head0 = by % c.kv.kv_heads;
    const auto context = static_cast<uint32_t>(c.context_lens[seq]);
    const uint32_t begin = bx * kAttnPartition;
    if (head0 % per_block != 0 || begin >= context) return std::nullopt;
    return DecodeWork(c, seq, bx, head0, per_block, min_u32(context - begin, kAttnPartition));
  }
};

}  // namespace
}  // namespace metrale::cpu
