// SPDX-License-Identifier: MIT OR Apache-2.0
// The quantized families' repacks (sizes, per-matrix offsets, guard bytes, shared layouts), the
// quant module (quantize_int8 bit for bit against the contract's formula, the other quantizers
// against worked-out codes, gather_k) and
// moe/moe_align, on every instruction-set tier this CPU has.
#include "quant_device.hpp"
#include "../support/quantizer_cases.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>

using namespace cpu_test;

namespace {

constexpr Fam kFamilies[] = {Fam::w4a16_zp, Fam::w8a16, Fam::fp8, Fam::w4a8, Fam::w8a8, Fam::bf16, Fam::f16};

// Host copies of a repack's three outputs, each with `guard` bytes past its end.
struct Repacked {
  std::vector<uint8_t> codes, scales, zeros;
};

Repacked repack_with_guards(Backend& b, const QuantProblem& p, size_t guard, uint8_t fill,
                            std::array<uint32_t, 2> extra = {0, 0}) {
  const FamInfo f = info(p.fam);
  const DeviceQ in{b.upload(p.codes), f.w16 ? 0 : b.upload(p.scales), f.zeros ? b.upload(p.zeros) : 0};
  const size_t sizes[] = {p.codes.size(), p.scales.size() * 4, f.zeros ? p.zeros.size() : 0};
  DeviceQ out;
  uint64_t* outs[] = {&out.codes, &out.scales, &out.zeros};
  for (int t = 0; t < 3; ++t)
    if (sizes[t]) *outs[t] = b.upload(std::vector<uint8_t>(sizes[t] + guard, fill));
  REQUIRE_MESSAGE(launch_repack(b, p.fam, in, out, p.n, p.k, p.group, p.count, extra) == METRALE_STATUS_OK,
                  b.last_error());
  CHECK(b.download<uint8_t>(in.codes, p.codes.size()) == p.codes);  // inputs untouched
  if (!f.w16) CHECK(b.download<float>(in.scales, p.scales.size()) == p.scales);
  Repacked r;
  std::vector<uint8_t>* host[] = {&r.codes, &r.scales, &r.zeros};
  for (int t = 0; t < 3; ++t) {
    if (!sizes[t]) continue;
    *host[t] = b.download<uint8_t>(*outs[t], sizes[t] + guard);
    CHECK(std::all_of(host[t]->begin() + static_cast<std::ptrdiff_t>(sizes[t]), host[t]->end(),
                      [&](uint8_t v) { return v == fill; }));
    host[t]->resize(sizes[t]);
  }
  for (uint64_t a : {in.codes, in.scales, in.zeros, out.codes, out.scales, out.zeros})
    if (a) b.free(a);
  return r;
}

// Matrix i of a stack alone.
QuantProblem slice(const QuantProblem& p, uint32_t i) {
  QuantProblem one = p;
  one.count = 1;
  const size_t codes = p.codes.size() / p.count, groups = p.scales.size() / p.count;
  one.codes.assign(p.codes.begin() + static_cast<std::ptrdiff_t>(i * codes),
                   p.codes.begin() + static_cast<std::ptrdiff_t>((i + 1) * codes));
  one.scales.assign(p.scales.begin() + static_cast<std::ptrdiff_t>(i * groups),
                    p.scales.begin() + static_cast<std::ptrdiff_t>((i + 1) * groups));
  if (!p.zeros.empty())
    one.zeros.assign(p.zeros.begin() + static_cast<std::ptrdiff_t>(i * groups),
                     p.zeros.begin() + static_cast<std::ptrdiff_t>((i + 1) * groups));
  return one;
}

template <class T>
std::vector<T> part(const std::vector<T>& v, size_t i, size_t count) {
  const size_t each = v.size() / count;
  return {v.begin() + static_cast<std::ptrdiff_t>(i * each), v.begin() + static_cast<std::ptrdiff_t>((i + 1) * each)};
}

}  // namespace

