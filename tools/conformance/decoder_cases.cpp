// SPDX-License-Identifier: MIT OR Apache-2.0
// Conformance cases of the decoder's small kernels (docs/kernels.md, modules norm, rope, embed,
// sample): each launched directly on synthetic bf16 data against the double-precision reference
// with the contract's rounding points (reference/decoder_reference.hpp); sample/argmax's ids
// against the host's argmax (engine/sampling.hpp), which the engine falls back to. The rope cases take inv_freq and
// the attention scaling from real configs' rope settings through layers/attention/rope.hpp.
#include "conformance/conformance.hpp"

#include "attention/rope.hpp"
#include "core/device_buffer.hpp"
#include "core/numeric.hpp"
#include "engine/sampling.hpp"
#include "reference/decoder_reference.hpp"

#include <metrale/catalogue_signatures.h>
#include <metrale/status.hpp>

#include <algorithm>

namespace metrale::conformance {

using namespace metrale::layers;

namespace {

using catalogue::signature;
constexpr auto kRmsNormSig = signature("norm", "rms_norm");
constexpr auto kRmsNormResidualSig = signature("norm", "rms_norm_residual");
constexpr auto kAddSig = signature("norm", "add");
constexpr auto kBiasAddSig = signature("norm", "bias_add");
constexpr auto kRopeSig = signature("rope", "rope");
constexpr auto kQkNormRopeSig = signature("rope", "qk_norm_rope");
constexpr auto kEmbeddingSig = signature("embed", "embedding");
constexpr auto kArgmaxSig = signature("sample", "argmax");
constexpr float kEps = 1e-6f;

// The rope settings of the cases: Qwen3's (theta 1e6, YaRN for 128K as its model card sets it)
// and Llama 3.1's.
const nlohmann::json& rope_config(const std::string& name) {
  static const nlohmann::json qwen3{{"head_dim", 128}, {"rope_theta", 1000000.0}, {"max_position_embeddings", 40960}};
  static const nlohmann::json qwen3_yarn{{"head_dim", 128}, {"rope_theta", 1000000.0}, {"max_position_embeddings", 131072},
                                         {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                           {"original_max_position_embeddings", 32768}}}};
  static const nlohmann::json llama3{{"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 500000.0},
                                     {"max_position_embeddings", 131072},
                                     {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                                       {"high_freq_factor", 4.0},
                                                       {"original_max_position_embeddings", 8192}}}};
  static const nlohmann::json small{{"head_dim", 64}, {"rope_theta", 10000.0}};
  if (name == "qwen3") return qwen3;
  if (name == "qwen3_yarn") return qwen3_yarn;
  if (name == "llama3") return llama3;
  return small;
}

Case decoder_case(const std::string& name, const char* module, const char* kernel, uint32_t m, uint32_t n, uint32_t k = 0,
                  uint32_t kv_heads = 0, std::string variant = {}) {
  Case c;
  c.kind = CaseKind::decoder;
  c.name = name;
  c.module = module;
  c.kernel = kernel;
  c.m = m;
  c.n = n;
  c.k = k;
  c.kv_heads = kv_heads;
  c.variant = std::move(variant);
  return c;
}

// The case's synthetic data: one stream per shape.
uint64_t stream_of(const Case& c) { return (uint64_t{c.m} << 40) ^ (uint64_t{c.n} << 8) ^ c.k; }

LaunchShape rows_grid(uint32_t rows) {
  LaunchShape shape;
  shape.grid = {rows, 1, 1};
  shape.block = {128, 1, 1};
  return shape;
}

// Rows of very different scales: RMSNorm's output must not depend on it.
std::vector<uint16_t> scaled_rows(uint32_t m, uint32_t h, uint64_t stream) {
  std::vector<uint16_t> x = synthetic_activations(m, h, stream);
  for (uint32_t r = 0; r < m; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 7) * 3 - 9);
    for (uint32_t j = 0; j < h; ++j) x[size_t{r} * h + j] = f32_to_bf16(bf16_to_f32(x[size_t{r} * h + j]) * scale);
  }
  return x;
}

