// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/quant_matrix.hpp"

#include "core/numeric.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <limits>

namespace metrale::layers {

namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error(Status::invalid_argument, what); }

std::string shape_text(uint64_t batch, uint64_t n, uint64_t k) {
  return "[" + std::to_string(batch) + ", " + std::to_string(n) + ", " + std::to_string(k) + "]";
}

}  // namespace

const char* weight_format_name(WeightFormat format) noexcept {
  switch (format) {
    case WeightFormat::w4a16: return "w4a16-nk-g128";
    case WeightFormat::w4_zp: return "w4-zp";
    case WeightFormat::w8_zp: return "w8-zp";
    case WeightFormat::fp8: return "fp8-e4m3";
    case WeightFormat::bf16: return "bf16-nk";
    case WeightFormat::f16: return "f16-nk";
  }
  return "?";
}

uint32_t weight_format_bits(WeightFormat format) noexcept {
  if (!weight_format_has_scales(format)) return 16;
  return format == WeightFormat::w4a16 || format == WeightFormat::w4_zp ? 4 : 8;
}

bool weight_format_has_scales(WeightFormat format) noexcept {
  return format != WeightFormat::bf16 && format != WeightFormat::f16;
}

bool weight_format_has_zeros(WeightFormat format) noexcept {
  return format == WeightFormat::w4_zp || format == WeightFormat::w8_zp;
}

uint32_t QuantView::code(uint32_t row, uint32_t col) const noexcept {
  if (weight_format_bits(format) == 4) return (qweight[size_t{row} * (k / 8) + col / 8] >> (4 * (col % 8))) & 0xfu;
  if (weight_format_bits(format) == 16) return (qweight[size_t{row} * (k / 2) + col / 2] >> (16 * (col % 2))) & 0xffffu;
  return (qweight[size_t{row} * (k / 4) + col / 4] >> (8 * (col % 4))) & 0xffu;
}

float QuantView::scale(uint32_t row, uint32_t group_index) const noexcept {
  if (!weight_format_has_scales(format)) return 1.0f;
  const size_t at = size_t{row} * (k / group) + group_index;
  return format == WeightFormat::w4a16 ? f16_to_f32(scales[at]) : scales32[at];
}

double QuantView::value(uint32_t row, uint32_t col) const noexcept {
  const uint32_t q = code(row, col);
  const double s = scale(row, col / group);
  switch (format) {
    case WeightFormat::w4a16: return (static_cast<double>(q) - 8.0) * s;
    case WeightFormat::w4_zp:
    case WeightFormat::w8_zp: return (static_cast<double>(q) - zeros[size_t{row} * (k / group) + col / group]) * s;
    case WeightFormat::fp8: return static_cast<double>(e4m3_to_f32(static_cast<uint8_t>(q))) * s;
    case WeightFormat::bf16: return bf16_to_f32(static_cast<uint16_t>(q));
    case WeightFormat::f16: return f16_to_f32(static_cast<uint16_t>(q));
  }
  return 0.0;
}

void QuantView::dequantize_row(uint32_t row, std::span<double> out) const {
  if (out.size() != k) invalid(std::string(name) + ": dequantize_row needs K outputs");
  for (uint32_t col = 0; col < k; ++col) out[col] = value(row, col);
}

size_t QuantMatrix::scale_bytes_per_matrix() const noexcept {
  if (!weight_format_has_scales(format)) return 0;
  return scales_per_matrix() * (format == WeightFormat::w4a16 ? sizeof(uint16_t) : sizeof(float));
}

size_t QuantMatrix::zero_bytes_per_matrix() const noexcept {
  return weight_format_has_zeros(format) ? scales_per_matrix() : 0;
}

size_t QuantMatrix::bytes_per_matrix() const noexcept {
  return qweight_bytes_per_matrix() + scale_bytes_per_matrix() + zero_bytes_per_matrix();
}

