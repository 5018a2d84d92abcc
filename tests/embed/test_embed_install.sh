#!/usr/bin/env bash
# Embedding against an installed metrale (docs/embedding.md): install this build into a temp root,
# check what an embedder needs is there (libmetrale-layers, metrale-layers.pc, the CMake package)
# and that the layers headers installed are the public ones docs/embedding.md lists, each compiling
# alone against nothing but the installed tree, then build docs/examples/embed out of tree twice --
# with Meson and pkg-config, and with CMake and find_package(metrale) -- and run both on two small checkpoints (dense, MoE): each must print the
# same, and write the y that the installed `metrale run --weights --layer --input --output` writes
# for the same rows, bit for bit.
# Usage: test_embed_install.sh BUILD_DIR SOURCE_DIR PREFIX BINDIR LIBDIR INCLUDEDIR PYTHON3
set -euo pipefail
build=$1 source=$2 prefix=$3 bindir=$4 libdir=$5 includedir=$6 python=$7
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
quiet() { local log=$1; shift; "$@" >"$log" 2>&1 || { cat "$log"; fail "$*"; }; }

for tool in cmake pkg-config c++; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (.ci/setup installs it)"
done

meson install -C "$build" --no-rebuild --destdir "$root/dest" --quiet >/dev/null
staged="$root/dest$prefix"
lib="$staged/$libdir"
inc="$staged/$includedir"
for f in "$lib/libmetrale-layers.so" "$lib/libmetrale.so" "$lib/pkgconfig/metrale-layers.pc" "$lib/pkgconfig/metrale.pc" \
         "$lib/cmake/metrale/metraleConfig.cmake" "$lib/cmake/metrale/metraleConfigVersion.cmake" \
         "$inc/metrale/layers/embed.hpp" "$inc/metrale/registry.hpp"; do
  [ -e "$f" ] || fail "not installed: ${f#"$root/dest"}"
done

export PKG_CONFIG_PATH="$lib/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$root/dest"
pkg-config --exists metrale-layers || fail "metrale-layers.pc: $(pkg-config --print-errors metrale-layers 2>&1)"
pkg-config --print-requires metrale-layers | grep -q '^metrale\b' || fail "metrale-layers.pc does not require metrale"

# The installed layers headers are exactly the public ones docs/embedding.md lists (a row
# "| `<metrale/layers/...>` |" each), and each resolves its includes inside the installed tree
# alone: compiled by itself, with nothing of the source tree.
headers=$(cd "$inc" && find metrale/layers -type f | sort)
# shellcheck disable=SC2016  # backquotes of Markdown, not a command
documented=$(sed -n 's/^| `<\(metrale\/layers\/[^>]*\)>` |.*/\1/p' "$source/docs/embedding.md" | sort)
[ -n "$documented" ] || fail "docs/embedding.md lists no layers header"
[ "$headers" = "$documented" ] ||
  { diff <(echo "$documented") <(echo "$headers"); fail "the installed layers headers (+) are not the ones docs/embedding.md lists (-)"; }
for header in $headers; do
  echo "#include <$header>" >"$root/one_header.cpp"
  # shellcheck disable=SC2046  # pkg-config's flags are words
  c++ -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror $(pkg-config --cflags metrale-layers) "$root/one_header.cpp" \
    >"$root/header.log" 2>&1 || { cat "$root/header.log"; fail "<$header> does not compile alone against the install"; }
done

# Out of tree: a copy of the example, so nothing of the source tree's build leaks in.
cp -r "$source/docs/examples/embed" "$root/example"
quiet "$root/meson-setup.log" meson setup "$root/build-pc" "$root/example"
quiet "$root/meson-compile.log" meson compile -C "$root/build-pc"
quiet "$root/cmake-setup.log" cmake -S "$root/example" -B "$root/build-cmake" -G Ninja -DCMAKE_PREFIX_PATH="$staged"
quiet "$root/cmake-build.log" cmake --build "$root/build-cmake"

export LD_LIBRARY_PATH="$lib" METRALE_PLUGIN_PATH="$lib/metrale/plugins"
# The default selection, kept on the CPU backend on a GPU machine too (by priority CUDA would win).
export METRALE_BACKENDS_DISABLE=cuda
quiet "$root/write.log" "$python" "$source/tests/embed/write_checkpoints.py" "$root/ckpt"
for case in "dense 1 5" "moe 0 3"; do
  read -r name layer m <<<"$case"
  for how in pc cmake; do
    mkdir -p "$root/out-$how-$name"
    "$root/build-$how/embed_example" "$root/ckpt/$name" "$layer" "$m" "$root/out-$how-$name" >"$root/$how-$name.txt" 2>&1 ||
      { cat "$root/$how-$name.txt"; fail "the $how-built example on the $name checkpoint exited $?"; }
  done
  cmp -s "$root/pc-$name.txt" "$root/cmake-$name.txt" || { diff "$root/pc-$name.txt" "$root/cmake-$name.txt"; fail "the two builds print differently"; }
  out="$root/pc-$name.txt"
  grep -q "^backend  cpu " "$out" || fail "$name: not on the default backend: $(head -1 "$out")"
  grep -q "^layer    $layer of " "$out" || fail "$name: not layer $layer: $(sed -n 2p "$out")"
  grep -q "^device buffers: same output$" "$out" || fail "$name: device-buffer run differs"
  grep -Eq " cpu +[^ ]+ +[a-z0-9_]+/[a-z0-9_]+ +(try|require) +resolved " "$out" || { cat "$out"; fail "$name: no resolved audit row printed"; }
  "$staged/$bindir/metrale" run --weights "$root/ckpt/$name" --layer "$layer" --input "$root/out-pc-$name/x.safetensors" \
    --output "$root/run-$name.safetensors" --quiet --repeat 1 --warmup 0 >"$root/run-$name.txt" 2>&1 ||
    { cat "$root/run-$name.txt"; fail "installed metrale run on $name exited $?"; }
  "$python" "$source/tests/embed/compare_outputs.py" "$root/run-$name.safetensors" "$root/out-pc-$name/y.safetensors" \
    "$root/out-cmake-$name/y.safetensors" || fail "$name: the example's y is not metrale run's"
done

# A backend asked for by name that does not exist: the example refuses with exit 3, as the CLI does.
set +e
METRALE_BACKEND=nosuch "$root/build-cmake/embed_example" "$root/ckpt/dense" 1 1 >"$root/refusal.txt" 2>&1
rc=$?
set -e
[ $rc = 3 ] && grep -q "nosuch" "$root/refusal.txt" || { cat "$root/refusal.txt"; fail "METRALE_BACKEND=nosuch: expected exit 3, got $rc"; }

echo "embedding test passed: installed, built with pkg-config and with CMake, same output as metrale run"
