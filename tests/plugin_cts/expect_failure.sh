#!/usr/bin/env bash
# Runs the plugin conformance suite on a plugin that breaks a rule and passes only when the suite fails
# naming that rule: exit status non-zero and PATTERN (grep -E) in its output.
# Usage: expect_failure.sh PATTERN PLUGIN_CTS [ARGS...]
set -uo pipefail
pattern=$1
shift
output=$("$@" 2>&1)
status=$?
if [ "$status" -eq 0 ]; then
  echo "FAIL: the suite passed a plugin that breaks a rule:"; echo "$output"; exit 1
fi
if ! grep -qE "$pattern" <<<"$output"; then
  echo "FAIL: the suite failed (exit $status), but not with /$pattern/:"; echo "$output"; exit 1
fi
echo "the suite failed as it should (exit $status): $(grep -E -m1 "$pattern" <<<"$output")"
