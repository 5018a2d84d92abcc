// SPDX-License-Identifier: MIT OR Apache-2.0
// Conformance of the CUDA quantized-weight kernels on a real GPU, through the real plugin,
// against the double-precision definitions of tests/cuda/quant_reference.hpp (the checks the host
// emulation passes): w4a16_zp, w8a16, fp8 (bf16 and, on sm_89+, E4M3 activations), w4a8, w8a8,
// w4afp8 (sm_89+), the plain bf16 / f16 weights at ragged and model-sized shapes, the activation
// quantizers bit for bit, gather_k, and moe_align feeding fp8_grouped_gemv; and the layers'
// conformance cases quant/bf16/* and quant/f16/* on the CUDA backend. Suite 'gpu'; exits 77 with
// one line when no CUDA device is usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "conformance/conformance.hpp"
#include "gpu_support.hpp"
#include "quant_reference.hpp"

#include <cstring>

namespace ref = metrale::reference;
using namespace metrale;
using metrale::gpu_test::DeviceBuffer;
using ref::QuantKind;

namespace {

std::shared_ptr<Backend> g_cuda;

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

enum class Act { bf16, int8, e4m3 };

struct Family {
  const char* module;
  const char* prefix;  // kernels <prefix>_gemv, <prefix>_gemm, <prefix>_grouped_gemm (+ suffix)
  const char* suffix;
  QuantKind kind;
  Act act;
};

const Family kFamilies[] = {
    {"w4a16_zp", "w4a16_zp", "", QuantKind::w4zp, Act::bf16}, {"w8a16", "w8a16", "", QuantKind::w8zp, Act::bf16},
    {"fp8", "fp8", "", QuantKind::fp8, Act::bf16},            {"w4a8", "w4a8", "", QuantKind::w4zp, Act::int8},
    {"w8a8", "w8a8", "", QuantKind::w8zp, Act::int8},         {"fp8", "fp8", "_a8", QuantKind::fp8, Act::e4m3},
    {"w4afp8", "w4afp8", "", QuantKind::w4zp, Act::e4m3},
    {"bf16", "bf16", "", QuantKind::bf16, Act::bf16},         {"f16", "f16", "", QuantKind::f16, Act::bf16},
};

// The E4M3 tensor cores of some GPUs accumulate with fewer than f32's bits within an mma.
double slack_of(Act act) { return act == Act::e4m3 ? 1.0 / 2048 : 0.0; }

// Device copies of one problem's inputs.
struct Inputs {
  DeviceBuffer x, xq, xscale, q, s, z, offsets;
  Inputs(Backend& b, const std::vector<uint16_t>& hx, const std::vector<uint8_t>& hxq, const std::vector<float>& hxs,
         const ref::QuantMatrix& w, const std::vector<int32_t>& hoff)
      : x(b, hx), xq(b, hxq), xscale(b, hxs), q(b, w.words), s(b, w.scales), z(b, w.zeros), offsets(b, hoff) {}
};

// Launches `kernel` of family f: dense when offsets are empty (grid from m), else grouped.
void launch(const Family& f, KernelHandle kernel, const Inputs& in, DevicePtr y, const ref::QuantMatrix& w, uint32_t m,
            bool gemv, bool grouped) {
  LaunchShape shape;
  shape.grid = {gemv ? ceil_div(w.n, 64) : ceil_div(w.n, 128), grouped ? w.count : (gemv ? 1 : ceil_div(m, 64)), 1};
  shape.block = {128, 1, 1};
  const uint32_t n = w.n, k = w.k, g = w.group, e = w.count;
  const bool zp = f.kind == QuantKind::w4zp || f.kind == QuantKind::w8zp;
  const DevicePtr a = f.act == Act::bf16 ? in.x.ptr() : in.xq.ptr();
  if (ref::plain16(f.kind)) {  // (x, weight, [offsets,] y, ...): no scales, no group
    if (grouped) g_cuda->launch(kernel, shape, a, in.q.ptr(), in.offsets.ptr(), y, n, k, e);
    else g_cuda->launch(kernel, shape, a, in.q.ptr(), y, m, n, k);
    return;
  }
  if (f.act == Act::bf16) {
    if (grouped && zp) g_cuda->launch(kernel, shape, a, in.q.ptr(), in.s.ptr(), in.z.ptr(), in.offsets.ptr(), y, n, k, g, e);
    if (grouped && !zp) g_cuda->launch(kernel, shape, a, in.q.ptr(), in.s.ptr(), in.offsets.ptr(), y, n, k, e);
    if (!grouped && zp) g_cuda->launch(kernel, shape, a, in.q.ptr(), in.s.ptr(), in.z.ptr(), y, m, n, k, g);
    if (!grouped && !zp) g_cuda->launch(kernel, shape, a, in.q.ptr(), in.s.ptr(), y, m, n, k);
    return;
  }
  const DevicePtr xs = in.xscale.ptr();
  if (grouped && zp) g_cuda->launch(kernel, shape, a, xs, in.q.ptr(), in.s.ptr(), in.z.ptr(), in.offsets.ptr(), y, n, k, g, e);
  if (grouped && !zp) g_cuda->launch(kernel, shape, a, xs, in.q.ptr(), in.s.ptr(), in.offsets.ptr(), y, n, k, e);
  if (!grouped && zp) g_cuda->launch(kernel, shape, a, xs, in.q.ptr(), in.s.ptr(), in.z.ptr(), y, m, n, k, g);
  if (!grouped && !zp) g_cuda->launch(kernel, shape, a, xs, in.q.ptr(), in.s.ptr(), y, m, n, k);
}

// Runs one family's kernel on `rows` rows grouped by `offsets` (one group: dense) and checks y.
void run_and_check(const Family& f, const std::string& name, const ref::QuantMatrix& w, const std::vector<int32_t>& offsets,
                   bool gemv, bool grouped, uint32_t seed) {
  const KernelHandle kernel = g_cuda->try_kernel(f.module, name);
  if (!kernel) {
    MESSAGE(name << " not available on " << g_cuda->target() << " (see the audit)");
    return;
  }
  const auto t = static_cast<uint32_t>(offsets.back());
  ref::QuantData data(seed);
  const auto x = data.bf16(static_cast<size_t>(t) * w.k);
  const auto xq = f.act == Act::e4m3 ? data.e4m3(static_cast<size_t>(t) * w.k) : data.int8(static_cast<size_t>(t) * w.k);
  const auto xscale = data.f32(t, 0.001f, 0.02f);
  Inputs in(*g_cuda, x, xq, xscale, w, offsets);
  DeviceBuffer dy(*g_cuda, static_cast<size_t>(t) * w.n * 2);
  g_cuda->memset(dy.ptr(), 0xff, static_cast<size_t>(t) * w.n * 2);  // NaN until written
  launch(f, kernel, in, dy.ptr(), w, t, gemv, grouped);
  const auto y = dy.download<uint16_t>(static_cast<size_t>(t) * w.n);
  ref::Comparison c;
  for (uint32_t e = 0; e + 1 < offsets.size(); ++e) {
    const auto begin = static_cast<size_t>(offsets[e]);
    const auto rows = static_cast<uint32_t>(offsets[e + 1] - offsets[e]);
    if (f.act == Act::bf16) {
      ref::check_bf16_rows(c, x.data() + begin * w.k, w, e, rows, y.data() + begin * w.n, begin * w.n);
    } else {
      ref::check_act8_rows(c, xq.data() + begin * w.k, xscale.data() + begin, w, e, rows, y.data() + begin * w.n,
                           f.act == Act::e4m3, slack_of(f.act), begin * w.n);
    }
  }
  CHECK_MESSAGE(c.ok(), name << ": " << c.report());
}

}  // namespace