QuantView QuantMatrix::view(uint32_t index) const {
  if (index >= batch) {
    invalid(name + ": matrix " + std::to_string(index) + " requested of a stack of " + std::to_string(batch));
  }
  QuantView v;
  v.name = name;
  v.format = format;
  v.n = n;
  v.k = k;
  v.group = group;
  v.qweight = std::span<const uint32_t>(qweight).subspan(index * words_per_matrix(), words_per_matrix());
  const size_t per = scales_per_matrix();
  if (format == WeightFormat::w4a16) {
    v.scales = std::span<const uint16_t>(scales).subspan(index * per, per);
  } else if (weight_format_has_scales(format)) {
    v.scales32 = std::span<const float>(scales32).subspan(index * per, per);
  }
  if (weight_format_has_zeros(format)) v.zeros = std::span<const uint8_t>(zeros).subspan(index * per, per);
  if (!perm.empty()) v.perm = std::span<const int32_t>(perm).subspan(size_t{index} * k, k);
  if (!input_scales.empty()) v.input_scale = input_scales[index];
  return v;
}

void QuantMatrix::validate() const {
  check_quant_shape(name, format, n, k, batch, group);
  const size_t per = scales_per_matrix();
  const bool w4a16 = format == WeightFormat::w4a16;
  const bool zp = weight_format_has_zeros(format);
  auto expect = [&](const char* tensor, size_t have, size_t want) {
    if (have != want) {
      invalid(name + ": " + weight_format_name(format) + " storage does not match its shape " + shape_text(batch, n, k) +
              ": " + std::to_string(have) + " " + tensor + " (expected " + std::to_string(want) + ")");
    }
  };
  expect("qweight words", qweight.size(), size_t{batch} * words_per_matrix());
  expect("fp16 scales", scales.size(), w4a16 ? size_t{batch} * per : 0);
  expect("f32 scales", scales32.size(), w4a16 || !weight_format_has_scales(format) ? 0 : size_t{batch} * per);
  expect("zero points", zeros.size(), zp ? size_t{batch} * per : 0);
  if (!input_scales.empty()) expect("static activation scales", input_scales.size(), batch);
  for (size_t e = 0; e < input_scales.size(); ++e) {
    if (!(input_scales[e] > 0 && input_scales[e] < std::numeric_limits<float>::infinity())) {
      invalid(name + ": the static activation scale of matrix " + std::to_string(e) + " is " +
              std::to_string(input_scales[e]) + " (expected a positive finite scale)");
    }
  }
  if (perm.empty()) return;
  expect("act-order permutation entries", perm.size(), size_t{batch} * k);
  std::vector<uint8_t> seen(k);
  for (uint32_t e = 0; e < batch; ++e) {
    std::fill(seen.begin(), seen.end(), uint8_t{0});
    for (uint32_t j = 0; j < k; ++j) {
      const int32_t c = perm[size_t{e} * k + j];
      if (c < 0 || static_cast<uint32_t>(c) >= k || seen[static_cast<uint32_t>(c)]) {
        invalid(name + ": act-order permutation of matrix " + std::to_string(e) + " is not a permutation of 0.." +
                std::to_string(k - 1) + " (entry " + std::to_string(j) + " = " + std::to_string(c) + ")");
      }
      seen[static_cast<uint32_t>(c)] = 1;
    }
  }
}

void check_quant_shape(std::string_view name, WeightFormat format, uint64_t n, uint64_t k, uint64_t batch,
                       uint64_t group) {
  const std::string who(name);
  const std::string what = weight_format_name(format);
  if (k == 0 || k % kW4a16GroupSize != 0) {
    invalid(who + ": " + what + " needs K to be a positive multiple of 128, got K = " + std::to_string(k));
  }
  const bool fixed128 = format == WeightFormat::w4a16 || format == WeightFormat::fp8 || !weight_format_has_scales(format);
  if (fixed128 ? group != kW4a16GroupSize : (group != 32 && group != 64 && group != 128)) {
    invalid(who + ": " + what + " groups along K are " + (fixed128 ? "128" : "32, 64 or 128") + ", got " +
            std::to_string(group));
  }
  if (n == 0) invalid(who + ": " + what + " matrix needs N >= 1, got N = 0 (K = " + std::to_string(k) + ")");
  if (batch == 0) invalid(who + ": a " + what + " stack needs at least one matrix");
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  // 2^40 bytes of codes at most: every size below stays far from overflow in 64 bits.
  if (n > kMax || k > kMax || batch > kMax || batch * n > (uint64_t{1} << 40) / k) {
    invalid(who + ": " + what + " shape " + shape_text(batch, n, k) + " is too large");
  }
}

