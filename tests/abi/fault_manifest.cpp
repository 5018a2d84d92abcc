// SPDX-License-Identifier: MIT OR Apache-2.0
#include "fault_manifest.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>

namespace fault {

namespace {

metrale_param_type type_of(const std::string& name) {
  metrale_param_type type;
  if (!metrale_param_type_parse(name.c_str(), &type)) throw std::invalid_argument("unknown parameter type " + name);
  return type;
}

}  // namespace

ListedManifest read_manifest(const char* manifest_json) {
  const auto manifest = nlohmann::json::parse(manifest_json ? manifest_json : "{}");
  ListedManifest out;
  if (manifest.contains("targets") && !manifest["targets"].empty()) out.target = manifest["targets"][0];
  for (const auto& module : manifest.value("modules", nlohmann::json::array())) {
    const auto& kernels = module["kernels"];
    for (size_t k = 0; k < kernels.size(); ++k) {
      ListedKernel kernel{module["name"], kernels[k]["name"], {}, k + 1 == kernels.size()};
      for (const auto& p : kernels[k]["params"]) kernel.params.push_back(type_of(p["type"]));
      out.kernels.push_back(std::move(kernel));
    }
  }
  return out;
}

}  // namespace fault
