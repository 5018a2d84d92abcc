// SPDX-License-Identifier: MIT OR Apache-2.0
// Helpers the runtime's test programs share: temporary directories, manifests written into them,
// and scoped environment changes that also reset the lever cache.
#pragma once

#include <metrale/levers.hpp>
#include <metrale/registry.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <system_error>

namespace metrale::testing {

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "metrale-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline std::filesystem::path write_file(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << text;
  return file;
}

// Sets (or, with nullopt, unsets) environment variables for one scope; restores them after.
// Levers are cached per process, so both directions reset the cache.
class EnvGuard {
 public:
  EnvGuard(std::initializer_list<std::pair<std::string, std::optional<std::string>>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      apply(name, value);
    }
    reset_lever_cache_for_tests();
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) apply(name, value);
    reset_lever_cache_for_tests();
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  static void apply(const std::string& name, const std::optional<std::string>& value) {
    if (value) setenv(name.c_str(), value->c_str(), 1);
    else unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

// A w4a16-family kernel entry (x, qweight, scales, y, m, n, k) for test manifests.
inline nlohmann::json w4a16_kernel(const std::string& name) {
  auto params = nlohmann::json::array();
  for (const char* p : {"x", "qweight", "scales", "y"}) params.push_back({{"name", p}, {"type", "ptr"}});
  for (const char* p : {"m", "n", "k"}) params.push_back({{"name", p}, {"type", "u32"}});
  return {{"name", name}, {"params", params}};
}

// w4a16-family entries for these kernel names.
inline nlohmann::json w4a16_kernels(const std::vector<std::string>& names) {
  auto list = nlohmann::json::array();
  for (const auto& name : names) list.push_back(w4a16_kernel(name));
  return list;
}

// A valid manifest for `library`, with the given modules (name -> kernel entries).
inline nlohmann::json manifest_json(const std::string& backend, const std::filesystem::path& library, int priority,
                                    const std::map<std::string, nlohmann::json>& modules) {
  auto list = nlohmann::json::array();
  for (const auto& [name, kernels] : modules) list.push_back({{"name", name}, {"kernels", kernels}});
  return {{"format_version", "1.0"}, {"backend", backend},      {"library", library.string()},
          {"abi_version", 1},        {"priority", priority},    {"modules", list}};
}

// Writes `manifest` into `dir` and discovers exactly that file.
inline Registry discover_manifest(const TempDir& dir, const nlohmann::json& manifest) {
  DiscoveryOptions options;
  options.manifests = std::vector<std::filesystem::path>{
      write_file(dir / (manifest.value("backend", std::string("manifest")) + ".json"), manifest.dump())};
  return Registry::discover(options);
}

#ifdef FAULT_PLUGIN_DIR
// The library of one fault-plugin variant (tests/abi/meson.build builds one per misbehaviour).
inline std::filesystem::path fault_plugin(const std::string& variant) {
  return std::filesystem::path(FAULT_PLUGIN_DIR) / ("libfault_" + variant + ".so");
}
#endif

}  // namespace metrale::testing
