// SPDX-License-Identifier: MIT OR Apache-2.0
// The conformance suite: one list of cases that every backend runs against the double-precision
// reference (layers/reference/reference.hpp, whose tolerance applies). A library so that both the
// test program here and `metrale conformance` can run it, on any Backend — including a fault
// plugin with a deliberately wrong kernel, which the cases must catch.
//
// Cases:
//   kernel/<name>/m<M>_n<N>_k<K>  one w4a16-family kernel launched directly (only kernels the
//                                 backend's manifest lists; GEMV tiers only for the rows they take)
//   dispatch/m<M>_n<N>_k<K>       a projection through the layers' fallback chain, with K below
//                                 and at the k64 threshold w4a16_k64_min_k()
//   dense/<act>/...               DenseFfnLayer end to end
//   moe/...                       MoeLayer: tokens routed unevenly, experts with no tokens, with and
//                                 without renormalisation, a gated shared expert, per-expert launches
//   moe/topk_ties                 topk_softmax on exact ties (lower expert id first)
//   attn/decode/..., attn/prefill/...  the attn kernels over a paged KV cache (attn_cases.cpp)
//   norm/..., rope/..., embed/... the decoder's small kernels launched directly (decoder_cases.cpp):
//                                 rms_norm (also as Qwen3's q/k norm), rms_norm_residual, add,
//                                 bias_add (in place too), rope on real configs' frequencies,
//                                 qk_norm_rope (the two fused),
//                                 embedding and its refusal of an id
//   sample/argmax/...             greedy ids against the host's argmax: ties, the first and last
//                                 index, +inf, NaN (decoder_cases.cpp)
//   norm/rms_norm_zero_centred/..., attn/output_gate/..., deltanet/...  the hybrid models' kernels
//                                 (hybrid_cases.cpp, deltanet_cases.cpp): conv_silu and the delta
//                                 rule over several runs and state slots, states checked too
// A backend skips a case only when its manifest does not list, for this device, what the case
// needs (not listed, or gated by the device's target: the reason says which kernel and why), or
// when declared_skips() lists it with a reason. A listed kernel that cannot be used (the plugin
// does not provide it, its signature differs) and a refusal are failures, not skips. Manifest
// checks and layer-path coverage: certify.hpp.
#pragma once

#include "io/config.hpp"
#include "ffn/moe.hpp"
#include "reference/reference.hpp"

#include <metrale/backend.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::conformance {

// Fills the memory around and after a case's outputs: a NaN no kernel produces by arithmetic, so a
// write out of bounds (or a read of a row that should not be read) shows.
inline constexpr uint16_t kCanary = 0x7fc1;

enum class CaseKind { kernel, dispatch, dense, moe, topk_ties, attn_decode, attn_prefill, decoder };
enum class Routing { synthetic, uneven };

// The cache of an attn case (docs/kernels.md, "Module attn").
struct AttnShape {
  uint32_t head_dim = 0, q_heads = 0, kv_heads = 0, block_size = 0;
};

struct Case {
  std::string name;
  CaseKind kind = CaseKind::dispatch;
  std::string module;  // kernel cases
  std::string kernel;  // kernel cases
  uint32_t m = 1;
  uint32_t n = 0;
  uint32_t k = 0;
  layers::ModelConfig config;  // dense and MoE cases
  layers::MoeBuildOptions moe_options;
  layers::SyntheticFormats formats;  // dense and MoE cases: the weights' format (default W4A16)
  layers::ActivationQuant activations = layers::ActivationQuant::bf16;  // asked for explicitly when not bf16
  layers::ActivationScaling scaling;  // how the int8/fp8 quantizer sets its scales
  Routing routing = Routing::synthetic;
  AttnShape attn;                      // attn cases
  std::vector<uint32_t> attn_lengths;  // attn_decode: each sequence's context; attn_prefill: {past}
  uint64_t seed = 1;
  uint32_t kv_heads = 0;  // decoder cases: rope's k heads (m tokens, n head_dim, k q heads)
  std::string variant;    // decoder cases: "in_place", "out_of_range", a rope config's name
};

enum class Outcome { passed, failed, skipped };
const char* outcome_name(Outcome outcome) noexcept;

struct CaseResult {
  std::string name;
  Outcome outcome = Outcome::failed;
  std::string detail;  // the comparison summary, the error, or the skip reason
  std::vector<std::string> kernels;  // "module/name" the case ran
  std::optional<layers::Comparison> comparison;
};

// Every case, built for this process's w4a16_k64_min_k() (read once per process).
std::vector<Case> cases();
// The quantized-format layer cases (quant_cases.cpp): every format x group size x symmetry x
// act-order, under each activation tier that runs it, dense and MoE; part of cases().
std::vector<Case> quant_layer_cases();
// Why a quantized-format case cannot run on `backend` (the family's module is not listed), or nullopt.
std::optional<std::string> quant_skip_reason(Backend& backend, const Case& c);
// The attention cases (attn_cases.cpp): decode over several sequences, prefill after past
// tokens; part of cases(). Why one cannot run on `backend`, or nullopt; and running one.
std::vector<Case> attn_cases();
std::optional<std::string> attn_skip_reason(Backend& backend, const Case& c);
CaseResult run_attn_case(Backend& backend, const Case& c, CaseResult r);
// The decoder's small-kernel cases (decoder_cases.cpp); part of cases().
std::vector<Case> decoder_cases();
// Runs one of them (the caller has checked that the backend lists its kernel).
CaseResult run_decoder_case(Backend& backend, const Case& c, CaseResult r);
// The hybrid models' kernels (hybrid_cases.cpp: rms_norm_zero_centred, output_gate, gated_norm;
// deltanet_cases.cpp: conv_silu and the delta rule over state slots); part of decoder_cases().
std::vector<Case> hybrid_cases();
CaseResult run_hybrid_case(Backend& backend, const Case& c, CaseResult r);
std::vector<Case> deltanet_cases();
CaseResult run_deltanet_case(Backend& backend, const Case& c, CaseResult r);

// A case a backend declares it skips, with its reason ('*' globs allowed in `cases`).
struct DeclaredSkip {
  std::string backend;
  std::string cases;
  std::string reason;
};
const std::vector<DeclaredSkip>& declared_skips();

// Why `backend` skips `c`, or nullopt when it runs it.
std::optional<std::string> skip_reason(Backend& backend, const Case& c);

// Runs one case (skips as above). Never throws for a backend's failure: errors become `failed`.
CaseResult run_case(Backend& backend, const Case& c);

struct SuiteSummary {
  size_t passed = 0;
  size_t failed = 0;
  size_t skipped = 0;
};
SuiteSummary summarize(const std::vector<CaseResult>& results);
// One line per result: "PASS kernel/w4a16_gemv/m1_n77_k256  [w4a16/w4a16_gemv] <detail>".
std::string render_results(const std::vector<CaseResult>& results);

}  // namespace metrale::conformance
