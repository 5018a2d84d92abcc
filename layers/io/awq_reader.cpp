// SPDX-License-Identifier: MIT OR Apache-2.0
// AutoAWQ's GEMM layout (docs/checkpoint-formats.md, "AWQ GEMM"): qweight I32 [K, N/8] and qzeros
// I32 [K/g, N/8] packed along N in AWQ's interleaved field order, scales F16 [K/g, N]; true zeros.
#include "io/linear_reader.hpp"

#include <metrale/status.hpp>

#include <array>

namespace metrale::layers {

namespace {

// The field of a word that holds output 8c + j.
constexpr std::array<uint32_t, 8> kAwqField{0, 4, 1, 5, 2, 6, 3, 7};

uint32_t awq_nibble(const std::vector<uint32_t>& words, uint32_t words_per_row, uint32_t row_of_words, uint32_t output) {
  return (words[size_t{row_of_words} * words_per_row + output / 8] >> (4 * kAwqField[output % 8])) & 0xfu;
}

}  // namespace

QuantMatrix read_awq_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                            const CheckpointQuant& q) {
  if (n % 8 != 0) {
    throw Error(Status::invalid_argument, prefix + ": AWQ packs 8 outputs per word, but the layer has N = " + std::to_string(n));
  }
  const KernelGroups g = kernel_groups(prefix, q.group_size, k);
  const uint32_t groups = k / g.checkpoint, words = n / 8;
  const std::string qname = prefix + ".qweight", zname = prefix + ".qzeros", sname = prefix + ".scales";
  SafetensorsReader& r = src.at(qname);
  const auto& qshape = r.info(qname).shape;
  if (qshape.size() == 2 && qshape[0] != k && qshape[1] == k / 8) {
    contradiction(r.where(qname), "quantization_config.version", "\"gemm\" (qweight [K, N/8])",
                  "its shape " + shape_string(qshape) + " is packed along K (AWQ's GEMV layout)");
  }
  const auto qweight = r.read_u32(qname, {Dtype::i32, Dtype::u32}, {k, words});
  const auto& sshape = src.at(sname).info(sname).shape;
  if (sshape.size() == 2 && sshape[1] == n && sshape[0] != groups) {
    contradiction(src.at(sname).where(sname), "quantization_config.group_size", std::to_string(q.group_size),
                  "it holds " + std::to_string(sshape[0]) + " groups");
  }
  const auto scales = src.at(sname).read_f32(sname, {groups, n});
  const auto zeros = src.at(zname).read_u32(zname, {Dtype::i32, Dtype::u32}, {groups, words});
  return build_zero_point_matrix(
      prefix, WeightFormat::w4_zp, n, k, g, {},
      [&](uint32_t row, uint32_t col) { return awq_nibble(qweight, words, col, row); },
      [&](uint32_t row, uint32_t group) { return scales[size_t{group} * n + row]; },
      [&](uint32_t row, uint32_t group) { return awq_nibble(zeros, words, group, row); });
}

}  // namespace metrale::layers
