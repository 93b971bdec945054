#!/usr/bin/python3
"""The documentation's commands run, and print what the documentation says they print.

Every fenced block tagged `console` in README.md and docs/**/*.md (docs/reference/cli.md, which
is generated, excluded) is run, unless the line before it is `<!-- illustrative -->`:

- a line starting with `$ ` is a command (a line ending in `\\` continues on the next); it runs
  in bash with `fp8lm` on PATH (a temporary directory holding a symlink to --fp8lm),
  OMP_NUM_THREADS=2 and no GPU visible, in a fresh temporary directory per markdown file, where
  README.md, docs/ and examples/ of the repository are symlinked (text corpora for the tokenizer
  and dataset examples). The commands of one file share that directory, in order, so a later
  block can use an earlier block's run directory;
- the lines after a command are its expected output: each must match a line of the command's
  combined stdout and stderr, in order (lines in between are allowed). `...` inside a line
  matches any text; a line that is only `...` marks skipped output and matches nothing;
- the command must exit with 0, or with N when its last expected line is `[exit N]`.

`python3` in those commands is Debian's interpreter (with numpy and PyTorch), and the Python
package built beside --fp8lm (BUILD/python) is on its PYTHONPATH where it was built. Every block
tagged `python` (not illustrative) is a whole program: it runs with that interpreter, in the same
directory after the file's console blocks before it, and must exit with 0.

Usage: doc_test.py --fp8lm BIN --root REPO [FILE.md ...] (files relative to REPO; default all).
Prints each failure with the file, the block's line and the missing line, then how many blocks
ran and how many were illustrative; exits 1 on any failure.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ILLUSTRATIVE = "<!-- illustrative -->"
EXCLUDED = {os.path.join("docs", "reference", "cli.md")}
COMMAND_TIMEOUT_S = 600


class Block:
    def __init__(self, path, line, tag, lines, illustrative):
        self.path, self.line, self.tag, self.lines, self.illustrative = path, line, tag, lines, illustrative


class Command:
    def __init__(self, line, text):
        self.line, self.text, self.expected, self.exit_code = line, text, [], 0


def fenced_blocks(path, text):
    """Every fenced block of a markdown file: (line of the opening fence, tag, body lines),
    with whether the nearest non-blank line before it is the illustrative marker."""
    blocks, lines, i = [], text.split("\n"), 0
    previous = ""
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        indent, fence, tag = m.group(1), m.group(2), m.group(3)
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence), lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        blocks.append(Block(path, start, tag, body, previous == ILLUSTRATIVE))
        previous = ""
        i += 1
    return blocks


def commands(block):
    """The commands of a console block with their expected lines."""
    out, cmd, continuing = [], None, False
    for n, raw in enumerate(block.lines):
        line = raw.rstrip()
        if continuing:
            cmd.text += "\n" + line
            continuing = line.endswith("\\")
            continue
        if line.startswith("$ ") or line == "$":
            cmd = Command(block.line + n + 1, line[2:])
            out.append(cmd)
            continuing = line.endswith("\\")
        elif cmd is None:
            if line.strip():
                raise ValueError(f"{block.path}:{block.line + n + 1}: output before any `$ ` command")
        elif line.strip():
            cmd.expected.append(line)
    for c in out:
        if c.expected:
            m = re.fullmatch(r"\[exit (\d+)\]", c.expected[-1].strip())
            if m:
                c.exit_code = int(m.group(1))
                c.expected.pop()
    return out


def line_pattern(expected):
    parts = expected.strip().split("...")
    return re.compile(".*".join(re.escape(p) for p in parts))


def first_missing(expected, output):
    """The first expected line that does not match an output line after the previous match."""
    got = [l.rstrip() for l in re.split(r"\r\n|\r|\n", output)]
    pos = 0
    for want in expected:
        if want.strip() == "...":
            continue
        pattern = line_pattern(want)
        while pos < len(got) and not pattern.fullmatch(got[pos].strip()):
            pos += 1
        if pos == len(got):
            return want
        pos += 1
    return None


def python_program(block):
    """A python block as one command: the interpreter on the block's text, expecting exit 0."""
    program = "\n".join(block.lines)
    return Command(block.line, f"python3 - <<'PYTHON_BLOCK'\n{program}\nPYTHON_BLOCK")


