#!/usr/bin/env bash
# The kernel-developer workflow at real size: `metrale bench 'w4a16_gemm_t*' --backend cpu` on the
# Qwen3-32B preset shapes prints a row per CPU variant and shape, all passed (one timed launch each,
# to keep it short on a small CPU). Usage: test_bench_preset.sh METRALE CPU_MANIFEST
set -euo pipefail
metrale=$1 cpu_manifest=$2
export METRALE_MANIFESTS="$cpu_manifest"
json=$("$metrale" bench 'w4a16_gemm_t*' --backend cpu --model qwen3-32b --warmup 0 --repeat 1 --quiet --json) ||
  { echo "FAIL: bench on the qwen3-32b shapes exited $?"; exit 1; }
python3 - "$json" <<'PY'
import json, sys
out = json.loads(sys.argv[1])
rows = out["rows"]
shapes = {(r["shape"]["label"], r["shape"]["m"], r["shape"]["n"], r["shape"]["k"]) for r in rows}
want = {(f"preset qwen3-32b:ffn.{p}", m, n, k) for p, n, k in (("gate_up", 51200, 5120), ("down", 5120, 25600)) for m in (1, 8, 64)}
assert shapes == want, shapes
kernels = {r["kernel"] for r in rows}
assert kernels == {"w4a16_gemm_t", "w4a16_gemm_t_k64"}, kernels
assert len(rows) == len(kernels) * len(want), len(rows)
for r in rows:
    assert r["disposition"] == "passed", r
    assert r["error"]["columns_checked"] == 256 and r["error"]["violations"] == 0, r["error"]
assert out["summary"]["passed"] == len(rows), out["summary"]
PY
echo "qwen3-32b bench passed: $(wc -c <<<"$json") bytes of JSON"
