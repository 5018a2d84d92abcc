// SPDX-License-Identifier: MIT OR Apache-2.0
#include "decoder_table.hpp"

#include "launch_checks.hpp"


namespace metrale::cpu {

namespace {

// rms_norm (x, weight, y, m, h, eps) and rms_norm_residual (x, residual, weight, y, residual_out,
// m, h, eps): `rows` are the indices of the [m][h] bf16 tensors, `weight` that of the [h] one.
template <bool kResidual>
metrale_status check_rms_norm(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  constexpr unsigned kM = kResidual ? 5 : 3;
  const uint32_t m = arg_u32(a, kM), h = arg_u32(a, kM + 1);
  if (!at_least_one({{"m", m}, {"h", h}}, error) || !finite_ok(arg_f32(a, kM + 2), "eps", true, error)) return kInvalid;
  const uint64_t row_bytes = product({m, h, 2});
  const bool rows_ok = kResidual ? buffer(a, mem, 0, "x", row_bytes, "m*h bf16", error) &&
                                       buffer(a, mem, 1, "residual", row_bytes, "m*h bf16", error) &&
                                       buffer(a, mem, 2, "weight", product({h, 2}), "h bf16", error) &&
                                       buffer(a, mem, 3, "y", row_bytes, "m*h bf16", error) &&
                                       buffer(a, mem, 4, "residual_out", row_bytes, "m*h bf16", error)
                                 : buffer(a, mem, 0, "x", row_bytes, "m*h bf16", error) &&
                                       buffer(a, mem, 1, "weight", product({h, 2}), "h bf16", error) &&
                                       buffer(a, mem, 2, "y", row_bytes, "m*h bf16", error);
  if (!rows_ok) return kInvalid;
  needed = {m, 1};
  return kOk;
}

// y (argument `out`, `bytes` long) is x (argument 0) itself or apart from it, and apart from the
// other input `other` (`other_bytes`).
bool in_place_or_apart(const KernelArgs& a, unsigned out, const char* out_name, uint64_t bytes, unsigned other,
                       const char* other_name, uint64_t other_bytes, std::string& error) {
  const Span spans[] = {{a.v[other], other_bytes, other_name}, {a.v[out], bytes, out_name}};
  if (!apart(spans, 2, 1, error, "it may be x itself and overlap nothing else")) return false;
  if (a.v[out] == a.v[0] || disjoint(a.v[0], bytes, a.v[out], bytes)) return true;
  error = std::string(out_name) + " (" + hex(a.v[out]) + ") overlaps x (" + hex(a.v[0]) + ", " + std::to_string(bytes) +
          " bytes) in part; it may be x itself";
  return false;
}

// rms_norm_zero_centred (x, weight, y, m, h, eps): y may be x, no other overlap.
metrale_status check_zero_centred(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t m = arg_u32(a, 3), h = arg_u32(a, 4);
  if (!at_least_one({{"m", m}, {"h", h}}, error) || !finite_ok(arg_f32(a, 5), "eps", true, error)) return kInvalid;
  const uint64_t row_bytes = product({m, h, 2});
  if (!buffer(a, mem, 0, "x", row_bytes, "m*h bf16", error) || !buffer(a, mem, 1, "weight", product({h, 2}), "h bf16", error) ||
      !buffer(a, mem, 2, "y", row_bytes, "m*h bf16", error) ||
      !in_place_or_apart(a, 2, "y", row_bytes, 1, "weight", product({h, 2}), error))
    return kInvalid;
  needed = {m, 1};
  return kOk;
}

// output_gate (x, gate, out, m, n): out may be x, no other overlap.
metrale_status check_output_gate(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t m = arg_u32(a, 3), n = arg_u32(a, 4);
  if (!at_least_one({{"m", m}, {"n", n}}, error)) return kInvalid;
  const uint64_t row_bytes = product({m, n, 2});
  if (!buffer(a, mem, 0, "x", row_bytes, "m*n bf16", error) || !buffer(a, mem, 1, "gate", row_bytes, "m*n bf16", error) ||
      !buffer(a, mem, 2, "out", row_bytes, "m*n bf16", error) ||
      !in_place_or_apart(a, 2, "out", row_bytes, 1, "gate", row_bytes, error))
    return kInvalid;
  needed = {m, 1};
  return kOk;
}

// add (x, residual, out, m, h).
metrale_status check_add(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t m = arg_u32(a, 3), h = arg_u32(a, 4);
  if (!at_least_one({{"m", m}, {"h", h}}, error)) return kInvalid;
  const uint64_t row_bytes = product({m, h, 2});
  if (!buffer(a, mem, 0, "x", row_bytes, "m*h bf16", error) || !buffer(a, mem, 1, "residual", row_bytes, "m*h bf16", error) ||
      !buffer(a, mem, 2, "out", row_bytes, "m*h bf16", error))
    return kInvalid;
  needed = {m, 1};
  return kOk;
}

// bias_add (x, bias, out, m, n).
metrale_status check_bias_add(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t m = arg_u32(a, 3), n = arg_u32(a, 4);
  if (!at_least_one({{"m", m}, {"n", n}}, error)) return kInvalid;
  const uint64_t row_bytes = product({m, n, 2});
  if (!buffer(a, mem, 0, "x", row_bytes, "m*n bf16", error) || !buffer(a, mem, 1, "bias", product({n, 2}), "n bf16", error) ||
      !buffer(a, mem, 2, "out", row_bytes, "m*n bf16", error))
    return kInvalid;
  needed = {m, 1};
  return kOk;
}

// rope (q, k, positions, inv_freq, t, q_heads, kv_heads, head_dim, scaling) and qk_norm_rope
// (q, k, q_weight, k_weight, positions, inv_freq, t, q_heads, kv_heads, head_dim, eps, scaling).
// Every block rotates its token's rows of q and k in place, so q and k must not overlap.
template <bool kNorm>
metrale_status check_rotary(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  constexpr unsigned kPositions = kNorm ? 4 : 2, kT = kPositions + 2, kScaling = kNorm ? 11 : 8;
  const uint32_t t = arg_u32(a, kT), q_heads = arg_u32(a, kT + 1), kv_heads = arg_u32(a, kT + 2),
                 head_dim = arg_u32(a, kT + 3);
  if (!at_least_one({{"t", t}, {"q_heads", q_heads}, {"kv_heads", kv_heads}}, error) ||
      (kNorm && !finite_ok(arg_f32(a, 10), "eps", true, error)) || !finite_ok(arg_f32(a, kScaling), "scaling", false, error) ||
      !rotary_head_dim_ok(head_dim, error))
    return kInvalid;
  const uint64_t q_bytes = product({t, q_heads, head_dim, 2}), k_bytes = product({t, kv_heads, head_dim, 2});
  if (!buffer(a, mem, 0, "q", q_bytes, "t*q_heads*head_dim bf16", error) ||
      !buffer(a, mem, 1, "k", k_bytes, "t*kv_heads*head_dim bf16", error) ||
      (kNorm && (!buffer(a, mem, 2, "q_weight", product({head_dim, 2}), "head_dim bf16", error) ||
                 !buffer(a, mem, 3, "k_weight", product({head_dim, 2}), "head_dim bf16", error))) ||
      !buffer(a, mem, kPositions, "positions", product({t, 4}), "t i32", error) ||
      !buffer(a, mem, kPositions + 1, "inv_freq", product({head_dim / 2, 4}), "head_dim/2 f32", error))
    return kInvalid;
  if (!disjoint(a.v[0], q_bytes, a.v[1], k_bytes)) {
    error = "q (" + hex(a.v[0]) + ", " + std::to_string(q_bytes) + " bytes) and k (" + hex(a.v[1]) + ", " +
            std::to_string(k_bytes) + " bytes) overlap; both are rotated in place";
    return kInvalid;
  }
  needed = {t, 1};
  return kOk;
}

// (table, ids, out, t, h, vocab): every id a row of the [vocab][h] table.
metrale_status check_embedding(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t t = arg_u32(a, 3), h = arg_u32(a, 4), vocab = arg_u32(a, 5);
  if (!at_least_one({{"t", t}, {"h", h}, {"vocab", vocab}}, error)) return kInvalid;
  if (!buffer(a, mem, 0, "table", product({vocab, h, 2}), "vocab*h bf16", error) ||
      !buffer(a, mem, 1, "ids", product({t, 4}), "t i32", error) ||
      !buffer(a, mem, 2, "out", product({t, h, 2}), "t*h bf16", error))
    return kInvalid;
  const auto* ids = arg_ptr<const int32_t>(a, 1);
  for (uint32_t i = 0; i < t; ++i) {
    if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= vocab) {
      error = "ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) + " is not a token of the table (vocab=" +
              std::to_string(vocab) + ": ids are 0.." + std::to_string(vocab - 1) + ")";
      return kInvalid;
    }
  }
  needed = {t, 1};
  return kOk;
}

// argmax (logits, ids, m, vocab): one i32 per row of the [m][vocab] bf16 logits. ids must not
// overlap logits: one row's block writes its id while others still read their rows.
metrale_status check_argmax(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t m = arg_u32(a, 2), vocab = arg_u32(a, 3);
  if (!at_least_one({{"m", m}, {"vocab", vocab}}, error)) return kInvalid;
  const uint64_t logit_bytes = product({m, vocab, 2}), id_bytes = product({m, 4});
  if (!buffer(a, mem, 0, "logits", logit_bytes, "m*vocab bf16", error) || !buffer(a, mem, 1, "ids", id_bytes, "m i32", error))
    return kInvalid;
  if (!disjoint(a.v[0], logit_bytes, a.v[1], id_bytes)) {
    error = "logits (" + hex(a.v[0]) + ", " + std::to_string(logit_bytes) + " bytes) and ids (" + hex(a.v[1]) + ", " +
            std::to_string(id_bytes) + " bytes) overlap";
    return kInvalid;
  }
  needed = {m, 1};
  return kOk;
}

const KernelSpec kSpecs[] = {
    {METRALE_CPU_KERNEL(norm, rms_norm), check_rms_norm<false>, baseline::rms_norm, -1, "(m, 1)"},
    {METRALE_CPU_KERNEL(norm, rms_norm_residual), check_rms_norm<true>,
     baseline::rms_norm_residual, -1, "(m, 1)"},
    {METRALE_CPU_KERNEL(norm, add), check_add, baseline::add, -1, "(m, 1)"},
    {METRALE_CPU_KERNEL(norm, bias_add), check_bias_add, baseline::bias_add, -1, "(m, 1)"},
    {METRALE_CPU_KERNEL(norm, rms_norm_zero_centred), check_zero_centred, baseline::rms_norm_zero_centred, -1, "(m, 1)"},
    {METRALE_CPU_KERNEL(attn, output_gate), check_output_gate, baseline::output_gate, -1, "(m, 1)"},
    {METRALE_CPU_KERNEL(rope, rope), check_rotary<false>, baseline::rope, -1, "(t, 1)"},
    {METRALE_CPU_KERNEL(rope, qk_norm_rope), check_rotary<true>, baseline::qk_norm_rope,
     static_cast<int>(Simd::qk_norm_rope), "(t, 1)"},
    // A row gather: moe_gather's body reads (x, rows, out, t, h) from the same argument slots.
    {METRALE_CPU_KERNEL(embed, embedding), check_embedding, baseline::moe_gather, -1, "(t, 1)"},
    {METRALE_CPU_KERNEL(sample, argmax), check_argmax, baseline::argmax, -1, "(m, 1)"},
};

}  // namespace

std::span<const KernelSpec> decoder_kernel_specs() { return kSpecs; }

}  // namespace metrale::cpu
