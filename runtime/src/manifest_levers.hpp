// SPDX-License-Identifier: MIT OR Apache-2.0
// The levers a manifest declares: registering them in the lever registry (so `metrale levers`,
// start-up validation and "did you mean" see them) and turning their values into create()
// options and the device index. Internal to the runtime.
#pragma once

#include <metrale/manifest.hpp>
#include <metrale/plugin_abi.h>

#include <optional>
#include <string>
#include <vector>

namespace metrale {

// Registers the manifest's levers, declared by "backend <name>" in the manifest's file. A lever
// another declarer already has with a different spec registers nothing and returns the problem,
// one line naming the manifest, the JSON pointer and the other declaration.
std::optional<std::string> declare_manifest_levers(const Manifest& manifest);

// The create() inputs the manifest's levers yield: options (only for levers that are set) and the
// device index (0 unless a lever with option "device_index" is set). Throws Refusal naming the
// variable, the value, what was expected and the declaring manifest when a value does not parse.
class LeverOptions {
 public:
  explicit LeverOptions(const Manifest& manifest);
  LeverOptions(const LeverOptions&) = delete;  // options_ points into storage_
  LeverOptions& operator=(const LeverOptions&) = delete;
  const metrale_option* data() const noexcept { return options_.data(); }
  uint32_t count() const noexcept { return static_cast<uint32_t>(options_.size()); }
  uint32_t device_index() const noexcept { return device_index_; }

 private:
  std::vector<std::pair<std::string, std::string>> storage_;
  std::vector<metrale_option> options_;
  uint32_t device_index_ = 0;
};

}  // namespace metrale
