// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/paths.hpp>
#include <metrale/regular_file.hpp>
#include <metrale/status.hpp>

#include "json_reader.hpp"
#include "metrale_config.h"

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

// The build-tree marker Meson writes at the root of a build (metrale-build-tree.json): found in
// the running program's directory or one of its parents, read once per process.
struct BuildTree {
  std::vector<fs::path> plugin_dirs;
  std::vector<fs::path> kernel_source_dirs;
};

std::optional<BuildTree> read_build_tree(const fs::path& marker) {
  std::string text;
  try {
    text = read_regular_file(marker, "build-tree marker", std::size_t{1} << 20);  // a few hundred bytes
  } catch (const Error&) {
    return std::nullopt;
  }
  const json_text::JsonReadResult doc = json_text::read_json(text);
  if (doc.error || !doc.root.is_object()) return std::nullopt;
  BuildTree tree;
  for (const auto& [key, list] : {std::pair{"plugin_dirs", &tree.plugin_dirs},
                                  std::pair{"kernel_source_dirs", &tree.kernel_source_dirs}}) {
    const auto it = doc.root.find(key);
    if (it == doc.root.end() || !it->is_array()) return std::nullopt;
    for (const auto& dir : *it) {
      if (!dir.is_string()) return std::nullopt;
      list->emplace_back(dir.get<std::string>());
    }
  }
  return tree;
}

// The marker in `dir` or one of its parents: build-tree programs and libraries sit at most a few
// levels below the build root (build/cli/metrale, build/tests/<suite>/<program>, build/runtime/).
std::optional<BuildTree> build_tree_above(fs::path dir) {
  std::error_code error;
  for (int level = 0; level < 4 && !dir.empty(); ++level, dir = dir.parent_path()) {
    const fs::path marker = dir / "metrale-build-tree.json";
    if (fs::is_regular_file(marker, error)) return read_build_tree(marker);
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

// The directory of libmetrale itself (this file is part of it), whatever program loaded it.
fs::path runtime_library_dir() {
  std::error_code error;
  const fs::path library = fs::weakly_canonical(boost::dll::this_line_location(error), error);
  return error ? fs::path() : library.parent_path();
}

// Above the running program, else above libmetrale: a program from elsewhere (a Python
// interpreter) that loads the build tree's runtime runs uninstalled too.
const std::optional<BuildTree>& build_tree() {
  static const std::optional<BuildTree> tree = []() -> std::optional<BuildTree> {
    std::error_code error;
    const fs::path program = fs::weakly_canonical(boost::dll::program_location(error), error);
    if (!error)
      if (auto found = build_tree_above(program.parent_path())) return found;
    const fs::path library_dir = runtime_library_dir();
    if (library_dir.empty()) return std::nullopt;
    return build_tree_above(library_dir);
  }();
  return tree;
}

// An install directory as configured: absolute, or relative to libmetrale's directory in a
// relocatable install (the Python package, meson option `wheel`, which lives wherever pip puts it).
fs::path install_dir(const char* configured) {
  const fs::path dir(configured);
  return dir.is_absolute() ? dir : runtime_library_dir() / dir;
}

}  // namespace

bool running_from_build_tree() { return build_tree().has_value(); }

fs::path installed_plugin_dir() { return install_dir(METRALE_INSTALL_PLUGIN_DIR); }

std::vector<fs::path> build_tree_plugin_dirs() {
  return build_tree() ? build_tree()->plugin_dirs : std::vector<fs::path>{};
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
  if (const auto& tree = build_tree()) dirs.insert(dirs.end(), tree->kernel_source_dirs.begin(), tree->kernel_source_dirs.end());
  dirs.push_back(install_dir(METRALE_INSTALL_KERNEL_SRC_DIR));
  return dirs;
}

}  // namespace metrale