// Weights around 1 as trained norms' are, a few negative.
std::vector<uint16_t> norm_weight(uint32_t h, uint64_t stream) {
  std::vector<uint16_t> w = synthetic_activations(1, h, stream);
  for (uint16_t& v : w) v = f32_to_bf16(1.0f + 0.75f * bf16_to_f32(v));
  return w;
}

CaseResult checked(CaseResult r, const std::vector<uint16_t>& got, const ReferenceOutput& ref,
                   const std::vector<uint16_t>* guard_after = nullptr) {
  if (guard_after && !std::all_of(guard_after->begin(), guard_after->end(), [](uint16_t v) { return v == kCanary; })) {
    r.outcome = Outcome::failed;
    r.detail = "wrote past the end of the output";
    return r;
  }
  const Comparison cmp = compare_to_reference(got, ref);
  r.outcome = cmp.passed() ? Outcome::passed : Outcome::failed;
  r.detail = cmp.summary();
  r.comparison = cmp;
  return r;
}

// The output buffer: `count` elements of canary and one guard row of `row` more.
DeviceBuffer canary_buffer(Backend& b, size_t count, size_t row) {
  DeviceBuffer out(b, (count + row) * 2);
  const std::vector<uint16_t> poison(count + row, kCanary);
  out.upload(std::span<const uint16_t>(poison));
  return out;
}

std::vector<uint16_t> split_guard(std::vector<uint16_t>& all, size_t count) {
  std::vector<uint16_t> guard(all.begin() + static_cast<std::ptrdiff_t>(count), all.end());
  all.resize(count);
  return guard;
}

CaseResult run_rms_norm(Backend& b, const Case& c, CaseResult r) {
  const uint32_t m = c.m, h = c.n;
  const size_t count = size_t{m} * h;
  const std::vector<uint16_t> x = scaled_rows(m, h, stream_of(c)), w = norm_weight(h, stream_of(c) + 1);
  const bool in_place = c.variant == "in_place";
  DeviceBuffer dx(b, count * 2), dw(b, h * 2);
  dx.upload(std::span<const uint16_t>(x));
  dw.upload(std::span<const uint16_t>(w));
  DeviceBuffer dy = canary_buffer(b, count, h);
  const DevicePtr y = in_place ? dx.ptr() : dy.ptr();
  b.launch(b.kernel("norm", "rms_norm", kRmsNormSig), rows_grid(m), dx.ptr(), dw.ptr(), y, m, h, kEps);
  b.synchronize();
  std::vector<uint16_t> all = in_place ? dx.download<uint16_t>(count) : dy.download<uint16_t>(count + h);
  const std::vector<uint16_t> guard = in_place ? std::vector<uint16_t>{} : split_guard(all, count);
  return checked(std::move(r), all, reference_rms_norm(x, w, m, h, kEps), &guard);
}

