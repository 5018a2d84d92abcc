# SPDX-License-Identifier: MIT OR Apache-2.0
"""The Python package's suite (suite `python` of `meson test`, against the build tree's package:
python/meson.build passes PYTHONPATH, the CLI and the source root). Every comparison with the CLI
runs the build's own `metrale`, on the CPU backend."""
import os
import subprocess
import sys

import pytest

SOURCE_ROOT = os.environ.get("TEST_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
# The project's numpy safetensors reader and writer, and the checkpoint writers (tests/checkpoints).
sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "checkpoints"))

import metrale  # noqa: E402


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("TEST_METRALE_CLI")
    if not path or not os.path.exists(path):
        pytest.skip("TEST_METRALE_CLI does not name the build's metrale (meson test sets it)")
    return path


def run_cli(cli, *args, expect=0, cpu_only=True):
    """Runs the CLI (on the CPU backend unless cpu_only is False: then it discovers what a Runtime()
    of this process does); returns (stdout, stderr), failing on an unexpected exit code."""
    env = dict(os.environ, METRALE_BACKENDS_DISABLE="cuda") if cpu_only else dict(os.environ)
    done = subprocess.run([cli, *args], capture_output=True, text=True, env=env)
    assert done.returncode == expect, f"{' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout, done.stderr


@pytest.fixture(scope="session")
def runtime():
    return metrale.Runtime()


@pytest.fixture(scope="session")
def cpu(runtime):
    return runtime.select("cpu")


@pytest.fixture(scope="session")
def torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed (too large for CI): its tests are skipped")
    return torch
