// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/paths.hpp>

#include <boost/dll/runtime_symbol_info.hpp>

#include <cstdlib>

namespace fs = std::filesystem;

namespace metrale {

namespace {

// HOME and XDG_* steer where plugins load from: ignore them in elevated processes too.
std::optional<fs::path> env_path(const char* name) {
  const char* value = secure_getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return fs::path(value);
}

std::optional<fs::path> xdg_dir(const char* variable, const char* fallback_under_home) {
  if (auto dir = env_path(variable); dir && dir->is_absolute()) return dir;
  if (auto home = env_path("HOME")) return *home / fallback_under_home;
  return std::nullopt;
}

}  // namespace

bool running_from_build_tree() {
  std::error_code error;
  fs::path program = fs::weakly_canonical(boost::dll::program_location(error), error);
  if (error) return false;
  fs::path build_root = fs::weakly_canonical(METRALE_BUILD_ROOT, error);
  if (error) return false;
  auto [root_end, ignored] = std::mismatch(build_root.begin(), build_root.end(), program.begin(), program.end());
  return root_end == build_root.end();
}

fs::path installed_plugin_dir() { return METRALE_INSTALL_PLUGIN_DIR; }

std::vector<fs::path> build_tree_plugin_dirs() {
  fs::path root = METRALE_BUILD_ROOT;
  return {root / "plugins" / "cpu", root / "plugins" / "cuda"};
}

std::optional<fs::path> user_plugin_dir() {
  auto data = xdg_dir("XDG_DATA_HOME", ".local/share");
  if (!data) return std::nullopt;
  return *data / "metrale" / "plugins";
}

std::optional<fs::path> cache_dir() {
  if (auto lever = lever_raw("METRALE_CACHE_DIR")) return fs::path(*lever);
  auto cache = xdg_dir("XDG_CACHE_HOME", ".cache");
  if (!cache) return std::nullopt;
  return *cache / "metrale";
}

std::vector<fs::path> kernel_source_dirs() {
  std::vector<fs::path> dirs;
  if (auto lever = lever_raw("METRALE_KERNEL_SRC")) dirs.emplace_back(*lever);
  if (running_from_build_tree()) dirs.emplace_back(fs::path(METRALE_SOURCE_ROOT) / "kernel_src");
  dirs.emplace_back(METRALE_INSTALL_KERNEL_SRC_DIR);
  return dirs;
}

}  // namespace metrale