// The repacks' contract (docs/kernels.md): the canonical byte sizes, matrix i where it was,
// inputs untouched, nothing written past the outputs, extra blocks harmless; the baseline tier
// copies. Modules that declare the same layout (w4a16_zp and w4a8; w8a16 and w8a8; bf16 and f16)
// write the same bytes.
TEST_CASE("quantized families' repacks keep sizes, offsets and guard bytes on every tier") {
  constexpr uint32_t kCount = 3;
  constexpr size_t kGuard = 64;
  uint64_t seed = 5000;
  for (const uint32_t n : {1u, 17u, 100u, 129u})
    for (const uint32_t k : {128u, 384u})
      for (const uint32_t group : {32u, 128u})
        for (const std::string& tier : supported_tiers()) {
          Backend& b = tier_backend(tier);
          std::map<std::string, Repacked> by_layout;
          for (const Fam fam : kFamilies) {
            if ((fam == Fam::fp8 || info(fam).w16) && group != 128) continue;
            const QuantProblem p = make_quant(fam, 0, n, k, group, seed++, std::vector<int32_t>(kCount, 0));
            INFO(info(fam).module << " n=" << n << " k=" << k << " group=" << group << " on " << tier);
            const Repacked r = repack_with_guards(b, p, kGuard, 0xa5);
            CHECK(repack_with_guards(b, p, kGuard, 0x5a, {2, 1}).codes == r.codes);
            if (tier == "baseline") {
              CHECK(r.codes == p.codes);
              CHECK(r.zeros == p.zeros);
            }
            for (uint32_t i = 0; i < kCount; ++i) {
              const Repacked alone = repack_with_guards(b, slice(p, i), 0, 0);
              CHECK(alone.codes == part(r.codes, i, kCount));
              CHECK(alone.scales == part(r.scales, i, kCount));
              CHECK(alone.zeros == part(r.zeros, i, kCount));
            }
            if (fam == Fam::fp8) continue;
            const std::string layout = info(fam).bits == 4 ? "w4zp" : info(fam).bits == 16 ? "w16" : "w8";
            // Same codes, scales and zeros under the sibling module: the same bytes.
            if (by_layout.count(layout) == 0) {
              by_layout[layout] = r;
              QuantProblem sibling = p;
              sibling.fam = fam == Fam::w4a16_zp ? Fam::w4a8 : fam == Fam::w8a16 ? Fam::w8a8 : fam == Fam::bf16 ? Fam::f16 : fam;
              const Repacked s = repack_with_guards(b, sibling, 0, 0);
              CHECK(s.codes == r.codes);
              CHECK(s.scales == r.scales);
              CHECK(s.zeros == r.zeros);
            }
          }
        }
}

namespace {

// docs/kernels.md: a = max |x| (exact), sr = a / 127 in f32, xq = clamp(round half even(x / sr)).
int8_t contract_code(float x, float sr) {
  if (sr == 0.0f) return 0;
  const double v = static_cast<double>(x / sr);  // the f32 division, then exact in double
  const double low = std::floor(v), frac = v - low;
  double r = frac > 0.5 ? low + 1 : frac < 0.5 ? low : (std::fmod(low, 2.0) == 0 ? low : low + 1);
  r = std::min(127.0, std::max(-127.0, r));
  return static_cast<int8_t>(r);
}

}  // namespace

