// SPDX-License-Identifier: MIT OR Apache-2.0
// Prints what the runtime sees of the path levers. test_elevated.sh runs it setuid to check that
// an elevated process ignores them (secure_getenv), as the Vulkan loader does.
#include <metrale/levers.hpp>
#include <metrale/registry.hpp>

#include <iostream>

int main() {
  std::cout << "elevated=" << (metrale::process_is_elevated() ? 1 : 0) << '\n';
  std::cout << "manifests=" << metrale::lever_raw("METRALE_MANIFESTS").value_or("(ignored)") << '\n';
  std::cout << "plugin_path=" << metrale::lever_raw("METRALE_PLUGIN_PATH").value_or("(ignored)") << '\n';
  // Non-path levers are still honoured.
  std::cout << "backend=" << metrale::lever_raw("METRALE_BACKEND").value_or("(unset)") << '\n';
  metrale::DiscoveryOptions options;
  options.use_default_dirs = false;
  std::cout << "discovered=" << metrale::discover_manifest_files(options).size() << '\n';
  return 0;
}
