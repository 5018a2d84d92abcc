#!/usr/bin/env bash
# `metrale compile` end to end, without a GPU: every module for a target, the cache hit on the
# second run, a corrupt cache entry rebuilt with a warning, usage errors, and a refusal when the
# cuda backend is disabled (compile goes through the registry). Args: metrale binary.
set -u
metrale=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export METRALE_CACHE_DIR=$work/cache
unset METRALE_KERNEL_SRC
fail() { echo "FAIL: $*"; exit 1; }

"$metrale" compile --target sm_86 >"$work/out1" 2>"$work/err1" || fail "first compile: $(cat "$work/err1")"
grep -q '^w4a16 *compiled' "$work/out1" || fail "w4a16 not compiled: $(cat "$work/out1")"
grep -q '^w4a16_v3 *gated' "$work/out1" || fail "w4a16_v3 should be gated on sm_86"
grep -q '\[1/20\] w4a16: compiled in' "$work/err1" || fail "no progress lines on stderr"
grep -q '^fp8 *compiled' "$work/out1" || fail "fp8 not compiled: $(cat "$work/out1")"
grep -q 'fp8_gemm_a8 .*gated: requires sm_89' "$work/out1" || fail "fp8_gemm_a8 should be gated on sm_86"
grep -q '^w4afp8 *gated' "$work/out1" || fail "w4afp8 (every kernel sm_89+) should be gated on sm_86: $(cat "$work/out1")"

"$metrale" compile --target sm_86 >"$work/out2" 2>"$work/err2" || fail "second compile"
for m in w4a16 w4a16_v2 act moe w4a16_zp w8a16 fp8 quant w4a8 w8a8 bf16 f16 norm rope embed sample deltanet; do
  grep -q "^$m *cache hit" "$work/out2" || fail "$m not a cache hit the second time: $(cat "$work/out2")"
done

for entry in "$work"/cache/cuda/*.mcache; do
  printf 'garbage' | dd of="$entry" bs=1 seek=300 conv=notrunc status=none
done
"$metrale" compile --target sm_86 --module act >"$work/out3" 2>"$work/err3" || fail "compile after corruption"
grep -q 'is corrupt (checksum mismatch); rebuilding it' "$work/err3" || fail "no corruption warning: $(cat "$work/err3")"
grep -q '^act *compiled' "$work/out3" || fail "act not rebuilt"

"$metrale" --json compile --target sm_86 --module act >"$work/json" 2>/dev/null || fail "--json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["modules"][0]["cache_hit"], d' "$work/json" \
  || fail "bad JSON"

"$metrale" compile --target sm_8x >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown target should exit 2"
"$metrale" compile --target sm_86 --module nope >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown module should exit 2"
METRALE_BACKENDS_DISABLE=cuda "$metrale" compile --target sm_90 >/dev/null 2>"$work/err4"; code=$?
[ $code -eq 3 ] || fail "a disabled cuda backend should exit 3, not $code"
grep -q 'disabled by METRALE_BACKENDS_DISABLE=cuda' "$work/err4" || fail "no lever named: $(cat "$work/err4")"
echo ok