TEST_CASE("quantize_int8 is bit-exact against the contract's formula on every tier") {
  const uint32_t k = 384;
  std::mt19937_64 rng(6000);
  std::vector<std::vector<double>> rows;
  rows.push_back(std::vector<double>(k, 0.0));  // all zero: scale 0, codes 0
  std::vector<double> ties(k, 0.0);             // max 127: sr = 1, the halves are ties
  const double tie_values[] = {127, 2.5, 3.5, -2.5, -0.5, 0.5, 1.5, 126.5, -127, -126.5, 0.25};
  for (size_t i = 0; i < std::size(tie_values); ++i) ties[i * 5] = tie_values[i];
  rows.push_back(ties);
  std::vector<double> tiny(k);  // subnormal bf16: the f32 scale is subnormal too
  for (auto& v : tiny) v = std::ldexp(static_cast<double>(rng() % 64) - 32, -140);
  rows.push_back(tiny);
  for (int r = 0; r < 4; ++r) {
    std::uniform_real_distribution<double> dist(-std::ldexp(1.0, r * 20 - 30), std::ldexp(1.0, r * 20 - 30));
    std::vector<double> row(k);
    for (auto& v : row) v = dist(rng);
    rows.push_back(row);
  }
  const auto m = static_cast<uint32_t>(rows.size());
  std::vector<uint16_t> x;
  for (const auto& row : rows)
    for (double v : row) x.push_back(to_bf16(v));
  std::vector<int8_t> want(x.size());
  std::vector<float> want_scale(m);
  for (uint32_t r = 0; r < m; ++r) {
    float a = 0.0f;
    for (uint32_t t = 0; t < k; ++t) a = std::max(a, static_cast<float>(std::fabs(bf16_value(x[size_t{r} * k + t]))));
    want_scale[r] = a / 127.0f;
    for (uint32_t t = 0; t < k; ++t)
      want[size_t{r} * k + t] = contract_code(static_cast<float>(bf16_value(x[size_t{r} * k + t])), want_scale[r]);
  }
  CHECK(want[size_t{1} * k + 5] == 2);    // 2.5 -> 2
  CHECK(want[size_t{1} * k + 10] == 4);   // 3.5 -> 4
  CHECK(want[size_t{1} * k + 35] == 126); // 126.5 -> 126
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dq = b.alloc(x.size()), ds = b.alloc(size_t{m} * 4);
    Args args;
    args.ptr(dx).ptr(dq).ptr(ds).u32(m).u32(k);
    REQUIRE_MESSAGE(b.launch(b.kernel("quant", "quantize_int8"), {m, 1}, args, 256) == METRALE_STATUS_OK,
                    b.last_error());
    INFO("on " << tier);
    CHECK(b.download<int8_t>(dq, x.size()) == want);
    CHECK(b.download<float>(ds, m) == want_scale);
    for (uint64_t a : {dx, dq, ds}) b.free(a);
  }
}

TEST_CASE("the quantizers write the codes of their arithmetic: f32 or compressed-tensors' bf16, per row or per 128 columns") {
  const uint32_t k = quantizer_cases::kCols, m = quantizer_cases::kRows;
  std::vector<uint16_t> x;
  for (double v : quantizer_cases::rows()) x.push_back(to_bf16(v));
  const std::vector<quantizer_cases::Case> cases = quantizer_cases::cases();
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    for (const quantizer_cases::Case& c : cases) {
      INFO("quant/" << c.kernel << " on " << tier);
      const std::vector<uint8_t> want = c.bytes();
      const uint64_t dx = b.upload(x), dq = b.alloc(x.size()), ds = b.alloc(c.scales.size() * 4);
      Args args;
      args.ptr(dx).ptr(dq).ptr(ds).u32(m).u32(k);
      REQUIRE_MESSAGE(b.launch(b.kernel("quant", c.kernel), {m, 1}, args, 256) == METRALE_STATUS_OK, b.last_error());
      CHECK(b.download<uint8_t>(dq, x.size()) == want);
      CHECK(b.download<float>(ds, c.scales.size()) == c.scales);
      for (uint64_t a : {dx, dq, ds}) b.free(a);
    }
  }
}

