// SPDX-License-Identifier: MIT OR Apache-2.0
// Conformance of every CUDA kernel on a real GPU against the double-precision definitions of
// tests/cuda/kernel_reference.hpp (the same checks the host emulation passes): the W4A16 family
// at ragged and model-sized shapes, the activations and the MoE kernels. Suite 'gpu'; exits 77
// with one line when no CUDA device is usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gpu_support.hpp"
#include "kernel_reference.hpp"

#include <cstring>

namespace ref = metrale::reference;
using namespace metrale;
using metrale::gpu_test::DeviceBuffer;

namespace {

std::shared_ptr<Backend> g_cuda;

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

struct W4A16Kernel {
  const char* module;
  const char* name;
  uint32_t tile_n, tile_m, threads;
  uint32_t max_m;  // rows the kernel takes (GEMV tiers), 0: any
};

const W4A16Kernel kKernels[] = {
    {"w4a16", "w4a16_gemv", 64, 1, 128, 1},
    {"w4a16", "w4a16_gemv_b8", 64, 8, 128, 8},
    {"w4a16", "w4a16_gemm_t", 128, 64, 128, 0},
    {"w4a16", "w4a16_gemm_t_p3", 128, 64, 128, 0},
    {"w4a16", "w4a16_gemm_t_k64", 128, 64, 128, 0},
    {"w4a16", "w4a16_gemm_t_k64_p3", 128, 64, 128, 0},
    {"w4a16", "w4a16_gemm_t_k64_n64_p3", 64, 64, 128, 0},
    {"w4a16_v2", "w4a16_gemm_t_m128_v2", 128, 128, 256, 0},
    {"w4a16_v3", "w4a16_gemm_t_m128_v3", 128, 128, 256, 0},
};

}  // namespace

TEST_CASE("W4A16 kernels match the reference on the GPU") {
  struct Shape {
    uint32_t m, n, k;
  };
  const Shape shapes[] = {{1, 130, 256}, {8, 300, 1152}, {67, 300, 384}, {130, 72, 128},
                          {1, 4096, 4096}, {5, 1000, 8192}, {200, 700, 2048}};
  for (const auto& kernel : kKernels) {
    const KernelHandle handle = g_cuda->try_kernel(kernel.module, kernel.name);
    if (!handle) {
      MESSAGE(kernel.name << " not available on " << g_cuda->target() << " (see the audit)");
      continue;
    }
    for (const auto& s : shapes) {
      if (kernel.max_m != 0 && s.m > kernel.max_m) continue;
      CAPTURE(kernel.name);
      CAPTURE(s.m);
      CAPTURE(s.n);
      CAPTURE(s.k);
      ref::Data data(s.m * 31 + s.n * 7 + s.k);
      const auto x = data.bf16(static_cast<size_t>(s.m) * s.k);
      const auto w = data.w4a16(s.n, s.k);
      DeviceBuffer dx(*g_cuda, x), dq(*g_cuda, w.qweight), ds(*g_cuda, w.scales);
      DeviceBuffer dy(*g_cuda, static_cast<size_t>(s.m) * s.n * 2);
      g_cuda->memset(dy.ptr(), 0xff, static_cast<size_t>(s.m) * s.n * 2);  // NaN until written
      LaunchShape shape;
      shape.grid = {ceil_div(s.n, kernel.tile_n), kernel.max_m != 0 ? 1 : ceil_div(s.m, kernel.tile_m), 1};
      shape.block = {kernel.threads, 1, 1};
      g_cuda->launch(handle, shape, dx.ptr(), dq.ptr(), ds.ptr(), dy.ptr(), s.m, s.n, s.k);
      const auto y = dy.download<uint16_t>(static_cast<size_t>(s.m) * s.n);
      const auto c = ref::check_w4a16(x, w, s.m, y);
      CHECK_MESSAGE(c.ok(), c.report());
    }
  }
}

