// SPDX-License-Identifier: MIT OR Apache-2.0
// The whole-model rows of metrale-bench-layers (variant `model`): a decoder preset on synthetic
// bf16 weights (decoder/decoder_weights.hpp), greedy generation through generate_tokens as
// `metrale generate` runs it. Prefill: one prompt of each --model-prompt length, tokens per second
// and its FLOP rate against the bf16 dot peak (2 per weight per token, plus causal attention).
// Decode: --model-seqs sequences after such a prompt each, tokens per second and the bytes a step
// reads (every weight once, the KV cache of every sequence) against the read bandwidth.
#include "bench_rows.hpp"

#include "compose.hpp"

#include <cstdio>

namespace metrale::bench {

using namespace metrale::layers;

namespace {

// Multiply-adds per token of the layers' projections (dense FFN presets), before attention.
double layer_params(const DecoderConfig& c) {
  const double h = c.attention.hidden_size, q = c.attention.q_width(), kv = c.attention.kv_width();
  const double ffn = 3.0 * h * c.ffn.intermediate_size;
  return c.num_layers * (h * (q + 2 * kv) + q * h + ffn);
}

// Multiply-adds of one row's logits.
double logit_params(const DecoderConfig& c) { return double(c.vocab_size) * c.attention.hidden_size; }

Rate model_rate(const std::string& preset, const char* path, uint32_t m, uint32_t context, unsigned threads) {
  Rate r;
  r.preset = preset;
  r.variant = "model";
  r.ffn = "decoder";
  r.path = path;
  r.m = m;
  r.context = context;
  r.threads = threads;
  return r;
}

// The rows' kernels column: what a reader of a model row wants first.
std::string tokens_per_second(double rate) {
  char text[64];
  std::snprintf(text, sizeof text, "generate: %.1f tokens/s", rate);
  return text;
}

}  // namespace

std::vector<Rate> measure_model_rates(Backend& b, const ModelRowsRequest& request, unsigned threads, const Denominators& d) {
  std::vector<Rate> rates;
  if (!request.enabled) return rates;
  LayerRequest open;
  open.model = request.preset;
  std::fprintf(stderr, "model %s: generating and uploading synthetic bf16 weights...\n", request.preset.c_str());
  OpenedModel opened = open_model(b, open);
  DecoderModel& model = *opened.model;
  const DecoderConfig& c = model.config();
  // The bytes a step streams: every weight but the embedding table, of which it gathers a row.
  const double weight_bytes = static_cast<double>(model.weight_bytes()) - 2.0 * c.vocab_size * c.attention.hidden_size;
  const double kv_bytes_per_token = 2.0 * c.num_layers * c.attention.kv_width() * 2;  // K and V, bf16
  for (uint32_t prompt : request.prompts) {
    for (uint32_t seqs : request.seqs) {
      std::fprintf(stderr, "model %s: %u sequence(s) of %u prompt tokens + %u new...\n", request.preset.c_str(), seqs, prompt,
                   request.new_tokens);
      std::vector<std::vector<int32_t>> prompts(seqs);
      for (uint32_t s = 0; s < seqs; ++s)
        for (uint32_t i = 0; i < prompt; ++i) prompts[s].push_back(static_cast<int32_t>((i * 7919u + s * 104729u) % c.vocab_size));
      GenerateOptions g;
      g.max_new_tokens = request.new_tokens;
      g.prefill_chunk = prompt;
      const GenerateResult out = generate_tokens(b, model, prompts, g);
      if (seqs == 1) {
        Rate r = model_rate(request.preset, "prefill", prompt, prompt, threads);
        r.median_s = out.stats.prefill_seconds;
        const double attention = 2.0 * c.num_layers * c.attention.q_width() * double(prompt) * (prompt + 1);  // QK and PV, causal
        r.flops = 2.0 * (layer_params(c) * prompt + logit_params(c)) + attention;  // logits of the last row only
        r.weight_bytes = weight_bytes;
        r.gb_per_s = r.weight_bytes / r.median_s / 1e9;
        r.gflop_per_s = r.flops / r.median_s / 1e9;
        r.kernels = tokens_per_second(prompt / r.median_s);
        set_ratios(r, d);
        rates.push_back(r);
      }
      const double steps = request.new_tokens - 1;
      if (steps < 1) continue;
      Rate r = model_rate(request.preset, "decode", seqs, prompt + request.new_tokens / 2, threads);
      r.median_s = out.stats.decode_seconds / steps;  // one step: every sequence's next token
      r.weight_bytes = weight_bytes + kv_bytes_per_token * seqs * (prompt + request.new_tokens / 2.0);
      r.flops = 2.0 * (layer_params(c) + logit_params(c)) * seqs;
      r.gb_per_s = r.weight_bytes / r.median_s / 1e9;
      r.gflop_per_s = r.flops / r.median_s / 1e9;
      r.kernels = tokens_per_second(seqs / r.median_s);
      set_ratios(r, d);
      rates.push_back(r);
    }
  }
  return rates;
}

}  // namespace metrale::bench
