#!/usr/bin/env bash
# Runs elevated_probe setuid (owner nobody, started by root) and checks that the path levers are
# ignored while ordinary levers are not. Skips (77) where setuid cannot be arranged.
set -euo pipefail
probe=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to make a setuid copy"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user 'nobody'"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
cp "$probe" "$dir/probe"
chown nobody "$dir/probe"
chmod 4755 "$dir/probe"
echo '{}' > "$dir/m.json"

plain=$(METRALE_MANIFESTS="$dir/m.json" METRALE_PLUGIN_PATH="$dir" METRALE_BACKEND=cpu "$probe")
grep -qx "elevated=0" <<<"$plain" || { echo "FAIL: plain run reports elevated"; echo "$plain"; exit 1; }
grep -qx "manifests=$dir/m.json" <<<"$plain" || { echo "FAIL: plain run ignores METRALE_MANIFESTS"; echo "$plain"; exit 1; }

if ! elevated=$(METRALE_MANIFESTS="$dir/m.json" METRALE_PLUGIN_PATH="$dir" METRALE_BACKEND=cpu "$dir/probe" 2>&1); then
  echo "SKIP: the setuid copy cannot run here (nosuid mount or loader policy): $elevated"; exit 77
fi
grep -qx "elevated=1" <<<"$elevated" || { echo "SKIP: setuid bit not honoured here (nosuid mount?)"; echo "$elevated"; exit 77; }
grep -qx "manifests=(ignored)" <<<"$elevated" || { echo "FAIL: elevated run honours METRALE_MANIFESTS"; echo "$elevated"; exit 1; }
grep -qx "plugin_path=(ignored)" <<<"$elevated" || { echo "FAIL: elevated run honours METRALE_PLUGIN_PATH"; echo "$elevated"; exit 1; }
grep -qx "backend=cpu" <<<"$elevated" || { echo "FAIL: elevated run drops a non-path lever"; echo "$elevated"; exit 1; }
grep -qx "discovered=0" <<<"$elevated" || { echo "FAIL: elevated discovery used the path levers"; echo "$elevated"; exit 1; }
echo "elevated-privilege test passed: path levers ignored under setuid"