TEST_CASE("quantized GEMV and GEMM kernels match the reference on the GPU") {
  struct Shape {
    uint32_t m, n, k, group;
  };
  const Shape gemv_shapes[] = {{1, 130, 256, 32}, {8, 300, 1152, 64}, {3, 17, 384, 128}, {1, 4096, 4096, 128},
                               {5, 1000, 2048, 32}};
  const Shape gemm_shapes[] = {{1, 130, 256, 32}, {67, 300, 384, 64}, {130, 72, 128, 128}, {200, 700, 2048, 128},
                               {16, 4096, 4096, 64}};
  for (const auto& f : kFamilies) {
    for (const bool gemv : {true, false}) {
      if (gemv && f.act == Act::e4m3) continue;  // no E4M3-activation GEMV
      const std::string name = std::string(f.prefix) + (gemv ? "_gemv" : "_gemm") + f.suffix;
      for (const auto& s : gemv ? std::vector<Shape>(std::begin(gemv_shapes), std::end(gemv_shapes))
                                : std::vector<Shape>(std::begin(gemm_shapes), std::end(gemm_shapes))) {
        CAPTURE(name);
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        CAPTURE(s.group);
        ref::QuantData data(s.m * 31 + s.n * 7 + s.k + s.group);
        const auto w = data.weights(f.kind, s.n, s.k, s.group, 1);
        run_and_check(f, name, w, {0, static_cast<int32_t>(s.m)}, gemv, false, s.n + s.k);
      }
    }
  }
}

