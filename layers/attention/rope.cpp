// SPDX-License-Identifier: MIT OR Apache-2.0
// Ported from the behaviour of transformers' modeling_rope_utils (_compute_default_rope_parameters,
// _compute_llama3_parameters, _compute_yarn_parameters): torch computes the frequencies in f32
// tensors, and each step below is one f32 operation in the same order, so inv_freq comes out
// bit for bit as transformers' (the scalars of the python side, yarn's correction range and
// mscale, are doubles as there).
#include "attention/rope.hpp"

#include "io/config_json.hpp"

#include <metrale/status.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace metrale::layers {

namespace {

using config_json::Object;

// base ** (arange(0, dim, 2) / dim), in f32.
std::vector<float> position_frequencies(double theta, uint32_t dim) {
  std::vector<float> out(dim / 2);
  const auto base = static_cast<float>(theta);
  for (uint32_t i = 0; i < dim / 2; ++i)
    out[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  return out;
}

std::vector<float> default_inv_freq(double theta, uint32_t dim) {
  std::vector<float> out = position_frequencies(theta, dim);
  for (float& f : out) f = 1.0f / f;
  return out;
}

std::vector<float> llama3_inv_freq(const RopeConfig& c) {
  const RopeScaling& s = c.scaling;
  const auto factor = static_cast<float>(s.factor);
  const double old_context = *s.original_max_position_embeddings;
  const auto low_wavelen = static_cast<float>(old_context / s.low_freq_factor);
  const auto high_wavelen = static_cast<float>(old_context / s.high_freq_factor);
  const auto two_pi = static_cast<float>(2 * std::numbers::pi);
  std::vector<float> out = default_inv_freq(c.theta, c.head_dim);
  for (float& f : out) {
    const float wavelen = two_pi / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float smooth = (static_cast<float>(old_context) / wavelen - static_cast<float>(s.low_freq_factor)) /
                         static_cast<float>(s.high_freq_factor - s.low_freq_factor);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
  return out;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

RopeParameters yarn(const RopeConfig& c) {
  const RopeScaling& s = c.scaling;
  const uint32_t dim = c.head_dim;
  // As transformers 5: the frequencies use rope_scaling.factor; the ratio of the two context
  // lengths stands in only when factor is absent (DeepSeek-V3's convention).
  const double original = s.original_max_position_embeddings.value_or(c.max_position_embeddings);
  const double factor = s.factor_given ? s.factor : c.max_position_embeddings / original;
  double attention = 0;
  if (s.attention_factor) attention = *s.attention_factor;
  else if (s.mscale && s.mscale_all_dim && *s.mscale != 0 && *s.mscale_all_dim != 0)
    attention = yarn_mscale(factor, *s.mscale) / yarn_mscale(factor, *s.mscale_all_dim);
  else attention = yarn_mscale(factor, 1.0);

  const auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(c.theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;

  const std::vector<float> pos = position_frequencies(c.theta, dim);
  const auto factor_f = static_cast<float>(factor);
  const auto low_f = static_cast<float>(low), span = static_cast<float>(high - low);
  RopeParameters out;
  out.inv_freq.resize(dim / 2);
  for (uint32_t i = 0; i < dim / 2; ++i) {
    const float extrapolation = 1.0f / pos[i];
    const float interpolation = 1.0f / (factor_f * pos[i]);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the extrapolation's share
    out.inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  out.attention_scaling = static_cast<float>(attention);
  return out;
}

}  // namespace

namespace {

// partial_rotary_factor: rope_parameters' (transformers 5 moves it there), else the top level's.
double partial_rotary_factor(const Object& config, const std::optional<Object>& parameters, double fallback) {
  const Object* where = parameters && parameters->has("partial_rotary_factor") ? &*parameters : &config;
  const auto factor = where->number("partial_rotary_factor");
  if (!factor) return fallback;
  if (!(*factor > 0 && *factor <= 1))
    where->unsupported("partial_rotary_factor", *where->find("partial_rotary_factor"), "a fraction in (0, 1]");
  return *factor;
}

}  // namespace

RopeConfig parse_rope_config(const nlohmann::json& document, const std::string& source, double default_partial) {
  const Object config(document, source, "");
  RopeConfig out;
  // Newer transformers write the rope settings, rope_theta included, as rope_parameters.
  const std::optional<Object> parameters = config.object("rope_parameters", "an object (the rotary embedding)");
  const std::optional<Object> scaling =
      parameters ? parameters : config.object("rope_scaling", "an object (the rotary embedding's scaling)");
  out.theta = (parameters && parameters->has("rope_theta") ? parameters->number("rope_theta") : config.number("rope_theta"))
                  .value_or(10000.0);
  if (!(out.theta > 1.0)) config.malformed("rope_theta", "a number above 1", config.find("rope_theta"));
  if (const auto head_dim = config.u32("head_dim")) {
    out.head_dim = *head_dim;
  } else {
    const uint32_t hidden = config.u32("hidden_size").value_or(0), heads = config.u32("num_attention_heads").value_or(0);
    if (hidden == 0 || heads == 0 || hidden % heads != 0)
      config.malformed("head_dim", "head_dim, or hidden_size a multiple of num_attention_heads", nullptr);
    out.head_dim = hidden / heads;
  }
  if (out.head_dim == 0 || out.head_dim % 2 != 0)
    config.malformed("head_dim", "an even number of at least 2", config.find("head_dim"));
  const double partial = partial_rotary_factor(config, parameters, default_partial);
  out.rotary_dim = static_cast<uint32_t>(out.head_dim * partial);  // transformers: int(head_dim * factor)
  if (out.rotary_dim == 0 || out.rotary_dim % 2 != 0) {
    config.malformed("partial_rotary_factor", "a factor leaving an even, positive number of rotated dims of head_dim " +
                                                  std::to_string(out.head_dim), config.find("partial_rotary_factor"));
  }
  out.max_position_embeddings = config.u32("max_position_embeddings").value_or(0);
  if (!scaling) return out;

  RopeScaling& s = out.scaling;
  const char* type_key = scaling->has("rope_type") ? "rope_type" : "type";
  s.type = scaling->string(type_key).value_or("default");
  if (s.type != "default" && s.type != "llama3" && s.type != "yarn")
    scaling->unsupported(type_key, *scaling->find(type_key), "\"default\", \"llama3\" or \"yarn\"");
  if (s.type == "default") return out;
  if (out.rotary_dim != out.head_dim)
    scaling->unsupported(type_key, *scaling->find(type_key), "\"default\" when only part of each head rotates");
  const auto required = [&](const char* key) {
    const auto value = scaling->number(key);
    if (!value) scaling->malformed(key, "a number (rope_type " + s.type + " needs it)", nullptr);
    return *value;
  };
  s.factor_given = scaling->has("factor");
  s.factor = s.type == "llama3" || s.factor_given ? required("factor") : 1.0;
  if (!(s.factor > 0)) scaling->malformed("factor", "a positive number", scaling->find("factor"));
  s.original_max_position_embeddings = scaling->number("original_max_position_embeddings");
  if (s.type == "llama3") {
    s.low_freq_factor = required("low_freq_factor");
    s.high_freq_factor = required("high_freq_factor");
    if (!s.original_max_position_embeddings) required("original_max_position_embeddings");
    if (!(s.high_freq_factor > s.low_freq_factor) || !(s.low_freq_factor > 0))
      scaling->malformed("high_freq_factor", "a number above low_freq_factor, which is positive", scaling->find("high_freq_factor"));
    return out;
  }
  s.attention_factor = scaling->number("attention_factor");
  s.mscale = scaling->number("mscale");
  s.mscale_all_dim = scaling->number("mscale_all_dim");
  // transformers: `get("beta_fast") or 32`, so 0 means the default too.
  if (const auto v = scaling->number("beta_fast"); v && *v != 0) s.beta_fast = *v;
  if (const auto v = scaling->number("beta_slow"); v && *v != 0) s.beta_slow = *v;
  s.truncate = scaling->boolean("truncate").value_or(true);
  if (out.max_position_embeddings == 0)
    config.malformed("max_position_embeddings", "a positive integer (rope_type yarn needs it)", config.find("max_position_embeddings"));
  // transformers 5 gives a top-level original_max_position_embeddings (Phi-3's place) priority.
  if (const auto top = config.number("original_max_position_embeddings")) s.original_max_position_embeddings = top;
  if (!s.factor_given && !s.original_max_position_embeddings)
    scaling->malformed("factor", "a number, or original_max_position_embeddings to derive it from (rope_type yarn)", nullptr);
  if (s.original_max_position_embeddings && !(*s.original_max_position_embeddings > 0))
    scaling->malformed("original_max_position_embeddings", "a positive number", scaling->find("original_max_position_embeddings"));
  return out;
}

RopeParameters rope_parameters(const RopeConfig& config) {
  if (config.head_dim == 0 || config.head_dim % 2 != 0)
    throw Error(Status::invalid_argument, "rope: head_dim " + std::to_string(config.head_dim) + " is not even and positive");
  const std::string& type = config.scaling.type;
  if (type == "default") return {default_inv_freq(config.theta, config.rotary_dim ? config.rotary_dim : config.head_dim), 1.0f};
  if (type == "llama3") return {llama3_inv_freq(config), 1.0f};
  if (type == "yarn") return yarn(config);
  throw Refusal("rope: rope_type \"" + type + "\" is not supported: \"default\", \"llama3\" or \"yarn\"");
}

}  // namespace metrale::layers
