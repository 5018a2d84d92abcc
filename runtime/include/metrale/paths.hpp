// SPDX-License-Identifier: MIT OR Apache-2.0
// Well-known directories: installed and build-tree plugin dirs, the user data and cache dirs
// (XDG), and kernel source dirs. Path levers are ignored in elevated-privilege processes.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

namespace metrale {

// Whether this runs uninstalled: the running executable, or else libmetrale itself (loaded by a
// program from elsewhere, a Python interpreter), lives in this project's build tree.
bool running_from_build_tree();
// <prefix>/<libdir>/metrale/plugins; in a relocatable install (the Python package) the directory
// configured relative to libmetrale's own.
std::filesystem::path installed_plugin_dir();
std::vector<std::filesystem::path> build_tree_plugin_dirs();
// $XDG_DATA_HOME/metrale/plugins or ~/.local/share/metrale/plugins.
std::optional<std::filesystem::path> user_plugin_dir();
// METRALE_CACHE_DIR, else $XDG_CACHE_HOME/metrale, else ~/.cache/metrale.
std::optional<std::filesystem::path> cache_dir();
// METRALE_KERNEL_SRC first (override), then the installed or source-tree kernel_src.
std::vector<std::filesystem::path> kernel_source_dirs();

}  // namespace metrale
