// SPDX-License-Identifier: MIT OR Apache-2.0
#include "conformance/conformance.hpp"

#include "ffn/ffn.hpp"
#include "core/numeric.hpp"
#include "linear/projection.hpp"
#include "core/rng.hpp"
#include "io/weights.hpp"
#include "linear/selectors.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/names.hpp>
#include <metrale/registry.hpp>
#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace metrale::conformance {

using namespace metrale::layers;

namespace {

constexpr uint32_t kRowCounts[] = {1, 3, 8, 9, 64, 200};

struct KernelSpec {
  const char* module;
  const char* name;
  uint32_t max_m;    // 0: any
  uint32_t n_tile;   // grid x = ceil(n / n_tile)
  uint32_t m_tile;   // grid y = ceil(m / m_tile); 0: grid y = 1
  uint32_t block;
  bool deep;         // a deep-K kernel: also run at K >= w4a16_k64_min_k()
};

// docs/kernels.md, module w4a16 and the m128 variants.
constexpr std::array<KernelSpec, 9> kKernels{{
    {"w4a16", "w4a16_gemv", 1, 64, 0, 128, false},
    {"w4a16", "w4a16_gemv_b8", 8, 64, 0, 128, false},
    {"w4a16", "w4a16_gemm_t", 0, 128, 64, 128, false},
    {"w4a16", "w4a16_gemm_t_p3", 0, 128, 64, 128, false},
    {"w4a16", "w4a16_gemm_t_k64", 0, 128, 64, 128, true},
    {"w4a16", "w4a16_gemm_t_k64_p3", 0, 128, 64, 128, true},
    {"w4a16", "w4a16_gemm_t_k64_n64_p3", 0, 64, 64, 128, true},
    {"w4a16_v2", "w4a16_gemm_t_m128_v2", 0, 128, 128, 256, false},
    {"w4a16_v3", "w4a16_gemm_t_m128_v3", 0, 128, 128, 256, false},
}};

const KernelSpec* find_spec(std::string_view module, std::string_view name) {
  for (const auto& s : kKernels)
    if (module == s.module && name == s.name) return &s;
  return nullptr;
}

uint32_t round_up_128(uint32_t v) { return (v + 127) / 128 * 128; }

// K at the k64 threshold and the largest K below it (0 when there is none).
uint32_t deep_k() { return std::max<uint32_t>(128, round_up_128(w4a16_k64_min_k())); }
uint32_t shallow_k() {
  const uint32_t min_k = w4a16_k64_min_k();
  return min_k > 128 ? (min_k - 1) / 128 * 128 : 0;
}

std::string shape_name(uint32_t m, uint32_t n, uint32_t k) {
  return "m" + std::to_string(m) + "_n" + std::to_string(n) + "_k" + std::to_string(k);
}

uint64_t shape_seed(uint32_t n, uint32_t k) { return (uint64_t{n} << 32) ^ k ^ 0x5eedull; }

// Weights, inputs and references are shared by every kernel run on the same shape.
struct ProjectionFixture {
  QuantMatrix w;
  std::map<uint32_t, std::vector<uint16_t>> x;       // by m
  std::map<uint32_t, ReferenceOutput> reference;     // by m
};

std::mutex fixtures_mutex;
std::map<std::pair<uint32_t, uint32_t>, ProjectionFixture> fixtures;

// Returns copies so the lock is not held while a kernel runs.
std::tuple<QuantMatrix, std::vector<uint16_t>, ReferenceOutput> fixture(uint32_t m, uint32_t n, uint32_t k) {
  std::lock_guard lock(fixtures_mutex);
  auto [it, fresh] = fixtures.try_emplace({n, k});
  ProjectionFixture& f = it->second;
  if (fresh) f.w = synthetic_w4a16("conformance.w", n, k, shape_seed(n, k));
  if (!f.x.contains(m)) {
    f.x[m] = synthetic_activations(m, k, shape_seed(n, k) + m);
    f.reference[m] = reference_projection(f.w.view(), f.x[m], m);
  }
  return {f.w, f.x[m], f.reference[m]};
}

Case kernel_case(const KernelSpec& s, uint32_t m, uint32_t n, uint32_t k) {
  Case c;
  c.kind = CaseKind::kernel;
  c.module = s.module;
  c.kernel = s.name;
  c.m = m;
  c.n = n;
  c.k = k;
  c.name = "kernel/" + std::string(s.name) + "/" + shape_name(m, n, k);
  return c;
}

Case dispatch_case(uint32_t m, uint32_t n, uint32_t k) {
  Case c;
  c.kind = CaseKind::dispatch;
  c.m = m;
  c.n = n;
  c.k = k;
  c.name = "dispatch/" + shape_name(m, n, k);
  return c;
}

ModelConfig config_of(const nlohmann::json& doc, const std::string& name) { return parse_model_config(doc, "conformance " + name); }

Case layer_case(CaseKind kind, const std::string& name, const ModelConfig& config, uint32_t m, uint64_t seed,
                Routing routing = Routing::synthetic, MoeBuildOptions options = {}) {
  Case c;
  c.kind = kind;
  c.name = name + "/m" + std::to_string(m);
  c.config = config;
  c.m = m;
  c.seed = seed;
  c.routing = routing;
  c.moe_options = options;
  return c;
}

// Uneven routing by construction: router row e is the unit vector e_e, so token r's logits are
// its first E inputs, which we set: 3/4 of the tokens put expert 0 first, the second choice
// cycles over 1..5, and the last experts get no token at all. Gaps are >= 1, exact in bf16 and
// f32, so no backend can route differently.
void make_uneven(MoeWeights& w, std::vector<uint16_t>& x, uint32_t m, uint32_t k) {
  const uint32_t E = w.experts, H = w.hidden;
  std::fill(w.router.begin(), w.router.end(), 0.0f);
  for (uint32_t e = 0; e < E; ++e) w.router[size_t{e} * H + e] = 1.0f;
  const uint32_t reachable = std::min<uint32_t>(E - 2, 6);  // experts >= reachable receive nothing
  for (uint32_t r = 0; r < m; ++r) {
    std::vector<float> logits(E);
    for (uint32_t e = 0; e < E; ++e) logits[e] = -1.0f - 0.125f * static_cast<float>(e % 16);
    std::vector<uint32_t> chosen;
    chosen.push_back(r % 4 != 3 ? 0u : 1u + r % (reachable - 1));
    for (uint32_t j = 1; chosen.size() < k; ++j) {
      const uint32_t e = 1 + (r / 2 + j) % (reachable - 1);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (size_t j = 0; j < chosen.size(); ++j) logits[chosen[j]] = 2.0f - static_cast<float>(j);
    for (uint32_t e = 0; e < E; ++e) x[size_t{r} * H + e] = f32_to_bf16(logits[e]);
  }
}

std::string join_kernels(const std::vector<std::string>& kernels) {
  std::string out;
  for (const auto& k : kernels) out += (out.empty() ? "" : ", ") + k;
  return out;
}

std::vector<uint16_t> download_bf16(Backend& b, DevicePtr ptr, size_t count) {
  std::vector<uint16_t> out(count);
  b.copy_to_host(out.data(), ptr, count * 2);
  b.synchronize();
  return out;
}

bool glob(std::string_view pattern, std::string_view text) { return glob_match(pattern, text); }

CaseResult finish(CaseResult r, const Comparison& cmp) {
  r.outcome = cmp.passed() ? Outcome::passed : Outcome::failed;
  r.detail = cmp.summary();
  r.comparison = cmp;
  return r;
}

CaseResult run_kernel(Backend& b, const Case& c, CaseResult r) {
  const KernelSpec* spec = find_spec(c.module, c.kernel);
  if (!spec) throw Error(Status::invalid_argument, "unknown conformance kernel " + c.module + "/" + c.kernel);
  Backend::LookupRequest request{
      .kind = LookupKind::try_lookup, .expected = kW4a16GemmSignature, .lever = {}, .refuse_because = {}, .annotations = {}};
  const Backend::Resolution found = b.resolve(c.module, c.kernel, request);
  const KernelHandle h = found.handle;
  r.kernels.push_back(c.module + "/" + c.kernel);
  if (!h) {
    // Listed in the manifest (skip_reason() passed it) but not usable: gated by the device's
    // target is the manifest's own say-so (skip); anything else is a broken promise (fail).
    const std::string& reason = found.reason;
    const bool gated = reason.starts_with("gated");
    r.outcome = gated ? Outcome::skipped : Outcome::failed;
    r.detail = (gated ? "not for this device: " : "listed in the manifest but not usable: ") + reason;
    return r;
  }
  auto [w, x, ref] = fixture(c.m, c.n, c.k);
  DeviceQuantMatrix dw = DeviceQuantMatrix::upload(b, w);  // through the backend's repack, as the layers load weights
  require_weight_layout(b, h, dw.layout);
  DeviceBuffer dx(b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  // The output is poisoned and followed by a guard row: unwritten elements and writes past
  // the edge of an odd N both show up.
  const size_t count = size_t{c.m} * c.n;
  std::vector<uint16_t> poison(count + c.n, kCanary);
  DeviceBuffer dy(b, poison.size() * 2);
  dy.upload(std::span<const uint16_t>(poison));
  LaunchShape shape;
  shape.grid = {(c.n + spec->n_tile - 1) / spec->n_tile, spec->m_tile ? (c.m + spec->m_tile - 1) / spec->m_tile : 1, 1};
  shape.block = {spec->block, 1, 1};
  b.launch(h, shape, dx.ptr(), dw.qweight.ptr(), dw.scales.ptr(), dy.ptr(), c.m, c.n, c.k);
  b.synchronize();
  auto all = download_bf16(b, dy.ptr(), poison.size());
  if (!std::all_of(all.begin() + static_cast<std::ptrdiff_t>(count), all.end(), [](uint16_t v) { return v == kCanary; })) {
    r.outcome = Outcome::failed;
    r.detail = "wrote past the end of y (the row after [m, n] was modified)";
    return r;
  }
  all.resize(count);
  return finish(std::move(r), compare_to_reference(all, ref));
}

CaseResult run_dispatch(Backend& b, const Case& c, CaseResult r) {
  const std::array<ProjectionShape, 1> shapes{ProjectionShape{"conformance.w", c.n, c.k}};
  ProjectionKernels kernels = resolve_projection_kernels(b, shapes, "conformance");
  r.kernels.push_back(b.kernel_name(plan_projection(kernels, c.m, c.n, c.k).kernel));
  auto [w, x, ref] = fixture(c.m, c.n, c.k);
  DeviceQuantMatrix dw = DeviceQuantMatrix::upload(b, w);
  require_weight_layout(b, kernels, dw.layout);
  DeviceBuffer dx(b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  DeviceBuffer dy(b, size_t{c.m} * c.n * 2);
  b.memset(dy.ptr(), 0xff, dy.bytes());  // NaN everywhere: an unwritten element fails
  launch_projection(b, kernels, dw, 0, dx.ptr(), dy.ptr(), c.m, 0);
  return finish(std::move(r), compare_to_reference(download_bf16(b, dy.ptr(), size_t{c.m} * c.n), ref));
}

// Static activation scales for every projection, as a checkpoint stores them (bf16 values):
// around max|x| / 127.5 (int8) or / 448 of the layer's inputs, a different one per expert, some
// small enough that codes clamp.
void add_static_scales(FfnWeights& w, const std::vector<uint16_t>& x, ActivationQuant tier) {
  float amax = 0;
  for (uint16_t v : x) amax = std::max(amax, std::fabs(bf16_to_f32(v)));
  const float base = amax / (tier == ActivationQuant::int8 ? 127.5f : 448.0f);
  const auto scales_for = [&](QuantMatrix& m, float factor) {
    m.input_scales.resize(m.batch);
    for (uint32_t e = 0; e < m.batch; ++e) {
      m.input_scales[e] = bf16_to_f32(f32_to_bf16(base * factor * (1.0f + 0.125f * static_cast<float>(e % 5)) * 0.75f));
    }
  };
  const auto dense = [&](DenseFfnWeights& d) {
    scales_for(d.gate_up, 1.0f);
    scales_for(d.down, 0.5f);
  };
  if (w.dense) dense(*w.dense);
  if (w.moe) {
    scales_for(w.moe->gate_up, 1.0f);
    scales_for(w.moe->down, 0.5f);
    if (w.moe->shared_expert) dense(*w.moe->shared_expert);
  }
}

CaseResult run_layer(Backend& b, const Case& c, CaseResult r) {
  FfnWeights w = synthetic_ffn_weights(c.config, c.seed, c.formats);
  std::vector<uint16_t> x = synthetic_activations(c.m, c.config.hidden_size, c.seed + 1);
  if (c.scaling.static_tensor) add_static_scales(w, x, c.activations);
  if (c.routing == Routing::uneven) make_uneven(*w.moe, x, c.m, c.config.num_experts_per_tok);
  const ActivationRequest activations{c.activations, c.activations != ActivationQuant::bf16, "conformance case " + c.name,
                                      c.scaling};
  FfnComponent ffn = FfnComponent::build(b, c.config, w, FfnBuildOptions{c.moe_options, activations});
  std::set<std::string> seen;
  for (const auto& step : ffn.plan(c.m))
    if (seen.insert(step.kernel).second) r.kernels.push_back(step.kernel);
  DeviceBuffer dx(b, x.size() * 2);
  dx.upload(std::span<const uint16_t>(x));
  DevicePtr y = ffn.forward(dx.ptr(), c.m);
  b.synchronize();
  auto got = download_bf16(b, y, x.size());
  ReferenceOptions options;
  ffn.reference_tiers(options);  // the tier the layers ended at
  ReferenceOutput ref = reference_ffn(w, c.config, x, c.m, options);
  Comparison cmp = compare_to_reference(got, ref);
  r = finish(std::move(r), cmp);
  if (auto* moe = ffn.moe(); moe && c.routing == Routing::uneven) {
    // The case is only worth its name if some expert got several tokens and some got none.
    const auto& rows = moe->last_expert_rows();
    const uint32_t idle = static_cast<uint32_t>(std::count(rows.begin(), rows.end(), 0u));
    r.detail += "; expert rows [";
    for (size_t e = 0; e < rows.size(); ++e) r.detail += (e ? " " : "") + std::to_string(rows[e]);
    r.detail += "], " + std::to_string(idle) + " idle";
    if (idle == 0) {
      r.outcome = Outcome::failed;
      r.detail += " (expected idle experts: routing did not follow the router)";
    }
  }
  return r;
}

CaseResult run_topk_ties(Backend& b, const Case&, CaseResult r) {
  Backend::LookupRequest request{.kind = LookupKind::require, .expected = catalogue::signature("moe", "topk_softmax"),
                                 .lever = {}, .refuse_because = {}, .annotations = {}};
  const KernelHandle h = b.lookup("moe", "topk_softmax", request);
  r.kernels.push_back("moe/topk_softmax");
  constexpr uint32_t m = 3, E = 6, K = 3;
  const std::vector<float> logits{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,  // all tied: ids 0, 1, 2
                                  1.0f, 5.0f, 5.0f, 5.0f, 0.0f, 0.0f,  // three tied at the top
                                  0.1f, -0.2f, 0.3f, 0.3f, -1.0f, 2.0f};
  const std::vector<int32_t> want_ids{0, 1, 2, 1, 2, 3, 5, 2, 3};
  DeviceBuffer dl(b, logits.size() * 4), di(b, m * K * 4), dw(b, m * K * 4);
  dl.upload(std::span<const float>(logits));
  std::vector<double> dlogits(logits.begin(), logits.end());
  std::string problems;
  for (uint32_t renorm : {0u, 1u}) {
    LaunchShape shape;
    shape.grid = {m, 1, 1};
    shape.block = {128, 1, 1};
    b.launch(h, shape, dl.ptr(), di.ptr(), dw.ptr(), m, E, K, renorm);
    auto ids = di.download<int32_t>(m * K);
    auto weights = dw.download<float>(m * K);
    ReferenceRouting ref = reference_topk_softmax(dlogits, {}, m, E, K, renorm != 0);
    if (ref.ids != want_ids) throw Error(Status::internal, "conformance topk_ties: reference disagrees with the contract");
    for (uint32_t i = 0; i < m * K; ++i) {
      if (ids[i] != want_ids[i]) {
        problems += " renormalize=" + std::to_string(renorm) + ": token " + std::to_string(i / K) + " choice " +
                    std::to_string(i % K) + " is expert " + std::to_string(ids[i]) + ", want " + std::to_string(want_ids[i]) + ";";
      } else if (!(std::fabs(weights[i] - ref.weights[i]) <= 1e-5 * ref.weights[i])) {
        problems += " renormalize=" + std::to_string(renorm) + ": weight[" + std::to_string(i) + "] = " +
                    std::to_string(weights[i]) + ", want " + std::to_string(ref.weights[i]) + ";";
      }
    }
  }
  r.outcome = problems.empty() ? Outcome::passed : Outcome::failed;
  r.detail = problems.empty() ? "ties resolved to the lower expert id; weights within 1e-5" : problems;
  return r;
}

}  // namespace

const char* outcome_name(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::passed: return "PASS";
    case Outcome::failed: return "FAIL";
    case Outcome::skipped: return "SKIP";
  }
  return "?";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const uint32_t deep = deep_k();
  const uint32_t shallow = shallow_k();
  // Kernel cases: every w4a16-family kernel on odd N, at K = 256 and 1152, deep kernels also at
  // the k64 threshold; the GEMV tiers only for the rows they accept.
  for (const auto& spec : kKernels) {
    std::vector<std::pair<uint32_t, uint32_t>> shapes{{77, 256}, {301, 1152}, {1, 128}};
    if (spec.deep && deep > 1152) shapes.emplace_back(129, deep);
    for (auto [n, k] : shapes) {
      for (uint32_t m : kRowCounts) {
        if (spec.max_m && m > spec.max_m) continue;
        if (n == 1 && m != 1 && m != 9) continue;  // N = 1 is about the edge, not the rows
        out.push_back(kernel_case(spec, m, n, k));
      }
    }
  }
  // Dispatch cases: the layers' chain on both sides of the k64 switch.
  for (uint32_t m : kRowCounts) {
    if (shallow) out.push_back(dispatch_case(m, 77, shallow));
    out.push_back(dispatch_case(m, 301, deep));
  }
  out.push_back(dispatch_case(1, 1, 128));
  out.push_back(dispatch_case(9, 129, 256));

  // Dense FFNs: silu at every row count; gelu; the down projection and then the gate/up
  // projection past the k64 threshold.
  const ModelConfig small = *preset_config("small-dense");
  for (uint32_t m : kRowCounts) out.push_back(layer_case(CaseKind::dense, "dense/silu_h256_i512", small, m, 11));
  const ModelConfig gelu = *preset_config("small-dense-gelu");
  for (uint32_t m : {1u, 9u, 64u}) out.push_back(layer_case(CaseKind::dense, "dense/gelu_h384_i640", gelu, m, 12));
  const ModelConfig deep_down = config_of({{"model_type", "conformance"}, {"hidden_size", 256}, {"intermediate_size", deep},
                                           {"hidden_act", "silu"}}, "deep-down");
  for (uint32_t m : {1u, 9u, 64u})
    out.push_back(layer_case(CaseKind::dense, "dense/silu_h256_i" + std::to_string(deep), deep_down, m, 13));
  const ModelConfig deep_up = config_of({{"model_type", "conformance"}, {"hidden_size", deep}, {"intermediate_size", 256},
                                         {"hidden_act", "gelu_pytorch_tanh"}}, "deep-up");
  for (uint32_t m : {3u, 64u})
    out.push_back(layer_case(CaseKind::dense, "dense/gelu_h" + std::to_string(deep) + "_i256", deep_up, m, 14));

  // MoE.
  const nlohmann::json moe_base{{"model_type", "conformance_moe"}, {"hidden_size", 256}, {"hidden_act", "silu"},
                                {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 128},
                                {"norm_topk_prob", true}};
  const ModelConfig uneven = config_of(moe_base, "uneven");
  for (uint32_t m : {1u, 9u, 64u}) out.push_back(layer_case(CaseKind::moe, "moe/uneven_e8_k2", uneven, m, 21, Routing::uneven));
  nlohmann::json plain = moe_base;
  plain["norm_topk_prob"] = false;
  out.push_back(layer_case(CaseKind::moe, "moe/uneven_no_renorm", config_of(plain, "no-renorm"), 8, 22, Routing::uneven));
  for (uint32_t m : {9u, 64u}) {
    out.push_back(layer_case(CaseKind::moe, "moe/per_expert_uneven", uneven, m, 23, Routing::uneven,
                             MoeBuildOptions{.use_grouped_kernel = false}));
  }
  const ModelConfig shared = *preset_config("small-moe");
  for (uint32_t m : {1u, 5u, 200u}) out.push_back(layer_case(CaseKind::moe, "moe/shared_gated_e8_k2", shared, m, 24));
  out.push_back(layer_case(CaseKind::moe, "moe/qwen3_30b_a3b_shape", *preset_config("qwen3-30b-a3b"), 4, 25));
  Case ties;
  ties.kind = CaseKind::topk_ties;
  ties.name = "moe/topk_ties";
  out.push_back(ties);
  for (Case& c : quant_layer_cases()) out.push_back(std::move(c));
  for (Case& c : attn_cases()) out.push_back(std::move(c));
  for (Case& c : decoder_cases()) out.push_back(std::move(c));
  return out;
}

const std::vector<DeclaredSkip>& declared_skips() {
  // Backends list here the cases they knowingly do not pass, each with its reason. Capability
  // gaps (a kernel the manifest does not list) need no entry: skip_reason() derives them.
  static const std::vector<DeclaredSkip> kSkips{};
  return kSkips;
}

std::optional<std::string> skip_reason(Backend& backend, const Case& c) {
  for (const auto& s : declared_skips()) {
    if (glob(s.backend, backend.name()) && glob(s.cases, c.name)) return "declared by backend '" + backend.name() + "': " + s.reason;
  }
  // Only what the manifest does not list for this device (not listed, or gated by its target)
  // is skipped; what it lists must work.
  auto lacks = [&](std::string_view module, std::string_view name) -> std::optional<std::string> {
    const ManifestKernel* listed = backend.manifest().find_kernel(module, name);
    if (!listed) {
      return "backend '" + backend.name() + "' does not list " + std::string(module) + "/" + std::string(name);
    }
    if (std::string gate = backend.gate_reason(*listed); !gate.empty()) {
      return "backend '" + backend.name() + "' lists " + std::string(module) + "/" + std::string(name) +
             " for other devices: " + gate;
    }
    return std::nullopt;
  };
  // Every tile-GEMM site needs the deep-K kernel (k64_kernel() requires it); a backend that
  // provides only part of the family cannot run those sites at all.
  auto lacks_tile_gemm = [&]() -> std::optional<std::string> {
    if (!lacks("w4a16", "w4a16_gemm_t_k64") || !lacks("w4a16", "w4a16_gemm_t_k64_p3"))
      return std::nullopt;
    return "backend '" + backend.name() + "' lists no deep-K tile GEMM (w4a16/w4a16_gemm_t_k64[_p3]), which every "
           "tile-GEMM site requires";
  };
  switch (c.kind) {
    case CaseKind::kernel:
    case CaseKind::decoder: return lacks(c.module, c.kernel);
    case CaseKind::topk_ties: return lacks("moe", "topk_softmax");
    case CaseKind::dense:
    case CaseKind::moe:
      if (auto r = quant_skip_reason(backend, c)) return r;
      if (c.formats.weights == WeightFormat::w4a16 && !c.formats.act_order && c.activations == ActivationQuant::bf16)
        if (auto r = lacks_tile_gemm()) return r;
      if (auto r = lacks("act", c.config.activation == Activation::silu ? "silu_mul" : "gelu_mul")) return r;
      if (c.kind == CaseKind::moe) {
        for (const char* k : {"router_gemm", "topk_softmax", "moe_gather", "moe_combine"})
          if (auto r = lacks("moe", k)) return r;
      }
      return std::nullopt;
    case CaseKind::dispatch: return lacks_tile_gemm();
    case CaseKind::attn_decode:
    case CaseKind::attn_prefill: return attn_skip_reason(backend, c);
  }
  return std::nullopt;
}

CaseResult run_case(Backend& backend, const Case& c) {
  CaseResult r;
  r.name = c.name;
  if (auto why = skip_reason(backend, c)) {
    r.outcome = Outcome::skipped;
    r.detail = *why;
    return r;
  }
  try {
    switch (c.kind) {
      case CaseKind::kernel: return run_kernel(backend, c, std::move(r));
      case CaseKind::dispatch: return run_dispatch(backend, c, std::move(r));
      case CaseKind::dense:
      case CaseKind::moe: return run_layer(backend, c, std::move(r));
      case CaseKind::topk_ties: return run_topk_ties(backend, c, std::move(r));
      case CaseKind::attn_decode:
      case CaseKind::attn_prefill: return run_attn_case(backend, c, std::move(r));
      case CaseKind::decoder: return run_decoder_case(backend, c, std::move(r));
    }
  } catch (const Refusal& e) {
    // The manifest lists what the case needs: a refusal is not a capability gap.
    r.outcome = Outcome::failed;
    r.detail = std::string("refused under the current levers: ") + e.what();
    return r;
  } catch (const std::exception& e) {
    r.outcome = Outcome::failed;
    r.detail = e.what();
    return r;
  }
  return r;
}

SuiteSummary summarize(const std::vector<CaseResult>& results) {
  SuiteSummary s;
  for (const auto& r : results) {
    if (r.outcome == Outcome::passed) ++s.passed;
    if (r.outcome == Outcome::failed) ++s.failed;
    if (r.outcome == Outcome::skipped) ++s.skipped;
  }
  return s;
}

std::string render_results(const std::vector<CaseResult>& results) {
  std::ostringstream out;
  for (const auto& r : results) {
    out << outcome_name(r.outcome) << ' ' << r.name;
    if (!r.kernels.empty()) out << "  [" << join_kernels(r.kernels) << "]";
    out << "  " << r.detail << '\n';
  }
  const SuiteSummary s = summarize(results);
  out << s.passed << " passed, " << s.failed << " failed, " << s.skipped << " skipped\n";
  return out.str();
}

}  // namespace metrale::conformance
