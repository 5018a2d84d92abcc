// SPDX-License-Identifier: MIT OR Apache-2.0
// The rotary embedding's host side (layers/attention/rope.hpp) against values derived by hand or
// in double precision here, and its refusals.
#include <doctest/doctest.h>

#include "attention/rope.hpp"

#include <metrale/status.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <numbers>
#include <vector>

using namespace metrale::layers;
using nlohmann::json;

namespace {

RopeParameters from(const json& config) { return rope_parameters(parse_rope_config(config, "config.json")); }

// base^(-2i/dim) in double.
double plain(double base, uint32_t i, uint32_t dim) { return std::pow(base, -2.0 * i / dim); }

std::string rope_refusal_of(const json& config) {
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
  // As transformers 5: rope_scaling.factor rules even where the context lengths' ratio differs
  // (Qwen3's model card: 40960 / 32768); the ratio stands in only when factor is absent.
  json qwen3_own = config;
  qwen3_own["max_position_embeddings"] = 40960;
  CHECK(from(qwen3_own).attention_scaling == p.attention_scaling);
  CHECK(from(qwen3_own).inv_freq == p.inv_freq);
  json no_factor = qwen3_own;
  no_factor["rope_scaling"].erase("factor");
  CHECK(from(no_factor).attention_scaling == doctest::Approx(0.1 * std::log(1.25) + 1).epsilon(1e-7));
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

// inv_freq and the attention factor as transformers 5.23's _compute_yarn_parameters returned them
// (torch f32; Qwen3Config, head_dim 64), for the three ways it finds the factor and the scaling.
TEST_CASE("rope yarn equals transformers 5: factor given, factor absent (the context ratio), mscale / mscale_all_dim") {
  struct Case {
    const char* name;
    json config;
    double attention;
    std::vector<float> inv_freq;
  };
  const auto yarn = [](json parameters, uint32_t max_positions) {
    return json{{"head_dim", 64}, {"hidden_size", 256}, {"num_attention_heads", 4}, {"max_position_embeddings", max_positions},
                {"rope_parameters", std::move(parameters)}};
  };
  const std::vector<Case> cases{
      {"factor 4, contexts 40960 / 32768",
       yarn({{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}, 40960),
       1.138629436111989, {
      1.0f, 0.6493816375732422f, 0.4216965138912201f, 0.2738419771194458f,
      0.17782793939113617f, 0.11547820270061493f, 0.07498941570520401f, 0.04869675263762474f,
      0.03162277862429619f, 0.02053525112569332f, 0.01333521492779255f, 0.00865964312106371f,
      0.005154795479029417f, 0.0030431177001446486f, 0.0017785303061828017f, 0.001026617712341249f,
      0.0005833333707414567f, 0.00032469083089381456f, 0.0001757068675942719f, 9.128064994001761e-05f,
      4.4456985051510856e-05f, 2.8869548259535804e-05f, 1.8747356079984456e-05f, 1.2174188668723218e-05f,
      7.905693564680405e-06f, 5.133812464919174e-06f, 3.3338035336782923e-06f, 2.1649109385180054e-06f,
      1.405853367941745e-06f, 9.129353202297352e-07f, 5.928434347879374e-07f, 3.8498163235090033e-07f,
      }},
      {"no factor, contexts 65536 / 32768",
       yarn({{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", nullptr}, {"original_max_position_embeddings", 32768}}, 65536),
       1.0693147180559945, {
      1.0f, 0.6493816375732422f, 0.4216965138912201f, 0.2738419771194458f,
      0.17782793939113617f, 0.11547820270061493f, 0.07498941570520401f, 0.04869675263762474f,
      0.03162277862429619f, 0.02053525112569332f, 0.01333521492779255f, 0.00865964312106371f,
      0.005311001092195511f, 0.0032459923531860113f, 0.0019761447329074144f, 0.0011977206449955702f,
      0.0007222222629934549f, 0.0004329211078584194f, 0.0002577034174464643f, 0.00015213442384265363f,
      8.891397010302171e-05f, 5.773909651907161e-05f, 3.749471215996891e-05f, 2.4348377337446436e-05f,
      1.581138712936081e-05f, 1.0267624929838348e-05f, 6.667607067356585e-06f, 4.329821877036011e-06f,
      2.81170673588349e-06f, 1.8258706404594705e-06f, 1.1856868695758749e-06f, 7.699632647018007e-07f,
      }},
      {"factor 40, mscale 1, mscale_all_dim 0.707 (DeepSeek's form)",
       yarn({{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 40.0}, {"original_max_position_embeddings", 4096},
             {"mscale", 1.0}, {"mscale_all_dim", 0.707}, {"beta_fast", 32}, {"beta_slow", 1}}, 163840),
       1.0857263992561355, {
      1.0f, 0.7498942017555237f, 0.5623413324356079f, 0.4216965138912201f,
      0.3162277638912201f, 0.23713736236095428f, 0.17782793939113617f, 0.1333521455526352f,
      0.10000000149011612f, 0.07498941570520401f, 0.05623412877321243f, 0.039006926119327545f,
      0.026879360899329185f, 0.01837814413011074f, 0.012447956018149853f, 0.0083345090970397f,
      0.005500000435858965f, 0.0035619973205029964f, 0.002249365206807852f, 0.0013705134624615312f,
      0.0007905694073997438f, 0.0004149904125370085f, 0.00017782794020604342f, 3.333803397254087e-05f,
      2.499999936844688e-05f, 1.8747354260995053e-05f, 1.4058532542549074e-05f, 1.0542412383074407e-05f,
      7.905694474175107e-06f, 5.928434347879374e-06f, 4.445698323252145e-06f, 3.3338035336782923e-06f,
      }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const RopeParameters p = from(c.config);
    CHECK(p.attention_scaling == static_cast<float>(c.attention));
    REQUIRE(p.inv_freq.size() == c.inv_freq.size());
    for (size_t i = 0; i < c.inv_freq.size(); ++i) {
      CAPTURE(i);
      CHECK(p.inv_freq[i] == c.inv_freq[i]);  // bit for bit: the same f32 operations in the same order
    }
  }
}

TEST_CASE("partial rotary: int(head_dim * factor) dims, the default frequencies over them, from either place") {
  const RopeConfig top = parse_rope_config({{"head_dim", 256}, {"partial_rotary_factor", 0.25}}, "config.json");
  CHECK(top.rotary_dim == 64);
  const RopeConfig nested = parse_rope_config(
      {{"head_dim", 256}, {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}}},
      "config.json");
  CHECK(nested.rotary_dim == 64);
  CHECK(parse_rope_config({{"head_dim", 256}}, "config.json", 0.25).rotary_dim == 64);  // the architecture's default
  CHECK(parse_rope_config({{"head_dim", 256}}, "config.json").rotary_dim == 256);
  const RopeParameters p = rope_parameters(nested);
  REQUIRE(p.inv_freq.size() == 32);
  CHECK(p.inv_freq[0] == 1.0f);
  CHECK(p.inv_freq[1] == 1.0f / std::pow(1e7f, 2.0f / 64.0f));  // exponents over the rotated width, as transformers
}

TEST_CASE("rope refuses other rope types by name, partial rotary, and says which field is malformed") {
  CHECK(rope_refusal_of({{"head_dim", 128}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}}) ==
        "config.json: rope_scaling.rope_type = \"linear\" is not supported: \"default\", \"llama3\" or \"yarn\"");
  CHECK(rope_refusal_of({{"head_dim", 128}, {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}).find("\"dynamic\"") !=
        std::string::npos);
  // Which architectures rotate part of a head is the registry's call; a factor outside (0, 1], or
  // partial rotary beside a scaled rope type, the parser's.
  CHECK(rope_refusal_of({{"head_dim", 128}, {"partial_rotary_factor", 1.5}}).find("partial_rotary_factor") != std::string::npos);
  CHECK(rope_refusal_of({{"head_dim", 128}, {"max_position_embeddings", 4096}, {"partial_rotary_factor", 0.5},
                         {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}})
            .find("rope_type") != std::string::npos);
  CHECK_THROWS_WITH_AS(from({{"head_dim", 128}, {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}),
                       doctest::Contains("low_freq_factor"), metrale::Error);
  CHECK_THROWS_AS(from({{"head_dim", 127}}), metrale::Error);
  CHECK_THROWS_WITH_AS(from({{"head_dim", 64}, {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}),
                       doctest::Contains("max_position_embeddings"), metrale::Error);
}
