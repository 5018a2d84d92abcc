#!/usr/bin/env bash
# `metrale bench` end to end: the CPU variants pass on small shapes (text, --json, --csv), the
# quantized families' GEMV/GEMM too (w8a8 with int8 activations, fp8), a
# backend with a wrong w4a16_gemv shows `incorrect` and exits 1, nothing matched exits 1, a bad
# option combination is an error. Usage: test_bench.sh METRALE CPU_MANIFEST WRONG_MANIFEST
set -euo pipefail
metrale=$1 cpu_manifest=$2 wrong_manifest=$3
export METRALE_MANIFESTS="$cpu_manifest:$wrong_manifest"
unset METRALE_BACKEND
fail() { echo "FAIL: $*"; exit 1; }

# Every CPU variant of the family on an odd N, K below and at a deep K, m = 1, 3, 9.
json=$("$metrale" bench 'w4a16_*' --backend cpu --m 1,3,9 --n 301 --k 1152 --warmup 1 --repeat 2 \
  --baseline w4a16_gemm_t --quiet --json) || fail "bench on cpu exited $?"
python3 - "$json" <<'PY'
import json, sys
out = json.loads(sys.argv[1])
rows = out["rows"]
assert out["glob"] == "w4a16_*" and out["baseline"] == "w4a16_gemm_t", out
assert "budget" in out["verify"] and "columns" in out["verify"], out["verify"]
kernels = {r["kernel"] for r in rows}
assert {"w4a16_gemv", "w4a16_gemv_b8", "w4a16_gemm_t", "w4a16_gemm_t_k64", "w4a16_zp_gemv", "w4a16_zp_gemm"} <= kernels, kernels
assert {r["tier"] for r in rows if r["module"] == "w4a16_zp"} == {"bf16/w4a16_zp"}, rows
assert len(rows) == len(kernels) * 3, len(rows)
for r in rows:
    for key in ("backend", "target", "module", "kernel", "shape", "disposition", "why", "rerun", "timing", "error",
                "ratio_to_baseline", "weight_bytes", "flops"):
        assert key in r, (key, r)
    assert r["backend"] == "cpu" and r["shape"]["n"] == 301 and r["shape"]["k"] == 1152, r
    assert r["rerun"].startswith("metrale bench '" + r["module"] + "/" + r["kernel"] + "' --backend cpu --m "), r["rerun"]
    too_many = (r["kernel"] == "w4a16_gemv" and r["shape"]["m"] > 1) or (r["kernel"] == "w4a16_gemv_b8" and r["shape"]["m"] > 8) \
        or (r["kernel"] == "w4a16_zp_gemv" and r["shape"]["m"] > 8)
    if too_many:
        assert r["disposition"] == "not-supported" and "row" in r["why"] and "(docs/kernels.md); m = " in r["why"], r
        assert r["timing"] is None, r
        continue
    assert r["disposition"] == "passed", r
    t = r["timing"]
    assert t["repeat"] == 2 and len(t["seconds"]) == 2 and t["min_s"] <= t["median_s"] <= t["max_s"], t
    assert r["gb_per_s"] > 0 and r["gflop_per_s"] > 0, r
    assert r["error"]["violations"] == 0 and r["error"]["checked"] == r["shape"]["m"] * 256, r["error"]
    assert r["error"]["worst_budget_ratio"] <= 1, r["error"]
    assert r["ratio_to_baseline"] is not None, r
    if r["kernel"] == "w4a16_gemm_t":
        assert abs(r["ratio_to_baseline"] - 1) < 1e-9, r
assert out["summary"]["incorrect"] == 0 and out["summary"]["not_run"] == 0, out["summary"]
PY

# A quantized family with int8 activations: the GEMV takes 1..8 rows, the GEMM any; both verified
# against the reference of the int8 tier, with their weight bytes (codes, scales, zero points).
json=$("$metrale" bench 'w8a8/*' --backend cpu --m 1,9 --n 200 --k 384 --repeat 1 --quiet --json) ||
  fail "bench of w8a8 on cpu exited $?"
