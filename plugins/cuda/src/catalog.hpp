// SPDX-License-Identifier: MIT OR Apache-2.0
// The modules and kernels this plugin promises, read from the manifest text the runtime hands
// to create() (or the compile entry point). The runtime has validated the manifest already; the
// plugin still checks each field it uses and says which one is wrong.
#pragma once

#include "targets.hpp"

#include <metrale/plugin_abi.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::cuda {

struct CatalogKernel {
  std::string name;
  std::vector<metrale_param_type> params;
  std::optional<Target> min_target;
};

struct CatalogModule {
  std::string name;
  std::string source;  // file name in a kernel source directory
  std::vector<CatalogKernel> kernels;
  const CatalogKernel* find(std::string_view kernel) const;
};

class Catalog {
 public:
  // Throws PluginError(INVALID_ARGUMENT) naming the JSON pointer of a bad field.
  static Catalog parse(const std::string& manifest_json, const std::string& origin);

  const std::vector<CatalogModule>& modules() const noexcept { return modules_; }
  const CatalogModule* find(std::string_view module) const;
  // The list_kernels() array: stable for the catalog's lifetime (pointers into modules_).
  const std::vector<metrale_kernel_desc>& descriptors() const noexcept { return descriptors_; }

  Catalog() = default;
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;
  Catalog(Catalog&&) = default;
  Catalog& operator=(Catalog&&) = default;

 private:
  std::vector<CatalogModule> modules_;
  std::vector<metrale_kernel_desc> descriptors_;
};

// Bytes a parameter of this type occupies in the kernel's parameter buffer.
uint32_t param_size(metrale_param_type type) noexcept;
const char* param_type_text(metrale_param_type type) noexcept;

}  // namespace metrale::cuda
