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
# The command-line tool goes into bin/ (an installed prefix puts fp8lm on the PATH).
if [[ $("$tmp/prefix/bin/fp8lm" --version) != "fp8lm "* ]]; then
  echo "bin/fp8lm was not installed" >&2
  exit 1
fi
cmake -S "$src/examples" -B "$tmp/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/examples" >/dev/null
cd "$tmp"
OMP_NUM_THREADS=2 "$tmp/examples/train_demo" 3 "$tmp/demo.safetensors" | tee "$tmp/out.txt"
grep -q "^generated after" "$tmp/out.txt"
grep -q "layers.0.fc1 input: scale" "$tmp/out.txt"

# The C++ programs of README.md and docs/ build against the installed package too: every
# ```cpp block with an `int main` is compiled and linked as examples/ is (a `#line` directive
# makes errors name the markdown file and line). A block without main must be marked
# <!-- illustrative --> on the line before it. The blocks are read with tests/doc_test.py's
# parser, the one that runs the ```console blocks.
snippets=$tmp/snippets
mkdir -p "$snippets"
/usr/bin/python3 - "$src" "$snippets" <<'PY'
import os
import sys

src, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(src, "tests"))
from doc_test import fenced_blocks  # noqa: E402

files = ["README.md"] + sorted(
    os.path.relpath(os.path.join(d, f), src)
    for d, _, names in os.walk(os.path.join(src, "docs")) for f in names if f.endswith(".md"))
cmake = ["cmake_minimum_required(VERSION 3.25)", "project(fp8lm_doc_snippets LANGUAGES CXX)",
         "set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD_REQUIRED ON)", "find_package(fp8lm REQUIRED)"]
bad, count = [], 0
for f in files:
    for b in fenced_blocks(f, open(os.path.join(src, f), encoding="utf-8").read()):
        if b.tag not in ("cpp", "c++") or b.illustrative:
            continue
        if not any("int main" in line for line in b.lines):
            bad.append(f"{f}:{b.line}")
            continue
        count += 1
        name = f"snippet_{count}"
        with open(os.path.join(out, name + ".cpp"), "w", encoding="utf-8") as o:
            o.write(f'#line {b.line + 1} "{f}"\n' + "\n".join(b.lines) + "\n")
        cmake += [f"add_executable({name} {name}.cpp)  # {f}:{b.line}",
                  f"target_link_libraries({name} PRIVATE fp8lm::fp8lm)"]
        print(f"{name}: {f}:{b.line}")
if bad:
    sys.exit("C++ blocks that are not whole programs (add int main, or mark them "
             "<!-- illustrative -->): " + ", ".join(bad))
if count == 0:
    sys.exit("no C++ program found in README.md and docs/")
open(os.path.join(out, "CMakeLists.txt"), "w").write("\n".join(cmake) + "\n")
PY
cmake -S "$snippets" -B "$snippets/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$snippets/build"
echo "the documentation's C++ programs build against the installed package"
