// SPDX-License-Identifier: MIT OR Apache-2.0
#include "reference/attention.hpp"

#include "core/numeric.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace metrale::layers {

ReferenceOutput reference_paged_attention(std::span<const uint16_t> q, uint32_t rows, uint32_t q_heads,
                                          const PagedKvView& kv, std::span<const int32_t> tables, uint32_t max_blocks,
                                          std::span<const uint32_t> context, float scale) {
  const uint32_t d = kv.head_dim, group = q_heads / kv.kv_heads;
  if (q.size() != size_t{rows} * q_heads * d || context.size() != rows || tables.size() != size_t{rows} * max_blocks)
    throw std::invalid_argument("reference_paged_attention: q, context or tables has the wrong size for rows=" +
                                std::to_string(rows));
  ReferenceOutput out;
  out.m = rows;
  out.n = q_heads * d;
  out.value.assign(size_t{rows} * out.n, 0.0);
  out.bound.assign(size_t{rows} * out.n, 0.0);
  out.row_excluded.assign(rows, 0);
  const auto element = [&](const int32_t* table, uint32_t head, uint32_t pos) {
    const uint32_t block = static_cast<uint32_t>(table[pos / kv.block_size]);
    return ((size_t{block} * kv.kv_heads + head) * kv.block_size + pos % kv.block_size) * d;
  };
  std::vector<double> score, magnitude;
  for (uint32_t r = 0; r < rows; ++r) {
    const int32_t* table = tables.data() + size_t{r} * max_blocks;
    const uint32_t n = context[r];
    for (uint32_t h = 0; h < q_heads; ++h) {
      const uint16_t* qh = q.data() + (size_t{r} * q_heads + h) * d;
      const uint32_t kv_head = h / group;
      score.assign(n, 0.0);
      magnitude.assign(n, 0.0);
      double top = -INFINITY, largest = 0.0;
      for (uint32_t j = 0; j < n; ++j) {
        const uint16_t* k = kv.k_cache.data() + element(table, kv_head, j);
        double dot = 0.0, size = 0.0;
        for (uint32_t i = 0; i < d; ++i) {
          const double product = double{bf16_to_f32(qh[i])} * double{bf16_to_f32(k[i])};
          dot += product;
          size += std::fabs(product);
        }
        score[j] = dot * scale;
        top = std::max(top, score[j]);
        largest = std::max(largest, size);
      }
      double sum = 0.0;
      for (uint32_t j = 0; j < n; ++j) {
        score[j] = std::exp(score[j] - top);
        sum += score[j];
      }
      const double slack = kAttnWeightTolerance + 2 * kAttnScoreTolerance * std::fabs(double{scale}) * largest;
      double* value = out.value.data() + size_t{r} * out.n + size_t{h} * d;
      double* bound = out.bound.data() + size_t{r} * out.n + size_t{h} * d;
      for (uint32_t j = 0; j < n; ++j) {
        const double w = score[j] / sum;
        const uint16_t* v = kv.v_cache.data() + element(table, kv_head, j);
        for (uint32_t i = 0; i < d; ++i) {
          value[i] += w * double{bf16_to_f32(v[i])};
          bound[i] += w * std::fabs(double{bf16_to_f32(v[i])});
        }
      }
      for (uint32_t i = 0; i < d; ++i) bound[i] = kAttnRelTolerance * std::fabs(value[i]) + slack * bound[i];
    }
  }
  return out;
}

uint32_t paged_blocks_needed(std::span<const uint32_t> lengths, uint32_t block_size) {
  uint32_t blocks = 0;
  for (uint32_t len : lengths) blocks += (len + block_size - 1) / block_size;
  return blocks;
}

PagedTables paged_tables(std::span<const uint32_t> lengths, uint32_t block_size, std::span<const int32_t> order) {
  if (order.size() < paged_blocks_needed(lengths, block_size))
    throw std::invalid_argument("paged_tables: the sequences need " + std::to_string(paged_blocks_needed(lengths, block_size)) +
                                " blocks, the order lists " + std::to_string(order.size()));
  PagedTables t;
  for (uint32_t len : lengths) t.max_blocks = std::max(t.max_blocks, (len + block_size - 1) / block_size);
  t.tables.assign(lengths.size() * t.max_blocks, 0);
  size_t next = 0;
  for (size_t seq = 0; seq < lengths.size(); ++seq) {
    int32_t* row = t.tables.data() + seq * t.max_blocks;
    for (uint32_t b = 0; b < (lengths[seq] + block_size - 1) / block_size; ++b) row[b] = order[next++];
    for (uint32_t pos = 0; pos < lengths[seq]; ++pos)
      t.slots.push_back(row[pos / block_size] * static_cast<int32_t>(block_size) + static_cast<int32_t>(pos % block_size));
  }
  return t;
}

}  // namespace metrale::layers
