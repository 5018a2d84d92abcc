// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/catalogue.hpp>
#include <metrale/names.hpp>
#include <metrale/status.hpp>

#include "catalogue_data.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace metrale {

namespace {

using json = nlohmann::json;

const json& member(const json& object, const char* key, json::value_t type, const std::string& where) {
  auto it = object.find(key);
  const bool ok = it != object.end() && (it->type() == type || (type == json::value_t::string && it->is_string()));
  if (!ok) {
    throw Error(Status::invalid_argument,
                where + ": expected key \"" + key + "\" of type " + json(type).type_name());
  }
  return *it;
}

std::string string_member(const json& object, const char* key, const std::string& where) {
  return member(object, key, json::value_t::string, where).get<std::string>();
}

std::vector<KernelParam> parse_params(const json& kernel, const std::string& where) {
  std::vector<KernelParam> params;
  const json& list = member(kernel, "params", json::value_t::array, where);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + "/params/" + std::to_string(i);
    if (!list[i].is_object()) throw Error(Status::invalid_argument, at + ": expected a parameter object");
    const std::string type = string_member(list[i], "type", at);
    auto parsed = param_type_from_name(type);
    if (!parsed) throw Error(Status::invalid_argument, at + "/type: unknown parameter type \"" + type + "\"");
    params.push_back({string_member(list[i], "name", at), *parsed});
  }
  return params;
}

std::string format_param(const KernelParam& p) { return p.name + ": " + param_type_name(p.type); }

// The first way `got` differs from `want`, in words.
std::string first_difference(const std::vector<KernelParam>& got, const std::vector<KernelParam>& want) {
  const size_t common = std::min(got.size(), want.size());
  for (size_t i = 0; i < common; ++i) {
    if (got[i].name != want[i].name || got[i].type != want[i].type) {
      return "parameter " + std::to_string(i + 1) + " is " + format_param(got[i]) + ", documented " + format_param(want[i]);
    }
  }
  if (got.size() < want.size()) return "parameter " + std::to_string(common + 1) + " (" + format_param(want[common]) + ") is missing";
  return "parameter " + std::to_string(common + 1) + " (" + format_param(got[common]) + ") is not documented";
}

bool same_params(const std::vector<KernelParam>& a, const std::vector<KernelParam>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const KernelParam& x, const KernelParam& y) { return x.name == y.name && x.type == y.type; });
}

// The finding for a kernel of a documented module that the catalogue does not have.
std::string undocumented_in_module(const KernelCatalogue& catalogue, const std::string& module, const std::string& name) {
  std::vector<std::string_view> names;
  for (const auto& k : catalogue.kernels())
    if (k.module == module) names.push_back(k.name);
  std::string message = "module " + module + " is documented in docs/kernels.md, and " + name + " is not one of its kernels";
  if (auto near = likely_typo_of(name, names)) message += " (did you mean " + *near + "?)";
  return message;
}

}  // namespace

std::string format_params(const std::vector<KernelParam>& params) {
  std::string out = "(";
  for (size_t i = 0; i < params.size(); ++i) out += (i ? ", " : "") + format_param(params[i]);
  return out + ")";
}

KernelCatalogue KernelCatalogue::parse(std::string_view text, std::string_view source) {
  const std::string where(source);
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) throw Error(Status::invalid_argument, where + ": not a JSON object");
  KernelCatalogue catalogue;
  const json& modules = member(doc, "modules", json::value_t::array, where);
  for (size_t m = 0; m < modules.size(); ++m) {
    const std::string at = where + ": /modules/" + std::to_string(m);
    const std::string module = string_member(modules[m], "name", at);
    const json& kernels = member(modules[m], "kernels", json::value_t::array, at);
    for (size_t k = 0; k < kernels.size(); ++k) {
      const std::string kernel_at = at + "/kernels/" + std::to_string(k);
      CatalogueKernel kernel{module, string_member(kernels[k], "name", kernel_at), parse_params(kernels[k], kernel_at)};
      if (catalogue.find_name(kernel.name)) {
        throw Error(Status::invalid_argument, kernel_at + ": kernel " + kernel.name + " is catalogued twice");
      }
      catalogue.kernels_.push_back(std::move(kernel));
    }
  }
  return catalogue;
}

const KernelCatalogue& KernelCatalogue::documented() {
  static const KernelCatalogue catalogue = parse(detail::kCatalogueJson, "built-in kernel catalogue (manifests/catalogue.json)");
  return catalogue;
}

const CatalogueKernel* KernelCatalogue::find(std::string_view module, std::string_view name) const noexcept {
  for (const auto& k : kernels_)
    if (k.module == module && k.name == name) return &k;
  return nullptr;
}

const CatalogueKernel* KernelCatalogue::find_name(std::string_view name) const noexcept {
  for (const auto& k : kernels_)
    if (k.name == name) return &k;
  return nullptr;
}

bool KernelCatalogue::documents_module(std::string_view module) const noexcept {
  return std::any_of(kernels_.begin(), kernels_.end(), [&](const CatalogueKernel& k) { return k.module == module; });
}

std::vector<CatalogueFinding> KernelCatalogue::check(const Manifest& manifest) const {
  std::vector<CatalogueFinding> findings;
  for (size_t m = 0; m < manifest.modules.size(); ++m) {
    const ManifestModule& module = manifest.modules[m];
    const std::string at = "/modules/" + std::to_string(m);
    for (size_t k = 0; k < module.kernels.size(); ++k) {
      const ManifestKernel& kernel = module.kernels[k];
      const std::string kernel_at = at + "/kernels/" + std::to_string(k);
      const std::string label = module.name + "/" + kernel.name;
      if (const CatalogueKernel* documented = find(module.name, kernel.name)) {
        if (!same_params(kernel.params, documented->params)) {
          findings.push_back({module.name, kernel.name, kernel_at + "/params",
                              label + " declares " + format_params(kernel.params) + ", docs/kernels.md documents " +
                                  format_params(documented->params) + ": " +
                                  first_difference(kernel.params, documented->params)});
        }
      } else if (documents_module(module.name)) {
        findings.push_back({module.name, kernel.name, kernel_at + "/name", undocumented_in_module(*this, module.name, kernel.name)});
      } else if (const CatalogueKernel* elsewhere = find_name(kernel.name)) {
        findings.push_back({module.name, kernel.name, at + "/name",
                            kernel.name + " is documented in module " + elsewhere->module + ", not in module " +
                                module.name + " (a documented kernel keeps its module)"});
      }
    }
  }
  return findings;
}

std::vector<ManifestProblem> contract_problems(const Manifest& manifest, const std::filesystem::path& file) {
  std::vector<ManifestProblem> problems;
  if (manifest.abi_version < METRALE_ABI_VERSION_MIN || manifest.abi_version > METRALE_ABI_VERSION) {
    problems.push_back({file, "/abi_version",
                        "plugin ABI " + std::to_string(manifest.abi_version) + " is not one this runtime speaks (" +
                            std::to_string(METRALE_ABI_VERSION_MIN) + ".." + std::to_string(METRALE_ABI_VERSION) +
                            "): the plugin cannot be loaded here"});
  }
  for (auto& finding : KernelCatalogue::documented().check(manifest))
    problems.push_back({file, std::move(finding.pointer), std::move(finding.message)});
  return problems;
}

}  // namespace metrale
