// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale generate`: a whole checkpoint's model from token ids (no tokenizer), every prompt a
// request of the engine loop: admitted at its arrival step, prefilled in chunks beside the running
// decodes, greedy or sampled (docs/layers.md, "Generating"). Prints the generated ids, prefill and decode tokens per second and the audit of
// every lookup the model made; --output writes the ids and the logits they were chosen from.
#include "commands.hpp"
#include "tier_flags.hpp"

#include "progress.hpp"

#include <layers/compose.hpp>
#include <layers/io/activation_io.hpp>
#include <layers/io/safetensors.hpp>
#include <metrale/status.hpp>
#include <metrale/text_table.hpp>

#include <nlohmann/json.hpp>

#include <charconv>

#include <sys/resource.h>
#include <iostream>

namespace metrale::cli {

namespace {

using namespace metrale::layers;

struct GenerateCliOptions {
  std::string weights;
  std::string model;
  uint64_t seed = 1;
  std::string prompt_ids;
  std::string batch_file;
  uint32_t max_new_tokens = 16;
  std::string output;
  bool prompt_logits = false;
  uint64_t kv_tokens = 0;
  uint32_t block_size = 16;
  uint32_t prefill_chunk = 512;
  uint32_t token_budget = 0;
  std::string arrival_steps;
  SamplingParams sampling;
  std::string speculate = "none";
  uint32_t draft_tokens = 4;
  std::string backend;
  bool json = false;
  bool quiet = false;
  bool per_expert = false;
  TierFlags tiers;
};

// Comma-separated integers from 0 to `max` (`option` and `what` name them in the message).
std::vector<int64_t> parse_list(const std::string& text, const char* option, const char* what, int64_t max) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0 || v > max) {
      throw Error(Status::invalid_argument, std::string(option) + " '" + text + "': '" + item + "' is not " + what +
                                                " (comma-separated integers from 0, e.g. 1,2,3)");
    }
    values.push_back(v);
    start = end + 1;
  }
  return values;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  const std::vector<int64_t> values = parse_list(text, "--prompt-ids", "a token id", INT32_MAX);
  return std::vector<int32_t>(values.begin(), values.end());
}