TEST_CASE("every tier's quantizers write the baseline's bytes: ties, subnormal quotients, saturation, NaN and infinity rows") {
  const uint32_t k = 384;  // three groups of 128
  std::mt19937_64 rng(6100);
  std::vector<double> x;
  const auto row = [&](auto value) {
    for (uint32_t t = 0; t < k; ++t) x.push_back(value(t));
  };
  // Peak 448 in every group: scale 1 (f32 and bf16), quotients on E4M3 and int8 ties, normal and subnormal.
  const double ties[] = {448, 1.0625, -1.0625, 1.1875, 0.0126953125, -0.005859375, 0.0009765625, 2.5, -3.5, 12.5, 0.5};
  row([&](uint32_t t) { return t % 128 < std::size(ties) ? ties[t % 128] : 0.0; });
  row([&](uint32_t t) { return t == 7 ? std::nan("") : 1.0; });                          // NaN in group 0
  row([&](uint32_t t) { return t == 200 ? -HUGE_VAL : 0.25; });                           // infinity in group 1
  row([](uint32_t) { return 0.0; });                                                      // scale 0 (f32) or 2^-23 (bf16)
  row([&](uint32_t) { return std::ldexp(static_cast<double>(rng() % 64) - 32, -135); });  // subnormal bf16
  for (int r = 0; r < 4; ++r) {
    std::normal_distribution<double> dist(0.0, std::ldexp(1.0, 12 * r - 20));
    row([&](uint32_t t) { return t == 300 ? dist(rng) * 1000 : dist(rng); });  // an outlier in group 2
  }
  const auto m = static_cast<uint32_t>(x.size() / k);
  std::vector<uint16_t> xb;
  for (double v : x) xb.push_back(to_bf16(v));
  for (const char* kernel : {"quantize_int8", "quantize_int8_bf16", "quantize_fp8", "quantize_fp8_bf16", "quantize_fp8_group128",
                             "quantize_fp8_group128_bf16"}) {
    const uint32_t scales = std::string(kernel).ends_with("group128") || std::string(kernel).ends_with("group128_bf16") ? k / 128 : 1;
    const auto run = [&](const std::string& tier) {
      Backend& b = tier_backend(tier);
      const uint64_t dx = b.upload(xb), dq = b.alloc(xb.size()), ds = b.alloc(size_t{m} * scales * 4);
      Args args;
      args.ptr(dx).ptr(dq).ptr(ds).u32(m).u32(k);
      REQUIRE_MESSAGE(b.launch(b.kernel("quant", kernel), {m, 1}, args, 256) == METRALE_STATUS_OK, b.last_error());
      auto out = std::make_pair(b.download<uint8_t>(dq, xb.size()), b.download<float>(ds, size_t{m} * scales));
      for (uint64_t a : {dx, dq, ds}) b.free(a);
      return out;
    };
    const auto [want_codes, want_scales] = run("baseline");
    if (std::string(kernel) == "quantize_fp8") {  // the ties go to the even code
      CHECK(want_codes[1] == 0x38);  // 1.0625 -> 1.0
      CHECK(want_codes[3] == 0x3a);  // 1.1875 -> 1.25
      CHECK(want_codes[4] == 0x06);  // 6.5 * 2^-9 -> subnormal 6
      CHECK(want_codes[5] == 0x83);  // -3 * 2^-9
      CHECK(want_codes[6] == 0x00);  // 2^-10 -> 0
      CHECK(want_codes[9] == 0x54);  // 12.5 -> 12
    }
    for (const std::string& tier : supported_tiers()) {
      INFO("quant/" << kernel << " on " << tier);
      const auto [codes, got_scales] = run(tier);
      CHECK(codes == want_codes);
      CHECK(std::memcmp(got_scales.data(), want_scales.data(), want_scales.size() * 4) == 0);  // NaN scales too
    }
  }
}

TEST_CASE("the static quantizers take each group's stored scale: the dynamic bf16 codes at the same scales, saturation at -128") {
  const uint32_t k = quantizer_cases::kCols, m = quantizer_cases::kRows;
  std::vector<uint16_t> x;
  for (double v : quantizer_cases::rows()) x.push_back(to_bf16(v));
  const std::vector<int32_t> offsets{0, 1, 2};  // one group per row
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    for (const auto& c : quantizer_cases::static_cases()) {
      INFO("quant/" << c.kernel << " on " << tier);
      std::vector<uint8_t> want;
      for (const auto& d : quantizer_cases::cases())
        if (std::string(d.kernel) == c.dynamic) want = d.bytes();
      const auto run = [&](std::vector<float> scales, std::vector<int32_t> offs) {
        const uint64_t dx = b.upload(x), dsc = b.upload(scales), doff = b.upload(offs), dq = b.alloc(x.size()),
                       ds = b.alloc(size_t{m} * 4);
        Args args;
        args.ptr(dx).ptr(dsc).ptr(doff).ptr(dq).ptr(ds).u32(k).u32(static_cast<uint32_t>(offs.size() - 1));
        REQUIRE_MESSAGE(b.launch(b.kernel("quant", c.kernel), {m, 1}, args, 128) == METRALE_STATUS_OK, b.last_error());
        auto out = std::make_pair(b.download<uint8_t>(dq, x.size()), b.download<float>(ds, m));
        for (uint64_t a : {dx, dsc, doff, dq, ds}) b.free(a);
        return out;
      };
      const auto [codes, xscale] = run(c.scales, offsets);
      CHECK(codes == want);
      CHECK(xscale == c.scales);
      if (std::string(c.kernel).starts_with("quantize_int8")) {
        // Both rows in one group under a scale too small for row 0: saturated codes.
        const auto [sat, sat_scale] = run({quantizer_cases::kSaturatingScale}, {0, 2});
        CHECK(sat[0] == 0x7f);
        CHECK(sat[1] == 0x80);
        CHECK(sat_scale == std::vector<float>{quantizer_cases::kSaturatingScale, quantizer_cases::kSaturatingScale});
      }
    }
  }
}