def run_file(path, blocks, env, root):
    failures, ran = [], 0
    with tempfile.TemporaryDirectory(prefix="doc_test.") as work:
        for name in ("README.md", "docs", "examples"):
            os.symlink(os.path.join(root, name), os.path.join(work, name))
        for block in blocks:
            if block.tag not in ("console", "python") or block.illustrative:
                continue
            ran += 1
            for cmd in commands(block) if block.tag == "console" else [python_program(block)]:
                t0 = time.time()
                try:
                    p = subprocess.run(["bash", "-c", cmd.text], cwd=work, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S)
                    output, code = p.stdout.decode("utf-8", "replace"), p.returncode
                except subprocess.TimeoutExpired as e:
                    output, code = (e.stdout or b"").decode("utf-8", "replace"), f"timeout {COMMAND_TIMEOUT_S} s"
                took = time.time() - t0
                where = f"{path}:{cmd.line} (block at line {block.line})"
                problems = []
                if code != cmd.exit_code:
                    problems.append(f"exit {code}, expected {cmd.exit_code}")
                missing = first_missing(cmd.expected, output)
                if missing is not None:
                    problems.append(f"missing line: {missing.strip()}")
                if problems:
                    tail = "\n".join("    | " + l for l in output.rstrip().split("\n")[-15:])
                    failures.append(f"FAIL {where}: $ {cmd.text}\n  " + "\n  ".join(problems) + f"\n  output:\n{tail}")
                    print(failures[-1], flush=True)
                else:
                    print(f"ok   {where} ({took:.1f} s): $ {cmd.text.splitlines()[0]}", flush=True)
    return ran, failures


def self_test(env):
    """The matcher's own rules, on made-up blocks: a missing line and a wrong exit fail."""
    doc = "\n".join([
        "```console", "$ printf 'a 1\\nb 2\\nc 3\\n'", "a ...", "...", "c 3", "```",
        "<!-- illustrative -->", "```console", "$ false", "```",
        "```console", "$ printf 'x\\n'; exit 3", "x", "[exit 3]", "```",
        "```console", "$ printf 'c\\nb\\n'", "b", "c", "```",
        "```console", "$ echo one \\", "  two", "one two", "```",
        "```console", "$ exit 2", "```",
    ])
    blocks = fenced_blocks("self-test.md", doc)
    assert [b.illustrative for b in blocks] == [False, True, False, False, False, False], "illustrative marker"
    results = []
    for b in blocks[2:]:
        for c in commands(b):
            p = subprocess.run(["bash", "-c", c.text], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            results.append((p.returncode == c.exit_code, first_missing(c.expected, p.stdout.decode())))
    a = commands(blocks[0])[0]
    out = subprocess.run(["bash", "-c", a.text], stdout=subprocess.PIPE).stdout.decode()
    assert first_missing(a.expected, out) is None, "wildcards"
    assert results == [(True, None), (True, "c"), (True, None), (False, None)], f"self-test: {results}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fp8lm", required=True, help="the fp8lm binary")
    ap.add_argument("--root", required=True, help="the repository")
    ap.add_argument("files", nargs="*", help="markdown files relative to --root (default: all)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    binary = os.path.abspath(args.fp8lm)
    if not os.access(binary, os.X_OK):
        sys.exit(f"error: {binary} is not an executable")

    files = args.files or ["README.md"] + sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, _, names in os.walk(os.path.join(root, "docs")) for f in names if f.endswith(".md"))
    files = [f for f in files if os.path.normpath(f) not in EXCLUDED]

    with tempfile.TemporaryDirectory(prefix="doc_test_bin.") as bindir:
        os.symlink(binary, os.path.join(bindir, "fp8lm"))
        os.symlink("/usr/bin/python3", os.path.join(bindir, "python3"))
        package = os.path.join(os.path.dirname(binary), "python")
        # The CPU's outputs everywhere: a GPU on the test machine would change what `--device
        # auto` picks and what the commands print.
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
                   OMP_NUM_THREADS="2", LC_ALL="C.UTF-8", CUDA_VISIBLE_DEVICES="")
        if os.path.isdir(os.path.join(package, "fp8lm")):
            env["PYTHONPATH"] = package
        self_test(env)
        t0, ran, skipped, failures = time.time(), 0, 0, []
        for f in files:
            text = open(os.path.join(root, f), encoding="utf-8").read()
            blocks = fenced_blocks(f, text)
            skipped += sum(1 for b in blocks if b.tag in ("console", "python") and b.illustrative)
            try:
                for b in blocks:
                    if b.tag == "console" and not b.illustrative:
                        commands(b)
            except ValueError as e:
                failures.append(f"FAIL {e}")
                print(failures[-1])
                continue
            r, fails = run_file(f, blocks, env, root)
            ran += r
            failures += fails
    print(f"\n{ran} console and python blocks run, {skipped} illustrative (not run), in {len(files)} files, "
          f"{time.time() - t0:.0f} s; {len(failures)} failed")
    for f in failures:  # once more, one line each, after the progress
        print(" ".join(l.strip() for l in f.split("\n")[:2]))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