TEST_CASE("grouped quantized GEMMs on the GPU: empty experts, one row, more rows than a tile") {
  const std::vector<int32_t> offsets = {0, 20, 20, 21, 161, 161, 230, 231, 240};
  for (const auto& f : kFamilies) {
    const std::string name = std::string(f.prefix) + "_grouped_gemm" + f.suffix;
    for (const uint32_t group : {32u, 128u}) {
      CAPTURE(name);
      CAPTURE(group);
      ref::QuantData data(group + 5);
      const auto w = data.weights(f.kind, 384, 1024, group, static_cast<uint32_t>(offsets.size() - 1));
      run_and_check(f, name, w, offsets, false, true, group);
    }
  }
}

TEST_CASE("FP8 weights on the GPU: subnormals and ±448 exact, a NaN weight poisons its column only") {
  ref::QuantData data(77);
  const uint32_t m = 9, n = 17, k = 256;
  auto w = data.weights(QuantKind::fp8, n, k, 128, 1);
  auto* b = reinterpret_cast<uint8_t*>(w.words.data());
  for (uint32_t j = 0; j < k; ++j) {
    b[2 * k + j] = static_cast<uint8_t>((j % 8) | (j % 16 >= 8 ? 0x80 : 0));
    b[4 * k + j] = j % 2 ? 0x7e : 0xfe;
  }
  b[6 * k + 200] = 0x7f;
  for (const char* name : {"fp8_gemv", "fp8_gemm"}) {
    CAPTURE(name);
    run_and_check(kFamilies[2], name, w, {0, static_cast<int32_t>(m)}, std::string(name) == "fp8_gemv", false, 3);
  }
}

TEST_CASE("quantize_int8 and quantize_fp8 on the GPU: scales and codes bit for bit") {
  ref::QuantData data(91);
  const uint32_t m = 6, k = 4096;
  auto x = data.bf16(static_cast<size_t>(m) * k);
  for (uint32_t j = 0; j < k; ++j) {
    x[k + j] = 0;
    x[2 * k + j] = ref::float_to_bf16(std::ldexp(data.uniform(-1.f, 1.f), -static_cast<int>(j % 24)));
    x[3 * k + j] = ref::float_to_bf16(j == 7 ? 3.f : -data.uniform(0.f, 1e-4f));
  }
  DeviceBuffer dx(*g_cuda, x), dq(*g_cuda, static_cast<size_t>(m) * k), ds(*g_cuda, m * 4);
  for (const bool fp8 : {false, true}) {
    CAPTURE(fp8);
    const KernelHandle kernel = g_cuda->try_kernel("quant", fp8 ? "quantize_fp8" : "quantize_int8");
    if (!kernel) {
      MESSAGE("quantize_fp8 not available on " << g_cuda->target());
      continue;
    }
    LaunchShape shape;
    shape.grid = {m, 1, 1};
    shape.block = {256, 1, 1};
    g_cuda->launch(kernel, shape, dx.ptr(), dq.ptr(), ds.ptr(), m, k);
    const auto xq = dq.download<uint8_t>(static_cast<size_t>(m) * k);
    const auto xscale = ds.download<float>(m);
    for (uint32_t r = 0; r < m; ++r) {
      CAPTURE(r);
      std::vector<uint8_t> want(k);
      CHECK(xscale[r] == ref::quantize_row(&x[static_cast<size_t>(r) * k], k, fp8, want.data()));
      CHECK(std::memcmp(&xq[static_cast<size_t>(r) * k], want.data(), k) == 0);
    }
  }
}

TEST_CASE("gather_k on the GPU") {
  ref::QuantData data(5);
  const uint32_t k = 2048, groups = 3;
  const std::vector<int32_t> offsets = {0, 7, 7, 12};
  std::vector<int32_t> perm(static_cast<size_t>(groups) * k);
  for (uint32_t g = 0; g < groups; ++g) {
    for (uint32_t j = 0; j < k; ++j) perm[g * k + j] = static_cast<int32_t>(j);
    std::shuffle(perm.begin() + g * k, perm.begin() + (g + 1) * k, std::mt19937(g));
  }
  const uint32_t t = 12;
  const auto x = data.bf16(static_cast<size_t>(t) * k);
  DeviceBuffer dx(*g_cuda, x), dp(*g_cuda, perm), doff(*g_cuda, offsets), dout(*g_cuda, static_cast<size_t>(t) * k * 2);
  LaunchShape shape;
  shape.grid = {t, 1, 1};
  shape.block = {128, 1, 1};
  g_cuda->launch(g_cuda->kernel("quant", "gather_k"), shape, dx.ptr(), dp.ptr(), doff.ptr(), dout.ptr(), k, groups);
  const auto out = dout.download<uint16_t>(static_cast<size_t>(t) * k);
  for (uint32_t r = 0; r < t; ++r) {
    const uint32_t g = r < 7 ? 0 : 2;
    uint32_t differ = 0;
    for (uint32_t j = 0; j < k; ++j) differ += out[r * k + j] != x[r * k + perm[g * k + j]];
    CHECK_MESSAGE(differ == 0, "row " << r);
  }
}

