// SPDX-License-Identifier: MIT OR Apache-2.0
// The attention cases (docs/kernels.md, "Module attn"): a paged cache filled through kv_append
// with each sequence's blocks scattered through the pool, then attn_decode + attn_decode_combine
// over several sequences of their own lengths, or attn_prefill of a chunk after past tokens,
// against layers/reference/attention.hpp.
#include "conformance/conformance.hpp"

#include "core/device_buffer.hpp"
#include "core/rng.hpp"
#include "core/numeric.hpp"
#include "reference/attention.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>

namespace metrale::conformance {

using namespace metrale::layers;

namespace {

constexpr uint32_t kPartition = 512;  // attn_decode's split

constexpr auto kAppendSignature = catalogue::signature("attn", "kv_append");
constexpr auto kDecodeSignature = catalogue::signature("attn", "attn_decode");
constexpr auto kCombineSignature = catalogue::signature("attn", "attn_decode_combine");
constexpr auto kPrefillSignature = catalogue::signature("attn", "attn_prefill");

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

std::vector<uint16_t> random_bf16(SplitMix64& rng, size_t count, double amplitude) {
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = f64_to_bf16(rng.uniform(-amplitude, amplitude));
  return out;
}

KernelHandle require(Backend& b, const char* name, std::span<const metrale_param_type> signature, CaseResult& r) {
  r.kernels.push_back(std::string("attn/") + name);
  return b.kernel("attn", name, signature);
}

// The pools with every sequence's tokens appended, the host copy, the block tables.
struct Cache {
  const AttnShape& shape;
  uint32_t num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> tables;
  std::vector<uint16_t> k_pool, v_pool;
  DeviceBuffer k_cache, v_cache;

  Cache(Backend& b, SplitMix64& rng, const AttnShape& s, const std::vector<uint32_t>& lengths, CaseResult& r)
      : shape(s) {
    num_blocks = metrale::layers::paged_blocks_needed(lengths, s.block_size) + 2;
    std::vector<int32_t> order(num_blocks);
    for (uint32_t i = 0; i < num_blocks; ++i) order[i] = static_cast<int32_t>(i);
    for (uint32_t i = num_blocks - 1; i > 0; --i) std::swap(order[i], order[rng.next() % (i + 1)]);
    const size_t pool = size_t{num_blocks} * s.kv_heads * s.block_size * s.head_dim;
    k_pool = random_bf16(rng, pool, 1.0);  // what stale blocks hold
    v_pool = random_bf16(rng, pool, 1.0);
    k_cache = DeviceBuffer(b, pool * 2);
    v_cache = DeviceBuffer(b, pool * 2);
    k_cache.upload(std::span<const uint16_t>(k_pool));
    v_cache.upload(std::span<const uint16_t>(v_pool));
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
    DeviceBuffer dk(b, k.size() * 2), dv(b, v.size() * 2), ds(b, slots.size() * 4);
    dk.upload(std::span<const uint16_t>(k));
    dv.upload(std::span<const uint16_t>(v));
    ds.upload(std::span<const int32_t>(slots));
    LaunchShape launch;
    launch.grid = {tokens, 1, 1};
    launch.block = {128, 1, 1};
    b.launch(require(b, "kv_append", kAppendSignature, r), launch, dk.ptr(), dv.ptr(), ds.ptr(), k_cache.ptr(), v_cache.ptr(),
             tokens, s.kv_heads, s.head_dim, s.block_size, num_blocks);
    b.synchronize();
  }

