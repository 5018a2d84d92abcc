#!/usr/bin/env bash
# The vendor workflow with no rebuild of the runtime: install this build into a temp root, build
# docs/examples/vendor-plugin against nothing but the installed metrale-plugin.pc, install it into
# the plugin directory the .pc names, run the plugin conformance suite on what was installed, then
# with the installed CLI and METRALE_BACKEND=vendor: list, audit, conformance, run --check;
# METRALE_KERNEL_SUBST onto the vendor's alternative variant (visible in the audit, and run --check
# passes on it); a substitute with another parameter list is refused with exit 3.
# Usage: test_vendor_plugin.sh BUILD_DIR SOURCE_DIR PREFIX LIBDIR PLUGIN_CTS
set -euo pipefail
build=$1 source=$2 prefix=$3 libdir=$4 plugin_cts=$5
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

meson install -C "$build" --no-rebuild --destdir "$root/dest" --quiet >/dev/null
export PKG_CONFIG_PATH="$root/dest$prefix/$libdir/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$root/dest"
pkg-config --exists metrale-plugin || fail "installed metrale-plugin.pc not found under $PKG_CONFIG_PATH"

# Out of tree: a copy of the example, so nothing of the source tree's build leaks in.
cp -r "$source/docs/examples/vendor-plugin" "$root/vendor-plugin"
meson setup "$root/vendor-build" "$root/vendor-plugin" --prefix "$prefix" >"$root/setup.log" 2>&1 ||
  { cat "$root/setup.log"; fail "meson setup of the example"; }
meson compile -C "$root/vendor-build" >"$root/compile.log" 2>&1 || { cat "$root/compile.log"; fail "example build"; }
# pkg-config applies the sysroot to plugindir too, so this installs into the temp root.
meson install -C "$root/vendor-build" --quiet >/dev/null

plugins="$root/dest$prefix/$libdir/metrale/plugins"
[ -f "$plugins/libmetrale_vendor.so" ] && [ -f "$plugins/vendor.json" ] ||
  { ls -la "$plugins" || true; fail "vendor plugin not installed into $plugins"; }
for header in plugin_glue.h catalogue_signatures.h; do
  [ -f "$root/dest$prefix/include/metrale/$header" ] || fail "$header is not installed"
done

# The ABI contract, on the library as installed (docs/plugin-abi.md, "Conformance suite").
"$plugin_cts" --manifest "$plugins/vendor.json" --expect-device >"$root/cts.txt" 2>&1 ||
  { cat "$root/cts.txt"; fail "the plugin conformance suite failed on the installed vendor plugin"; }
grep -q "^plugin conformance, backend 'vendor' (.*): passed" "$root/cts.txt" || fail "suite verdict: $(tail -3 "$root/cts.txt")"

metrale() {
  env LD_LIBRARY_PATH="$root/dest$prefix/$libdir" METRALE_PLUGIN_PATH="$plugins" METRALE_BACKEND=vendor \
    "$root/dest$prefix/bin/metrale" "$@"
}

# list: loaded, every kernel usable, manifest and plugin agree.
list=$(metrale list --json)
python3 - "$list" <<'PY'
import json, sys
entries = {e["backend"]: e for e in json.loads(sys.argv[1]) if e["backend"]}
v = entries["vendor"]
assert v["state"] == "loaded", v
assert v["kernels"]["usable"] == 6, v["kernels"]
assert not v["cross_check"], v["cross_check"]
assert entries["cpu"]["state"] == "loaded", entries.get("cpu")
PY

# audit: the section-7 selectors resolve on the vendor backend.
audit=$(metrale audit --json) || fail "audit exited $?"
python3 - "$audit" <<'PY'
import json, sys
a = json.loads(sys.argv[1])
assert a["backend"] == "vendor" and a["error"] is None, a
got = {(r["module"], r["kernel"]): r["outcome"] for r in a["rows"]}
assert got[("w4a16", "w4a16_gemm_t")] == "resolved", got
assert got[("w4a16", "w4a16_gemm_t_k64")] == "resolved", got
assert got[("w4a16", "w4a16_gemm_t_p3")] == "null", got
PY

# conformance: certify the plugin (MoE cases skip: it lists no moe kernels).
metrale conformance --quiet >"$root/conformance.txt" || { cat "$root/conformance.txt"; fail "conformance exited $?"; }
grep -q "^backend 'vendor' passed every case it ran$" "$root/conformance.txt" || fail "verdict: $(tail -3 "$root/conformance.txt")"
grep -q "^PASS kernel/w4a16_gemm_t_k64/" "$root/conformance.txt" || fail "no k64 kernel case passed"
grep -q "^PASS dense/gelu_h384_i640/" "$root/conformance.txt" || fail "no gelu dense case passed"
grep -q "^SKIP moe/uneven_e8_k2/m1  backend 'vendor' does not list moe/router_gemm" "$root/conformance.txt" ||
  fail "MoE skip reason missing"

# run --check on the vendor backend, decode and prefill.
metrale run --model small-dense --check --quiet --repeat 1 >"$root/run.txt" || { cat "$root/run.txt"; fail "run --check exited $?"; }
grep -q "^backend  vendor (vendor-host" "$root/run.txt" || fail "run did not use vendor: $(head -3 "$root/run.txt")"
metrale run --model small-dense --tokens 16 --check --quiet --repeat 1 >/dev/null || fail "run --tokens 16 --check"

# Substitution onto the vendor's alternative variant: the audit shows both names, run --check passes.
export METRALE_KERNEL_SUBST=w4a16/w4a16_gemm_t=vendor/w4a16_gemm_t_alt
metrale audit >"$root/audit-subst.txt" || fail "audit under substitution exited $?"
grep -q "w4a16/w4a16_gemm_t -> vendor/w4a16_gemm_t_alt" "$root/audit-subst.txt" ||
  { cat "$root/audit-subst.txt"; fail "the audit does not show the substitution"; }
metrale run --model small-dense --tokens 16 --check --quiet --repeat 1 >"$root/run-subst.txt" ||
  { cat "$root/run-subst.txt"; fail "run --check on the substitute exited $?"; }
grep -q "vendor/w4a16_gemm_t_alt" "$root/run-subst.txt" || fail "run's plan does not use the substitute"
grep -q "^check    PASS" "$root/run-subst.txt" || fail "check: $(grep check "$root/run-subst.txt")"

# A substitute with a different parameter list: refused, exit 3, naming both kernels.
export METRALE_KERNEL_SUBST=w4a16/w4a16_gemm_t=act/silu_mul
set +e
msg=$(metrale run --model small-dense --tokens 16 --check --quiet 2>&1)
rc=$?
set -e
[ $rc = 3 ] || fail "a substitute with another parameter list must be refused with 3, got $rc: $msg"
grep -q "act/silu_mul" <<<"$msg" && grep -q "w4a16/w4a16_gemm_t" <<<"$msg" || fail "refusal does not name both: $msg"
unset METRALE_KERNEL_SUBST

echo "vendor plugin test passed: built out of tree, certified, substituted"
