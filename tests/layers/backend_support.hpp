// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU backend for the layer tests, discovered once per process the way the CLI does it
// (build tree when run uninstalled, levers honoured).
#pragma once

#include <metrale/backend.hpp>
#include <metrale/registry.hpp>

#include <memory>

namespace layers_test {

metrale::Registry& test_registry();
// The loaded CPU backend, or nullptr (the test program then exits 77: skipped).
std::shared_ptr<metrale::Backend> cpu_backend();

}  // namespace layers_test
