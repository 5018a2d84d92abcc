// SPDX-License-Identifier: MIT OR Apache-2.0
#include "reference/reference.hpp"

#include "core/numeric.hpp"
#include "core/rng.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <thread>

namespace metrale::layers {

namespace {

unsigned thread_count(const ReferenceOptions& o) {
  unsigned n = o.threads ? o.threads : std::thread::hardware_concurrency();
  return std::max(1u, n);
}

// Runs body(i) for i in [0, count) on a few threads, reporting progress as rows complete.
template <class Body>
void parallel_rows(uint32_t count, const ReferenceOptions& o, std::string_view stage, Body body) {
  std::atomic<uint32_t> next{0};
  std::atomic<uint32_t> done{0};
  std::mutex report;
  uint32_t reported_percent = 0;
  auto worker = [&] {
    for (uint32_t i; (i = next.fetch_add(1)) < count;) {
      body(i);
      const uint32_t finished = done.fetch_add(1) + 1;
      if (o.progress) {
        const uint32_t percent = static_cast<uint32_t>(uint64_t{finished} * 100 / count);
        std::lock_guard lock(report);
        if (percent >= reported_percent + 5 || finished == count) {
          reported_percent = percent;
          o.progress(stage, static_cast<double>(finished) / count);
        }
      }
    }
  };
  const unsigned threads = std::min<unsigned>(thread_count(o), std::max<uint32_t>(1, count / 4));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

struct Stage {
  uint32_t m = 0;
  uint32_t n = 0;
  std::vector<double> value;  // [m][n]
  std::vector<double> slack;  // [m][n]: the budget beyond 2^-7 |value| (reference.hpp)
};

// The inputs a projection multiplies, per row, in stored column order: the bf16 values gathered
// through the act-order permutation, or their quantized values under an int8/fp8 tier. `ulp[i]`
// is how far an input may be off when it is a bf16 intermediate of an earlier stage (the kernel
// rounds it in f32, the reference in double): one bf16 ulp, or under a quantized tier one code
// step (a flipped input can move its code by one). `neighbours` are the row's inputs quantized
// with the scales a one-ulp different row maximum would give (empty when the scale is certain).
struct ProjectionInputs {
  std::vector<double> x;                      // [m][k]
  std::vector<double> ulp;                    // [m][k]; empty: inputs given to the layer, exact
  std::vector<std::vector<double>> neighbours;  // each [m][k]
};

ProjectionInputs prepare_inputs(const QuantView& w, const std::vector<double>& x, uint32_t m, bool inputs_rounded,
                                ActivationQuant tier, ActivationScaling scaling) {
  ProjectionInputs in;
  const uint32_t k = w.k, width = scale_width(scaling, k);
  std::vector<double> gathered(size_t{m} * k);
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t c = 0; c < k; ++c) gathered[size_t{r} * k + c] = x[size_t{r} * k + w.input_column(c)];
  in.x.resize(gathered.size());
  if (inputs_rounded) in.ulp.resize(gathered.size());
  // A static scale does not depend on the row: no neighbouring scale to allow for.
  if (inputs_rounded && tier != ActivationQuant::bf16 && !scaling.static_tensor) {
    in.neighbours.assign(2, std::vector<double>(gathered.size()));
  }
  if (scaling.static_tensor && tier != ActivationQuant::bf16 && !(w.input_scale > 0)) {
    throw Error(Status::invalid_argument, std::string(w.name) + ": the reference quantizes with static scales, but the "
                                                                "weights carry none (no input_scale)");
  }
  std::vector<float> scales(k / width);
  for (uint32_t r = 0; r < m; ++r) {
    const double* xr = gathered.data() + size_t{r} * k;
    if (scaling.static_tensor) {
      scales.assign(1, w.input_scale);
      quantize_with_scale(tier, scaling.arithmetic, xr, k, w.input_scale, in.x.data() + size_t{r} * k);
    } else {
      quantize_row(tier, scaling, xr, k, in.x.data() + size_t{r} * k, scales.data());
    }
    if (!inputs_rounded) continue;
    for (uint32_t c = 0; c < k; ++c) {
      const double scale = scales[c / width];
      const double step = tier == ActivationQuant::int8 ? scale
                          : tier == ActivationQuant::fp8 ? std::max(std::fabs(in.x[size_t{r} * k + c]) / 8, 0x1.0p-9 * scale)
                                                         : bf16_ulp(xr[c]);
      in.ulp[size_t{r} * k + c] = step;
    }
    if (in.neighbours.empty()) continue;
    // A group's maximum itself may be one ulp off in the kernel: its scale then differs.
    for (uint32_t g = 0; g < k / width; ++g) {
      const double* xg = xr + size_t{g} * width;
      const double amax = std::fabs(*std::max_element(xg, xg + width, [](double a, double b) { return std::fabs(a) < std::fabs(b); }));
      for (int side = 0; side < 2; ++side) {
        const double other = side ? amax + bf16_ulp(amax) : std::max(0.0, amax - bf16_ulp(amax));
        quantize_with_scale(tier, scaling.arithmetic, xg, width, activation_scale(tier, scaling.arithmetic, other),
                            in.neighbours[side].data() + size_t{r} * k + size_t{g} * width);
      }
    }
  }
  return in;
}

// value[r][j] = sum_k x[r][k] * W[j][k]; slack = 2^-12 sum_k |x_k W_jk|, plus, when the inputs
// are bf16 intermediates of an earlier stage, kRefFlipInputs * max_k |W_jk| ulp(x_k) (and under a
// quantized tier the largest change a neighbouring row scale makes).
Stage project(const QuantView& w, const std::vector<double>& x, uint32_t m, const ReferenceOptions& o,
              std::string_view stage_name, bool inputs_rounded) {
  if (x.size() != size_t{m} * w.k) {
    throw Error(Status::invalid_argument, std::string(w.name) + ": reference projection got " + std::to_string(x.size()) +
                                              " inputs for m = " + std::to_string(m) + ", K = " + std::to_string(w.k));
  }
  Stage s{m, w.n, std::vector<double>(size_t{m} * w.n), std::vector<double>(size_t{m} * w.n)};
  const ProjectionInputs in = prepare_inputs(w, x, m, inputs_rounded, o.activations, o.activation_scaling);
  auto dot = [&](const double* xr, const double* row) {
    double sum = 0;
    for (uint32_t k = 0; k < w.k; ++k) sum += xr[k] * row[k];
    return sum;
  };
  parallel_rows(w.n, o, stage_name, [&](uint32_t j) {
    thread_local std::vector<double> row;
    row.resize(w.k);
    w.dequantize_row(j, row);
    for (uint32_t r = 0; r < m; ++r) {
      const double* xr = in.x.data() + size_t{r} * w.k;
      double magnitude = 0;
      double flip = 0;
      for (uint32_t k = 0; k < w.k; ++k) magnitude += std::fabs(xr[k] * row[k]);
      const double sum = dot(xr, row.data());
      if (!in.ulp.empty()) {
        const double* ur = in.ulp.data() + size_t{r} * w.k;
        for (uint32_t k = 0; k < w.k; ++k) flip = std::max(flip, std::fabs(row[k]) * ur[k]);
      }
      double rescale = 0;
      for (const auto& other : in.neighbours) rescale = std::max(rescale, std::fabs(dot(other.data() + size_t{r} * w.k, row.data()) - sum));
      s.value[size_t{r} * w.n + j] = sum;
      s.slack[size_t{r} * w.n + j] = kRefScaleTolerance * magnitude + kRefFlipInputs * flip + rescale;
    }
  });
  return s;
}

double round_bf16(double v) { return static_cast<double>(bf16_to_f32(f64_to_bf16(v))); }

std::vector<double> to_double(std::span<const uint16_t> bf16) {
  std::vector<double> out(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) out[i] = bf16_to_f32(bf16[i]);
  return out;
}

// gate_up -> act -> down, every intermediate rounded to bf16 as the kernels store it.
Stage dense_pipeline(const QuantView& gate_up, const QuantView& down, Activation act, const std::vector<double>& x,
                     uint32_t m, const ReferenceOptions& o, const std::string& name) {
  const uint32_t inter = down.k;
  Stage gu = project(gate_up, x, m, o, name + ".gate_up", false);
  std::vector<double> a(size_t{m} * inter);
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t j = 0; j < inter; ++j) {
      const double g = round_bf16(gu.value[size_t{r} * 2 * inter + j]);
      const double u = round_bf16(gu.value[size_t{r} * 2 * inter + inter + j]);
      a[size_t{r} * inter + j] = round_bf16(reference_activation(act, g) * u);
    }
  }
  return project(down, a, m, o, name + ".down", true);
}