CaseResult run_rms_norm_residual(Backend& b, const Case& c, CaseResult r) {
  const uint32_t m = c.m, h = c.n;
  const size_t count = size_t{m} * h;
  const std::vector<uint16_t> x = scaled_rows(m, h, stream_of(c)), residual = scaled_rows(m, h, stream_of(c) + 2);
  const std::vector<uint16_t> w = norm_weight(h, stream_of(c) + 1);
  const bool in_place = c.variant == "in_place";  // residual_out over residual, y over x: as a decoder runs it
  DeviceBuffer dx(b, count * 2), dr(b, count * 2), dw(b, h * 2);
  dx.upload(std::span<const uint16_t>(x));
  dr.upload(std::span<const uint16_t>(residual));
  dw.upload(std::span<const uint16_t>(w));
  DeviceBuffer dy = canary_buffer(b, count, h), dsum = canary_buffer(b, count, h);
  const DevicePtr y = in_place ? dx.ptr() : dy.ptr(), sum = in_place ? dr.ptr() : dsum.ptr();
  b.launch(b.kernel("norm", "rms_norm_residual", kRmsNormResidualSig), rows_grid(m), dx.ptr(), dr.ptr(), dw.ptr(), y, sum,
           m, h, kEps);
  b.synchronize();
  std::vector<uint16_t> got_y = in_place ? dx.download<uint16_t>(count) : dy.download<uint16_t>(count + h);
  std::vector<uint16_t> got_sum = in_place ? dr.download<uint16_t>(count) : dsum.download<uint16_t>(count + h);
  std::vector<uint16_t> guard = in_place ? std::vector<uint16_t>{} : split_guard(got_y, count);
  if (!in_place) {
    const std::vector<uint16_t> more = split_guard(got_sum, count);
    guard.insert(guard.end(), more.begin(), more.end());
  }
  const ReferenceResidualNorm ref = reference_rms_norm_residual(x, residual, w, m, h, kEps);
  CaseResult sum_result = checked(r, got_sum, ref.residual_out, &guard);
  if (sum_result.outcome != Outcome::passed) {
    sum_result.detail = "residual_out: " + sum_result.detail;
    return sum_result;
  }
  CaseResult out = checked(std::move(r), got_y, ref.y);
  out.detail = "residual_out exact; y: " + out.detail;
  return out;
}

// norm/add in place over the residual stream, as the layers' fallback for rms_norm_residual runs it.
CaseResult run_add(Backend& b, const Case& c, CaseResult r) {
  const uint32_t m = c.m, h = c.n;
  const size_t count = size_t{m} * h;
  const std::vector<uint16_t> x = scaled_rows(m, h, stream_of(c)), residual = scaled_rows(m, h, stream_of(c) + 2);
  DeviceBuffer dx(b, count * 2), dr = canary_buffer(b, count, h);
  dx.upload(std::span<const uint16_t>(x));
  dr.upload(std::span<const uint16_t>(residual));
  b.launch(b.kernel("norm", "add", kAddSig), rows_grid(m), dx.ptr(), dr.ptr(), dr.ptr(), m, h);
  b.synchronize();
  std::vector<uint16_t> got = dr.download<uint16_t>(count + h);
  const std::vector<uint16_t> guard = split_guard(got, count);
  const std::vector<uint16_t> w(h, f32_to_bf16(1.0f));
  return checked(std::move(r), got, reference_rms_norm_residual(x, residual, w, m, h, kEps).residual_out, &guard);
}

// norm/bias_add: rows of scales 2^-9..2^9 against one bias row of unit scale, so sums round at
// every exponent gap; in place over x (as the layers run it) or into a separate output.
CaseResult run_bias_add(Backend& b, const Case& c, CaseResult r) {
  const uint32_t m = c.m, n = c.n;
  const size_t count = size_t{m} * n;
  const std::vector<uint16_t> x = scaled_rows(m, n, stream_of(c)), bias = synthetic_activations(1, n, stream_of(c) + 3);
  const bool in_place = c.variant == "in_place";
  DeviceBuffer dx = canary_buffer(b, count, n), dbias(b, size_t{n} * 2), dout = canary_buffer(b, count, n);
  dx.upload(std::span<const uint16_t>(x));
  dbias.upload(std::span<const uint16_t>(bias));
  const DevicePtr out = in_place ? dx.ptr() : dout.ptr();
  b.launch(b.kernel("norm", "bias_add", kBiasAddSig), rows_grid(m), dx.ptr(), dbias.ptr(), out, m, n);
  b.synchronize();
  std::vector<uint16_t> got = (in_place ? dx : dout).download<uint16_t>(count + n);
  const std::vector<uint16_t> guard = split_guard(got, count);
  return checked(std::move(r), got, reference_bias_add(x, bias, m, n), &guard);
}

