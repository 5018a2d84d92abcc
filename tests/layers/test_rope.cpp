// SPDX-License-Identifier: MIT OR Apache-2.0
// The rotary embedding's host side (layers/attention/rope.hpp) against values derived by hand or
// in double precision here, and its refusals.
#include <doctest/doctest.h>

#include "attention/rope.hpp"

#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <numbers>

using namespace metrale::layers;
using nlohmann::json;

namespace {

RopeParameters from(const json& config) { return rope_parameters(parse_rope_config(config, "config.json")); }

// base^(-2i/dim) in double.
double plain(double base, uint32_t i, uint32_t dim) { return std::pow(base, -2.0 * i / dim); }

std::string refusal_of(const json& config) {
  try {
    (void)from(config);
  } catch (const metrale::Refusal& e) {
    return e.what();
  }
  return "(no refusal)";
}

}  // namespace

TEST_CASE("rope default: inv_freq = theta^(-2i/d) in f32, no scaling") {
  const RopeParameters small = from({{"head_dim", 4}, {"rope_theta", 10000.0}});
  REQUIRE(small.inv_freq.size() == 2);
  CHECK(small.inv_freq[0] == 1.0f);
  CHECK(small.inv_freq[1] == 0.01f);  // 1 / 10000^(1/2), both steps exact in f32 up to the last
  CHECK(small.attention_scaling == 1.0f);
  // Qwen3: head_dim 128, theta 1e6; head_dim from hidden_size / heads when absent; theta 10000 by default.
  const RopeParameters qwen3 = from({{"head_dim", 128}, {"rope_theta", 1e6}, {"hidden_size", 2048}, {"num_attention_heads", 32}});
  REQUIRE(qwen3.inv_freq.size() == 64);
  for (uint32_t i = 0; i < 64; ++i) CHECK(qwen3.inv_freq[i] == doctest::Approx(plain(1e6, i, 128)).epsilon(3e-7));
  CHECK(from({{"hidden_size", 4096}, {"num_attention_heads", 32}}).inv_freq.size() == 64);
  CHECK(from({{"head_dim", 8}}).inv_freq[1] == doctest::Approx(plain(10000, 1, 8)).epsilon(3e-7));
  CHECK(from({{"head_dim", 8}, {"rope_scaling", {{"rope_type", "default"}}}}).inv_freq ==
        from({{"head_dim", 8}}).inv_freq);
}

TEST_CASE("rope llama3 (Llama 3.1's settings): high frequencies kept, low ones divided by 8, a smooth band between") {
  const json config{{"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 500000.0},
                    {"max_position_embeddings", 131072},
                    {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}};
  const RopeParameters p = from(config);
  REQUIRE(p.inv_freq.size() == 64);
  CHECK(p.attention_scaling == 1.0f);
  uint32_t kept = 0, divided = 0, smoothed = 0;
  for (uint32_t i = 0; i < 64; ++i) {
    const double f = plain(500000, i, 128), wavelen = 2 * std::numbers::pi / f;
    double want = f;
    if (wavelen > 8192) {
      want = f / 8;
      ++divided;
    } else if (wavelen >= 2048) {
      const double smooth = (8192 / wavelen - 1) / 3;
      want = (1 - smooth) * f / 8 + smooth * f;
      ++smoothed;
    } else {
      ++kept;
    }
    CAPTURE(i);
    CHECK(p.inv_freq[i] == doctest::Approx(want).epsilon(1e-6));
  }
  // The three bands of the Llama 3.1 release: all present.
  CHECK(kept == 29);
  CHECK(smoothed == 6);
  CHECK(divided == 29);
}

TEST_CASE("rope yarn (Qwen3's 128K settings): extrapolation below the correction range, interpolation above") {
  const json config{{"head_dim", 128}, {"rope_theta", 1e6}, {"max_position_embeddings", 131072},
                    {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}};
  const RopeParameters p = from(config);
  const RopeParameters plain_rope = from({{"head_dim", 128}, {"rope_theta", 1e6}});
  REQUIRE(p.inv_freq.size() == 64);
  // 0.1 ln(4) + 1
  CHECK(p.attention_scaling == doctest::Approx(1.1386294361119891).epsilon(1e-7));
  // Correction range by hand: 128 ln(32768 / (r 2 pi)) / (2 ln 1e6) is 23.60 for r = 32 and 39.65
  // for r = 1: floor 23, ceil 40.
  for (uint32_t i = 0; i <= 23; ++i) CHECK(p.inv_freq[i] == plain_rope.inv_freq[i]);
  for (uint32_t i = 40; i < 64; ++i) CHECK(p.inv_freq[i] == plain_rope.inv_freq[i] / 4);
  for (uint32_t i = 24; i < 40; ++i) {
    const double ramp = (i - 23) / 17.0, f = plain(1e6, i, 128);
    CAPTURE(i);
    CHECK(p.inv_freq[i] == doctest::Approx(f / 4 * ramp + f * (1 - ramp)).epsilon(1e-6));
  }
  // As transformers: with original_max_position_embeddings the factor is the ratio of the context
  // lengths (Qwen3's own config.json, 40960 / 32768), not rope_scaling.factor.
  json qwen3_own = config;
  qwen3_own["max_position_embeddings"] = 40960;
  CHECK(from(qwen3_own).attention_scaling == doctest::Approx(0.1 * std::log(1.25) + 1).epsilon(1e-7));
  // attention_factor given: taken as is; mscale / mscale_all_dim: their ratio.
  json given = config;
  given["rope_scaling"]["attention_factor"] = 0.5;
  CHECK(from(given).attention_scaling == 0.5f);
  json deepseek = config;
  deepseek["rope_scaling"]["mscale"] = 1.0;
  deepseek["rope_scaling"]["mscale_all_dim"] = 0.5;
  CHECK(from(deepseek).attention_scaling ==
        doctest::Approx((0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1)).epsilon(1e-7));
  // The older key "type".
  json old = config;
  old["rope_scaling"].erase("rope_type");
  old["rope_scaling"]["type"] = "yarn";
  CHECK(from(old).inv_freq == p.inv_freq);
}

TEST_CASE("rope refuses other rope types by name, partial rotary, and says which field is malformed") {
  CHECK(refusal_of({{"head_dim", 128}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}}) ==
        "config.json: rope_scaling.rope_type = \"linear\" is not supported: \"default\", \"llama3\" or \"yarn\"");
  CHECK(refusal_of({{"head_dim", 128}, {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}).find("\"dynamic\"") !=
        std::string::npos);
  CHECK(refusal_of({{"head_dim", 128}, {"partial_rotary_factor", 0.5}}).find("partial_rotary_factor") != std::string::npos);
  CHECK_THROWS_WITH_AS(from({{"head_dim", 128}, {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}),
                       doctest::Contains("low_freq_factor"), metrale::Error);
  CHECK_THROWS_AS(from({{"head_dim", 127}}), metrale::Error);
  CHECK_THROWS_WITH_AS(from({{"head_dim", 64}, {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}),
                       doctest::Contains("max_position_embeddings"), metrale::Error);
}
