// SPDX-License-Identifier: MIT OR Apache-2.0
// PluginLibrary: one loaded plugin shared object, after the version handshake. Internal to the
// runtime. Lives as long as any Backend made from it (shared ownership), so code and strings the
// plugin handed out stay valid.
#pragma once

#include <metrale/manifest.hpp>
#include <metrale/plugin_abi.h>
#include <metrale/status.hpp>

#include <boost/dll/shared_library.hpp>

#include <memory>
#include <string>

namespace metrale {

class PluginLibrary {
 public:
  // Checks the file (exists, ELF, checksum pin), loads it RTLD_LOCAL|RTLD_NOW, resolves the entry
  // symbol, negotiates the ABI and validates the table. Throws Error with one precise message.
  static std::shared_ptr<PluginLibrary> open(const Manifest& manifest);

  const metrale_plugin_table& table() const noexcept { return *table_; }
  uint32_t abi_version() const noexcept { return abi_version_; }
  const std::string& backend_name() const noexcept { return backend_name_; }
  const std::string& version() const noexcept { return version_; }
  const std::string& description() const noexcept { return description_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  // NUL-terminated backend name handed to the plugin as the log callback's user pointer.
  const char* log_tag() const noexcept { return backend_name_.c_str(); }
  // Callbacks lent to every instance of this plugin; they live as long as the library.
  const metrale_host_callbacks& host_callbacks() const noexcept { return host_; }
  // Whether the table has a get_proc_address (struct_size covers it and it is not NULL).
  bool offers_extensions() const noexcept;
  // The plugin's extension entry point `name`, or nullptr (none by that name, or no extensions).
  void* proc_address(const std::string& name) const;

 private:
  boost::dll::shared_library library_;
  const metrale_plugin_table* table_ = nullptr;
  uint32_t abi_version_ = 0;
  std::string backend_name_;
  std::string version_;
  std::string description_;
  std::filesystem::path path_;
  metrale_host_callbacks host_{};
};

// "xxh3-64:<16 hex digits>" of a file's bytes.
std::string file_checksum(const std::filesystem::path& file);

}  // namespace metrale
