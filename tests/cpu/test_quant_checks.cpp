// SPDX-License-Identifier: MIT OR Apache-2.0
// Launch validation of the quantized families, the quant module and moe_align: every failed
// check is INVALID_ARGUMENT with a message naming the argument and the numbers.
#include "quant_device.hpp"

#include <doctest/doctest.h>

using namespace cpu_test;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Launches and expects a refusal whose message contains every part.
void refused(Backend& b, const char* module, const char* kernel, std::array<uint32_t, 2> grid, Args& args,
             std::initializer_list<std::string> parts) {
  CHECK(b.launch(b.kernel(module, kernel), grid, args) == METRALE_STATUS_INVALID_ARGUMENT);
  const std::string error = b.last_error();
  INFO(module << "/" << kernel << ": " << error);
  for (const std::string& part : parts) CHECK(contains(error, part));
}

}  // namespace

TEST_CASE("quantized GEMMs: shape rules, group sizes, pointers and grids are checked") {
  Backend b(Options{{"threads", "2"}});
  const uint32_t n = 64, k = 256, m = 2;
  // Large enough for every family at group 32 and n up to 128: codes n*k, scales n*k/32*4,
  // zeros n*k/32, y.
  const uint64_t x = b.alloc(size_t{m} * k * 2), q = b.alloc(size_t{2 * n} * k), s = b.alloc(size_t{2 * n} * k / 8),
                 z = b.alloc(size_t{2 * n} * k / 32), y = b.alloc(size_t{m} * 2 * n * 2), xs = b.alloc(m * 4);
  auto zp = [&](uint32_t mm, uint32_t nn, uint32_t kk, uint32_t group, uint64_t codes) {
    Args a;
    a.ptr(x).ptr(codes).ptr(s).ptr(z).ptr(y).u32(mm).u32(nn).u32(kk).u32(group);
    return a;
  };
  Args ok = zp(m, n, k, 32, q);
  CHECK(b.launch(b.kernel("w4a16_zp", "w4a16_zp_gemv"), {1, 1}, ok) == METRALE_STATUS_OK);
  Args group48 = zp(m, n, k, 48, q);
  refused(b, "w4a16_zp", "w4a16_zp_gemv", {1, 1}, group48, {"group must be 32, 64 or 128 (got group=48)"});
  Args odd_k = zp(m, n, 200, 32, q);
  refused(b, "w8a16", "w8a16_gemm", {1, 1}, odd_k, {"k must be a positive multiple of 128", "k=200"});
  Args nine = zp(9, n, k, 32, q);
  refused(b, "w8a16", "w8a16_gemv", {1, 1}, nine, {"m must be 1..8", "got m=9"});
  // 4-bit codes (n*k/2 bytes) fit 64 bytes before the allocation's half, 8-bit codes do not.
  Args shifted = zp(m, n, k, 32, q + 2 * n * k - n * k / 2 - 64);
  CHECK(b.launch(b.kernel("w4a16_zp", "w4a16_zp_gemm"), {1, 1}, shifted) == METRALE_STATUS_OK);
  refused(b, "w8a16", "w8a16_gemm", {1, 1}, shifted, {"argument 'qweight'", "must hold 16384 bytes (n*k u8)"});
  Args wide_n = zp(m, 2 * n, k, 32, q);
  refused(b, "w8a16", "w8a16_gemv", {1, 1}, wide_n, {"does not cover", "(ceil(n/64), 1) = (2, 1, 1)"});
  Args extra = zp(m, n, k, 32, q);
  CHECK(b.launch(b.kernel("w4a16_zp", "w4a16_zp_gemv"), {3, 2}, extra) == METRALE_STATUS_OK);  // extra blocks

  Args fp8;
  fp8.ptr(x).ptr(q).ptr(s + 4).ptr(y).u32(m).u32(n).u32(k);
  CHECK(b.launch(b.kernel("fp8", "fp8_gemm"), {1, 1}, fp8) == METRALE_STATUS_OK);
  Args fp8_null;
  fp8_null.ptr(x).ptr(0).ptr(s).ptr(y).u32(m).u32(n).u32(k);
  refused(b, "fp8", "fp8_gemv", {1, 1}, fp8_null, {"argument 'weight' is a null pointer"});

  Args i8;
  i8.ptr(x).ptr(xs).ptr(q).ptr(s).ptr(z).ptr(y).u32(m).u32(n).u32(k).u32(64);
  CHECK(b.launch(b.kernel("w8a8", "w8a8_gemm"), {1, 1}, i8) == METRALE_STATUS_OK);
  Args i8_scales;
  i8_scales.ptr(x).ptr(xs + 4).ptr(q).ptr(s).ptr(z).ptr(y).u32(m).u32(n).u32(k).u32(64);
  refused(b, "w4a8", "w4a8_gemv", {1, 1}, i8_scales, {"argument 'xscale'", "m f32"});
  Args i8_grid;
  i8_grid.ptr(x).ptr(xs).ptr(q).ptr(s).ptr(z).ptr(y).u32(m).u32(2 * n).u32(k).u32(64);
  refused(b, "w4a8", "w4a8_gemv", {1, 1}, i8_grid, {"does not cover", "(ceil(n/64), 1) = (2, 1, 1)"});

  // bf16 / f16 weights: n*k 16-bit values (2 n*k bytes: q holds 2n*k), no scales.
  auto w16 = [&](uint32_t mm, uint32_t nn, uint32_t kk, uint64_t weight) {
    Args a;
    a.ptr(x).ptr(weight).ptr(y).u32(mm).u32(nn).u32(kk);
    return a;
  };
  Args w16_ok = w16(m, n, k, q);
  CHECK(b.launch(b.kernel("bf16", "bf16_gemv"), {1, 1}, w16_ok) == METRALE_STATUS_OK);
  CHECK(b.launch(b.kernel("f16", "f16_gemm"), {1, 1}, w16_ok) == METRALE_STATUS_OK);
  Args w16_short = w16(m, n, k, q + 64);
  refused(b, "bf16", "bf16_gemm", {1, 1}, w16_short, {"argument 'weight'", "must hold 32768 bytes (n*k bf16)"});
  refused(b, "f16", "f16_gemv", {1, 1}, w16_short, {"argument 'weight'", "(n*k f16)"});
  Args w16_k = w16(m, n, 200, q);
  refused(b, "bf16", "bf16_gemv", {1, 1}, w16_k, {"k must be a positive multiple of 128", "k=200"});
  Args w16_rows = w16(9, n, k, q);
  refused(b, "f16", "f16_gemv", {1, 1}, w16_rows, {"m must be 1..8", "got m=9"});
  Args w16_y;  // y must hold m*n bf16
  w16_y.ptr(x).ptr(q).ptr(y + size_t{m} * 2 * n * 2 - 64).u32(m).u32(n).u32(k);
  refused(b, "bf16", "bf16_gemm", {1, 1}, w16_y, {"argument 'y'", "m*n bf16"});
}

