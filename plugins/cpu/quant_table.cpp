// SPDX-License-Identifier: MIT OR Apache-2.0
#include "quant_table.hpp"

#include "launch_checks.hpp"
#include "quant_calls.hpp"

namespace metrale::cpu {

namespace {

// The codes argument's name: plain, or a repack's input (1) or output (2). Literals: a launch
// that passes its checks builds no string.
const char* codes_name(const FamilyTraits& f, unsigned role = 0) {
  static constexpr const char* names[2][3] = {{"qweight", "qweight_in", "qweight_out"}, {"weight", "weight_in", "weight_out"}};
  return names[f.codes == Codes::fp8 || f.scale_bytes == 0][role];
}
const char* codes_what(const FamilyTraits& f) {
  return f.code_bits == 4 ? "n*k/8 u32" : f.codes == Codes::bf16 ? "n*k bf16" : f.codes == Codes::f16 ? "n*k f16" : "n*k u8";
}

// The weight tensors of `count` stacked [n, k] matrices at arguments codes, scales[, zeros].
bool weights_ok(const KernelArgs& a, const MemoryView& mem, const FamilyTraits& f, const int* index,
                uint64_t count, uint32_t n, uint32_t k, uint32_t group, std::string& error) {
  const MatrixBytes b = matrix_bytes(f, n, k, group);
  const char* stack = count == 1 ? "" : "experts*";
  const auto stacked = [&](const char* what) { return [=] { return stack + std::string(what); }; };
  return buffer(a, mem, static_cast<unsigned>(index[2]), codes_name(f), product({count, b.codes}), stacked(codes_what(f)),
                error) &&
         (f.scale_bytes == 0 ||
          buffer(a, mem, static_cast<unsigned>(index[3]), "scales", product({count, b.scales}), stacked("n*(k/group) f32"),
                 error)) &&
         (!f.zeros ||
          buffer(a, mem, static_cast<unsigned>(index[4]), "zeros", product({count, b.zeros}), stacked("n*(k/group) u8"),
                 error));
}

// Activations of `rows` rows at argument index[0] (and their scales at index[1]).
bool activations_ok(const KernelArgs& a, const MemoryView& mem, const FamilyTraits& f, const int* index,
                    uint64_t rows, uint32_t k, const char* rows_name, std::string& error) {
  const bool quantized = f.int8_act || f.e4m3_act;
  const auto what = [&] { return std::string(rows_name) + (f.int8_act ? "*k i8" : f.e4m3_act ? "*k e4m3" : "*k bf16"); };
  const auto scales = [&] { return std::string(rows_name) + (f.act_groups ? "*(k/128) f32" : " f32"); };
  return buffer(a, mem, static_cast<unsigned>(index[0]), quantized ? "xq" : "x", product({rows, act_row_bytes(f, k)}),
                what, error) &&
         (!quantized ||
          buffer(a, mem, static_cast<unsigned>(index[1]), "xscale", product({rows, act_row_scales(f, k), 4}), scales, error));
}

uint32_t group_of(const KernelArgs& a, const FamilyTraits& f, int index) {
  return f.fixed_group ? f.fixed_group : arg_u32(a, static_cast<unsigned>(index));
}

// <family>_gemv (m <= 8, N64 blocks) and <family>_gemm (N128 x M64 tiles).
template <Family kFamily, bool kGemv>
metrale_status check_dense(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  constexpr FamilyTraits f = traits(kFamily);
  const int* i = f.dense;
  const uint32_t m = arg_u32(a, i[6]), n = arg_u32(a, i[7]), k = arg_u32(a, i[8]), group = group_of(a, f, i[9]);
  if (!at_least_one({{"n", n}}, error) || !m_ok(m, kGemv ? kGemvMaxRows : 0, "; use the _gemm kernel for more rows", error) ||
      !k_ok(k, error) || (!f.fixed_group && !group_ok(group, error)))
    return kInvalid;
  if (!activations_ok(a, mem, f, i, m, k, "m", error) || !weights_ok(a, mem, f, i, 1, n, k, group, error) ||
      !buffer(a, mem, static_cast<unsigned>(i[5]), "y", product({m, n, 2}), "m*n bf16", error))
    return kInvalid;
  needed = kGemv ? BlockRange{ceil_div(n, kGemvRows), 1} : BlockRange{ceil_div(n, kTileN), ceil_div(m, kTileM)};
  return kOk;
}

// <family>_grouped_gemm: offsets [experts + 1] non-decreasing from >= 0; rows offsets[experts].
template <Family kFamily>
metrale_status check_grouped(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  constexpr FamilyTraits f = traits(kFamily);
  const int* i = f.grouped;
  const uint32_t n = arg_u32(a, i[7]), k = arg_u32(a, i[8]), group = group_of(a, f, i[9]);
  const uint32_t experts = arg_u32(a, i[10]);
  if (!at_least_one({{"n", n}, {"experts", experts}}, error) || !k_ok(k, error) ||
      (!f.fixed_group && !group_ok(group, error)))
    return kInvalid;
  const auto off = static_cast<unsigned>(i[5]);
  if (!buffer(a, mem, off, "offsets", product({uint64_t{experts} + 1, 4}), "(experts+1) i32", error) ||
      !offsets_ok(a, off, experts, error))
    return kInvalid;
  const auto* offsets = arg_ptr<const int32_t>(a, off);
  const auto rows = static_cast<uint64_t>(offsets[experts]);
  if (!activations_ok(a, mem, f, i, rows, k, "offsets[experts]", error) ||
      !weights_ok(a, mem, f, i, experts, n, k, group, error) ||
      !buffer(a, mem, static_cast<unsigned>(i[6]), "y", product({rows, n, 2}), "offsets[experts]*n bf16", error))
    return kInvalid;
  needed = {ceil_div(n, kTileN), experts, offsets};
  return kOk;
}

// <family>_repack: `count` stacked canonical matrices in, the same byte sizes out; the outputs
// overlap neither the inputs nor each other.
template <Family kFamily>
metrale_status check_repack(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  constexpr FamilyTraits f = traits(kFamily);
  const unsigned tensors = f.zeros ? 3 : f.scale_bytes ? 2 : 1;  // inputs, then outputs, then n, k[, group], count
  const uint32_t n = arg_u32(a, 2 * tensors), k = arg_u32(a, 2 * tensors + 1);
  const uint32_t group = f.zeros ? arg_u32(a, 2 * tensors + 2) : f.fixed_group;
  const uint32_t count = arg_u32(a, f.zeros ? 2 * tensors + 3 : 2 * tensors + 2);
  if (!at_least_one({{"n", n}, {"count", count}}, error) || !k_ok(k, error) || !group_ok(group, error)) return kInvalid;
  const MatrixBytes b = matrix_bytes(f, n, k, group);
  const uint64_t bytes[] = {product({count, b.codes}), product({count, b.scales}), product({count, b.zeros})};
  const char* names[] = {codes_name(f, 1), "scales_in", "zeros_in", codes_name(f, 2), "scales_out", "zeros_out"};
  const auto what = [&](unsigned t) {
    return t == 0 ? "count*" + std::string(codes_what(f)) : std::string(t == 1 ? "count*n*(k/group) f32" : "count*n*(k/group) u8");
  };
  Span spans[6];
  for (unsigned side = 0; side < 2; ++side)
    for (unsigned t = 0; t < tensors; ++t) {
      const unsigned arg = side * tensors + t;
      if (!buffer(a, mem, arg, names[side * 3 + t], bytes[t], [&] { return what(t); }, error)) return kInvalid;
      spans[arg] = {a.v[arg], bytes[t], names[side * 3 + t]};
    }
  if (!apart(spans, 2 * tensors, tensors, error)) return kInvalid;
  needed = {ceil_div(n, kRepackRows), count};
  return kOk;
}

// fp8_grouped_gemv: active[0] <= slots experts, ids ascending, each within the stacks and the
// offsets, at most 8 rows each.
bool active_expert_ok(const KernelArgs& a, const MemoryView& mem, uint32_t j, int32_t previous, uint32_t n,
                      uint32_t k, std::string& error) {
  const int32_t e = arg_ptr<const int32_t>(a, 4)[1 + j];
  const auto which = [&] { return "active[" + std::to_string(1 + j) + "] = " + std::to_string(e); };
  if (e < 0 || e <= previous) {
    error = which() + (e < 0 ? " is negative" : " does not follow active[" + std::to_string(j) + "] = " +
                                                    std::to_string(previous) + " in increasing order");
    return false;
  }
  const MatrixBytes b = matrix_bytes(traits(Family::fp8), n, k, kGroup);
  const uint64_t count = uint64_t(e) + 1;
  // which() named first: GCC 12 at -O3 reports a false -Wrestrict in "(" + std::string&&.
  const auto up_to = [&](const char* before, const char* after) {
    const std::string named = which();
    return before + named + after;
  };
  if (!buffer(a, mem, 3, "offsets", product({count + 1, 4}), [&] { return up_to("entries up to ", " + 1"); }, error) ||
      !buffer(a, mem, 1, "weight", product({count, b.codes}), [&] { return up_to("(", " + 1) matrices of n*k u8"); },
              error) ||
      !buffer(a, mem, 2, "scales", product({count, b.scales}), "their n*(k/128) f32 scales", error))
    return false;
  const int32_t first = arg_ptr<const int32_t>(a, 3)[e], last = arg_ptr<const int32_t>(a, 3)[e + 1];
  if (first < 0 || last < first || last - first > static_cast<int32_t>(kGemvMaxRows)) {
    error = "expert " + std::to_string(e) + " (" + which() + ") has rows offsets[" + std::to_string(e) + "] = " +
            std::to_string(first) + " .. offsets[" + std::to_string(e + 1) + "] = " + std::to_string(last) +
            "; fp8_grouped_gemv takes 0 to 8 rows per expert";
    return false;
  }
  return buffer(a, mem, 0, "x", product({uint64_t(last), k, 2}), "rows up to the expert's last, of k bf16", error) &&
         buffer(a, mem, 5, "y", product({uint64_t(last), n, 2}), "rows up to the expert's last, of n bf16", error);
}

metrale_status check_grouped_gemv(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t n = arg_u32(a, 6), k = arg_u32(a, 7), slots = arg_u32(a, 8);
  if (!at_least_one({{"n", n}, {"slots", slots}}, error) || !k_ok(k, error) ||
      !buffer(a, mem, 4, "active", 4, "active[0]", error))
    return kInvalid;
  const int32_t count = arg_ptr<const int32_t>(a, 4)[0];
  if (count < 0 || static_cast<uint32_t>(count) > slots) {
    error = "active[0] = " + std::to_string(count) + " must be 0.." + std::to_string(slots) + " (slots)";
    return kInvalid;
  }
  if (!buffer(a, mem, 4, "active", product({uint64_t(count) + 1, 4}), "1 + active[0] i32", error)) return kInvalid;
  for (int32_t j = 0, previous = -1; j < count; previous = arg_ptr<const int32_t>(a, 4)[1 + j], ++j)
    if (!active_expert_ok(a, mem, static_cast<uint32_t>(j), previous, n, k, error)) return kInvalid;
  needed = {ceil_div(n, kGemvRows), static_cast<uint32_t>(count)};
  return kOk;
}

// quantize_*: kWidth columns per scale (0: one scale per row).
template <uint32_t kWidth>
metrale_status check_quantize(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t m = arg_u32(a, 3), k = arg_u32(a, 4);
  if (!at_least_one({{"m", m}}, error) || !k_ok(k, error) ||
      !buffer(a, mem, 0, "x", product({m, k, 2}), "m*k bf16", error) ||
      !buffer(a, mem, 1, "xq", product({m, k}), "m*k bytes", error) ||
      !buffer(a, mem, 2, "xscale", product({m, kWidth ? k / kWidth : 1, 4}), kWidth ? "m*(k/128) f32" : "m f32", error))
    return kInvalid;
  needed = {m, 1};
  return kOk;
}

// quantize_*_static_bf16 (x, scales, offsets, xq, xscale, k, groups): rows grouped as gather_k's.
metrale_status check_quantize_static(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t k = arg_u32(a, 5), groups = arg_u32(a, 6);
  if (!at_least_one({{"groups", groups}}, error) || !k_ok(k, error) ||
      !buffer(a, mem, 2, "offsets", product({uint64_t{groups} + 1, 4}), "(groups+1) i32", error) ||
      !offsets_ok(a, 2, groups, error) || !buffer(a, mem, 1, "scales", product({groups, 4}), "groups f32", error))
    return kInvalid;
  const auto rows = static_cast<uint64_t>(arg_ptr<const int32_t>(a, 2)[groups]);
  if (!buffer(a, mem, 0, "x", product({rows, k, 2}), "offsets[groups]*k bf16", error) ||
      !buffer(a, mem, 3, "xq", product({rows, k}), "offsets[groups]*k bytes", error) ||
      !buffer(a, mem, 4, "xscale", product({rows, 4}), "offsets[groups] f32", error))
    return kInvalid;
  needed = {static_cast<uint32_t>(rows), 1};
  return kOk;
}

// gather_k: every perm entry of a group that has rows is checked (the rows' reads depend on
// them); a group without rows is not read. Whether each row is a permutation is not checked:
// a repeated index only repeats a column.
metrale_status check_gather_k(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t k = arg_u32(a, 4), groups = arg_u32(a, 5);
  if (!at_least_one({{"groups", groups}}, error) || !k_ok(k, error) ||
      !buffer(a, mem, 2, "offsets", product({uint64_t{groups} + 1, 4}), "(groups+1) i32", error) ||
      !offsets_ok(a, 2, groups, error))
    return kInvalid;
  const auto* offsets = arg_ptr<const int32_t>(a, 2);
  const auto rows = static_cast<uint64_t>(offsets[groups]);
  if (!buffer(a, mem, 0, "x", product({rows, k, 2}), "offsets[groups]*k bf16", error) ||
      !buffer(a, mem, 1, "perm", product({groups, k, 4}), "groups*k i32", error) ||
      !buffer(a, mem, 3, "out", product({rows, k, 2}), "offsets[groups]*k bf16", error))
    return kInvalid;
  const auto* perm = arg_ptr<const int32_t>(a, 1);
  for (uint32_t g = 0; g < groups; ++g) {
    if (offsets[g + 1] == offsets[g]) continue;
    for (size_t j = 0; j < k; ++j) {
      const int32_t v = perm[size_t{g} * k + j];
      if (v < 0 || static_cast<uint32_t>(v) >= k) {
        error = "perm[" + std::to_string(size_t{g} * k + j) + "] = " + std::to_string(v) + " (group " +
                std::to_string(g) + ", column " + std::to_string(j) + ") is not a column 0.." + std::to_string(k - 1);
        return kInvalid;
      }
    }
  }
  needed = {static_cast<uint32_t>(rows), 1};
  return kOk;
}

metrale_status check_moe_align(const KernelArgs& a, const MemoryView& mem, BlockRange& needed, std::string& error) {
  const uint32_t m = arg_u32(a, 8), e = arg_u32(a, 9), k = arg_u32(a, 10), shared = arg_u32(a, 11);
  if (!at_least_one({{"m", m}, {"e", e}, {"k", k}}, error)) return kInvalid;
  if (shared > 2) {
    error = "shared must be 0, 1 or 2 (got shared=" + std::to_string(shared) + ")";
    return kInvalid;
  }
  const uint64_t width = uint64_t{k} + (shared ? 1 : 0);
  if (!buffer(a, mem, 0, "ids", product({m, k, 4}), "m*k i32", error) ||
      !buffer(a, mem, 1, "topk_weights", product({m, k, 4}), "m*k f32", error) ||
      (shared == 2 && !buffer(a, mem, 2, "shared_logits", product({m, 4}), "m f32 (shared = 2)", error)) ||
      !buffer(a, mem, 3, "offsets", product({uint64_t{e} + 1, 4}), "(e+1) i32", error) ||
      !buffer(a, mem, 4, "rows", product({m, k, 4}), "m*k i32", error) ||
      !buffer(a, mem, 5, "slots", product({m, width, 4}), "m*(k+shared?1:0) i32", error) ||
      !buffer(a, mem, 6, "combine_weights", product({m, width, 4}), "m*(k+shared?1:0) f32", error) ||
      !buffer(a, mem, 7, "active", product({uint64_t{e} + 1, 4}), "(e+1) i32", error))
    return kInvalid;
  const auto* ids = arg_ptr<const int32_t>(a, 0);
  for (uint64_t i = 0; i < uint64_t{m} * k; ++i) {
    if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= e) {
      error = "ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) + " is not an expert id 0.." +
              std::to_string(e - 1) + " (e=" + std::to_string(e) + "); nothing was written";
      return kInvalid;
    }
  }
  needed = {1, 1};
  return kOk;
}

constexpr int slot(Simd s) { return static_cast<int>(s); }

#define METRALE_CPU_FAMILY(family, repack_body)                                                                  \
  {METRALE_CPU_KERNEL(family, family##_gemv), check_dense<Family::family, true>,                                 \
   baseline::family##_gemv, slot(Simd::family##_gemv), "(ceil(n/64), 1)"},                                       \
  {METRALE_CPU_KERNEL(family, family##_gemm), check_dense<Family::family, false>,                                \
   baseline::family##_gemm, slot(Simd::family##_gemm), "(ceil(n/128), ceil(m/64))"},                              \
  {METRALE_CPU_KERNEL(family, family##_grouped_gemm), check_grouped<Family::family>,                             \
   baseline::family##_grouped_gemm, slot(Simd::family##_grouped_gemm), "(ceil(n/128), experts)"},                 \
  {METRALE_CPU_KERNEL(family, family##_repack), check_repack<Family::family>, baseline::repack_body,              \
   slot(Simd::family##_repack), "(ceil(n/64), count)"}

const KernelSpec kSpecs[] = {
    METRALE_CPU_FAMILY(w4a16_zp, w4zp_repack),
    METRALE_CPU_FAMILY(w8a16, w8zp_repack),
    METRALE_CPU_FAMILY(fp8, fp8_repack),
    {METRALE_CPU_KERNEL(fp8, fp8_grouped_gemv), check_grouped_gemv, baseline::fp8_grouped_gemv,
     slot(Simd::fp8_grouped_gemv), "(ceil(n/64), active[0])"},
    METRALE_CPU_FAMILY(w4a8, w4zp_repack),
    METRALE_CPU_FAMILY(w8a8, w8zp_repack),
    {METRALE_CPU_KERNEL(w4afp8, w4afp8_gemm), check_dense<Family::w4afp8, false>, baseline::w4afp8_gemm,
     slot(Simd::w4afp8_gemm), "(ceil(n/128), ceil(m/64))"},
    {METRALE_CPU_KERNEL(w4afp8, w4afp8_grouped_gemm), check_grouped<Family::w4afp8>,
     baseline::w4afp8_grouped_gemm, slot(Simd::w4afp8_grouped_gemm), "(ceil(n/128), experts)"},
    {METRALE_CPU_KERNEL(w4afp8, w4afp8_repack), check_repack<Family::w4afp8>, baseline::w4zp_repack,
     slot(Simd::w4afp8_repack), "(ceil(n/64), count)"},
    METRALE_CPU_FAMILY(bf16, bf16_repack),
    METRALE_CPU_FAMILY(f16, f16_repack),
    {METRALE_CPU_KERNEL(fp8, fp8_gemv_a8), check_dense<Family::fp8_a8, true>, baseline::fp8_gemv_a8,
     slot(Simd::fp8_gemv_a8), "(ceil(n/64), 1)"},
    {METRALE_CPU_KERNEL(fp8, fp8_gemv_a8_group128), check_dense<Family::fp8_a8_group128, true>,
     baseline::fp8_gemv_a8_group128, slot(Simd::fp8_gemv_a8_group128), "(ceil(n/64), 1)"},
    {METRALE_CPU_KERNEL(fp8, fp8_gemm_a8), check_dense<Family::fp8_a8, false>, baseline::fp8_gemm_a8,
     slot(Simd::fp8_gemm_a8), "(ceil(n/128), ceil(m/64))"},
    {METRALE_CPU_KERNEL(fp8, fp8_grouped_gemm_a8), check_grouped<Family::fp8_a8>,
     baseline::fp8_grouped_gemm_a8, slot(Simd::fp8_grouped_gemm_a8), "(ceil(n/128), experts)"},
    {METRALE_CPU_KERNEL(fp8, fp8_gemm_a8_group128), check_dense<Family::fp8_a8_group128, false>,
     baseline::fp8_gemm_a8_group128, slot(Simd::fp8_gemm_a8_group128), "(ceil(n/128), ceil(m/64))"},
    {METRALE_CPU_KERNEL(fp8, fp8_grouped_gemm_a8_group128), check_grouped<Family::fp8_a8_group128>,
     baseline::fp8_grouped_gemm_a8_group128, slot(Simd::fp8_grouped_gemm_a8_group128), "(ceil(n/128), experts)"},
    {METRALE_CPU_KERNEL(quant, quantize_int8), check_quantize<0>, baseline::quantize_int8,
     slot(Simd::quantize_int8), "(m, 1)"},
    {METRALE_CPU_KERNEL(quant, quantize_int8_bf16), check_quantize<0>, baseline::quantize_int8_bf16, slot(Simd::quantize_int8_bf16),
     "(m, 1)"},
    {METRALE_CPU_KERNEL(quant, quantize_fp8), check_quantize<0>, baseline::quantize_fp8, slot(Simd::quantize_fp8), "(m, 1)"},
    {METRALE_CPU_KERNEL(quant, quantize_fp8_bf16), check_quantize<0>, baseline::quantize_fp8_bf16, slot(Simd::quantize_fp8_bf16),
     "(m, 1)"},
    {METRALE_CPU_KERNEL(quant, quantize_fp8_group128), check_quantize<128>, baseline::quantize_fp8_group128,
     slot(Simd::quantize_fp8_group128), "(m, 1)"},
    {METRALE_CPU_KERNEL(quant, quantize_fp8_group128_bf16), check_quantize<128>,
     baseline::quantize_fp8_group128_bf16, slot(Simd::quantize_fp8_group128_bf16), "(m, 1)"},
    {METRALE_CPU_KERNEL(quant, quantize_int8_static_bf16), check_quantize_static,
     baseline::quantize_int8_static_bf16, -1, "(offsets[groups], 1)"},
    {METRALE_CPU_KERNEL(quant, quantize_fp8_static_bf16), check_quantize_static,
     baseline::quantize_fp8_static_bf16, -1, "(offsets[groups], 1)"},
    {METRALE_CPU_KERNEL(quant, gather_k), check_gather_k, baseline::gather_k, -1,
     "(offsets[groups], 1)"},
    {METRALE_CPU_KERNEL(moe, moe_align), check_moe_align, baseline::moe_align, -1, "(1, 1)"},
};

#undef METRALE_CPU_FAMILY

}  // namespace

std::span<const KernelSpec> quant_kernel_specs() { return kSpecs; }

}  // namespace metrale::cpu