ReferenceOutput final_output(Stage&& s) {
  ReferenceOutput out;
  out.m = s.m;
  out.n = s.n;
  out.value = std::move(s.value);
  out.bound.resize(out.value.size());
  for (size_t i = 0; i < out.value.size(); ++i) {
    out.bound[i] = kRefRelTolerance * std::fabs(out.value[i]) + s.slack[i];
  }
  out.row_excluded.assign(out.m, 0);
  return out;
}

void check_input(std::span<const uint16_t> x, uint32_t m, uint32_t width, std::string_view what) {
  if (m == 0 || x.size() != size_t{m} * width) {
    throw Error(Status::invalid_argument, std::string(what) + ": reference input has " + std::to_string(x.size()) +
                                              " values, expected m (" + std::to_string(m) + ") x " + std::to_string(width));
  }
}

}  // namespace

size_t ReferenceOutput::excluded_rows() const noexcept {
  return static_cast<size_t>(std::count(row_excluded.begin(), row_excluded.end(), uint8_t{1}));
}

double reference_activation(Activation act, double g) noexcept {
  if (act == Activation::silu) return g / (1.0 + std::exp(-g));
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  return 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)));
}

ReferenceOutput reference_projection(const QuantView& w, std::span<const uint16_t> x, uint32_t m,
                                     const ReferenceOptions& o) {
  check_input(x, m, w.k, w.name);
  return final_output(project(w, to_double(x), m, o, w.name, false));
}

