#!/usr/bin/env bash
# `metrale conformance` end to end: the CPU backend passes the selected cases (text and --json)
# and serves every layer path, the wrong backend fails its w4a16_gemv cases with exit 1 and cannot
# run the dense paths, a backend that runs no case is an error, and --cases that matches nothing
# is an error. Usage: test_conformance_cli.sh METRALE CPU_MANIFEST WRONG_MANIFEST
set -euo pipefail
metrale=$1 cpu_manifest=$2 wrong_manifest=$3
export METRALE_MANIFESTS="$cpu_manifest:$wrong_manifest"
unset METRALE_BACKEND
fail() { echo "FAIL: $*"; exit 1; }

text=$("$metrale" conformance --backend cpu --cases 'kernel/w4a16_gemv/*' --cases 'dense/silu_h256_i512/m9' --quiet) ||
  fail "cpu conformance exited $?"
grep -q "^PASS kernel/w4a16_gemv/m1_n77_k256  \[w4a16/w4a16_gemv\]" <<<"$text" || fail "no PASS line: $text"
grep -q "^PASS dense/silu_h256_i512/m9" <<<"$text" || fail "no dense line: $text"
grep -q "^4 passed, 0 failed, 0 skipped$" <<<"$text" || fail "summary: $text"
grep -q "^backend 'cpu' passed every case it ran$" <<<"$text" || fail "verdict: $text"

json=$("$metrale" conformance --backend cpu --cases 'kernel/w4a16_gemm_t/m3_*' --quiet --json) || fail "json run exited $?"
python3 - "$json" <<'PY'
import json, sys
out = json.loads(sys.argv[1])
assert out["backend"] == "cpu" and out["certified"] is True, out
assert out["summary"] == {"passed": len(out["cases"]), "failed": 0, "skipped": 0}, out["summary"]
for c in out["cases"]:
    assert c["outcome"] == "PASS" and c["kernels"] == ["w4a16/w4a16_gemm_t"], c
    assert c["comparison"]["violations"] == 0 and c["comparison"]["checked"] > 0, c
paths = {r["path"]: r for r in out["coverage"]}
assert len(paths) == 24 and all(r["status"] == "serves" for r in paths.values()), out["coverage"]
assert paths["dense/decode"]["kernels"][0] == "w4a16/w4a16_gemv", paths["dense/decode"]
PY

# The wrong backend: every w4a16_gemv case fails; the rest are skipped (it lists nothing else).
set +e
wrong=$("$metrale" conformance --backend wrong --quiet)
rc=$?
set -e
[ $rc = 1 ] || fail "a failing backend must exit 1, got $rc"
grep -q "^FAIL kernel/w4a16_gemv/m1_n77_k256" <<<"$wrong" || fail "no FAIL line: $wrong"
grep -q "^SKIP dense/silu_h256_i512/m1  backend 'wrong' lists no deep-K tile GEMM" <<<"$wrong" || fail "no SKIP reason: $wrong"
grep -q "^backend 'wrong' FAILED 3 conformance case(s)$" <<<"$wrong" || fail "verdict: $wrong"
grep -q "^dense/decode  *cannot run  *-  *the manifest lists none of w4a16/w4a16_gemm_t_k64, w4a16/w4a16_gemm_t_k64_p3" <<<"$wrong" ||
  fail "coverage row: $wrong"

# Running nothing certifies nothing.
set +e
skipped=$("$metrale" conformance --backend wrong --cases 'dense/*' --quiet)
rc=$?
set -e
[ $rc = 1 ] || fail "a backend that ran no case must exit 1, got $rc"
grep -q "ran no conformance case (all 14 skipped): nothing is certified" <<<"$skipped" || fail "verdict: $skipped"

set +e
msg=$("$metrale" conformance --backend cpu --cases 'nothing/*' 2>&1); rc=$?
set -e
[ $rc = 1 ] && grep -q "'nothing/\*' matches no conformance case" <<<"$msg" || fail "unmatched --cases ($rc): $msg"
[ "$("$metrale" conformance --list --cases 'moe/topk_ties')" = "moe/topk_ties" ] || fail "--list"
echo "conformance cli test passed"
