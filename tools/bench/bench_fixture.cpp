// SPDX-License-Identifier: MIT OR Apache-2.0
#include "bench/bench_fixture.hpp"

#include "core/quant_synthetic.hpp"
#include "core/w4a16.hpp"
#include "linear/selectors.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <chrono>

namespace metrale::bench {

using namespace metrale::layers;

namespace {

constexpr uint16_t kPoison = 0xffff;  // a bf16 NaN: an element the kernel did not write fails

Resolved resolve_w4a16_variant(Backend& b, const Variant& v, KernelHandle repack, const std::string& layout) {
  Resolved r;
  r.repack = repack;
  Backend::LookupRequest request{.kind = LookupKind::try_lookup, .expected = kW4a16GemmSignature, .lever = {},
                                 .refuse_because = {}, .annotations = {}};
  Backend::Resolution found = b.resolve(v.module, v.name, request);
  r.handle = found.handle;
  if (!r.handle) {
    r.blocked = Disposition::not_supported;
    r.why = "not available on this backend: " + found.reason;
    return r;
  }
  try {
    require_weight_layout(b, r.handle, layout);
  } catch (const Error& e) {
    r.blocked = Disposition::not_run;  // a backend bug, not a capability gap: exit 1
    r.why = e.what();
  }
  return r;
}

// The family's kernels, resolved once per family: nullopt with `missing` when one it needs is
// absent; an Error (a layout a kernel cannot read) is kept as text.
struct FamilyResolution {
  std::optional<FamilyKernels> kernels;
  KernelMiss missing;
  std::string error;
};

Resolved resolve_family_variant(Backend& b, const Variant& v, std::map<KernelFamily, FamilyResolution>& families) {
  auto [it, fresh] = families.try_emplace(v.family);
  FamilyResolution& f = it->second;
  if (fresh) {
    try {
      f.kernels = resolve_family(b, FamilyRequest{.family = v.family, .grouped = false, .act_order = false,
                                                  .grouped_decode = false, .notes = {}, .shapes = {}, .model_type = {}, .scaling = {}},
                                 f.missing);
    } catch (const Refusal&) {
      throw;
    } catch (const Error& e) {
      f.error = e.what();
    }
  }
  Resolved r;
  if (!f.error.empty()) {
    r.blocked = Disposition::not_run;
    r.why = f.error;
    return r;
  }
  if (!f.kernels) {
    r.blocked = Disposition::not_supported;
    r.why = "not available on this backend: the " + v.tier() + " tier needs " + f.missing.kernel + ": " + f.missing.reason;
    return r;
  }
  r.kernels = *f.kernels;
  const bool gemv = v.name.ends_with("_gemv");
  r.handle = gemv ? r.kernels.gemv : r.kernels.gemm;
  r.kernels.gemv = gemv ? r.handle : KernelHandle{};  // the GEMM variant serves every m
  if (!r.handle) {
    r.blocked = Disposition::not_supported;
    r.why = "not available on this backend: " + f.kernels->why_absent(v.full_name());
  }
  return r;
}

// Evenly spaced output columns, first and last included; every column when n <= count or count == 0.
std::vector<uint32_t> verify_columns(uint32_t n, uint32_t count) {
  std::vector<uint32_t> cols;
  if (count == 0 || n <= count) {
    for (uint32_t c = 0; c < n; ++c) cols.push_back(c);
    return cols;
  }
  for (uint32_t i = 0; i < count; ++i) cols.push_back(static_cast<uint32_t>(uint64_t{i} * (n - 1) / (count - 1)));
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  return cols;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

void time_launches(Backend& b, const std::function<void()>& launch, const Options& options, Row& r) {
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
}

}  // namespace

std::vector<Resolved> resolve_variants(Backend& b, const std::vector<Variant>& variants) {
  // w4a16 weights are loaded as the layers load them: through the backend's repack, when it has one.
  KernelHandle repack;
  std::string layout;
  const bool any_w4a16 = std::any_of(variants.begin(), variants.end(), [](const Variant& v) { return v.family == KernelFamily::w4a16; });
  if (any_w4a16) {
    repack = resolve_w4a16_repack(b);
    layout = weight_layout_of(b, repack);
  }
  std::map<KernelFamily, FamilyResolution> families;
  std::vector<Resolved> out;
  for (const auto& v : variants) {
    out.push_back(v.family == KernelFamily::w4a16 ? resolve_w4a16_variant(b, v, repack, layout)
                                                  : resolve_family_variant(b, v, families));
  }
  return out;
}

Fixture make_fixture(Backend& b, const Shape& shape, const Options& options, const Resolved& resolved, KernelFamily family,
                     WeightCache& weights) {
  const FamilyInfo& info = family_info(family);
  check_quant_shape("bench " + shape.label, info.weights, shape.n, shape.k, 1, kW4a16GroupSize);
  const uint64_t seed = options.seed ^ (uint64_t{shape.n} << 32) ^ shape.k;
  auto [wit, fresh] = weights.try_emplace({info.weights, shape.n, shape.k});
  if (fresh) {
    wit->second = info.weights == WeightFormat::w4a16 ? synthetic_w4a16(shape.label, shape.n, shape.k, seed)
                                                      : synthetic_quant(shape.label, info.weights, shape.n, shape.k, seed);
  }
  Fixture f;
  f.w = wit->second;
  f.x = synthetic_activations(shape.m, shape.k, options.seed + shape.m);
  f.cols = verify_columns(shape.n, options.verify_columns);
  ReferenceOptions ro;
  ro.activations = info.activations;  // the reference quantizes the inputs as the tier's kernels do
  f.reference = reference_projection(select_rows(f.w.name + "[verified columns]", f.w, f.cols).view(), f.x, shape.m, ro);
  f.dw = DeviceQuantMatrix::upload(b, f.w, family == KernelFamily::w4a16 ? resolved.repack : resolved.kernels.repack);
  f.dx = DeviceBuffer(b, f.x.size() * 2);
  f.dx.upload(std::span<const uint16_t>(f.x));
  f.dy = DeviceBuffer(b, (size_t{shape.m} * shape.n + shape.n) * 2);  // one guard row after y
  if (info.activations != ActivationQuant::bf16) {
    f.dxq = DeviceBuffer(b, f.x.size());
    f.dxscale = DeviceBuffer(b, size_t{shape.m} * sizeof(float));
    launch_quantize(b, resolved.kernels, f.dx.ptr(), f.dxq.ptr(), f.dxscale.ptr(), shape.m, shape.k, 0);
  }
  b.synchronize();
  return f;
}

void measure(Backend& b, const std::function<void()>& launch, const Fixture& f, const Shape& shape, const Options& options,
             Row& r) {
  try {
    // Verify first, on a poisoned output with a guard row.
    const size_t count = size_t{shape.m} * shape.n;
    b.memset(f.dy.ptr(), 0xff, f.dy.bytes());
    launch();
    b.synchronize();
    std::vector<uint16_t> y = f.dy.download<uint16_t>(count + shape.n);
    const bool guard_ok =
        std::all_of(y.begin() + static_cast<std::ptrdiff_t>(count), y.end(), [](uint16_t v) { return v == kPoison; });
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
    time_launches(b, launch, options, r);
  } catch (const Refusal&) {
    throw;
  } catch (const std::exception& e) {
    r.disposition = Disposition::not_run;
    r.why = std::string("launch failed: ") + e.what();
  }
}

}  // namespace metrale::bench
