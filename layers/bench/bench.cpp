// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench/bench.hpp"

#include "model/config.hpp"
#include "model/device_buffer.hpp"
#include "model/reference.hpp"
#include "model/w4a16.hpp"
#include "selectors.hpp"

#include <metrale/names.hpp>
#include <metrale/registry.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <chrono>
#include <map>

namespace metrale::bench {

using namespace metrale::layers;

namespace {

constexpr uint16_t kPoison = 0xffff;  // a bf16 NaN: an element the kernel did not write fails

// Types and names both: moe/moe_combine has the same seven types but is not a GEMM.
bool family_signature(const ManifestKernel& k) {
  static constexpr const char* kNames[] = {"x", "qweight", "scales", "y", "m", "n", "k"};
  if (k.params.size() != kW4a16GemmSignature.size()) return false;
  for (size_t i = 0; i < k.params.size(); ++i)
    if (k.params[i].type != kW4a16GemmSignature[i] || k.params[i].name != kNames[i]) return false;
  return true;
}

// Evenly spaced output columns, first and last included; every column when n <= count or count == 0.
std::vector<uint32_t> verify_columns(uint32_t n, uint32_t count) {
  std::vector<uint32_t> cols;
  if (count == 0 || n <= count) {
    for (uint32_t c = 0; c < n; ++c) cols.push_back(c);
    return cols;
  }
  for (uint32_t i = 0; i < count; ++i)
    cols.push_back(static_cast<uint32_t>(uint64_t{i} * (n - 1) / (count - 1)));
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  return cols;
}

// The rows `cols` of W (an output column of y is a row of W), as their own matrix, so the layers'
// reference runs on exactly the columns we check.
QuantMatrix select_rows(const QuantMatrix& w, const std::vector<uint32_t>& cols) {
  QuantMatrix out = w4a16_zeros(w.name + "[verified columns]", static_cast<uint32_t>(cols.size()), w.k);
  const size_t words = w.k / 8, groups = w.k / kW4a16GroupSize;
  for (size_t i = 0; i < cols.size(); ++i) {
    std::copy_n(w.qweight.begin() + static_cast<std::ptrdiff_t>(cols[i] * words), words,
                out.qweight.begin() + static_cast<std::ptrdiff_t>(i * words));
    std::copy_n(w.scales.begin() + static_cast<std::ptrdiff_t>(cols[i] * groups), groups,
                out.scales.begin() + static_cast<std::ptrdiff_t>(i * groups));
  }
  return out;
}

std::string miss_reason(Backend& b, const Variant& v) {
  std::string reason = "the lookup failed (no audit row recorded why)";
  for (const auto& row : b.audit().snapshot())
    if (row.module == v.module && row.kernel == v.name) reason = row.reason;
  return reason;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Everything one shape needs, shared by the variants: weights on the device, input, reference.
struct Fixture {
  QuantMatrix w;
  std::vector<uint16_t> x;
  std::vector<uint32_t> cols;
  ReferenceOutput reference;
};

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
  // A new variant (a vendor's module): the tile GEMM's N128xM64 grid, said in the row.
  return {0, 128, 64, 128, false};
}

std::vector<Variant> family_variants(const Backend& backend) {
  std::vector<Variant> out;
  for (const auto& m : backend.manifest().modules)
    for (const auto& k : m.kernels)
      if (family_signature(k)) out.push_back({m.name, k.name});
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

std::vector<Row> run(Backend& b, const std::vector<Variant>& variants, const std::vector<Shape>& shapes,
                     const Options& options, const std::string& baseline) {
  if (options.repeat == 0) throw Error(Status::invalid_argument, "bench: --repeat must be at least 1");
  std::vector<Row> rows;
  // Weights are loaded as the layers load them: through the backend's repack, when it has one.
  const KernelHandle repack = resolve_w4a16_repack(b);
  const std::string weight_layout = weight_layout_of(b, repack);
  // Resolve once per variant; a miss, or a layout the variant cannot read, is the same for every shape.
  struct ResolvedVariant {
    KernelHandle handle;
    std::string miss;            // why the lookup failed
    std::string layout_problem;  // why the variant cannot read the loaded weights
  };
  std::map<std::string, ResolvedVariant> handles;
  for (const auto& v : variants) {
    Backend::LookupRequest request{.kind = LookupKind::try_lookup, .expected = kW4a16GemmSignature, .lever = {},
                                   .refuse_because = {}};
    ResolvedVariant& r = handles[v.full_name()];
    r.handle = b.lookup(v.module, v.name, request);
    if (!r.handle) r.miss = miss_reason(b, v);
    try {
      require_weight_layout(b, r.handle, weight_layout);
    } catch (const Error& e) {
      r.layout_problem = e.what();
    }
  }
  std::map<std::pair<uint32_t, uint32_t>, QuantMatrix> weights;  // by (n, k): one matrix per projection
  for (const auto& shape : shapes) {
    if (shape.m == 0 || shape.n == 0) throw Error(Status::invalid_argument, "bench: shape " + shape.label + " has m or n = 0");
    check_w4a16_shape("bench " + shape.label, shape.n, shape.k);
    auto [wit, fresh] = weights.try_emplace({shape.n, shape.k});
    if (fresh) wit->second = synthetic_w4a16(shape.label, shape.n, shape.k, options.seed ^ (uint64_t{shape.n} << 32) ^ shape.k);
    Fixture f;
    f.w = wit->second;
    f.x = synthetic_activations(shape.m, shape.k, options.seed + shape.m);
    f.cols = verify_columns(shape.n, options.verify_columns);
    f.reference = reference_projection(select_rows(f.w, f.cols).view(), f.x, shape.m);

    DeviceQuantMatrix dw = DeviceQuantMatrix::upload(b, f.w, repack);
    DeviceBuffer dx(b, f.x.size() * 2);
    dx.upload(std::span<const uint16_t>(f.x));
    const size_t count = size_t{shape.m} * shape.n;
    DeviceBuffer dy(b, (count + shape.n) * 2);  // one guard row after y
    const size_t first_row = rows.size();
    for (const auto& v : variants) {
      Row r;
      r.backend = b.name();
      r.target = b.target();
      r.variant = v;
      r.shape = shape;
      r.weight_bytes = static_cast<double>(f.w.bytes());
      r.flops = 2.0 * shape.m * shape.n * shape.k;
      r.columns_checked = static_cast<uint32_t>(f.cols.size());
      const auto& [handle, miss, layout_problem] = handles[v.full_name()];
      const GridConvention g = grid_convention(v.module, v.name);
      if (!g.documented) r.why = "grid not in docs/kernels.md: N128xM64 tile grid assumed";
      if (!handle) {
        r.disposition = Disposition::not_supported;
        r.why = "not available on this backend: " + miss;
        rows.push_back(std::move(r));
        continue;
      }
      if (!layout_problem.empty()) {
        r.disposition = Disposition::not_run;  // a backend bug, not a capability gap: exit 1
        r.why = layout_problem;
        rows.push_back(std::move(r));
        continue;
      }
      if (g.max_m && shape.m > g.max_m) {
        r.disposition = Disposition::not_supported;
        r.why = v.name + " takes " + (g.max_m == 1 ? "exactly 1 row" : "1.." + std::to_string(g.max_m) + " rows") +
                " (docs/kernels.md); m = " + std::to_string(shape.m);
        rows.push_back(std::move(r));
        continue;
      }
      LaunchShape ls;
      ls.grid = {(shape.n + g.n_tile - 1) / g.n_tile, g.m_tile ? (shape.m + g.m_tile - 1) / g.m_tile : 1, 1};
      ls.block = {g.block, 1, 1};
      auto launch = [&] { b.launch(handle, ls, dx.ptr(), dw.qweight.ptr(), dw.scales.ptr(), dy.ptr(), shape.m, shape.n, shape.k); };
      try {
        // Verify first, on a poisoned output with a guard row.
        b.memset(dy.ptr(), 0xff, dy.bytes());
        launch();
        b.synchronize();
        std::vector<uint16_t> y = dy.download<uint16_t>(count + shape.n);
        const bool guard_ok = std::all_of(y.begin() + static_cast<std::ptrdiff_t>(count), y.end(),
                                          [](uint16_t v) { return v == kPoison; });
        std::vector<uint16_t> picked(size_t{shape.m} * f.cols.size());
        for (uint32_t row = 0; row < shape.m; ++row)
          for (size_t c = 0; c < f.cols.size(); ++c) picked[row * f.cols.size() + c] = y[size_t{row} * shape.n + f.cols[c]];
        const Comparison cmp = compare_to_reference(picked, f.reference);
        r.checked = cmp.checked;
        r.violations = cmp.violations;
        r.max_abs = cmp.max_abs;
        r.max_rel = cmp.max_rel;
        r.worst_ratio = cmp.worst_ratio;
        r.check_summary = cmp.summary();
        if (!guard_ok) {
          r.disposition = Disposition::incorrect;
          r.why = "wrote past the end of y (the row after [m, n] was modified)";
        } else if (!cmp.passed()) {
          r.disposition = Disposition::incorrect;
          r.why = "over budget: " + cmp.summary();
        } else {
          r.disposition = Disposition::passed;
        }
        // Timed even when incorrect: a developer wants to see what the wrong version costs.
        for (uint32_t i = 0; i < options.warmup; ++i) launch();
        b.synchronize();
        for (uint32_t i = 0; i < options.repeat; ++i) {
          const auto start = std::chrono::steady_clock::now();
          launch();
          b.synchronize();
          r.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        r.median_s = median_of(r.seconds);
        r.min_s = *std::min_element(r.seconds.begin(), r.seconds.end());
        r.max_s = *std::max_element(r.seconds.begin(), r.seconds.end());
        if (r.median_s > 0) {
          r.gb_per_s = r.weight_bytes / r.median_s / 1e9;
          r.gflop_per_s = r.flops / r.median_s / 1e9;
        }
      } catch (const Refusal&) {
        throw;
      } catch (const std::exception& e) {
        r.disposition = Disposition::not_run;
        r.why = std::string("launch failed: ") + e.what();
      }
      rows.push_back(std::move(r));
    }
    // The baseline's median for this shape, when it ran.
    if (!baseline.empty()) {
      std::optional<double> base;
      for (size_t i = first_row; i < rows.size(); ++i) {
        const auto& r = rows[i];
        if ((r.variant.name == baseline || r.variant.full_name() == baseline) && !r.seconds.empty()) base = r.median_s;
      }
      if (base)
        for (size_t i = first_row; i < rows.size(); ++i)
          if (!rows[i].seconds.empty() && rows[i].median_s > 0) rows[i].ratio = *base / rows[i].median_s;
    }
  }
  return rows;
}

}  // namespace metrale::bench
