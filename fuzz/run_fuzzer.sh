#!/usr/bin/env bash
# Runs one libFuzzer harness for a fixed time on its committed corpus, failing on any crash, leak
# of the limits below, or hang. Args: harness, seed corpus directory, work directory.
# METRALE_FUZZ_SECONDS (default 20) sets the time; new inputs go to <work>/corpus, findings to
# <work>/artifacts (the committed corpus is only read).
set -euo pipefail
harness=$1
seeds=$2
work=$3
seconds=${METRALE_FUZZ_SECONDS:-20}
dict=$(dirname "$0")/json.dict
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
# Exit 1 on every finding (libFuzzer's own default, 77, would read as "skipped" to meson).
# -timeout: one input taking 10 s is a hang; -rss_limit_mb / -malloc_limit_mb: a memory blow-up.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
exec "$harness" "$work/corpus" "$seeds" -dict="$dict" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=32768 -error_exitcode=1 -timeout_exitcode=1 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1