// rope, and qk_norm_rope: Qwen3's q/k norm fused before it, on head rows of very different
// scales with weights around 1.
CaseResult run_rotary(Backend& b, const Case& c, CaseResult r) {
  const bool norm = c.kernel == "qk_norm_rope";
  const uint32_t t = c.m, head_dim = c.n, q_heads = c.k, kv_heads = c.kv_heads;
  const RopeParameters rope = rope_parameters(parse_rope_config(rope_config(c.variant), "conformance rope " + c.variant));
  if (rope.inv_freq.size() != head_dim / 2) throw Error(Status::internal, "conformance " + c.name + ": head_dim differs");
  // Positions from the first token to past the original context (YaRN's and Llama 3.1's range).
  std::vector<int32_t> positions(t);
  constexpr int32_t kPositions[] = {0, 1, 2, 17, 511, 4095, 8191, 8192, 32767, 40959, 131071};
  for (uint32_t i = 0; i < t; ++i) positions[i] = kPositions[i % std::size(kPositions)] + static_cast<int32_t>(i / 11);
  const auto heads = [&](uint32_t rows, uint64_t stream) {
    return norm ? scaled_rows(rows, head_dim, stream) : synthetic_activations(rows, head_dim, stream);
  };
  const std::vector<uint16_t> q = heads(t * q_heads, stream_of(c)), k = heads(t * kv_heads, stream_of(c) + 1);
  const std::vector<uint16_t> q_weight = norm_weight(head_dim, stream_of(c) + 2), k_weight = norm_weight(head_dim, stream_of(c) + 3);
  DeviceBuffer dq(b, q.size() * 2 + head_dim * 2), dk(b, k.size() * 2 + head_dim * 2), dp(b, t * 4),
      df(b, rope.inv_freq.size() * 4), dqw(b, head_dim * 2), dkw(b, head_dim * 2);
  std::vector<uint16_t> q_guarded = q, k_guarded = k;
  q_guarded.resize(q.size() + head_dim, kCanary);
  k_guarded.resize(k.size() + head_dim, kCanary);
  dq.upload(std::span<const uint16_t>(q_guarded));
  dk.upload(std::span<const uint16_t>(k_guarded));
  dp.upload(std::span<const int32_t>(positions));
  df.upload(std::span<const float>(rope.inv_freq));
  dqw.upload(std::span<const uint16_t>(q_weight));
  dkw.upload(std::span<const uint16_t>(k_weight));
  if (norm)
    b.launch(b.kernel("rope", "qk_norm_rope", kQkNormRopeSig), rows_grid(t), dq.ptr(), dk.ptr(), dqw.ptr(), dkw.ptr(),
             dp.ptr(), df.ptr(), t, q_heads, kv_heads, head_dim, kEps, rope.attention_scaling);
  else
    b.launch(b.kernel("rope", "rope", kRopeSig), rows_grid(t), dq.ptr(), dk.ptr(), dp.ptr(), df.ptr(), t, q_heads, kv_heads,
             head_dim, rope.attention_scaling);
  b.synchronize();
  const auto reference = [&](const std::vector<uint16_t>& x, const std::vector<uint16_t>& weight, uint32_t count) {
    return norm ? reference_qk_norm_rope(x, weight, positions, rope.inv_freq, t, count, head_dim, kEps, rope.attention_scaling)
                : reference_rope(x, positions, rope.inv_freq, t, count, head_dim, rope.attention_scaling);
  };
  std::vector<uint16_t> got_q = dq.download<uint16_t>(q_guarded.size()), got_k = dk.download<uint16_t>(k_guarded.size());
  std::vector<uint16_t> guard = split_guard(got_q, q.size());
  const std::vector<uint16_t> more = split_guard(got_k, k.size());
  guard.insert(guard.end(), more.begin(), more.end());
  CaseResult q_result = checked(r, got_q, reference(q, q_weight, q_heads), &guard);
  if (q_result.outcome != Outcome::passed) {
    q_result.detail = "q: " + q_result.detail;
    return q_result;
  }
  CaseResult out = checked(std::move(r), got_k, reference(k, k_weight, kv_heads));
  out.detail = "q and k; k: " + out.detail;
  return out;
}