TEST_CASE("activations on the GPU") {
  ref::Data data(5);
  const uint32_t m = 7, i = 5000;
  const auto gate_up = data.bf16(static_cast<size_t>(m) * 2 * i, -6.f, 6.f);
  DeviceBuffer din(*g_cuda, gate_up), dout(*g_cuda, static_cast<size_t>(m) * i * 2);
  LaunchShape shape;
  shape.grid = {ceil_div(i, 1024), m, 1};
  shape.block = {256, 1, 1};
  g_cuda->launch(g_cuda->kernel("act", "silu_mul"), shape, din.ptr(), dout.ptr(), m, i);
  const auto silu = ref::check_act(gate_up, m, i, dout.download<uint16_t>(static_cast<size_t>(m) * i), ref::silu);
  CHECK_MESSAGE(silu.ok(), silu.report());
  g_cuda->launch(g_cuda->kernel("act", "gelu_mul"), shape, din.ptr(), dout.ptr(), m, i);
  const auto gelu = ref::check_act(gate_up, m, i, dout.download<uint16_t>(static_cast<size_t>(m) * i), ref::gelu_tanh);
  CHECK_MESSAGE(gelu.ok(), gelu.report());
}

TEST_CASE("MoE kernels on the GPU: router and top-k") {
  ref::Data data(21);
  const uint32_t m = 6, e = 96, h = 1024, k = 4;
  const auto x = data.bf16(static_cast<size_t>(m) * h);
  const auto w = data.f32(static_cast<size_t>(e) * h, -0.1f, 0.1f);
  DeviceBuffer dx(*g_cuda, x), dw(*g_cuda, w), dlogits(*g_cuda, static_cast<size_t>(m) * e * 4);
  LaunchShape router;
  router.grid = {ceil_div(e, 64), m, 1};
  router.block = {128, 1, 1};
  g_cuda->launch(g_cuda->kernel("moe", "router_gemm"), router, dx.ptr(), dw.ptr(), dlogits.ptr(), m, e, h);
  auto logits = dlogits.download<float>(static_cast<size_t>(m) * e);
  const auto rc = ref::check_router(x, w, m, e, h, logits);
  CHECK_MESSAGE(rc.ok(), rc.report());

  for (const uint32_t j : {3u, 50u, 77u}) logits[e + j] = 9.f;  // row 1: a tie at the top
  DeviceBuffer dl2(*g_cuda, logits), dids(*g_cuda, static_cast<size_t>(m) * k * 4), dweights(*g_cuda, static_cast<size_t>(m) * k * 4);
  LaunchShape topk;
  topk.grid = {m, 1, 1};
  topk.block = {128, 1, 1};
  g_cuda->launch(g_cuda->kernel("moe", "topk_softmax"), topk, dl2.ptr(), dids.ptr(), dweights.ptr(), m, e, k, uint32_t{1});
  const auto ids = dids.download<int32_t>(static_cast<size_t>(m) * k);
  const auto weights = dweights.download<float>(static_cast<size_t>(m) * k);
  for (uint32_t r = 0; r < m; ++r) {
    const auto want = ref::topk_row(&logits[r * e], e, k, true);
    for (uint32_t j = 0; j < k; ++j) {
      CHECK(ids[r * k + j] == want[j].first);
      CHECK(weights[r * k + j] == doctest::Approx(want[j].second).epsilon(1e-5));
    }
  }
}