TEST_CASE("quantized grouped GEMMs and fp8_grouped_gemv: offsets and active experts are checked") {
  Backend b(Options{{"threads", "2"}});
  const uint32_t n = 64, k = 128, experts = 3;
  const uint64_t x = b.alloc(16 * k * 2), q = b.alloc(size_t{experts} * n * k), s = b.alloc(size_t{experts} * n * 4 * 4),
                 z = b.alloc(size_t{experts} * n * 4), y = b.alloc(16 * n * 2);
  const uint64_t good = b.upload(std::vector<int32_t>{0, 2, 2, 5}), bad = b.upload(std::vector<int32_t>{0, 5, 2, 6});
  auto grouped = [&](uint64_t offsets, uint32_t e) {
    Args a;
    a.ptr(x).ptr(q).ptr(s).ptr(z).ptr(offsets).ptr(y).u32(n).u32(k).u32(32).u32(e);
    return a;
  };
  Args ok = grouped(good, experts);
  CHECK(b.launch(b.kernel("w8a16", "w8a16_grouped_gemm"), {1, experts}, ok) == METRALE_STATUS_OK);
  Args decreasing = grouped(bad, experts);
  refused(b, "w8a16", "w8a16_grouped_gemm", {1, experts}, decreasing, {"offsets must be non-decreasing"});
  Args too_many = grouped(good, 4);
  refused(b, "w4a16_zp", "w4a16_zp_grouped_gemm", {1, 4}, too_many, {"argument 'offsets'", "(experts+1) i32"});

  auto active_call = [&](const std::vector<int32_t>& offsets, const std::vector<int32_t>& active, uint32_t slots) {
    Args a;
    a.ptr(x).ptr(q).ptr(s).ptr(b.upload(offsets)).ptr(b.upload(active)).ptr(y).u32(n).u32(k).u32(slots);
    return a;
  };
  Args fine = active_call({0, 2, 2, 5}, {2, 0, 2}, 3);
  CHECK(b.launch(b.kernel("fp8", "fp8_grouped_gemv"), {1, 3}, fine) == METRALE_STATUS_OK);
  Args over_slots = active_call({0, 2, 2, 5}, {2, 0, 2}, 1);
  refused(b, "fp8", "fp8_grouped_gemv", {1, 1}, over_slots, {"active[0] = 2 must be 0..1 (slots)"});
  Args beyond = active_call({0, 2, 2, 5}, {1, 3}, 2);
  refused(b, "fp8", "fp8_grouped_gemv", {1, 2}, beyond, {"active[1] = 3", "argument 'offsets'"});
  Args order = active_call({0, 2, 2, 5}, {2, 2, 0}, 2);
  refused(b, "fp8", "fp8_grouped_gemv", {1, 2}, order, {"active[2] = 0 does not follow active[1] = 2"});
  Args nine_rows = active_call({0, 9, 9, 9}, {1, 0}, 1);
  refused(b, "fp8", "fp8_grouped_gemv", {1, 1}, nine_rows, {"expert 0", "takes 0 to 8 rows per expert"});
}

