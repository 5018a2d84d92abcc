// SPDX-License-Identifier: MIT OR Apache-2.0
#include "manifest_levers.hpp"

#include <metrale/levers.hpp>

namespace metrale {

namespace {

LeverSpec spec_of(const ManifestLever& lever, const std::string& declared_by, const std::string& declared_in) {
  LeverSpec spec{lever.name, lever.type, lever.default_text, lever.meaning, {}, lever.path_like,
                 declared_by, declared_in};
  for (const auto& choice : lever.choices) spec.choices.emplace_back(choice);
  return spec;
}

}  // namespace

std::optional<std::string> declare_manifest_levers(const Manifest& manifest) {
  const std::string declared_by = "backend " + manifest.backend;
  const std::string declared_in = manifest.path.string();
  std::vector<LeverSpec> specs;
  for (size_t i = 0; i < manifest.levers.size(); ++i) {
    specs.push_back(spec_of(manifest.levers[i], declared_by, declared_in));
    if (auto conflict = lever_conflict(specs.back()))
      return declared_in + ": /levers/" + std::to_string(i) + "/name: " + *conflict +
             " (a lever may be declared again only identically)";
  }
  register_levers(specs);  // the views in specs are copied by the registry
  return std::nullopt;
}

LeverOptions::LeverOptions(const Manifest& manifest) {
  for (const auto& lever : manifest.levers) {
    auto value = lever_checked(lever.name);
    if (!value) continue;
    if (lever.option == kDeviceIndexOption) {
      device_index_ = lever_u32(lever.name).value_or(0);
      continue;
    }
    storage_.emplace_back(lever.option, *value);
  }
  for (const auto& [key, value] : storage_) options_.push_back({key.c_str(), value.c_str()});
}

}  // namespace metrale
