#!/usr/bin/env bash
# The Python package as a user installs it: `pip install SOURCE` into a fresh venv (meson-python
# builds the wheel in isolation, from PyPI's meson-python and nanobind), then, from a directory
# outside the source tree and without any METRALE_* variable, the package must import from the
# venv, list the CPU backend with its target, and have found its plugin inside the installed
# package: not in the source or build tree, not under /usr/local. Prints the wheel's size.
# Usage: test_pip_install.sh SOURCE_DIR PYTHON3
set -euo pipefail
source=$1 python=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A venv from the interpreter's base installation (not a venv inside a venv).
base=$("$python" -c 'import sys; print(sys.base_prefix)')/bin/python3
"$base" -m venv "$root/v" || fail "python3 -m venv (Debian: apt-get install python3-venv)"
start=$(date +%s)
"$root/v/bin/pip" wheel --quiet --no-deps --wheel-dir "$root/wheel" "$source" >"$root/build.log" 2>&1 ||
  { tail -50 "$root/build.log"; fail "pip wheel $source"; }
wheel=$(ls "$root"/wheel/metrale-*.whl)
"$root/v/bin/pip" install --quiet "$wheel" >"$root/install.log" 2>&1 || { cat "$root/install.log"; fail "pip install $wheel"; }
echo "wheel $(basename "$wheel"): $(stat -c %s "$wheel") bytes, built and installed in $(( $(date +%s) - start )) s"
"$base" -c 'import sys, zipfile; print("\n".join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))' "$wheel" >"$root/contents.txt"
for f in metrale/__init__.py metrale/_metrale.pyi metrale/py.typed metrale/plugins/cpu.json metrale/plugins/libmetrale_cpu.so \
         metrale/kernel_src/; do
  grep -q "^$f" "$root/contents.txt" || { cat "$root/contents.txt"; fail "the wheel lacks $f"; }
done
grep -Eq '^metrale/_metrale\..*\.so$' "$root/contents.txt" || fail "the wheel lacks the extension"
grep -Eq '^metrale/libmetrale\.so' "$root/contents.txt" || fail "the wheel lacks libmetrale"
grep -Eq '^metrale/libmetrale-layers\.so' "$root/contents.txt" || fail "the wheel lacks libmetrale-layers"

mkdir "$root/elsewhere"
cd "$root/elsewhere"
out=$(env -i HOME="$root/home" PATH=/usr/bin:/bin "$root/v/bin/python" -c '
import os, metrale
backends = metrale.Runtime().backends()
print(backends)
print("package", os.path.dirname(metrale.__file__))
for e in metrale.Runtime().entries():
    print("entry", e["backend"], e["state"], e["origin"], e["manifest"])
') || fail "import metrale outside the source tree"
echo "$out"
echo "$out" | grep -Eq '^\[.*<metrale.Backend cpu target=cpu-[^ ]+ ' || fail "the CPU backend is not listed with its target"
package=$(echo "$out" | sed -n 's/^package //p')
case $package in "$root/v/"*) ;; *) fail "metrale imported from $package, not the venv";; esac
echo "$out" | grep -q "^entry cpu loaded installed $package/plugins/cpu.json$" ||
  fail "the CPU plugin was not found inside the installed package ($package/plugins)"
if echo "$out" | grep '^entry' | grep -Eq "$source|/usr/local"; then fail "a manifest from the source tree or /usr/local"; fi
echo "pip install test passed: the wheel installs, imports outside the tree and loads its own CPU plugin"