ReferenceOutput reference_dense_ffn(const DenseFfnWeights& w, Activation act, std::span<const uint16_t> x, uint32_t m,
                                    const ReferenceOptions& o) {
  w.validate(w.hidden(), w.intermediate());
  check_input(x, m, w.hidden(), "dense FFN");
  return final_output(dense_pipeline(w.gate_up.view(), w.down.view(), act, to_double(x), m, o, "ffn"));
}

ReferenceRouting reference_topk_softmax(std::span<const double> logits, std::span<const double> logit_scale, uint32_t m,
                                        uint32_t experts, uint32_t k, bool renormalize) {
  ReferenceRouting out;
  out.ids.resize(size_t{m} * k);
  out.weights.resize(size_t{m} * k);
  out.ambiguous.assign(m, 0);
  std::vector<uint32_t> order(experts);
  for (uint32_t r = 0; r < m; ++r) {
    const double* l = logits.data() + size_t{r} * experts;
    const double top = *std::max_element(l, l + experts);
    double total = 0;
    for (uint32_t e = 0; e < experts; ++e) total += std::exp(l[e] - top);
    std::iota(order.begin(), order.end(), 0u);
    // Softmax is monotonic, so ranking logits ranks probabilities; ties go to the lower id.
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return l[a] > l[b]; });
    double chosen = 0;
    for (uint32_t j = 0; j < k; ++j) {
      out.ids[size_t{r} * k + j] = static_cast<int32_t>(order[j]);
      out.weights[size_t{r} * k + j] = std::exp(l[order[j]] - top) / total;
      chosen += out.weights[size_t{r} * k + j];
    }
    if (renormalize) {
      for (uint32_t j = 0; j < k; ++j) out.weights[size_t{r} * k + j] /= chosen;
    }
    if (k < experts && !logit_scale.empty()) {
      const uint32_t in = order[k - 1];
      const uint32_t outside = order[k];
      const double gap = l[in] - l[outside];
      const double scale = std::max(logit_scale[size_t{r} * experts + in], logit_scale[size_t{r} * experts + outside]);
      if (gap > 0 && gap <= kRefTieMargin * scale) out.ambiguous[r] = 1;
    }
  }
  return out;
}

namespace {

// Router logits in double from the f32 router weights, with each logit's sum of |terms| (what
// its rounding error scales with).
struct RouterLogits {
  std::vector<double> logits;
  std::vector<double> scale;
};

RouterLogits router_logits(const std::vector<double>& x, std::span<const float> router, uint32_t m, uint32_t H,
                           uint32_t E) {
  RouterLogits out{std::vector<double>(size_t{m} * E), std::vector<double>(size_t{m} * E)};
  for (uint32_t r = 0; r < m; ++r) {
    for (uint32_t e = 0; e < E; ++e) {
      double sum = 0;
      double magnitude = 0;
      for (uint32_t h = 0; h < H; ++h) {
        const double term = x[size_t{r} * H + h] * static_cast<double>(router[size_t{e} * H + h]);
        sum += term;
        magnitude += std::fabs(term);
      }
      out.logits[size_t{r} * E + e] = sum;
      out.scale[size_t{r} * E + e] = magnitude;
    }
  }
  return out;
}

// The weighted sum of expert outputs per token row, with its error bound.
class ExpertSum {
 public:
  ExpertSum(uint32_t m, uint32_t H)
      : m_(m), H_(H), value_(size_t{m} * H, 0.0), bound_(size_t{m} * H, 0.0), weighted_magnitude_(size_t{m} * H, 0.0) {}

