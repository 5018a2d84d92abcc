// SPDX-License-Identifier: MIT OR Apache-2.0
// doctest main for the tests that need the CPU backend: exit 77 (skipped) when it is not loaded.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "backend_support.hpp"

#include <layers/core/levers.hpp>

#include <cstdio>

namespace layers_test {

metrale::Registry& test_registry() {
  static metrale::Registry registry = metrale::Registry::discover();
  return registry;
}

std::shared_ptr<metrale::Backend> cpu_backend() { return test_registry().find("cpu"); }

}  // namespace layers_test

int main(int argc, char** argv) {
  metrale::layers::register_levers();  // before discovery, as every program using the layers does
  if (!layers_test::cpu_backend()) {
    std::fprintf(stderr, "the cpu backend is not loaded; skipping. Discovery found:\n");
    for (const auto& e : layers_test::test_registry().entries()) {
      std::fprintf(stderr, "  %s: %s %s\n", e.manifest_path.c_str(), metrale::entry_state_name(e.state), e.reason.c_str());
    }
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