TEST_CASE("MoE kernels on the GPU: grouped GEMM, gather and combine") {
  ref::Data data(22);
  const uint32_t h = 1024, n = 384;
  // Grouped expert GEMM over rows grouped by expert, one expert empty.
  const uint32_t experts = 4;
  const std::vector<int32_t> offsets = {0, 20, 20, 21, 40};
  const uint32_t t = 40;
  const auto xg = data.bf16(static_cast<size_t>(t) * h);
  std::vector<ref::W4A16Weight> ew;
  std::vector<uint32_t> qweight;
  std::vector<uint16_t> scales;
  for (uint32_t ex = 0; ex < experts; ++ex) {
    ew.push_back(data.w4a16(n, h));
    qweight.insert(qweight.end(), ew.back().qweight.begin(), ew.back().qweight.end());
    scales.insert(scales.end(), ew.back().scales.begin(), ew.back().scales.end());
  }
  DeviceBuffer dxg(*g_cuda, xg), dq(*g_cuda, qweight), ds(*g_cuda, scales), doff(*g_cuda, offsets);
  DeviceBuffer dy(*g_cuda, static_cast<size_t>(t) * n * 2);
  LaunchShape grouped;
  grouped.grid = {ceil_div(n, 128), experts, 1};
  grouped.block = {128, 1, 1};
  g_cuda->launch(g_cuda->kernel("moe", "w4a16_grouped_gemm"), grouped, dxg.ptr(), dq.ptr(), ds.ptr(), doff.ptr(),
                 dy.ptr(), n, h, experts);
  const auto y = dy.download<uint16_t>(static_cast<size_t>(t) * n);
  for (uint32_t ex = 0; ex < experts; ++ex) {
    const auto rows = static_cast<uint32_t>(offsets[ex + 1] - offsets[ex]);
    if (rows == 0) continue;
    const std::vector<uint16_t> xe(xg.begin() + offsets[ex] * h, xg.begin() + offsets[ex + 1] * h);
    const std::vector<uint16_t> ye(y.begin() + offsets[ex] * n, y.begin() + offsets[ex + 1] * n);
    const auto c = ref::check_w4a16(xe, ew[ex], rows, ye);
    CHECK_MESSAGE(c.ok(), "expert " << ex << ": " << c.report());
  }

  // Gather then combine with per-slot weights.
  const std::vector<int32_t> rows = {5, 0, 39, 12};
  DeviceBuffer drows(*g_cuda, rows), dgathered(*g_cuda, rows.size() * h * 2);
  LaunchShape gather;
  gather.grid = {static_cast<uint32_t>(rows.size()), 1, 1};
  gather.block = {256, 1, 1};
  g_cuda->launch(g_cuda->kernel("moe", "moe_gather"), gather, dxg.ptr(), drows.ptr(), dgathered.ptr(),
                 static_cast<uint32_t>(rows.size()), h);
  const auto gathered = dgathered.download<uint16_t>(rows.size() * h);
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(std::memcmp(&gathered[i * h], &xg[static_cast<size_t>(rows[i]) * h], h * 2) == 0);
  }
  const uint32_t cm = 3, ck = 2;
  const std::vector<int32_t> slots = {0, 1, 2, 3, 39, 7};
  const auto cw = data.f32(cm * ck, 0.f, 1.f);
  DeviceBuffer dslots(*g_cuda, slots), dcw(*g_cuda, cw), dout(*g_cuda, static_cast<size_t>(cm) * h * 2);
  LaunchShape combine;
  combine.grid = {cm, 1, 1};
  combine.block = {256, 1, 1};
  g_cuda->launch(g_cuda->kernel("moe", "moe_combine"), combine, dxg.ptr(), dslots.ptr(), dcw.ptr(), dout.ptr(), cm, ck, h);
  const auto out = dout.download<uint16_t>(static_cast<size_t>(cm) * h);
  ref::Comparison cc;
  for (uint32_t r = 0; r < cm; ++r) {
    for (uint32_t j = 0; j < h; ++j) {
      double want = 0, magnitude = 0;
      for (uint32_t s = 0; s < ck; ++s) {
        const double term = cw[r * ck + s] * ref::bf16_to_float(xg[static_cast<size_t>(slots[r * ck + s]) * h + j]);
        want += term;
        magnitude += std::abs(term);
      }
      cc.add(r * h + j, ref::bf16_to_float(out[r * h + j]), want, ref::tolerance(want, magnitude, ck));
    }
  }
  CHECK_MESSAGE(cc.ok(), cc.report());
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
