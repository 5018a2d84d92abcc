// SPDX-License-Identifier: MIT OR Apache-2.0
// The kernel catalogue: every kernel docs/kernels.md documents, with its parameter names and
// types (manifests/catalogue.json, built into the runtime and installed beside the manifest
// schema). A manifest that lists a documented kernel must list it in its documented module with
// exactly the documented parameters, and a documented module holds documented kernels only;
// check() reports each difference at its JSON pointer. Pure functions; the built-in catalogue is
// parsed once, thread-safely.
#pragma once

#include <metrale/manifest.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace metrale {

struct CatalogueKernel {
  std::string module;
  std::string name;
  std::vector<KernelParam> params;
};

// One difference between a manifest and the catalogue.
struct CatalogueFinding {
  std::string module;   // as the manifest lists it
  std::string kernel;   // as the manifest lists it
  std::string pointer;  // JSON pointer into the manifest
  std::string message;  // what docs/kernels.md documents and what the manifest says
};

class KernelCatalogue {
 public:
  // Parses catalogue JSON (the format of manifests/catalogue.json). Throws Error(invalid_argument)
  // naming `source` and the offending key.
  static KernelCatalogue parse(std::string_view json, std::string_view source);
  // The catalogue built into this runtime.
  static const KernelCatalogue& documented();

  const std::vector<CatalogueKernel>& kernels() const noexcept { return kernels_; }
  const CatalogueKernel* find(std::string_view module, std::string_view name) const noexcept;
  // The documented kernel of this name in any module, or nullptr.
  const CatalogueKernel* find_name(std::string_view name) const noexcept;
  bool documents_module(std::string_view module) const noexcept;

  // Every kernel of `manifest` against the catalogue, in the manifest's order.
  std::vector<CatalogueFinding> check(const Manifest& manifest) const;

 private:
  std::vector<CatalogueKernel> kernels_;
};

// "(x: ptr, m: u32)": a parameter list as docs/kernels.md writes it.
std::string format_params(const std::vector<KernelParam>& params);

// What `metrale check-manifest` adds to validation, without loading anything: an abi_version this
// runtime does not speak, and the catalogue's findings. `file` names the manifest in the problems.
std::vector<ManifestProblem> contract_problems(const Manifest& manifest, const std::filesystem::path& file);

}  // namespace metrale