  // Adds `weight` times row `row` of stage `s` to token row `r`.
  void add(uint32_t r, double weight, const Stage& s, uint32_t row) {
    for (uint32_t h = 0; h < H_; ++h) {
      const double e = round_bf16(s.value[size_t{row} * H_ + h]);  // expert outputs are stored bf16
      const size_t i = size_t{r} * H_ + h;
      value_[i] += weight * e;
      weighted_magnitude_[i] += std::fabs(weight * e);
      bound_[i] += std::fabs(weight) * (2 * bf16_ulp(e) + s.slack[size_t{row} * H_ + h]);
    }
  }

  ReferenceOutput finish(std::vector<uint8_t> row_excluded) && {
    ReferenceOutput out;
    out.m = m_;
    out.n = H_;
    out.value = std::move(value_);
    out.bound = std::move(bound_);
    for (size_t i = 0; i < out.value.size(); ++i) {
      out.bound[i] += kRefRelTolerance * std::fabs(out.value[i]) + kRefWeightTolerance * weighted_magnitude_[i];
    }
    out.row_excluded = std::move(row_excluded);
    return out;
  }

 private:
  uint32_t m_;
  uint32_t H_;
  std::vector<double> value_;
  std::vector<double> bound_;
  std::vector<double> weighted_magnitude_;
};

// Each expert runs on the rows routed to it, in token order (its own stage of the pipeline).
void add_routed_experts(const MoeWeights& w, const ModelConfig& c, const std::vector<double>& x, uint32_t m,
                        const ReferenceRouting& routing, const ReferenceOptions& o, ExpertSum& sum) {
  const uint32_t H = c.hidden_size;
  const uint32_t E = c.num_experts;
  const uint32_t K = c.num_experts_per_tok;
  ReferenceOptions quiet = o;
  quiet.progress = nullptr;
  quiet.activations = o.expert_activations.value_or(o.activations);
  for (uint32_t e = 0; e < E; ++e) {
    std::vector<std::pair<uint32_t, double>> tokens;  // (row, weight)
    for (uint32_t r = 0; r < m; ++r) {
      for (uint32_t j = 0; j < K; ++j) {
        if (routing.ids[size_t{r} * K + j] == static_cast<int32_t>(e)) tokens.emplace_back(r, routing.weights[size_t{r} * K + j]);
      }
    }
    if (!tokens.empty()) {
      std::vector<double> xe(tokens.size() * H);
      for (size_t t = 0; t < tokens.size(); ++t) {
        std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(size_t{tokens[t].first} * H), H,
                    xe.begin() + static_cast<std::ptrdiff_t>(t * H));
      }
      Stage s = dense_pipeline(w.gate_up.view(e), w.down.view(e), c.activation, xe, static_cast<uint32_t>(tokens.size()),
                               quiet, "ffn.experts." + std::to_string(e));
      for (size_t t = 0; t < tokens.size(); ++t) sum.add(tokens[t].first, tokens[t].second, s, static_cast<uint32_t>(t));
    }
    if (o.progress) o.progress("ffn.experts", static_cast<double>(e + 1) / E);
  }
}

// The shared expert runs on every row, scaled by its sigmoid gate when the model has one.
void add_shared_expert(const MoeWeights& w, const ModelConfig& c, const std::vector<double>& x, uint32_t m,
                       const ReferenceOptions& o, ExpertSum& sum) {
  const uint32_t H = c.hidden_size;
  Stage s = dense_pipeline(w.shared_expert->gate_up.view(), w.shared_expert->down.view(), c.activation, x, m, o,
                           "ffn.shared_expert");
  for (uint32_t r = 0; r < m; ++r) {
    double gate = 1.0;
    if (!w.shared_expert_gate.empty()) {
      double logit = 0;
      for (uint32_t h = 0; h < H; ++h) logit += x[size_t{r} * H + h] * static_cast<double>(w.shared_expert_gate[h]);
      gate = 1.0 / (1.0 + std::exp(-logit));
    }
    sum.add(r, gate, s, r);
  }
}

}  // namespace

