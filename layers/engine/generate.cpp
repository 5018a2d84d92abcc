// SPDX-License-Identifier: MIT OR Apache-2.0
#include "engine/generate.hpp"

#include "engine/engine.hpp"

#include <metrale/status.hpp>

namespace metrale::layers {

GenerateResult generate_tokens(Backend& backend, DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const GenerateOptions& o) {
  if (prompts.empty()) throw Error(Status::invalid_argument, "generate: no prompt");
  if (!o.arrival_steps.empty() && o.arrival_steps.size() != prompts.size()) {
    throw Error(Status::invalid_argument, "generate: " + std::to_string(o.arrival_steps.size()) + " arrival steps for " +
                                              std::to_string(prompts.size()) + " prompts (one each, or none)");
  }
  if (o.block_size == 0) throw Error(Status::invalid_argument, "generate: block_size must be at least 1");
  GenerateResult r;
  // Room for every prompt at once unless told otherwise.
  uint64_t blocks = 0;
  for (const auto& p : prompts) blocks += request_blocks(p.size(), std::max(o.max_new_tokens, 1u), o.block_size);
  r.cache = model.cache_shape(o.kv_tokens ? o.kv_tokens : blocks * o.block_size, o.block_size,
                              static_cast<uint32_t>(prompts.size()));
  StatePool pool(backend, r.cache);
  EngineOptions options;
  options.prefill_chunk = o.prefill_chunk;
  options.token_budget = o.token_budget ? o.token_budget : o.prefill_chunk + static_cast<uint32_t>(prompts.size());
  Engine engine(backend, model, pool, options);
  for (size_t p = 0; p < prompts.size(); ++p) {
    EngineRequest request;
    request.prompt = prompts[p];
    request.max_new_tokens = o.max_new_tokens;
    request.sampling = o.sampling;
    request.speculation = o.speculation;
    request.arrival_step = o.arrival_steps.empty() ? 0 : o.arrival_steps[p];
    request.keep_logits = o.keep_logits;
    request.keep_prompt_logits = o.prompt_logits;
    engine.submit(std::move(request));  // request p is prompt p (its messages say "request p")
  }
  if (o.progress) engine.progress = [&](uint64_t done, uint64_t all) { o.progress("generate", double(done) / double(all)); };
  engine.run();
  for (size_t p = 0; p < prompts.size(); ++p) {
    const Completion& c = engine.completion(static_cast<uint32_t>(p));
    r.generated.push_back(c.generated);
    r.logits.push_back(c.logits);
    if (o.prompt_logits) r.prompt_logits.push_back(c.prompt_logits);
    r.admitted_step.push_back(c.admitted_step);
    r.finished_step.push_back(c.finished_step);
    r.drafts.push_back(c.drafts);
  }
  r.stats = engine.stats();
  return r;
}

}  // namespace metrale::layers
