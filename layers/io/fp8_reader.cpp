// SPDX-License-Identifier: MIT OR Apache-2.0
// Block FP8 as DeepSeek-V3 and Qwen3-FP8 store it (docs/checkpoint-formats.md, "Block FP8"):
// weight F8_E4M3 [N, K], weight_scale_inv F32 [ceil(N/128), ceil(K/128)] (the factor that
// multiplies the FP8 values back, despite its name). Also the shared FP8 and scale-grid helpers.
#include "io/linear_reader.hpp"

#include <metrale/status.hpp>

#include <cstddef>
#include <cstring>

namespace metrale::layers {

QuantMatrix build_fp8_matrix(std::string name, uint32_t n, uint32_t k, const std::vector<std::byte>& codes,
                             const std::function<float(uint32_t row, uint32_t group)>& scale) {
  QuantMatrix m = quant_zeros(std::move(name), WeightFormat::fp8, n, k);
  // One code per byte, k-major within a row: exactly the canonical words' little-endian bytes.
  std::memcpy(m.qweight.data(), codes.data(), codes.size());
  const uint32_t groups = k / 128;
  for (uint32_t row = 0; row < n; ++row)
    for (uint32_t g = 0; g < groups; ++g) m.scales32[size_t{row} * groups + g] = scale(row, g);
  return m;
}

ScaleGrid read_scale_grid(const TensorSource& src, const std::string& name, uint32_t n, uint32_t k, ScaleStrategy strategy) {
  SafetensorsReader& r = src.at(name);
  ScaleGrid grid;
  std::vector<uint64_t> shape;
  switch (strategy) {
    case ScaleStrategy::block:
      grid.row_step = 128;
      grid.group_step = 1;
      grid.columns = (k + 127) / 128;
      shape = {(n + uint64_t{127}) / 128, grid.columns};
      break;
    case ScaleStrategy::tensor:
      grid.row_step = n;
      shape = r.info(name).shape.size() == 2 ? std::vector<uint64_t>{1, 1} : std::vector<uint64_t>{1};
      break;
    case ScaleStrategy::channel:
    case ScaleStrategy::group:
      shape = {n, 1};
      break;
  }
  grid.values = r.read_f32(name, shape);
  return grid;
}

QuantMatrix read_fp8_linear(const TensorSource& src, const std::string& prefix, uint32_t n, uint32_t k,
                            const CheckpointQuant&) {
  const std::string wname = prefix + ".weight", sname = prefix + ".weight_scale_inv";
  if (!src.contains(sname) && src.contains(wname)) {
    throw Refusal(src.at(wname).where(wname) + "no weight_scale_inv beside it: the layer is not block-FP8 quantized (a "
                                               "module the checkpoint left in float), and metrale runs quantized FFN weights");
  }
  const auto codes = src.at(wname).read_raw(wname, {Dtype::f8_e4m3}, std::vector<uint64_t>{n, k});
  const ScaleGrid grid = read_scale_grid(src, sname, n, k, ScaleStrategy::block);
  return build_fp8_matrix(prefix, n, k, codes, [&](uint32_t row, uint32_t g) { return grid.at(row, g); });
}

std::vector<QuantMatrix> read_fp8_fused_experts(const TensorSource& src, const std::string& name, uint32_t experts,
                                                uint32_t n, uint32_t k) {
  const std::string sname = name + "_scale_inv";
  if (!src.contains(sname)) {
    throw Refusal(src.at(name).where(name) + "no " + sname.substr(sname.rfind('.') + 1) + " beside it: the experts are not "
                  "block-FP8 quantized (left in float), and metrale runs quantized FFN weights");
  }
  const auto codes = src.at(name).read_raw(name, {Dtype::f8_e4m3}, std::vector<uint64_t>{experts, n, k});
  const uint32_t rows = (n + 127) / 128, columns = (k + 127) / 128;
  const auto scales = src.at(sname).read_f32(sname, {experts, rows, columns});
  std::vector<QuantMatrix> out;
  const size_t per_expert = size_t{n} * k;
  for (uint32_t e = 0; e < experts; ++e) {
    const std::vector<std::byte> slice(codes.begin() + static_cast<std::ptrdiff_t>(e * per_expert),
                                       codes.begin() + static_cast<std::ptrdiff_t>((e + 1) * per_expert));
    const size_t base = size_t{e} * rows * columns;
    out.push_back(build_fp8_matrix(name + "[" + std::to_string(e) + "]", n, k, slice, [&](uint32_t row, uint32_t g) {
      return scales[base + size_t{row / 128} * columns + g];
    }));
  }
  return out;
}

}  // namespace metrale::layers
