// SPDX-License-Identifier: MIT OR Apache-2.0
// metrale._metrale: the extension under the Python package (python/metrale/__init__.py). Importing
// it loads libmetrale and libmetrale-layers and nothing else: no plugin loads until a Runtime opens.
#include "bindings.hpp"

NB_MODULE(_metrale, m) {
  m.doc() = "metrale's C++ runtime and layers (docs/python.md); use the metrale package, which wraps this.";
  metrale::python::bind_runtime(m);
  metrale::python::bind_backend(m);
  metrale::python::bind_layers(m);
}
