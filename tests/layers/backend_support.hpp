// SPDX-License-Identifier: MIT OR Apache-2.0
// The CPU backend for the layer tests, discovered once per process the way the CLI does it
// (build tree when run uninstalled, levers honoured).
#pragma once

#include "layer_request.hpp"

#include <metrale/backend.hpp>
#include <metrale/registry.hpp>

#include <memory>

namespace layers_test {

metrale::Registry& test_registry();
// The loaded CPU backend, or nullptr (the test program then exits 77: skipped).
std::shared_ptr<metrale::Backend> cpu_backend();

// The tiny-qwen3 preset on synthetic weights: the whole-model tests' model.
inline metrale::layers::LayerRequest tiny_qwen3() {
  metrale::layers::LayerRequest r;
  r.model = "tiny-qwen3";
  return r;
}

}  // namespace layers_test
