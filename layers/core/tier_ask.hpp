// SPDX-License-Identifier: MIT OR Apache-2.0
// A tier asked for by name (docs/quantization.md). Public: programs fill TierAsks into a
// LayerRequest (layer_request.hpp, installed); core/tier_request.hpp turns them into requests.
#pragma once

#include <string>

namespace metrale::layers {

// `value` as given ("int8"; empty: not asked) and `by`, the caller's name for the option that
// carries it ("--activation-quantization" in the CLI), so that messages and the audit say
// "--activation-quantization int8". The layers know no flag.
struct TierAsk {
  std::string value;
  std::string by;
  std::string source() const { return by + " " + value; }
};

}  // namespace metrale::layers
