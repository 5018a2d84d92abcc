#!/usr/bin/env bash
# The whole GPU check in one go, sized for a short lease on a GPU machine (a few minutes):
#   1. configure (release) and build only what the check needs;
#   2. `metrale list`: the CUDA backend must be loaded (else: exit 77 with the reason);
#   3. the GPU suite (`meson test --suite gpu`): every CUDA kernel against the double-precision
#      reference; then its benchmark (`meson test --benchmark --suite gpu`: GB/s of weights and
#      ratio to the copy bandwidth);
#   4. the layers' conformance cases on the CUDA backend alone;
#   5. `metrale compile` for the device's own target (compile times, registers, spills).
# Logs, the benchmark JSON and a summary go to $OUT (set by the device runner) or
# <build>/gpu-check. Usage: tests/gpu/run.sh [build-dir]   (default: build-gpu)
# Exit: 0 all passed, 77 no usable GPU, 1 something failed (see summary.txt).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
out=${OUT:-$build/gpu-check}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
say() { echo "== $*" | tee -a "$summary"; }
status=0
step() {  # step NAME LOGFILE COMMAND...: run, keep the log, record pass/fail
  local name=$1 logfile=$2
  shift 2
  local start=$SECONDS
  "$@" >"$out/$logfile" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then say "$name: ok ($((SECONDS - start)) s)"; else say "$name: FAILED rc=$rc ($((SECONDS - start)) s), log $logfile"; status=1; fi
  return $rc
}

if command -v nvidia-smi >/dev/null; then nvidia-smi -L | tee "$out/nvidia-smi.txt"; else say "nvidia-smi not found"; fi

if [ ! -f "$build/build.ninja" ]; then
  step "configure" setup.log meson setup "$build" "$root" -Dbuildtype=release -Dtests=true || { tail -30 "$out/setup.log"; exit 1; }
fi
targets=(plugins/cuda/libmetrale_cuda.so plugins/cuda/cuda.json cli/metrale tests/gpu/gpu_kernel_tests tests/gpu/gpu_quant_tests
  tests/gpu/gpu_attn_tests tests/gpu/gpu_decoder_tests tests/gpu/gpu_hybrid_tests tests/gpu/gpu_bench)
ninja -C "$build" -t targets all 2>/dev/null | grep -q '^tests/conformance/conformance_tests:' && targets+=(tests/conformance/conformance_tests)
step "build" build.log ninja -C "$build" -j"$(nproc)" "${targets[@]}" || { tail -40 "$out/build.log"; exit 1; }

# Compiled modules stay in the build tree; nothing from the caller's environment steers the run.
export METRALE_CACHE_DIR=$build/metrale-cache
unset METRALE_BACKEND METRALE_MANIFESTS METRALE_ADD_MANIFESTS METRALE_PLUGIN_PATH METRALE_KERNEL_SRC METRALE_CUDA_DRIVER
metrale=$build/cli/metrale
"$metrale" list | tee "$out/list.txt"
target=$("$metrale" --json list 2>/dev/null | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e.get("backend") == "cuda" and e.get("state") == "loaded":
        print(e["target"]); break
')
if [ -z "$target" ]; then
  say "SKIP: the CUDA backend is not usable here (see list.txt)"
  exit 77
fi
say "CUDA backend loaded, target $target"

step "gpu suite (kernels vs reference)" gpu-suite.log \
  meson test -C "$build" --no-rebuild --suite gpu --print-errorlogs --num-processes 1
cp "$build/meson-logs/testlog.txt" "$out/gpu-testlog.txt" 2>/dev/null
step "gpu benchmark" gpu-bench.log \
  meson test -C "$build" --no-rebuild --benchmark --suite gpu --print-errorlogs
cp "$build/meson-logs/benchmarklog.txt" "$out/gpu-benchmarklog.txt" 2>/dev/null
cp "$build/gpu-bench.json" "$out/gpu-bench.json" 2>/dev/null
# The benchmark table, readable in the summary.
sed -n '/^kernel /,/^$/p' "$out/gpu-benchmarklog.txt" 2>/dev/null | head -200 >>"$summary"
if [ -x "$build/tests/conformance/conformance_tests" ]; then
  step "conformance cases on cuda" conformance.log env METRALE_BACKENDS_DISABLE=cpu "$build/tests/conformance/conformance_tests"
else
  say "conformance program not built in this tree: skipped"
fi
step "metrale compile --target $target" compile.log "$metrale" compile --target "$target"
say "done: $([ $status -eq 0 ] && echo all passed || echo FAILURES) — logs in $out"
exit $status
