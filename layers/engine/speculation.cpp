// SPDX-License-Identifier: MIT OR Apache-2.0
#include "engine/speculation.hpp"

#include <metrale/status.hpp>

#include <algorithm>

namespace metrale::layers {

namespace {

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const SpeculationParams& p) : max_(p.ngram_max), min_(p.ngram_min) {}
  std::vector<int32_t> propose(std::span<const int32_t> context, uint32_t max_tokens) override {
    return ngram_lookup(context, max_tokens, max_, min_);
  }

 private:
  uint32_t max_, min_;
};

}  // namespace

void SpeculationParams::validate() const {
  if (draft_tokens > kMaxDraftTokens) {
    throw Error(Status::invalid_argument, "speculation: " + std::to_string(draft_tokens) + " draft tokens; at most " +
                                              std::to_string(kMaxDraftTokens));
  }
  if (ngram_min < 1 || ngram_min > ngram_max) {
    throw Error(Status::invalid_argument, "speculation: n-gram range " + std::to_string(ngram_max) + ".." +
                                              std::to_string(ngram_min) + "; expected 1 <= min <= max");
  }
}

std::string SpeculationParams::describe() const {
  if (!enabled()) return "none";
  if (drafter) return "the caller's drafter, " + std::to_string(draft_tokens) + " draft tokens";
  return std::string(speculation_method_name(method)) + " (" + std::to_string(ngram_max) + ".." + std::to_string(ngram_min) +
         "), " + std::to_string(draft_tokens) + " draft tokens";
}

SpeculationMethod parse_speculation_method(std::string_view name) {
  if (name == "none") return SpeculationMethod::none;
  if (name == "ngram") return SpeculationMethod::ngram;
  throw Error(Status::invalid_argument, "speculation '" + std::string(name) + "': expected none or ngram");
}

std::string_view speculation_method_name(SpeculationMethod method) noexcept {
  return method == SpeculationMethod::ngram ? "ngram" : "none";
}

std::vector<int32_t> ngram_lookup(std::span<const int32_t> context, uint32_t max_tokens, uint32_t ngram_max,
                                  uint32_t ngram_min) {
  const size_t size = context.size();
  if (max_tokens == 0) return {};
  for (uint32_t n = ngram_max; n >= std::max(ngram_min, 1u); --n) {
    if (n >= size) continue;  // an earlier occurrence needs a token after it
    const std::span<const int32_t> tail = context.last(n);
    for (size_t i = size - n; i-- > 0;) {  // latest first; i + n < size: a token follows
      if (std::equal(tail.begin(), tail.end(), context.begin() + static_cast<std::ptrdiff_t>(i))) {
        const size_t from = i + n, count = std::min<size_t>(max_tokens, size - from);
        return {context.begin() + static_cast<std::ptrdiff_t>(from), context.begin() + static_cast<std::ptrdiff_t>(from + count)};
      }
    }
  }
  return {};
}

std::shared_ptr<Drafter> make_drafter(const SpeculationParams& params) {
  if (!params.enabled()) return nullptr;
  if (params.drafter) return params.drafter;
  return std::make_shared<NgramDrafter>(params);
}

}  // namespace metrale::layers