void check_w4a16_shape(std::string_view name, uint64_t n, uint64_t k, uint64_t batch) {
  check_quant_shape(name, WeightFormat::w4a16, n, k, batch, kW4a16GroupSize);
}

QuantMatrix quant_zeros(std::string name, WeightFormat format, uint32_t n, uint32_t k, uint32_t batch,
                        uint32_t group) {
  check_quant_shape(name, format, n, k, batch, group);
  QuantMatrix m;
  m.name = std::move(name);
  m.format = format;
  m.batch = batch;
  m.n = n;
  m.k = k;
  m.group = group;
  const uint32_t zero_code = format == WeightFormat::w8_zp                                    ? 0x80808080u
                             : format == WeightFormat::fp8 || !weight_format_has_scales(format) ? 0u
                                                                                                : 0x88888888u;
  m.qweight.assign(size_t{batch} * m.words_per_matrix(), zero_code);
  const size_t scales = size_t{batch} * m.scales_per_matrix();
  if (format == WeightFormat::w4a16) {
    m.scales.assign(scales, 0);
  } else if (weight_format_has_scales(format)) {
    m.scales32.assign(scales, 0.0f);
  }
  if (weight_format_has_zeros(format)) m.zeros.assign(scales, format == WeightFormat::w8_zp ? 128 : 8);
  return m;
}

QuantMatrix to_w4_zp(const QuantMatrix& m) {
  m.validate();
  if (m.format != WeightFormat::w4a16) invalid(m.name + ": to_w4_zp converts w4a16-nk-g128 weights, got " + weight_format_name(m.format));
  QuantMatrix out;
  out.name = m.name;
  out.format = WeightFormat::w4_zp;
  out.batch = m.batch;
  out.n = m.n;
  out.k = m.k;
  out.group = kW4a16GroupSize;
  out.qweight = m.qweight;
  out.scales32.resize(m.scales.size());
  std::transform(m.scales.begin(), m.scales.end(), out.scales32.begin(), [](uint16_t s) { return f16_to_f32(s); });
  out.zeros.assign(m.scales.size(), 8);
  out.perm = m.perm;
  out.input_scales = m.input_scales;
  return out;
}

namespace {

// Copies row `from` of `src` to row `to` of `dst` (same K, format and group), every tensor.
void copy_row(const QuantMatrix& src, uint32_t from, QuantMatrix& dst, uint32_t to) {
  const size_t words = src.words_per_matrix() / src.n, groups = src.groups();
  std::copy_n(src.qweight.begin() + static_cast<std::ptrdiff_t>(from * words), words,
              dst.qweight.begin() + static_cast<std::ptrdiff_t>(to * words));
  auto copy_groups = [&](const auto& in, auto& out) {
    if (!in.empty()) std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(from * groups), groups, out.begin() + static_cast<std::ptrdiff_t>(to * groups));
  };
  copy_groups(src.scales, dst.scales);
  copy_groups(src.scales32, dst.scales32);
  copy_groups(src.zeros, dst.zeros);
}

}  // namespace

QuantMatrix concat_rows(std::string name, const QuantMatrix& top, const QuantMatrix& bottom) {
  if (top.k != bottom.k || top.format != bottom.format || top.group != bottom.group || top.perm != bottom.perm ||
      top.batch != 1 || bottom.batch != 1) {
    invalid(top.name + " and " + bottom.name + " cannot be fused into " + name + ": they differ in " +
            (top.k != bottom.k ? "K" : top.format != bottom.format ? "format" : top.group != bottom.group ? "group size"
                                                                              : "act-order permutation (g_idx)") +
            "; the fused projection reads one input order, one format");
  }
  QuantMatrix m = quant_zeros(std::move(name), top.format, top.n + bottom.n, top.k, 1, top.group);
  for (uint32_t r = 0; r < top.n; ++r) copy_row(top, r, m, r);
  for (uint32_t r = 0; r < bottom.n; ++r) copy_row(bottom, r, m, top.n + r);
  m.perm = top.perm;
  if (top.input_scales != bottom.input_scales) {
    const auto scale = [](const QuantMatrix& x) { return x.input_scales.empty() ? std::string("none") : std::to_string(x.input_scales[0]); };
    throw Refusal(top.name + ".input_scale = " + scale(top) + " and " + bottom.name + ".input_scale = " + scale(bottom) +
                  " differ: metrale fuses them into " + m.name + ", which quantizes its input once with one static scale");
  }
  m.input_scales = top.input_scales;
  return m;
}

