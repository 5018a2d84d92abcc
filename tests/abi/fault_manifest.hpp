// SPDX-License-Identifier: MIT OR Apache-2.0
// What a fault plugin reads from the manifest it is given: its target and the kernels it lists.
// Compiled once and linked into every fault plugin variant, so the JSON parser is not rebuilt per
// variant. Throws std::exception on a malformed manifest; create() turns that into a status.
#pragma once

#include <metrale/plugin_abi.h>

#include <string>
#include <vector>

namespace fault {

struct ListedKernel {
  std::string module, name;
  std::vector<metrale_param_type> params;
  bool last_of_module = false;  // FAULT_LISTED_NOT_PROVIDED leaves these out
};

struct ListedManifest {
  std::string target;  // the first of "targets", "" when it lists none
  std::vector<ListedKernel> kernels;
};

// `manifest_json` may be null (an empty manifest).
ListedManifest read_manifest(const char* manifest_json);

}  // namespace fault