CaseResult run_embedding(Backend& b, const Case& c, CaseResult r) {
  const uint32_t t = c.m, h = c.n, vocab = c.k;
  // Both ends of the table and rows between; the last id is out of range in that variant.
  std::vector<int32_t> ids(t);
  for (uint32_t i = 0; i < t; ++i) ids[i] = static_cast<int32_t>((i * 7919u + (i % 3 == 0 ? vocab - 1 : 0)) % vocab);
  ids[0] = 0;
  if (t > 1) ids[t - 1] = static_cast<int32_t>(vocab - 1);
  const bool out_of_range = c.variant == "out_of_range";
  if (out_of_range) ids[t - 1] = static_cast<int32_t>(vocab);
  // Only the selected rows carry values; every other row is the canary NaN, so gathering a wrong
  // row fails, and a real vocabulary costs one fill instead of a synthetic value per entry.
  std::vector<uint16_t> table(size_t{vocab} * h, kCanary);
  const std::vector<uint16_t> rows = synthetic_activations(t, h, stream_of(c));
  for (uint32_t i = 0; i < t; ++i)
    if (static_cast<uint32_t>(ids[i]) < vocab) std::copy_n(&rows[size_t{i} * h], h, &table[size_t(ids[i]) * h]);
  DeviceBuffer dt(b, table.size() * 2), di(b, t * 4);
  dt.upload(std::span<const uint16_t>(table));
  di.upload(std::span<const int32_t>(ids));
  DeviceBuffer dout = canary_buffer(b, size_t{t} * h, h);
  const KernelHandle kernel = b.kernel("embed", "embedding", kEmbeddingSig);
  if (out_of_range) {
    try {
      b.launch(kernel, rows_grid(t), dt.ptr(), di.ptr(), dout.ptr(), t, h, vocab);
      b.synchronize();
    } catch (const Error& e) {
      r.detail = std::string("refused: ") + e.what();
      std::vector<uint16_t> after;
      try {
        after = dout.download<uint16_t>(size_t{t} * h + h);
      } catch (const Error&) {
        // A GPU kernel refuses by trapping, after which the context's memory cannot be read.
        r.outcome = Outcome::passed;
        r.detail += "; the output is unreadable after the fault";
        return r;
      }
      const bool untouched = std::all_of(after.begin(), after.end(), [](uint16_t v) { return v == kCanary; });
      r.outcome = untouched ? Outcome::passed : Outcome::failed;
      if (!untouched) r.detail = "wrote out before failing; " + r.detail;
      return r;
    }
    r.outcome = Outcome::failed;
    r.detail = "ids[" + std::to_string(t - 1) + "] = vocab was accepted: the launch must fail";
    return r;
  }
  b.launch(kernel, rows_grid(t), dt.ptr(), di.ptr(), dout.ptr(), t, h, vocab);
  b.synchronize();
  std::vector<uint16_t> got = dout.download<uint16_t>(size_t{t} * h + h);
  const std::vector<uint16_t> guard = split_guard(got, size_t{t} * h);
  ReferenceOutput ref;
  ref.m = t;
  ref.n = h;
  ref.row_excluded.assign(t, 0);
  ref.bound.assign(size_t{t} * h, 0.0);
  for (uint32_t i = 0; i < t; ++i)
    for (uint32_t j = 0; j < h; ++j) ref.value.push_back(bf16_to_f32(table[size_t(ids[i]) * h + j]));
  return checked(std::move(r), got, ref, &guard);
}