TEST_CASE("gather_k permutes each group's rows by the group's permutation on every tier") {
  const uint32_t k = 384;
  const std::vector<int32_t> offsets{0, 3, 3, 8};  // a group without rows in the middle
  const auto groups = static_cast<uint32_t>(offsets.size() - 1), t = static_cast<uint32_t>(offsets.back());
  std::mt19937_64 rng(7000);
  const auto x = random_bf16(rng, size_t{t} * k, -4, 4);
  std::vector<int32_t> perm(size_t{groups} * k);
  for (uint32_t g = 0; g < groups; ++g) {
    std::iota(perm.begin() + g * k, perm.begin() + (g + 1) * k, 0);
    std::shuffle(perm.begin() + g * k, perm.begin() + (g + 1) * k, rng);
  }
  std::vector<uint16_t> want(x.size());
  for (uint32_t g = 0; g < groups; ++g)
    for (int32_t r = offsets[g]; r < offsets[g + 1]; ++r)
      for (uint32_t j = 0; j < k; ++j) want[size_t(r) * k + j] = x[size_t(r) * k + perm[size_t{g} * k + j]];
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    const uint64_t dx = b.upload(x), dp = b.upload(perm), doff = b.upload(offsets), dout = b.alloc(x.size() * 2);
    Args args;
    args.ptr(dx).ptr(dp).ptr(doff).ptr(dout).u32(k).u32(groups);
    REQUIRE_MESSAGE(b.launch(b.kernel("quant", "gather_k"), {t, 1}, args) == METRALE_STATUS_OK, b.last_error());
    INFO("on " << tier);
    CHECK(b.download<uint16_t>(dout, x.size()) == want);
    for (uint64_t a : {dx, dp, doff, dout}) b.free(a);
  }
}

namespace {

struct Routing {
  std::vector<int32_t> offsets, rows, slots, active;
  std::vector<float> combine;
};

// docs/kernels.md, moe_align: grouped rows by expert, within an expert by token then choice.
Routing contract_routing(const std::vector<int32_t>& ids, const std::vector<float>& weights,
                         const std::vector<float>& logits, uint32_t m, uint32_t e, uint32_t k, uint32_t shared) {
  const uint32_t s = k + (shared ? 1 : 0);
  Routing r;
  r.offsets.assign(e + 1, 0);
  r.slots.assign(size_t{m} * s, 0);
  r.combine.assign(size_t{m} * s, 0.0f);
  r.active = {0};
  for (uint32_t ex = 0; ex < e; ++ex) {
    r.offsets[ex] = static_cast<int32_t>(r.rows.size());
    for (uint32_t t = 0; t < m; ++t)
      for (uint32_t j = 0; j < k; ++j)
        if (ids[t * k + j] == static_cast<int32_t>(ex)) {
          r.slots[t * s + j] = static_cast<int32_t>(r.rows.size());
          r.rows.push_back(static_cast<int32_t>(t));
        }
    if (r.offsets[ex] != static_cast<int32_t>(r.rows.size())) {
      r.active.push_back(static_cast<int32_t>(ex));
      ++r.active[0];
    }
  }
  r.offsets[e] = static_cast<int32_t>(r.rows.size());
  for (uint32_t t = 0; t < m; ++t) {
    for (uint32_t j = 0; j < k; ++j) r.combine[t * s + j] = weights[t * k + j];
    if (!shared) continue;
    r.slots[t * s + k] = static_cast<int32_t>(m * k + t);
    r.combine[t * s + k] = shared == 1 ? 1.0f : static_cast<float>(1.0 / (1.0 + std::exp(-double{logits[t]})));
  }
  return r;
}

}  // namespace