  PagedKvView view() const { return {k_pool, v_pool, shape.kv_heads, shape.head_dim, shape.block_size}; }
};

// Poisoned output with a guard row after it: unwritten elements and writes past the end fail.
struct Output {
  size_t count;
  DeviceBuffer buffer;
  Output(Backend& b, size_t elements, size_t guard) : count(elements), buffer(b, (elements + guard) * 2) {
    const std::vector<uint16_t> poison(elements + guard, kCanary);
    buffer.upload(std::span<const uint16_t>(poison));
  }
  CaseResult finish(CaseResult r, const ReferenceOutput& ref) const {
    auto all = buffer.download<uint16_t>(buffer.bytes() / 2);
    if (!std::all_of(all.begin() + static_cast<std::ptrdiff_t>(count), all.end(), [](uint16_t v) { return v == kCanary; })) {
      r.outcome = Outcome::failed;
      r.detail = "wrote past the end of out";
      return r;
    }
    all.resize(count);
    const Comparison cmp = compare_to_reference(all, ref);
    r.outcome = cmp.passed() ? Outcome::passed : Outcome::failed;
    r.detail = cmp.summary();
    r.comparison = cmp;
    return r;
  }
};

float scale_of(const AttnShape& s) { return static_cast<float>(1.0 / std::sqrt(double(s.head_dim))); }

std::string shape_name(const AttnShape& s) {
  return "d" + std::to_string(s.head_dim) + "_q" + std::to_string(s.q_heads) + "_kv" + std::to_string(s.kv_heads) + "_b" +
         std::to_string(s.block_size);
}

Case decode_case(const AttnShape& s, std::vector<uint32_t> lengths) {
  Case c;
  c.kind = CaseKind::attn_decode;
  c.attn = s;
  c.name = "attn/decode/" + shape_name(s) + "_len";
  for (size_t i = 0; i < lengths.size(); ++i) c.name += (i ? "-" : "") + std::to_string(lengths[i]);
  c.m = static_cast<uint32_t>(lengths.size());
  c.attn_lengths = std::move(lengths);
  c.seed = c.name.size() * 977 + c.m;
  return c;
}

Case prefill_case(const AttnShape& s, uint32_t m, uint32_t past) {
  Case c;
  c.kind = CaseKind::attn_prefill;
  c.attn = s;
  c.m = m;
  c.attn_lengths = {past};
  c.name = "attn/prefill/" + shape_name(s) + "_m" + std::to_string(m) + "_past" + std::to_string(past);
  c.seed = uint64_t{m} * 131 + past;
  return c;
}

}  // namespace

std::vector<Case> attn_cases() {
  return {
      decode_case({128, 8, 8, 16}, {1, 17, 100, 33}),     // MHA
      decode_case({128, 32, 8, 16}, {1300, 5, 512, 513}),  // GQA 4, splits and a split boundary
      decode_case({64, 16, 2, 32}, {2049, 31, 1}),         // GQA 8
      decode_case({64, 8, 1, 8}, {700, 64}),               // MQA
      prefill_case({128, 32, 8, 16}, 1, 37),
      prefill_case({128, 32, 8, 16}, 7, 300),
      prefill_case({64, 16, 2, 32}, 64, 100),
      prefill_case({64, 8, 1, 8}, 130, 5),
  };
}

std::optional<std::string> attn_skip_reason(Backend& backend, const Case& c) {
  const std::vector<const char*> needed = c.kind == CaseKind::attn_decode
                                              ? std::vector<const char*>{"kv_append", "attn_decode", "attn_decode_combine"}
                                              : std::vector<const char*>{"kv_append", "attn_prefill"};
  for (const char* name : needed) {
    const ManifestKernel* listed = backend.manifest().find_kernel("attn", name);
    if (!listed) return "backend '" + backend.name() + "' does not list attn/" + name;
    if (std::string gate = backend.gate_reason(*listed); !gate.empty())
      return "backend '" + backend.name() + "' lists attn/" + name + " for other devices: " + gate;
  }
  return std::nullopt;
}

CaseResult run_attn_case(Backend& b, const Case& c, CaseResult r) {
  const AttnShape& s = c.attn;
  SplitMix64 rng(c.seed);
  LaunchShape shape;
  shape.block = {128, 1, 1};
  if (c.kind == CaseKind::attn_decode) {
    const std::vector<uint32_t>& lengths = c.attn_lengths;
    const Cache cache(b, rng, s, lengths, r);
    const uint32_t seqs = c.m, partitions = ceil_div(cache.max_blocks * s.block_size, kPartition);
    const auto q = random_bf16(rng, size_t{seqs} * s.q_heads * s.head_dim, 3.0);
    const std::vector<int32_t> context(lengths.begin(), lengths.end());
    DeviceBuffer dq(b, q.size() * 2), dt(b, cache.tables.size() * 4), dc(b, context.size() * 4);
    dq.upload(std::span<const uint16_t>(q));
    dt.upload(std::span<const int32_t>(cache.tables));
    dc.upload(std::span<const int32_t>(context));
    DeviceBuffer partials(b, size_t{seqs} * s.q_heads * partitions * (s.head_dim + 2) * 4);
    const Output out(b, size_t{seqs} * s.q_heads * s.head_dim, s.head_dim);
    shape.grid = {partitions, seqs * s.kv_heads, 1};
    b.launch(require(b, "attn_decode", kDecodeSignature, r), shape, dq.ptr(), cache.k_cache.ptr(), cache.v_cache.ptr(),
             dt.ptr(), dc.ptr(), partials.ptr(), seqs, s.q_heads, s.kv_heads, s.head_dim, s.block_size, cache.max_blocks,
             cache.num_blocks, scale_of(s));
    shape.grid = {s.q_heads, seqs, 1};
    b.launch(require(b, "attn_decode_combine", kCombineSignature, r), shape, partials.ptr(), dc.ptr(), out.buffer.ptr(),
             seqs, s.q_heads, s.head_dim, partitions);
    b.synchronize();
    return out.finish(std::move(r),
                      reference_paged_attention(q, seqs, s.q_heads, cache.view(), cache.tables, cache.max_blocks, lengths,
                                                scale_of(s)));
  }
  const uint32_t m = c.m, past = c.attn_lengths.at(0);
  const Cache cache(b, rng, s, {past + m}, r);
  const auto q = random_bf16(rng, size_t{m} * s.q_heads * s.head_dim, 3.0);
  DeviceBuffer dq(b, q.size() * 2), dt(b, cache.tables.size() * 4);
  dq.upload(std::span<const uint16_t>(q));
  dt.upload(std::span<const int32_t>(cache.tables));
  const Output out(b, size_t{m} * s.q_heads * s.head_dim, s.head_dim);
  shape.grid = {ceil_div(m, 64), s.kv_heads, 1};
  b.launch(require(b, "attn_prefill", kPrefillSignature, r), shape, dq.ptr(), cache.k_cache.ptr(), cache.v_cache.ptr(),
           dt.ptr(), out.buffer.ptr(), m, past, s.q_heads, s.kv_heads, s.head_dim, s.block_size, cache.num_blocks,
           scale_of(s));
  b.synchronize();
  std::vector<int32_t> tables;
  std::vector<uint32_t> context;
  for (uint32_t i = 0; i < m; ++i) {
    tables.insert(tables.end(), cache.tables.begin(), cache.tables.end());
    context.push_back(past + i + 1);
  }
  return out.finish(std::move(r), reference_paged_attention(q, m, s.q_heads, cache.view(), tables, cache.max_blocks,
                                                            context, scale_of(s)));
}

}  // namespace metrale::conformance
