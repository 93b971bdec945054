#!/usr/bin/env bash
# A user's view of the library: install the build into a fresh prefix, build examples/ against
# it with find_package(fp8lm) (only the installed public headers on its include path), and
# run the example for a few steps. Usage: tests/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# The installed headers are the public ones only, and they include nothing else.
if [[ -e $tmp/prefix/include/core || -e $tmp/prefix/include/nn ]]; then
  echo "internal headers were installed" >&2
  exit 1
fi
cmake -S "$src/examples" -B "$tmp/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/examples" >/dev/null
cd "$tmp"
OMP_NUM_THREADS=2 "$tmp/examples/train_demo" 3 "$tmp/demo.safetensors" | tee "$tmp/out.txt"
grep -q "^generated after" "$tmp/out.txt"
grep -q "layers.0.fc1 input: scale" "$tmp/out.txt"