ReferenceOutput reference_moe(const MoeWeights& w, const ModelConfig& c, std::span<const uint16_t> x_bf16, uint32_t m,
                              const ReferenceOptions& o) {
  w.validate(c);
  check_input(x_bf16, m, c.hidden_size, "MoE");
  const std::vector<double> x = to_double(x_bf16);
  const RouterLogits router = router_logits(x, w.router, m, c.hidden_size, c.num_experts);
  ReferenceRouting routing =
      reference_topk_softmax(router.logits, router.scale, m, c.num_experts, c.num_experts_per_tok, c.norm_topk_prob);
  ExpertSum sum(m, c.hidden_size);
  add_routed_experts(w, c, x, m, routing, o, sum);
  if (w.shared_expert) add_shared_expert(w, c, x, m, o, sum);
  return std::move(sum).finish(std::move(routing.ambiguous));
}

ReferenceOutput reference_ffn(const FfnWeights& w, const ModelConfig& c, std::span<const uint16_t> x, uint32_t m,
                              const ReferenceOptions& o) {
  w.validate(c);
  switch (c.ffn_kind()) {
    case FfnKind::dense: return reference_dense_ffn(*w.dense, c.activation, x, m, o);
    case FfnKind::moe: return reference_moe(*w.moe, c, x, m, o);
    case FfnKind::none: break;
  }
  check_input(x, m, c.hidden_size, "FFN (none)");
  ReferenceOutput out;
  out.m = m;
  out.n = c.hidden_size;
  out.value = to_double(x);
  out.bound.assign(out.value.size(), 0.0);
  out.row_excluded.assign(m, 0);
  return out;
}

Comparison compare_to_reference(std::span<const uint16_t> got, const ReferenceOutput& ref) {
  if (got.size() != size_t{ref.m} * ref.n) {
    throw Error(Status::invalid_argument, "compare: " + std::to_string(got.size()) + " outputs, reference has " +
                                              std::to_string(ref.m) + " x " + std::to_string(ref.n));
  }
  Comparison c;
  // Relative error means little next to zero: it is reported over |r| >= rms(r) / 4.
  double sum_sq = 0;
  for (double v : ref.value) sum_sq += v * v;
  const double rel_floor = 0.25 * std::sqrt(sum_sq / static_cast<double>(std::max<size_t>(1, ref.value.size())));
  for (uint32_t r = 0; r < ref.m; ++r) {
    if (!ref.row_excluded.empty() && ref.row_excluded[r]) {
      ++c.excluded_rows;
      continue;
    }
    for (uint32_t j = 0; j < ref.n; ++j) {
      const size_t i = size_t{r} * ref.n + j;
      const double y = bf16_to_f32(got[i]);
      const double want = ref.value[i];
      const double diff = std::fabs(y - want);
      ++c.checked;
      const bool ok = diff <= ref.bound[i];  // false for NaN
      if (!ok) ++c.violations;
      const double ratio = !std::isfinite(diff) ? INFINITY : ref.bound[i] > 0 ? diff / ref.bound[i] : (diff > 0 ? INFINITY : 0);
      if (std::isfinite(diff)) {
        c.max_abs = std::max(c.max_abs, diff);
        if (std::fabs(want) >= rel_floor && want != 0) c.max_rel = std::max(c.max_rel, diff / std::fabs(want));
      } else {
        c.max_abs = INFINITY;
      }
      if (ratio > c.worst_ratio || (c.checked == 1)) {
        c.worst_ratio = ratio;
        c.worst_row = r;
        c.worst_col = j;
        c.worst_got = y;
        c.worst_want = want;
        c.worst_bound = ref.bound[i];
      }
    }
  }
  return c;
}

std::string Comparison::summary() const {
  char text[512];
  std::snprintf(text, sizeof text,
                "%s: %zu elements, %zu over budget; max abs err %.3g, max rel err %.3g (|ref| >= rms/4), worst %.3g of budget at "
                "[%u, %u] (got %.6g, want %.6g, budget %.3g)%s",
                passed() ? "PASS" : "FAIL", checked, violations, max_abs, max_rel, worst_ratio, worst_row, worst_col,
                worst_got, worst_want, worst_bound, excluded_rows ? "" : "");
  std::string out = text;
  if (excluded_rows) out += "; " + std::to_string(excluded_rows) + " row(s) excluded (near-tie routing)";
  if (checked == 0) out += "; nothing was checked";
  return out;
}

std::vector<uint16_t> synthetic_activations(uint32_t m, uint32_t width, uint64_t seed) {
  SplitMix64 rng(derive_seed(seed, "activations"));
  std::vector<uint16_t> out(size_t{m} * width);
  for (auto& v : out) v = f32_to_bf16(static_cast<float>(rng.uniform(-1.0, 1.0)));
  return out;
}

}  // namespace metrale::layers