python3 - "$json" <<'PY'
import json, sys
rows = json.loads(sys.argv[1])["rows"]
assert {(r["kernel"], r["shape"]["m"]) for r in rows} == {("w8a8_gemv", 1), ("w8a8_gemv", 9), ("w8a8_gemm", 1), ("w8a8_gemm", 9)}, rows
for r in rows:
    assert r["tier"] == "int8/w8a8", r
    if r["kernel"] == "w8a8_gemv" and r["shape"]["m"] == 9:
        assert r["disposition"] == "not-supported" and "1..8 rows" in r["why"], r
        continue
    assert r["disposition"] == "passed", r
    assert r["error"]["violations"] == 0 and r["error"]["checked"] == r["shape"]["m"] * 200, r["error"]
    assert r["weight_bytes"] == 200 * 384 + 200 * 3 * 4 + 200 * 3, r["weight_bytes"]
PY
text=$("$metrale" bench 'fp8_gemm' --backend cpu --m 3 --n 64 --k 256 --repeat 1 --quiet) || fail "bench of fp8_gemm exited $?"
grep -q "fp8/fp8_gemm .*bf16/fp8" <<<"$text" || fail "no fp8 row in: $text"
grep -q "^1 passed, 0 incorrect, 0 not-supported, 0 not-run$" <<<"$text" || fail "fp8 summary: $text"

# A model preset's shapes, text output: one row per variant and shape, a rerun line per row.
text=$("$metrale" bench 'w4a16_gemm_t' --backend cpu --model small-dense --m 4 --repeat 1 --quiet) ||
  fail "bench on the small-dense preset exited $?"
grep -q "small-dense:ffn.gate_up m4 n1024 k256" <<<"$text" || fail "no gate_up row in: $text"
grep -q "small-dense:ffn.down m4 n256 k512" <<<"$text" || fail "no down row in: $text"
[ "$(grep -c "rerun: metrale bench 'w4a16/w4a16_gemm_t' --backend cpu --m 4" <<<"$text")" = 2 ] || fail "rerun lines: $text"
grep -q "^2 passed, 0 incorrect, 0 not-supported, 0 not-run$" <<<"$text" || fail "summary: $text"

# CSV: a header and one line per row.
csv=$("$metrale" bench 'w4a16_gemm_t_k64' --backend cpu --m 2 --n 64 --k 256 --repeat 1 --quiet --csv)
[ "$(head -1 <<<"$csv" | cut -d, -f1-4)" = "backend,target,module,kernel" ] || fail "csv header: $csv"
[ "$(wc -l <<<"$csv")" = 2 ] && grep -q ",passed," <<<"$csv" || fail "csv rows: $csv"

# The wrong backend: its w4a16_gemv skips the last 8 codes of K.
set +e
wrong=$("$metrale" bench 'w4a16_gemv' --backend wrong --m 1 --n 77 --k 256 --repeat 1 --quiet --json)
rc=$?
set -e
[ $rc = 1 ] || fail "a wrong kernel must exit 1, got $rc"
python3 - "$wrong" <<'PY'
import json, sys
[row] = json.loads(sys.argv[1])["rows"]
assert row["backend"] == "wrong" and row["disposition"] == "incorrect", row
assert row["error"]["violations"] > 0 and "over budget" in row["why"], row
PY

# Nothing matched: exit 1, naming the backend and what it has.
set +e
none=$("$metrale" bench 'no_such_kernel*' --backend cpu --n 64 --k 128 2>&1)
rc=$?
set -e
[ $rc = 1 ] || fail "nothing matched must exit 1, got $rc"
grep -q "backend 'cpu': no GEMV/GEMM variant of a documented family matches 'no_such_kernel\*'; it has: w4a16/w4a16_gemv" <<<"$none" ||
  fail "message: $none"
grep -q "moe_combine" <<<"$none" && fail "moe/moe_combine is not a GEMM variant: $none"

# Usage: --n without --k is an error; a backend that is not loaded is a refusal (exit 3).
set +e
"$metrale" bench 'w4a16_gemm_t' --n 64 >/dev/null 2>&1; rc=$?
[ $rc = 1 ] || fail "--n without --k must exit 1, got $rc"
"$metrale" bench 'w4a16_gemm_t' --backend nosuch --n 64 --k 128 >/dev/null 2>&1; rc=$?
[ $rc = 3 ] || fail "an unknown --backend must be refused (3), got $rc"
set -e
echo "bench test passed"