TEST_CASE("quantized repacks: sizes, group and aliasing are checked") {
  Backend b(Options{{"threads", "2"}});
  const uint32_t n = 65, k = 256, count = 2;
  const size_t codes = size_t{count} * n * k, scales = size_t{count} * n * (k / 32) * 4, zeros = scales / 4;
  const uint64_t qi = b.alloc(codes), si = b.alloc(scales), zi = b.alloc(zeros), qo = b.alloc(codes),
                 so = b.alloc(scales), zo = b.alloc(zeros);
  auto repack = [&](uint64_t q_out, uint64_t z_out, uint32_t group, uint32_t c) {
    Args a;
    a.ptr(qi).ptr(si).ptr(zi).ptr(q_out).ptr(so).ptr(z_out).u32(n).u32(k).u32(group).u32(c);
    return a;
  };
  Args ok = repack(qo, zo, 32, count);
  CHECK(b.launch(b.kernel("w8a8", "w8a8_repack"), {2, 2}, ok) == METRALE_STATUS_OK);
  Args short_grid = repack(qo, zo, 32, count);
  refused(b, "w8a8", "w8a8_repack", {1, 2}, short_grid, {"(ceil(n/64), count) = (2, 2, 1)"});
  Args group16 = repack(qo, zo, 16, count);
  refused(b, "w4a8", "w4a8_repack", {2, 2}, group16, {"group must be 32, 64 or 128"});
  Args in_place = repack(qi, zo, 32, count);
  refused(b, "w4a16_zp", "w4a16_zp_repack", {2, 2}, in_place, {"'qweight_out'", "overlaps 'qweight_in'"});
  Args zeros_on_codes = repack(qo, qo + 8, 32, count);
  refused(b, "w8a16", "w8a16_repack", {2, 2}, zeros_on_codes, {"'zeros_out'", "overlaps 'qweight_out'"});
  Args three = repack(qo, zo, 32, 3);
  refused(b, "w8a16", "w8a16_repack", {2, 3}, three, {"argument 'qweight_in'", "count*n*k u8"});
  Args fp8;
  fp8.ptr(qi).ptr(si).ptr(qo).ptr(si + 4).u32(n).u32(k).u32(count);
  refused(b, "fp8", "fp8_repack", {2, 2}, fp8, {"'scales_out'", "overlaps 'scales_in'"});
  // bf16 / f16: (weight_in, weight_out, n, k, count), 2 n*k bytes per matrix (codes holds count*n*k).
  Args w16;
  w16.ptr(qi).ptr(qo).u32(n).u32(k).u32(1);
  CHECK(b.launch(b.kernel("bf16", "bf16_repack"), {2, 1}, w16) == METRALE_STATUS_OK);
  Args w16_count;
  w16_count.ptr(qi).ptr(qo).u32(n).u32(k).u32(count);
  refused(b, "f16", "f16_repack", {2, 2}, w16_count, {"argument 'weight_in'", "count*n*k f16"});
  Args w16_alias;
  w16_alias.ptr(qi).ptr(qi).u32(n).u32(k).u32(1);
  refused(b, "bf16", "bf16_repack", {2, 1}, w16_alias, {"'weight_out'", "overlaps 'weight_in'"});
}