// Logits with the contract's edges, row by row: the maximum at the first index, at the last, tied
// at three places (the lowest wins), +inf twice, a NaN (it wins, as in torch.argmax), a random row
// (at a real vocabulary its largest bf16 values often tie).
std::vector<uint16_t> argmax_logits(const Case& c) {
  const uint32_t vocab = c.n;
  std::vector<uint16_t> logits = synthetic_activations(c.m, vocab, stream_of(c));
  const uint16_t top = f32_to_bf16(64.0f), inf = 0x7f80, nan = 0x7fc0;
  for (uint32_t r = 0; r < c.m; ++r) {
    uint16_t* x = logits.data() + size_t{r} * vocab;
    switch (r % 6) {
      case 0: x[0] = top; break;
      case 1: x[vocab - 1] = top; break;
      case 2: x[vocab / 3] = x[vocab / 2] = x[vocab - 1] = top; break;
      case 3: x[vocab / 2] = x[vocab - 1] = inf; break;
      case 4:
        x[1] = inf;
        x[vocab / 4] = nan;
        break;
      default: break;
    }
  }
  return logits;
}

// sample/argmax: every id must be the host's, and nothing written past the m-th.
CaseResult run_argmax(Backend& b, const Case& c, CaseResult r) {
  constexpr int32_t kIdCanary = -0x5a5a5a5b;
  const uint32_t m = c.m, vocab = c.n;
  const std::vector<uint16_t> logits = argmax_logits(c);
  DeviceBuffer dl(b, logits.size() * 2), di(b, (size_t{m} + 1) * 4);
  dl.upload(std::span<const uint16_t>(logits));
  di.upload(std::span<const int32_t>(std::vector<int32_t>(size_t{m} + 1, kIdCanary)));
  b.launch(b.kernel("sample", "argmax", kArgmaxSig), rows_grid(m), dl.ptr(), di.ptr(), m, vocab);
  b.synchronize();
  const std::vector<int32_t> got = di.download<int32_t>(size_t{m} + 1);
  r.outcome = Outcome::failed;
  if (got[m] != kIdCanary) {
    r.detail = "wrote past the end of ids";
    return r;
  }
  std::vector<float> row(vocab);
  for (uint32_t i = 0; i < m; ++i) {
    bf16_to_f32(std::span<const uint16_t>(logits).subspan(size_t{i} * vocab, vocab), row);
    const int32_t want = argmax(row);
    if (got[i] != want) {
      r.detail = "row " + std::to_string(i) + ": id " + std::to_string(got[i]) + ", the host's argmax is " +
                 std::to_string(want) + " (value " + std::to_string(row[static_cast<size_t>(want)]) + ")";
      return r;
    }
  }
  r.outcome = Outcome::passed;
  r.detail = std::to_string(m) + " ids equal the host's argmax";
  return r;
}

}  // namespace

