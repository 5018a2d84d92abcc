// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench/bench.hpp"
#include "bench/bench_fixture.hpp"

#include "io/config.hpp"
#include "core/device_buffer.hpp"
#include "reference/reference.hpp"
#include "core/w4a16.hpp"
#include "linear/selectors.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/names.hpp>
#include <metrale/registry.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <chrono>
#include <map>

namespace metrale::bench {

using namespace metrale::layers;

namespace {

// Types and names both: moe/moe_combine has the same seven types but is not a GEMM.
bool w4a16_signature(const ManifestKernel& k) {
  static constexpr const catalogue::DocumentedKernel& kGemm = *catalogue::find("w4a16", "w4a16_gemm_t");
  if (k.params.size() != kGemm.types.size()) return false;
  for (size_t i = 0; i < k.params.size(); ++i)
    if (k.params[i].type != kGemm.types[i] || k.params[i].name != kGemm.names[i]) return false;
  return true;
}

// The quantized family whose documented GEMV or GEMM `module/name` is (docs/kernels.md).
std::optional<KernelFamily> quant_family(const std::string& module, const std::string& name) {
  for (auto family : {KernelFamily::w4a16_zp, KernelFamily::w8a16, KernelFamily::fp8, KernelFamily::w4a8, KernelFamily::w8a8,
                      KernelFamily::bf16, KernelFamily::f16}) {
    const FamilyInfo& f = family_info(family);
    if (module == f.module && (name == std::string(f.prefix) + "_gemv" || name == std::string(f.prefix) + "_gemm")) return family;
  }
  if (module == "fp8" && name == "fp8_gemm_a8") return KernelFamily::fp8_a8;
  return std::nullopt;
}

// The launch of one variant on one fixture.
std::function<void()> launcher(Backend& b, const Variant& v, const Resolved& resolved, const Fixture& f, const Shape& shape) {
  if (v.family != KernelFamily::w4a16) {
    const bool quantized = family_info(v.family).activations != ActivationQuant::bf16;
    return [&b, &resolved, &f, m = shape.m, quantized] {
      launch_family_projection(b, resolved.kernels, f.dw, 0, quantized ? f.dxq.ptr() : f.dx.ptr(),
                               quantized ? f.dxscale.ptr() : DevicePtr{}, f.dy.ptr(), m, 0);
    };
  }
  const GridConvention g = grid_convention(v.module, v.name);
  LaunchShape ls;
  ls.grid = {(shape.n + g.n_tile - 1) / g.n_tile, g.m_tile ? (shape.m + g.m_tile - 1) / g.m_tile : 1, 1};
  ls.block = {g.block, 1, 1};
  return [&b, &resolved, &f, ls, shape] {
    b.launch(resolved.handle, ls, f.dx.ptr(), f.dw.qweight.ptr(), f.dw.scales.ptr(), f.dy.ptr(), shape.m, shape.n, shape.k);
  };
}

// Fills Row::ratio of rows [first, end) from the baseline's median, when it ran.
void apply_baseline(std::vector<Row>& rows, size_t first, const std::string& baseline) {
  if (baseline.empty()) return;
  std::optional<double> base;
  for (size_t i = first; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if ((r.variant.name == baseline || r.variant.full_name() == baseline) && !r.seconds.empty()) base = r.median_s;
  }
  if (!base) return;
  for (size_t i = first; i < rows.size(); ++i)
    if (!rows[i].seconds.empty() && rows[i].median_s > 0) rows[i].ratio = *base / rows[i].median_s;
}

}  // namespace

std::vector<Shape> model_shapes(const std::string& preset_or_path, const std::vector<uint32_t>& ms) {
  const ModelConfig c = resolve_model(preset_or_path);
  std::vector<std::pair<std::string, std::pair<uint32_t, uint32_t>>> nk;  // label, (n, k)
  switch (c.ffn_kind()) {
    case FfnKind::none:
      throw Error(Status::invalid_argument, c.source + ": the model has no FFN (no intermediate_size, no num_experts), "
                                                       "so it has no projection shapes to bench");
    case FfnKind::dense:
      nk.push_back({"ffn.gate_up", {gate_up_rows(c.intermediate_size), c.hidden_size}});
      nk.push_back({"ffn.down", {c.hidden_size, c.intermediate_size}});
      break;
    case FfnKind::moe:
      nk.push_back({"ffn.experts.gate_up", {gate_up_rows(c.moe_intermediate_size), c.hidden_size}});
      nk.push_back({"ffn.experts.down", {c.hidden_size, c.moe_intermediate_size}});
      if (c.shared_expert_intermediate_size) {
        nk.push_back({"ffn.shared_expert.gate_up", {gate_up_rows(c.shared_expert_intermediate_size), c.hidden_size}});
        nk.push_back({"ffn.shared_expert.down", {c.hidden_size, c.shared_expert_intermediate_size}});
      }
      break;
  }
  std::vector<Shape> out;
  for (const auto& [label, shape] : nk)
    for (uint32_t m : ms) out.push_back(Shape{c.source + ":" + label, m, shape.first, shape.second});
  return out;
}

GridConvention grid_convention(const std::string& module, const std::string& name) {
  // docs/kernels.md, module w4a16 and the m128 variants.
  if (module == "w4a16" && name == "w4a16_gemv") return {1, 64, 0, 128, true};
  if (module == "w4a16" && name == "w4a16_gemv_b8") return {8, 64, 0, 128, true};
  if (module == "w4a16" && name == "w4a16_gemm_t_k64_n64_p3") return {0, 64, 64, 128, true};
  if (module == "w4a16" && (name == "w4a16_gemm_t" || name == "w4a16_gemm_t_p3" || name == "w4a16_gemm_t_k64" ||
                            name == "w4a16_gemm_t_k64_p3"))
    return {0, 128, 64, 128, true};
  if ((module == "w4a16_v2" && name == "w4a16_gemm_t_m128_v2") || (module == "w4a16_v3" && name == "w4a16_gemm_t_m128_v3"))
    return {0, 128, 128, 256, true};
  if (quant_family(module, name)) return name.ends_with("_gemv") ? GridConvention{8, 64, 0, 128, true} : GridConvention{0, 128, 64, 128, true};
  // A new variant (a vendor's module): the tile GEMM's N128xM64 grid, said in the row.
  return {0, 128, 64, 128, false};
}

std::string Variant::tier() const {
  const FamilyInfo& f = family_info(family);
  return std::string(activation_quant_name(f.activations)) + "/" + std::string(f.module);
}

std::vector<Variant> family_variants(const Backend& backend) {
  std::vector<Variant> out;
  for (const auto& m : backend.manifest().modules) {
    for (const auto& k : m.kernels) {
      if (auto family = quant_family(m.name, k.name)) out.push_back({m.name, k.name, *family});
      else if (w4a16_signature(k)) out.push_back({m.name, k.name, KernelFamily::w4a16});
    }
  }
  return out;
}

std::vector<Variant> matching_variants(const Backend& backend, const std::string& glob) {
  std::vector<Variant> out;
  for (auto& v : family_variants(backend))
    if (glob_match(glob, v.name) || glob_match(glob, v.full_name())) out.push_back(std::move(v));
  return out;
}

const char* disposition_name(Disposition d) noexcept {
  switch (d) {
    case Disposition::passed: return "passed";
    case Disposition::incorrect: return "incorrect";
    case Disposition::not_supported: return "not-supported";
    case Disposition::not_run: return "not-run";
  }
  return "?";
}

namespace {

// One row: the variant's blocked disposition, its row limit, or the measurement on the fixture
// of its family (made on first use for this shape).
Row bench_row(Backend& b, const Variant& v, const Resolved& resolved, const Shape& shape, const Options& options,
              std::map<KernelFamily, Fixture>& fixtures, WeightCache& weights) {
  Row r;
  r.backend = b.name();
  r.target = b.target();
  r.variant = v;
  r.shape = shape;
  r.flops = 2.0 * shape.m * shape.n * shape.k;
  QuantMatrix sizes;  // the tensor sizes follow from the shape and format alone
  sizes.format = family_info(v.family).weights;
  sizes.n = shape.n;
  sizes.k = shape.k;
  r.weight_bytes = static_cast<double>(sizes.bytes_per_matrix());
  const GridConvention g = grid_convention(v.module, v.name);
  if (!g.documented) r.why = "grid not in docs/kernels.md: N128xM64 tile grid assumed";
  if (resolved.blocked) {
    r.disposition = *resolved.blocked;
    r.why = resolved.why;
    return r;
  }
  if (g.max_m && shape.m > g.max_m) {
    r.disposition = Disposition::not_supported;
    r.why = v.name + " takes " + (g.max_m == 1 ? "exactly 1 row" : "1.." + std::to_string(g.max_m) + " rows") +
            " (docs/kernels.md); m = " + std::to_string(shape.m);
    return r;
  }
  auto it = fixtures.find(v.family);
  if (it == fixtures.end()) it = fixtures.emplace(v.family, make_fixture(b, shape, options, resolved, v.family, weights)).first;
  const Fixture& f = it->second;
  r.columns_checked = static_cast<uint32_t>(f.cols.size());
  measure(b, launcher(b, v, resolved, f, shape), f, shape, options, r);
  return r;
}

}  // namespace

std::vector<Row> run(Backend& b, const std::vector<Variant>& variants, const std::vector<Shape>& shapes,
                     const Options& options, const std::string& baseline) {
  if (options.repeat == 0) throw Error(Status::invalid_argument, "bench: --repeat must be at least 1");
  for (const auto& shape : shapes) {
    if (shape.m == 0 || shape.n == 0) throw Error(Status::invalid_argument, "bench: shape " + shape.label + " has m or n = 0");
    check_w4a16_shape("bench " + shape.label, shape.n, shape.k);
  }
  // Resolve once per variant: a miss, or a layout the variant cannot read, is the same for every shape.
  const std::vector<Resolved> resolved = resolve_variants(b, variants);
  WeightCache weights;
  std::vector<Row> rows;
  for (const auto& shape : shapes) {
    std::map<KernelFamily, Fixture> fixtures;
    const size_t first_row = rows.size();
    for (size_t i = 0; i < variants.size(); ++i) rows.push_back(bench_row(b, variants[i], resolved[i], shape, options, fixtures, weights));
    apply_baseline(rows, first_row, baseline);
  }
  return rows;
}

}  // namespace metrale::bench
