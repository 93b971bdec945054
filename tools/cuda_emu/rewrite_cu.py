#!/usr/bin/env python3
"""Rewrites a .cu file into C++ that g++ compiles against the emulator's shim headers.

Two constructs of CUDA C++ are not C++ and no macro can express them, so they are rewritten
textually (the source in src/ is never touched; the copy goes to the build directory), and
static shared variables get a call that poisons them once per block:

  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> ::emu::launch(kernel, ::emu::LaunchConfig(grid, block[, smem[, stream]]))(args)
  extern __shared__ [__align__(n)] T name[];
      -> T* const name = static_cast<T*>(::emu::dynamic_shared_memory());
  __shared__ T name[dims];
      -> __shared__ T name[dims]; ::emu::poison_shared(&name, sizeof(name));

Newlines are kept where they were, and a #line directive names the original file, so compiler
diagnostics and debuggers point at the real source line.

Usage: rewrite_cu.py INPUT.cu OUTPUT.cpp   (OUTPUT is written only when its text changes, so
an unchanged .cu does not recompile.)
"""
import re
import sys

IDENT = re.compile(r"[A-Za-z0-9_]")


def skip_space_back(text, i):
    """Index of the last non-blank character at or before i."""
    while i >= 0 and text[i].isspace():
        i -= 1
    return i


def kernel_start(text, end):
    """Start of the kernel expression that ends just before index `end` (exclusive): a possibly
    qualified name, possibly with template arguments (balanced <...>, which may nest)."""
    i = skip_space_back(text, end - 1)
    while True:
        if i >= 0 and text[i] == ">":  # template arguments: walk back to the matching '<'
            depth = 0
            while i >= 0:
                c = text[i]
                if c in ">)]":
                    depth += 1
                elif c in "<([":
                    depth -= 1
                    if depth == 0:
                        break
                i -= 1
            i = skip_space_back(text, i - 1)
        if i < 0 or not IDENT.match(text[i]):
            raise ValueError(f"no kernel name before <<< at offset {end}")
        while i >= 0 and IDENT.match(text[i]):
            i -= 1
        start = i + 1
        j = skip_space_back(text, i)
        if j >= 1 and text[j] == ":" and text[j - 1] == ":":  # a qualified name: keep going
            i = skip_space_back(text, j - 2)
            continue
        return start


def rewrite_launches(text):
    out = []
    pos = 0
    while True:
        open_at = text.find("<<<", pos)
        if open_at < 0:
            out.append(text[pos:])
            return "".join(out)
        close_at = text.find(">>>", open_at)
        if close_at < 0:
            raise ValueError(f"<<< without >>> at offset {open_at}")
        start = kernel_start(text, open_at)
        if start < pos:
            raise ValueError(f"overlapping launches at offset {open_at}")
        kernel = text[start:open_at]
        config = text[open_at + 3:close_at]
        out.append(text[pos:start])
        # Newlines between the kernel and <<< move after the rewritten call: lines stay put.
        newlines = "\n" * kernel[len(kernel.rstrip()):].count("\n")
        out.append(f"::emu::launch({kernel.rstrip()}, ::emu::LaunchConfig({config})){newlines}")
        pos = close_at + 3


EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\w+\s*\)\s*)?([^;\[]*?)\s*\b(\w+)\s*\[\s*\]\s*;")


def rewrite_extern_shared(text):
    def repl(m):
        type_, name = m.group(1).strip(), m.group(2)
        newlines = "\n" * m.group(0).count("\n")
        return (f"{type_}* const {name} = "
                f"static_cast<{type_}*>(::emu::dynamic_shared_memory());{newlines}")
    return EXTERN_SHARED.sub(repl, text)


STATIC_SHARED = re.compile(
    r"(?<!extern )\b__shared__\s+([^;={}]+?)\s+(\w+)\s*((?:\[[^\]\n]*\]\s*)*);")


def poison_static_shared(text):
    # __shared__ variables are static thread-locals (emu/qualifiers.h) that would keep the
    # previous block's values; the first thread of a block to pass the declaration fills them
    # with 0xFF bytes, as uninitialized shared memory holds garbage on a GPU.
    def repl(m):
        return f"{m.group(0)} ::emu::poison_shared(&{m.group(2)}, sizeof({m.group(2)}));"
    return STATIC_SHARED.sub(repl, text)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    try:
        body = rewrite_launches(poison_static_shared(rewrite_extern_shared(text)))
    except ValueError as e:
        sys.exit(f"{src}: {e}")
    result = f'#line 1 "{src}"\n{body}'
    try:
        with open(dst, encoding="utf-8") as f:
            if f.read() == result:
                return
    except FileNotFoundError:
        pass
    with open(dst, "w", encoding="utf-8") as f:
        f.write(result)


if __name__ == "__main__":
    main()