TEST_CASE("quantize_int8 and gather_k: shapes, perm entries and offsets are checked") {
  Backend b(Options{{"threads", "2"}});
  const uint32_t k = 128;
  const uint64_t x = b.alloc(4 * k * 2), xq = b.alloc(4 * k), xs = b.alloc(16), out = b.alloc(4 * k * 2);
  Args quant;
  quant.ptr(x).ptr(xq).ptr(xs).u32(4).u32(k);
  CHECK(b.launch(b.kernel("quant", "quantize_int8"), {4, 1}, quant) == METRALE_STATUS_OK);
  Args five;
  five.ptr(x).ptr(xq).ptr(xs).u32(5).u32(k);
  refused(b, "quant", "quantize_int8", {5, 1}, five, {"argument 'x'", "m*k bf16"});

  std::vector<int32_t> perm(2 * k);
  for (uint32_t j = 0; j < k; ++j) perm[j] = perm[k + j] = static_cast<int32_t>(k - 1 - j);
  auto gather = [&](const std::vector<int32_t>& p, const std::vector<int32_t>& offsets) {
    Args a;
    a.ptr(x).ptr(b.upload(p)).ptr(b.upload(offsets)).ptr(out).u32(k).u32(2);
    return a;
  };
  Args ok = gather(perm, {0, 1, 4});
  CHECK(b.launch(b.kernel("quant", "gather_k"), {4, 1}, ok) == METRALE_STATUS_OK);
  std::vector<int32_t> wrong = perm;
  wrong[k + 7] = static_cast<int32_t>(k);
  Args out_of_range = gather(wrong, {0, 1, 4});
  refused(b, "quant", "gather_k", {4, 1}, out_of_range,
          {"perm[135] = 128 (group 1, column 7) is not a column 0..127"});
  Args unused_group = gather(wrong, {0, 4, 4});  // group 1 has no rows: its perm is not read
  CHECK(b.launch(b.kernel("quant", "gather_k"), {4, 1}, unused_group) == METRALE_STATUS_OK);
  Args too_many_rows = gather(perm, {0, 1, 5});
  refused(b, "quant", "gather_k", {5, 1}, too_many_rows, {"argument 'x'", "offsets[groups]*k bf16"});
}

TEST_CASE("moe_align: sizes and the shared mode are checked") {
  Backend b(Options{{"threads", "2"}});
  const uint32_t m = 2, e = 4, k = 2;
  const uint64_t ids = b.upload(std::vector<int32_t>{0, 1, 2, 3}), w = b.alloc(16), off = b.alloc(20),
                 rows = b.alloc(16), slots = b.alloc(24), comb = b.alloc(24), act = b.alloc(20);
  auto align = [&](uint64_t logits, uint64_t slot_buffer, uint32_t shared) {
    Args a;
    a.ptr(ids).ptr(w).ptr(logits).ptr(off).ptr(rows).ptr(slot_buffer).ptr(comb).ptr(act);
    a.u32(m).u32(e).u32(k).u32(shared);
    return a;
  };
  Args no_logits = align(0, slots, 1);  // read only when shared = 2
  CHECK(b.launch(b.kernel("moe", "moe_align"), {1, 1}, no_logits) == METRALE_STATUS_OK);
  Args needs_logits = align(0, slots, 2);
  refused(b, "moe", "moe_align", {1, 1}, needs_logits, {"argument 'shared_logits' is a null pointer"});
  Args three = align(w, slots, 3);
  refused(b, "moe", "moe_align", {1, 1}, three, {"shared must be 0, 1 or 2 (got shared=3)"});
  Args small_slots = align(w, rows, 1);
  refused(b, "moe", "moe_align", {1, 1}, small_slots, {"argument 'slots'", "m*(k+shared?1:0) i32"});
}