void reorder_rows(QuantMatrix& m, std::span<const int32_t> order) {
  if (m.batch != 1 || order.size() != m.n) invalid(m.name + ": reorder_rows needs one index per row of a plain matrix");
  const QuantMatrix original = m;
  for (uint32_t r = 0; r < m.n; ++r) copy_row(original, static_cast<uint32_t>(order[r]), m, r);
}

QuantMatrix select_rows(std::string name, const QuantMatrix& m, std::span<const uint32_t> rows) {
  if (m.batch != 1) invalid(m.name + ": select_rows needs a plain matrix");
  QuantMatrix out = quant_zeros(std::move(name), m.format, static_cast<uint32_t>(rows.size()), m.k, 1, m.group);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= m.n) invalid(m.name + ": select_rows: row " + std::to_string(rows[i]) + " of " + std::to_string(m.n));
    copy_row(m, rows[i], out, static_cast<uint32_t>(i));
  }
  out.perm = m.perm;
  out.input_scales = m.input_scales;
  return out;
}

QuantMatrix stack_matrices(std::string name, std::vector<QuantMatrix> matrices) {
  if (matrices.empty()) invalid(name + ": a stack needs at least one matrix");
  const QuantMatrix& first = matrices.front();
  QuantMatrix m = quant_zeros(std::move(name), first.format, first.n, first.k, static_cast<uint32_t>(matrices.size()), first.group);
  const bool any_perm = std::any_of(matrices.begin(), matrices.end(), [](const QuantMatrix& x) { return !x.perm.empty(); });
  if (any_perm) m.perm.reserve(size_t{m.batch} * m.k);
  for (const QuantMatrix& x : matrices) {
    if (x.input_scales.empty() != first.input_scales.empty()) {
      invalid(x.name + " and " + first.name + " differ in having static activation scales: experts of one stack share a tier");
    }
    m.input_scales.insert(m.input_scales.end(), x.input_scales.begin(), x.input_scales.end());
  }
  for (uint32_t e = 0; e < m.batch; ++e) {
    const QuantMatrix& x = matrices[e];
    if (x.n != first.n || x.k != first.k || x.format != first.format || x.group != first.group || x.batch != 1) {
      invalid(x.name + " differs in shape, format or group from " + first.name + ": experts of one stack share them");
    }
    std::copy(x.qweight.begin(), x.qweight.end(), m.qweight.begin() + static_cast<std::ptrdiff_t>(e * m.words_per_matrix()));
    const size_t per = m.scales_per_matrix();
    std::copy(x.scales.begin(), x.scales.end(), m.scales.begin() + static_cast<std::ptrdiff_t>(e * (x.scales.empty() ? 0 : per)));
    std::copy(x.scales32.begin(), x.scales32.end(), m.scales32.begin() + static_cast<std::ptrdiff_t>(e * (x.scales32.empty() ? 0 : per)));
    std::copy(x.zeros.begin(), x.zeros.end(), m.zeros.begin() + static_cast<std::ptrdiff_t>(e * (x.zeros.empty() ? 0 : per)));
    if (!any_perm) continue;
    if (x.perm.empty()) {
      for (uint32_t c = 0; c < m.k; ++c) m.perm.push_back(static_cast<int32_t>(c));
    } else {
      m.perm.insert(m.perm.end(), x.perm.begin(), x.perm.end());
    }
  }
  return m;
}

}  // namespace metrale::layers
