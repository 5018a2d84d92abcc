# SPDX-License-Identifier: MIT OR Apache-2.0
"""The package itself: importing loads no plugin (a Runtime does) and not numpy, the typing stubs ship
with it."""
import os
import subprocess
import sys

import metrale

CHILD = """
import sys
import metrale
print("numpy: " + str("numpy" in sys.modules))
def plugins():
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libmetrale_" in line})
print("import:", plugins())
runtime = metrale.Runtime()  # kept: a Runtime dropped unloads its plugins
print("runtime:", plugins())
"""


def test_import_loads_no_plugin_until_a_runtime_opens():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["import"] == "[]"
    assert lines["numpy"] == "False"  # numpy and ml_dtypes load when first used: the import stays quick
    assert "libmetrale_cpu.so" in lines["runtime"]


def test_typing_stubs_ship_beside_the_extension():
    package = os.path.dirname(metrale.__file__)
    assert os.path.exists(os.path.join(package, "py.typed"))
    stub = os.path.join(package, "_metrale.pyi")
    with open(stub) as f:
        text = f.read()
    for name in ("class Runtime", "class Backend", "class Buffer", "class Kernel", "class Refusal(Error)",
                 "def try_kernel", "def launch"):
        assert name in text, f"{stub} lacks {name}"
    assert "std::" not in text, "a C++ type leaked into the stubs (a missing nanobind type caster)"
