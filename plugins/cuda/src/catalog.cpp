// SPDX-License-Identifier: MIT OR Apache-2.0
#include "catalog.hpp"

#include "errors.hpp"

#include <nlohmann/json.hpp>

namespace metrale::cuda {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& origin, const std::string& pointer, const std::string& what) {
  throw PluginError(METRALE_STATUS_INVALID_ARGUMENT, origin + ": " + pointer + ": " + what);
}

const json& member(const json& object, const char* key, const std::string& origin,
                   const std::string& pointer) {
  if (!object.is_object()) bad(origin, pointer, "expected an object");
  const auto it = object.find(key);
  if (it == object.end()) bad(origin, pointer + "/" + key, "missing");
  return *it;
}

std::string string_member(const json& object, const char* key, const std::string& origin,
                          const std::string& pointer) {
  const json& value = member(object, key, origin, pointer);
  if (!value.is_string()) bad(origin, pointer + "/" + key, "expected a string");
  return value.get<std::string>();
}

metrale_param_type param_type(const std::string& name, const std::string& origin, const std::string& pointer) {
  metrale_param_type type;
  if (metrale_param_type_parse(name.c_str(), &type)) return type;
  bad(origin, pointer, "unknown parameter type \"" + name + "\" (ptr, u32, i32, u64, i64, f32, f64)");
}

}  // namespace

uint32_t param_size(metrale_param_type type) noexcept {
  switch (type) {
    case METRALE_PARAM_U32:
    case METRALE_PARAM_I32:
    case METRALE_PARAM_F32:
      return 4;
    case METRALE_PARAM_PTR:
    case METRALE_PARAM_U64:
    case METRALE_PARAM_I64:
    case METRALE_PARAM_F64:
      return 8;
  }
  return 0;
}

const char* param_type_text(metrale_param_type type) noexcept {
  const char* name = metrale_param_type_name(type);
  return name ? name : "?";
}

const CatalogKernel* CatalogModule::find(std::string_view kernel) const {
  for (const auto& k : kernels) {
    if (k.name == kernel) return &k;
  }
  return nullptr;
}

const CatalogModule* Catalog::find(std::string_view module) const {
  for (const auto& m : modules_) {
    if (m.name == module) return &m;
  }
  return nullptr;
}

Catalog Catalog::parse(const std::string& manifest_json, const std::string& origin) {
  json doc;
  try {
    doc = json::parse(manifest_json);
  } catch (const json::exception& e) {
    bad(origin, "", std::string("not valid JSON: ") + e.what());
  }
  Catalog catalog;
  const json& modules = member(doc, "modules", origin, "");
  if (!modules.is_array()) bad(origin, "/modules", "expected an array");
  for (size_t i = 0; i < modules.size(); ++i) {
    const std::string mp = "/modules/" + std::to_string(i);
    CatalogModule module;
    module.name = string_member(modules[i], "name", origin, mp);
    // A JIT backend cannot provide a module without a source.
    module.source = string_member(modules[i], "source", origin, mp);
    const json& kernels = member(modules[i], "kernels", origin, mp);
    if (!kernels.is_array()) bad(origin, mp + "/kernels", "expected an array");
    for (size_t j = 0; j < kernels.size(); ++j) {
      const std::string kp = mp + "/kernels/" + std::to_string(j);
      CatalogKernel kernel;
      kernel.name = string_member(kernels[j], "name", origin, kp);
      const json& params = member(kernels[j], "params", origin, kp);
      if (!params.is_array()) bad(origin, kp + "/params", "expected an array");
      for (size_t p = 0; p < params.size(); ++p) {
        const std::string pp = kp + "/params/" + std::to_string(p);
        kernel.params.push_back(param_type(string_member(params[p], "type", origin, pp), origin, pp + "/type"));
      }
      if (kernels[j].contains("min_target")) {
        const std::string text = string_member(kernels[j], "min_target", origin, kp);
        kernel.min_target = parse_target(text);
        if (!kernel.min_target) bad(origin, kp + "/min_target", "\"" + text + "\" is not a CUDA target (sm_XY[a|f])");
      }
      module.kernels.push_back(std::move(kernel));
    }
    catalog.modules_.push_back(std::move(module));
  }
  for (const auto& module : catalog.modules_) {
    for (const auto& kernel : module.kernels) {
      catalog.descriptors_.push_back({module.name.c_str(), kernel.name.c_str(), kernel.params.data(),
                                      static_cast<uint32_t>(kernel.params.size())});
    }
  }
  return catalog;
}

}  // namespace metrale::cuda