std::vector<Case> decoder_cases() {
  std::vector<Case> out;
  // RMSNorm: one row, an H that is no multiple of 16, Qwen3-30B-A3B's H over many rows, in place.
  for (auto [m, h] : {std::pair{1u, 256u}, {7u, 1000u}, {64u, 2048u}, {3u, 4096u}})
    out.push_back(decoder_case("norm/rms_norm/m" + std::to_string(m) + "_h" + std::to_string(h), "norm", "rms_norm", m, h));
  out.push_back(decoder_case("norm/rms_norm/in_place_m5_h512", "norm", "rms_norm", 5, 512, 0, 0, "in_place"));
  // Qwen3's q_norm / k_norm: rms_norm over head_dim, one row per (token, head).
  out.push_back(decoder_case("norm/qk_norm/t9_heads32_d128", "norm", "rms_norm", 9 * 32, 128));
  for (auto [m, h] : {std::pair{1u, 256u}, {9u, 1000u}, {64u, 2048u}})
    out.push_back(decoder_case("norm/rms_norm_residual/m" + std::to_string(m) + "_h" + std::to_string(h), "norm",
                               "rms_norm_residual", m, h));
  out.push_back(decoder_case("norm/rms_norm_residual/in_place_m5_h512", "norm", "rms_norm_residual", 5, 512, 0, 0, "in_place"));
  out.push_back(decoder_case("norm/add/m9_h1000", "norm", "add", 9, 1000));
  // A Linear bias: Qwen2-7B's q projection (n = 3584) over many rows; in place, an n no multiple of
  // the block.
  out.push_back(decoder_case("norm/bias_add/m33_n3584", "norm", "bias_add", 33, 3584));
  out.push_back(decoder_case("norm/bias_add/in_place_m7_n1000", "norm", "bias_add", 7, 1000, 0, 0, "in_place"));
  // Rotary: GQA head counts of Qwen3 (32 q / 4 kv) and Llama 3.1 (32 / 8), equal heads, a small head_dim.
  out.push_back(decoder_case("rope/rope/qwen3_t11_q32_kv4_d128", "rope", "rope", 11, 128, 32, 4, "qwen3"));
  out.push_back(decoder_case("rope/rope/qwen3_yarn_t22_q8_kv2_d128", "rope", "rope", 22, 128, 8, 2, "qwen3_yarn"));
  out.push_back(decoder_case("rope/rope/llama3_t11_q32_kv8_d128", "rope", "rope", 11, 128, 32, 8, "llama3"));
  out.push_back(decoder_case("rope/rope/default_t3_q4_kv4_d64", "rope", "rope", 3, 64, 4, 4, "small"));
  // Qwen3's q/k norm fused with its rotary embedding: Qwen3-30B-A3B's heads (32 q / 4 kv), YaRN,
  // and a small head_dim.
  out.push_back(decoder_case("rope/qk_norm_rope/qwen3_t11_q32_kv4_d128", "rope", "qk_norm_rope", 11, 128, 32, 4, "qwen3"));
  out.push_back(
      decoder_case("rope/qk_norm_rope/qwen3_yarn_t22_q8_kv2_d128", "rope", "qk_norm_rope", 22, 128, 8, 2, "qwen3_yarn"));
  out.push_back(decoder_case("rope/qk_norm_rope/default_t3_q4_kv4_d64", "rope", "qk_norm_rope", 3, 64, 4, 4, "small"));
  // Embedding: repeated ids, the first and last rows of the table; an id past the table.
  out.push_back(decoder_case("embed/embedding/t13_h256_v1000", "embed", "embedding", 13, 256, 1000));
  out.push_back(decoder_case("embed/embedding/t2_h4096_v151936", "embed", "embedding", 2, 4096, 151936));
  out.push_back(decoder_case("embed/embedding/out_of_range", "embed", "embedding", 5, 64, 100, 0, "out_of_range"));
  // Greedy choice: a vocab no multiple of any vector width, and Qwen3's over a decode batch.
  out.push_back(decoder_case("sample/argmax/m13_v1001", "sample", "argmax", 13, 1001));
  out.push_back(decoder_case("sample/argmax/m8_v151936", "sample", "argmax", 8, 151936));
  for (Case& c : hybrid_cases()) out.push_back(std::move(c));
  return out;
}

CaseResult run_decoder_case(Backend& backend, const Case& c, CaseResult r) {
  r.kernels.push_back(c.module + "/" + c.kernel);
  if (c.kernel == "rms_norm") return run_rms_norm(backend, c, std::move(r));
  if (c.kernel == "rms_norm_residual") return run_rms_norm_residual(backend, c, std::move(r));
  if (c.kernel == "add") return run_add(backend, c, std::move(r));
  if (c.kernel == "bias_add") return run_bias_add(backend, c, std::move(r));
  if (c.kernel == "rope" || c.kernel == "qk_norm_rope") return run_rotary(backend, c, std::move(r));
  if (c.kernel == "embedding") return run_embedding(backend, c, std::move(r));
  if (c.kernel == "argmax") return run_argmax(backend, c, std::move(r));
  if (c.module == "deltanet" || c.kernel == "rms_norm_zero_centred" || c.kernel == "output_gate")
    return run_hybrid_case(backend, c, std::move(r));
  throw Error(Status::internal, "conformance: no runner for " + c.module + "/" + c.kernel);
}

}  // namespace metrale::conformance