TEST_CASE("moe_align routes on the device as the contract says (experts without rows, shared 0/1/2)") {
  const uint32_t m = 5, e = 9, k = 3;
  std::mt19937_64 rng(8000);
  std::vector<int32_t> ids(size_t{m} * k);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % 6) * (rng() % 2 ? 1 : 0) + 1;  // experts 0, 7, 8 empty
  ids[4] = ids[3];  // one token choosing the same expert twice
  std::vector<float> weights(ids.size()), logits(m);
  for (auto& w : weights) w = static_cast<float>(rng() % 1000) / 1000.0f;
  for (auto& l : logits) l = static_cast<float>(static_cast<int>(rng() % 200) - 100) / 25.0f;
  for (const uint32_t shared : {0u, 1u, 2u})
    for (const std::string& tier : supported_tiers()) {
      INFO("shared=" << shared << " on " << tier);
      const Routing want = contract_routing(ids, weights, logits, m, e, k, shared);
      const uint32_t s = k + (shared ? 1 : 0);
      Backend& b = tier_backend(tier);
      const uint64_t di = b.upload(ids), dw = b.upload(weights), dl = b.upload(logits), doff = b.alloc((e + 1) * 4),
                     drows = b.alloc(m * k * 4), dslots = b.alloc(m * s * 4), dcomb = b.alloc(m * s * 4),
                     dact = b.alloc((e + 1) * 4);
      Args args;
      args.ptr(di).ptr(dw).ptr(dl).ptr(doff).ptr(drows).ptr(dslots).ptr(dcomb).ptr(dact);
      args.u32(m).u32(e).u32(k).u32(shared);
      REQUIRE_MESSAGE(b.launch(b.kernel("moe", "moe_align"), {1, 1}, args) == METRALE_STATUS_OK, b.last_error());
      CHECK(b.download<int32_t>(doff, e + 1) == want.offsets);
      CHECK(b.download<int32_t>(drows, m * k) == want.rows);
      CHECK(b.download<int32_t>(dslots, m * s) == want.slots);
      const auto active = b.download<int32_t>(dact, e + 1);
      CHECK(std::vector<int32_t>(active.begin(), active.begin() + 1 + active[0]) == want.active);
      const auto combine = b.download<float>(dcomb, m * s);
      for (size_t i = 0; i < combine.size(); ++i) CHECK(combine[i] == doctest::Approx(want.combine[i]).epsilon(1e-6));
      for (uint64_t a : {di, dw, dl, doff, drows, dslots, dcomb, dact}) b.free(a);
    }
}

TEST_CASE("moe_align: an expert id out of range fails the launch and writes nothing") {
  const uint32_t m = 2, e = 4, k = 2;
  for (const std::string& tier : supported_tiers()) {
    Backend& b = tier_backend(tier);
    for (const int32_t bad : {4, -1}) {
      const std::vector<int32_t> ids{0, 1, 2, bad};
      const std::vector<float> weights(4, 0.5f);
      const std::vector<int32_t> sentinel(16, 0x5a5a5a5a);
      const uint64_t di = b.upload(ids), dw = b.upload(weights), doff = b.upload(sentinel), drows = b.upload(sentinel),
                     dslots = b.upload(sentinel), dcomb = b.upload(sentinel), dact = b.upload(sentinel);
      Args args;
      args.ptr(di).ptr(dw).ptr(0).ptr(doff).ptr(drows).ptr(dslots).ptr(dcomb).ptr(dact).u32(m).u32(e).u32(k).u32(0);
      CHECK(b.launch(b.kernel("moe", "moe_align"), {1, 1}, args) == METRALE_STATUS_INVALID_ARGUMENT);
      INFO(b.last_error());
      CHECK(b.last_error().find("ids[3] = " + std::to_string(bad) + " is not an expert id 0..3") != std::string::npos);
      for (uint64_t out : {doff, drows, dslots, dcomb, dact}) CHECK(b.download<int32_t>(out, 16) == sentinel);
      for (uint64_t a : {di, dw, doff, drows, dslots, dcomb, dact}) b.free(a);
    }
  }
}