TEST_CASE("moe_align on the GPU, then fp8_grouped_gemv over the experts it activated") {
  ref::QuantData data(23);
  const uint32_t m = 4, e = 16, k = 2, n = 1000, h = 2048;
  std::vector<int32_t> ids = {3, 9, 9, 3, 14, 0, 3, 14};  // experts 0, 3, 9, 14 active
  const auto weights = data.f32(m * k, 0.f, 1.f);
  const auto logits = data.f32(m, -4.f, 4.f);
  const uint32_t shared = 2, s = k + 1, t = m * k;
  DeviceBuffer dids(*g_cuda, ids), dw(*g_cuda, weights), dl(*g_cuda, logits);
  DeviceBuffer doff(*g_cuda, (e + 1) * 4), drows(*g_cuda, t * 4), dslots(*g_cuda, m * s * 4), dcw(*g_cuda, m * s * 4),
      dactive(*g_cuda, (e + 1) * 4);
  LaunchShape one;
  one.grid = {1, 1, 1};
  one.block = {128, 1, 1};
  g_cuda->launch(g_cuda->kernel("moe", "moe_align"), one, dids.ptr(), dw.ptr(), dl.ptr(), doff.ptr(), drows.ptr(),
                 dslots.ptr(), dcw.ptr(), dactive.ptr(), m, e, k, shared);
  const auto want = ref::align_routing(ids, weights, logits, m, e, k, shared);
  CHECK(doff.download<int32_t>(e + 1) == want.offsets);
  CHECK(drows.download<int32_t>(t) == want.rows);
  CHECK(dslots.download<int32_t>(m * s) == want.slots);
  const auto active = dactive.download<int32_t>(e + 1);
  CHECK(std::vector<int32_t>(active.begin(), active.begin() + want.active.size()) == want.active);
  const auto cw = dcw.download<float>(m * s);
  for (size_t i = 0; i < cw.size(); ++i) CHECK(cw[i] == doctest::Approx(want.combine_weights[i]).epsilon(1e-6));

  // The grouped decode reads offsets and active on the device; the host never sees them.
  const auto w = data.weights(QuantKind::fp8, n, h, 128, e);
  const auto x = data.bf16(static_cast<size_t>(t) * h);
  DeviceBuffer dx(*g_cuda, x), dq(*g_cuda, w.words), ds(*g_cuda, w.scales), dy(*g_cuda, static_cast<size_t>(t) * n * 2);
  g_cuda->memset(dy.ptr(), 0xff, static_cast<size_t>(t) * n * 2);
  LaunchShape shape;
  shape.grid = {ceil_div(n, 64), std::min(t, e), 1};
  shape.block = {128, 1, 1};
  g_cuda->launch(g_cuda->kernel("fp8", "fp8_grouped_gemv"), shape, dx.ptr(), dq.ptr(), ds.ptr(), doff.ptr(),
                 dactive.ptr(), dy.ptr(), n, h, std::min(t, e));
  const auto y = dy.download<uint16_t>(static_cast<size_t>(t) * n);
  ref::Comparison c;
  for (uint32_t ex = 0; ex < e; ++ex) {
    const auto begin = static_cast<size_t>(want.offsets[ex]);
    ref::check_bf16_rows(c, x.data() + begin * h, w, ex, static_cast<uint32_t>(want.offsets[ex + 1] - want.offsets[ex]),
                         y.data() + begin * n, begin * n);
  }
  CHECK_MESSAGE(c.ok(), c.report());
  CHECK(c.checked == static_cast<size_t>(t) * n);
}

TEST_CASE("the conformance cases quant/bf16/* and quant/f16/* pass on the CUDA backend") {
  size_t ran = 0;
  for (const conformance::Case& c : conformance::quant_layer_cases()) {
    if (!c.name.starts_with("quant/bf16/") && !c.name.starts_with("quant/f16/")) continue;
    const conformance::CaseResult r = conformance::run_case(*g_cuda, c);
    CAPTURE(c.name);
    CHECK_MESSAGE(r.outcome == conformance::Outcome::passed, r.detail);
    ++ran;
  }
  CHECK(ran >= 12);
}

int main(int argc, char** argv) {
  static Registry registry = gpu_test::discover_cuda();
  g_cuda = gpu_test::cuda_backend_or_explain(registry);
  if (!g_cuda) return 77;
  std::printf("CUDA backend on %s (%s)\n", g_cuda->device_name().c_str(), g_cuda->target().c_str());
  doctest::Context context(argc, argv);
  const int rc = context.run();
  g_cuda.reset();
  return rc;
}