// The prompts of --prompt-ids or of --batch-file's `ids` [B, L] (and `lengths` [B]).
std::vector<std::vector<int32_t>> read_prompts(const GenerateCliOptions& o) {
  if (o.prompt_ids.empty() == o.batch_file.empty()) {
    throw Error(Status::invalid_argument, "give the prompt as --prompt-ids 1,2,3 or --batch-file ids.safetensors (one of them)");
  }
  if (!o.prompt_ids.empty()) return {parse_ids(o.prompt_ids)};
  const auto ids = read_int_tensor(o.batch_file, "ids", 2);
  if (!ids) throw Error(Status::not_found, o.batch_file + ": no tensor 'ids' (I32 or I64 [B, L]: one prompt per row)");
  const uint64_t batch = ids->shape[0], width = ids->shape[1];
  std::vector<int64_t> lengths(batch, static_cast<int64_t>(width));
  if (const auto l = read_int_tensor(o.batch_file, "lengths", 1)) {
    if (l->shape[0] != batch) {
      throw Error(Status::invalid_argument, o.batch_file + ": tensor 'lengths' has " + std::to_string(l->shape[0]) +
                                                " entries for " + std::to_string(batch) + " prompts");
    }
    lengths = l->values;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (uint64_t b = 0; b < batch; ++b) {
    if (lengths[b] < 1 || static_cast<uint64_t>(lengths[b]) > width) {
      throw Error(Status::invalid_argument, o.batch_file + ": lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
                                                ", expected 1.." + std::to_string(width));
    }
    std::vector<int32_t> p;
    for (int64_t i = 0; i < lengths[b]; ++i) {
      const int64_t v = ids->values[b * width + static_cast<uint64_t>(i)];
      if (v < 0 || v > INT32_MAX) {
        throw Error(Status::invalid_argument, o.batch_file + ": ids[" + std::to_string(b) + ", " + std::to_string(i) + "] = " +
                                                  std::to_string(v) + " is not a token id");
      }
      p.push_back(static_cast<int32_t>(v));
    }
    prompts.push_back(std::move(p));
  }
  return prompts;
}

void write_output(const std::string& path, const GenerateResult& r, uint32_t vocab, uint32_t new_tokens) {
  const size_t B = r.generated.size();
  std::vector<int32_t> ids;
  std::vector<float> logits;
  for (size_t b = 0; b < B; ++b) {
    ids.insert(ids.end(), r.generated[b].begin(), r.generated[b].end());
    logits.insert(logits.end(), r.logits[b].begin(), r.logits[b].end());
  }
  SafetensorsWriter w;
  w.add("ids", Dtype::i32, {B, new_tokens}, std::span<const int32_t>(ids));
  w.add("logits", Dtype::f32, {B, new_tokens, vocab}, std::span<const float>(logits));
  std::vector<float> prompt_logits;
  if (!r.prompt_logits.empty()) {
    size_t longest = 0;
    for (const auto& p : r.prompt_logits) longest = std::max(longest, p.size() / vocab);
    prompt_logits.assign(B * longest * vocab, 0.0f);
    for (size_t b = 0; b < B; ++b) std::copy(r.prompt_logits[b].begin(), r.prompt_logits[b].end(), prompt_logits.begin() + b * longest * vocab);
    w.add("prompt_logits", Dtype::f32, {B, longest, vocab}, std::span<const float>(prompt_logits));
  }
  w.set_metadata("producer", "metrale generate");
  w.write(path);
}

std::string id_list(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

// Peak resident memory of the process so far (getrusage's maximum resident set, KiB on Linux).
uint64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

nlohmann::json memory_json(const LoadReport& load) {
  return {{"checkpoint_tensor_bytes", load.tensor_bytes}, {"bytes_read", load.bytes_read},
          {"bytes_mapped", load.bytes_mapped},           {"bytes_uploaded", load.bytes_uploaded},
          {"device_weight_bytes", load.device_weight_bytes}, {"peak_resident_bytes", peak_resident_bytes()}};
}

GenerateOptions generate_options(const GenerateCliOptions& o) {
  GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.kv_tokens = o.kv_tokens;
  g.block_size = o.block_size;
  g.prefill_chunk = o.prefill_chunk;
  g.token_budget = o.token_budget;
  g.sampling = o.sampling;
  g.speculation.method = parse_speculation_method(o.speculate);
  g.speculation.draft_tokens = o.draft_tokens;
  if (!o.arrival_steps.empty()) {
    for (int64_t step : parse_list(o.arrival_steps, "--arrival-steps", "a step", INT64_MAX)) {
      g.arrival_steps.push_back(static_cast<uint64_t>(step));
    }
  }
  g.prompt_logits = o.prompt_logits;
  g.keep_logits = !o.output.empty();  // only --output writes them
  return g;
}

// The model, backend, weights, tiers and the state pool's shape, one line each.
void print_model(Backend& b, const OpenedModel& opened, const StatePoolShape& cache) {
  const DecoderConfig& c = opened.model->config();
  std::cout << "model    " << c.source << ": " << c.num_layers << " layers, hidden " << c.attention.hidden_size << ", "
            << c.attention.q_heads << " q / " << c.attention.kv_heads << " kv heads of " << c.attention.head_dim << ", vocab "
            << c.vocab_size << " (model_type " << c.attention.model_type << ")\n"
            << "backend  " << b.name() << " (" << b.target() << ", " << b.device_name() << ")\n"
            << "weights  " << opened.weights_source << ", " << opened.quantization << '\n';
  for (const auto& tier : opened.model->tiers()) std::cout << "tier     " << tier << '\n';
  std::cout << "kv cache " << cache.capacity_tokens() << " tokens per layer, " << cache.num_blocks
            << (cache.num_blocks == 1 ? " block" : " blocks") << " of " << cache.block_size << ", " << cache.layers << " layers\n";
  if (cache.recurrent.layers > 0) {  // the DeltaNet layers' per-sequence state (docs/layers.md, "The hybrid layer")
    std::cout << "state    " << cache.recurrent.bytes << " bytes per sequence in each of " << cache.recurrent.layers
              << " recurrent layers, " << cache.recurrent.max_sequences << " slot(s)\n";
  }
}

double rate(double count, double seconds) { return seconds > 0 ? count / seconds : 0; }

// Speculation's counts: verifications, drafts proposed and accepted, their ratios.
nlohmann::json speculation_json(const SpeculationParams& s, const EngineStats& st) {
  return {{"method", speculation_method_name(s.method)},
          {"draft_tokens", s.draft_tokens},
          {"ngram", {s.ngram_max, s.ngram_min}},
          {"verifications", st.verifications},
          {"drafted_tokens", st.drafted_tokens},
          {"accepted_tokens", st.accepted_tokens},
          {"acceptance_rate", rate(double(st.accepted_tokens), double(st.drafted_tokens))},
          {"mean_accepted_length", rate(double(st.accepted_tokens), double(st.verifications))},
          {"replayed_tokens", st.replayed_tokens},
          {"decode_rows", st.decode_rows}};
}

std::string speculation_line(const SpeculationParams& s, const EngineStats& st) {
  char line[320];
  std::snprintf(line, sizeof line,
                "speculate %s: %llu verifications, %llu of %llu drafts accepted (rate %.3f), mean accepted length %.2f "
                "drafts per verification; %llu decode rows for %llu tokens\n",
                s.describe().c_str(), static_cast<unsigned long long>(st.verifications),
                static_cast<unsigned long long>(st.accepted_tokens), static_cast<unsigned long long>(st.drafted_tokens),
                rate(double(st.accepted_tokens), double(st.drafted_tokens)),
                rate(double(st.accepted_tokens), double(st.verifications)), static_cast<unsigned long long>(st.decode_rows),
                static_cast<unsigned long long>(st.decode_tokens));
  return line;
}

nlohmann::json result_json(Backend& b, const OpenedModel& opened, const GenerateCliOptions& o,
                           const std::vector<std::vector<int32_t>>& prompts, const GenerateResult& r) {
  nlohmann::json seqs = nlohmann::json::array();
  for (size_t p = 0; p < prompts.size(); ++p) {
    seqs.push_back({{"prompt", prompts[p]}, {"generated", r.generated[p]}, {"admitted_step", r.admitted_step[p]},
                    {"finished_step", r.finished_step[p]}, {"drafts", r.drafts[p]}});
  }
  const GenerateOptions g = generate_options(o);
  return {{"backend", b.name()},
          {"target", b.target()},
          {"weights", {{"source", opened.weights_source}, {"quantization", opened.quantization},
                       {"bytes", opened.model->weight_bytes()}}},
          {"tiers", opened.model->tiers()},
          {"kv_cache", {{"tokens", r.cache.capacity_tokens()}, {"block_size", r.cache.block_size},
                        {"blocks", r.cache.num_blocks}, {"layers", r.cache.layers}}},
          {"recurrent_state", {{"layers", r.cache.recurrent.layers}, {"bytes_per_sequence", r.cache.recurrent.bytes},
                               {"slots", r.cache.recurrent.max_sequences}}},
          {"memory", memory_json(opened.load)},
          {"sampling", o.sampling.describe()},
          {"speculation", speculation_json(g.speculation, r.stats)},
          {"steps", r.stats.steps},
          {"ids_chosen_on_backend", r.stats.ids_chosen_on_backend},
          {"sequences", seqs},
          {"prefill_tokens", r.stats.prefill_tokens},
          {"prefill_seconds", r.stats.prefill_seconds},
          {"prefill_tokens_per_s", rate(double(r.stats.prefill_tokens), r.stats.prefill_seconds)},
          {"decode_tokens", r.stats.decode_tokens},
          {"decode_seconds", r.stats.decode_seconds},
          {"decode_tokens_per_s", rate(double(r.stats.decode_tokens), r.stats.decode_seconds)},
          {"output", o.output.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.output)},
          {"audit", nlohmann::json::parse(render_audit_json(opened.audit))}};
}

void generate(CliContext& ctx, const GenerateCliOptions& o) {
  if (o.max_new_tokens == 0) throw Error(Status::invalid_argument, "--max-new-tokens must be at least 1");
  if (o.prefill_chunk == 0) throw Error(Status::invalid_argument, "--prefill-chunk must be at least 1");
  if (parse_speculation_method(o.speculate) != SpeculationMethod::none && !o.sampling.greedy()) {
    // The acceptance rule for sampled tokens (accept with min(1, p/q), resample the residual) is not built.
    throw Refusal("--speculate " + o.speculate + " with --temperature " + std::to_string(o.sampling.temperature) +
                  ": speculative decoding is greedy only here (the sampling acceptance rule is not built)");
  }
  const std::vector<std::vector<int32_t>> prompts = read_prompts(o);
  StderrProgress progress(!o.quiet);
  auto backend = ctx.registry().select(o.backend.empty() ? std::nullopt : std::optional(o.backend));
  Backend& b = *backend;
  LayerRequest request;
  request.weights = o.weights;
  request.model = o.model;
  request.seed = o.seed;
  request.per_expert = o.per_expert;
  apply_tier_flags(o.tiers, request);
  request.progress = [&progress](const std::string& stage, double fraction) { progress.report(stage, fraction); };
  OpenedModel opened = open_model(b, request);
  GenerateOptions g = generate_options(o);
  g.progress = request.progress;
  const GenerateResult r = generate_tokens(b, *opened.model, prompts, g);
  progress.finish("generate");
  const uint32_t vocab = opened.model->config().vocab_size;
  if (!o.output.empty()) write_output(o.output, r, vocab, o.max_new_tokens);
  const double prefill_tps = rate(double(r.stats.prefill_tokens), r.stats.prefill_seconds);
  const double decode_tps = rate(double(r.stats.decode_tokens), r.stats.decode_seconds);
  if (o.json || ctx.json) {
    std::cout << result_json(b, opened, o, prompts, r).dump(2) << '\n';
    return;
  }
  print_model(b, opened, r.cache);
  std::cout << "\naudit: the lookups made building the model\n"
            << render_audit_table(opened.audit) << '\n';
  if (!o.sampling.greedy()) std::cout << "sampling " << o.sampling.describe() << '\n';
  if (g.speculation.enabled()) std::cout << speculation_line(g.speculation, r.stats);
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::cout << "sequence " << p << ": prompt " << prompts[p].size() << " tokens, generated " << id_list(r.generated[p]) << '\n';
  }
  char line[160];
  std::snprintf(line, sizeof line, "prefill  %llu tokens in %.3f s: %.1f tokens/s\ndecode   %llu tokens in %.3f s: %.1f tokens/s\n",
                static_cast<unsigned long long>(r.stats.prefill_tokens), r.stats.prefill_seconds, prefill_tps,
                static_cast<unsigned long long>(r.stats.decode_tokens), r.stats.decode_seconds, decode_tps);
  std::cout << line;
  if (!o.output.empty()) std::cout << "output   " << o.output << " (ids I32 [B, N], logits F32 [B, N, vocab])\n";
}

}  // namespace

