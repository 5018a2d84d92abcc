#!/usr/bin/env bash
# Installs this build into a temporary root, builds tests/install/vendor_plugin against nothing
# but the installed metrale-plugin.pc, and checks the installed metrale loads it and answers
# lookups — with the installed CPU backend beside it. Usage: test_install.sh BUILD_DIR SOURCE_DIR PREFIX LIBDIR
set -euo pipefail
build=$1 source=$2 prefix=$3 libdir=$4
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

meson install -C "$build" --no-rebuild --destdir "$root/dest" --quiet >/dev/null
export PKG_CONFIG_PATH="$root/dest$prefix/$libdir/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$root/dest"
pkg-config --exists metrale-plugin || { echo "FAIL: installed metrale-plugin.pc not found"; exit 1; }

# Out of tree: only the installed header is visible to this build.
meson setup "$root/vendor-build" "$source/tests/install/vendor_plugin" --prefix "$prefix" >/dev/null
meson compile -C "$root/vendor-build" >/dev/null
# pkg-config applies the sysroot to plugindir too, so it already points into the temp root.
meson install -C "$root/vendor-build" --quiet >/dev/null

plugins="$root/dest$prefix/$libdir/metrale/plugins"
[ -f "$plugins/libvendor_axpy.so" ] && [ -f "$plugins/vendor.json" ] && [ -f "$plugins/cpu.json" ] ||
  { echo "FAIL: plugins not installed into $plugins"; ls -la "$plugins" || true; exit 1; }

metrale() {
  env -u METRALE_BACKEND LD_LIBRARY_PATH="$root/dest$prefix/$libdir" METRALE_PLUGIN_PATH="$plugins" \
    "$root/dest$prefix/bin/metrale" "$@"
}
list=$(metrale list --json)
python3 - "$list" <<'PY'
import json, sys
entries = {e["backend"]: e for e in json.loads(sys.argv[1]) if e["backend"]}
assert entries["vendor"]["state"] == "loaded", entries.get("vendor")
assert entries["vendor"]["kernels"]["usable"] == 1, entries["vendor"]
assert entries["cpu"]["state"] == "loaded", entries.get("cpu")
assert not entries["vendor"]["cross_check"], entries["vendor"]["cross_check"]
PY
kernels=$(metrale kernels --backend vendor --json)
python3 - "$kernels" <<'PY'
import json, sys
[backend] = json.loads(sys.argv[1])
[k] = backend["kernels"]
assert (k["module"], k["name"], k["listed"], k["provided"], k["gated"]) == ("blas", "saxpy", True, True, False), k
PY
# Lookups on the vendor backend: the w4a16 selectors find nothing there and say why.
audit=$(metrale audit --backend vendor --json || true)
python3 - "$audit" <<'PY'
import json, sys
audit = json.loads(sys.argv[1])
assert audit["backend"] == "vendor"
rows = audit["rows"]
assert rows and all(r["outcome"] in ("null", "error") for r in rows), rows
assert "no module 'w4a16'" in rows[0]["reason"], rows[0]
PY
echo "install test passed: vendor plugin built against the installed metrale-plugin.pc loads beside cpu"