void register_generate(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<GenerateCliOptions>();
  auto* cmd = app.add_subcommand("generate", "A checkpoint's whole model from token ids: greedy or sampled, continuously batched");
  std::string preset_names;
  for (const auto& p : decoder_presets()) preset_names += "\n  " + std::string(p.name) + ": " + std::string(p.description);
  auto* weights = cmd->add_option("--weights", o->weights,
                                  "The checkpoint: a directory (or its .safetensors / index) with config.json beside it");
  auto* model = cmd->add_option("--model", o->model,
                                "Without --weights: a model preset or a config.json, on synthetic weights from --seed "
                                "(--weight-quantization, default bf16):" + preset_names);
  weights->excludes(model);
  cmd->add_option("--seed", o->seed, "Seed of synthetic weights")->capture_default_str();
  cmd->add_option("--prompt-ids", o->prompt_ids, "One prompt: comma-separated token ids, e.g. 1,2,3");
  cmd->add_option("--batch-file", o->batch_file,
                  "Several prompts: a .safetensors file with 'ids' I32/I64 [B, L] and optionally 'lengths' [B]");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate per prompt")->capture_default_str();
  cmd->add_option("--output", o->output,
                  "Write 'ids' I32 [B, N] and 'logits' F32 [B, N, vocab] (with --prompt-logits also 'prompt_logits' [B, L, vocab])");
  cmd->add_flag("--prompt-logits", o->prompt_logits, "Keep the logits of every prompt position (for --output)");
  cmd->add_option("--kv-tokens", o->kv_tokens, "KV cache capacity in tokens (default: the prompts plus the new tokens)");
  cmd->add_option("--block-size", o->block_size, "KV cache block size in tokens (a power of two, 1..256)")->capture_default_str();
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens of one sequence per step, at most")->capture_default_str();
  cmd->add_option("--token-budget", o->token_budget,
                  "Rows per step: the running decodes first, prefill chunks in the rest (default: --prefill-chunk plus one per prompt)");
  cmd->add_option("--arrival-steps", o->arrival_steps,
                  "The step each prompt arrives at, comma-separated, one per prompt (default: all at step 0); "
                  "a prompt is admitted once it has arrived and the cache can reserve its tokens");
  cmd->add_option("--temperature", o->sampling.temperature, "0: greedy; > 0: sample from softmax(logits / temperature)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Sample among the k most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Sample among the most likely tokens whose probabilities reach p")
      ->capture_default_str();
  cmd->add_option("--sample-seed", o->sampling.seed, "Seed of the sampling draws (each request's n-th draw is fixed by it)")
      ->capture_default_str();
  cmd->add_option("--speculate", o->speculate,
                  "Speculative decoding, greedy only: ngram (prompt lookup: drafts that followed the last 3..1 tokens "
                  "earlier in the sequence, verified in one step; the ids are plain decoding's) or none")
      ->capture_default_str();
  cmd->add_option("--draft-tokens", o->draft_tokens, "With --speculate: draft tokens per verification, at most (1..64)")
      ->capture_default_str();
  cmd->add_option("--backend", o->backend, "Backend (default: METRALE_BACKEND or the highest priority)");
  cmd->add_flag("--per-expert", o->per_expert, "MoE: skip the grouped-expert kernel and launch per expert");
  add_tier_flags(*cmd, o->tiers);
  cmd->add_flag("--json", o->json, "Machine-readable JSON on stdout");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([&ctx, o] { generate(ctx, *o); });
}

}  // namespace metrale::cli
