#!/usr/bin/env python3
"""Tokenizing throughput (issue 15): `fp8lm data prepare` against Hugging Face's `tokenizers`
(encode_batch, the Rust library) on the same documents with the same tokenizer.json, at 1 thread
and at every core, in MB of input text per second; the ratio is ours over theirs (goal: at
least 1 per core). Our figure includes reading the files and writing the shards; theirs is the
encoding alone.

The text: this machine's Python sources and Debian changelogs and copyright files (varied
English and code, one document per file), about --mb MB. The tokenizer: one `fp8lm tokenizer
train` learns from a part of it (--vocab).

Usage: bench/tokenize_bench.py [--fp8lm build/release/fp8lm] [--mb 100] [--vocab 32000] [--lines]
"""
import argparse
import glob
import gzip
import json
import os
import subprocess
import tempfile
import time


def documents(limit):
    docs, total = [], 0
    paths = sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz") +
                   glob.glob("/usr/share/doc/*/copyright") +
                   glob.glob("/usr/lib/python3*/**/*.py", recursive=True))
    for p in paths:
        try:
            raw = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
        except OSError:
            continue
        text = raw.decode("utf-8", errors="replace")
        if not text:
            continue
        docs.append(text)
        total += len(text.encode("utf-8"))
        if total >= limit:
            break
    return docs, total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp8lm", default="build/release/fp8lm")
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--lines", action="store_true",
                    help="each line a document (data prepare --split-lines), not each file")
    a = ap.parse_args()
    from tokenizers import Tokenizer
    docs, total = documents(int(a.mb * 1e6))
    if a.lines:
        docs = [line for d in docs for line in d.split("\n") if line]
        total = sum(len(d.encode("utf-8")) for d in docs)
    mb = total / 1e6
    cores = os.cpu_count()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "docs.jsonl")
        with open(corpus, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        sample = os.path.join(tmp, "sample.jsonl")
        with open(sample, "w", encoding="utf-8") as f:
            for d in docs[::10]:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        tok = os.path.join(tmp, "tokenizer.json")
        subprocess.run([a.fp8lm, "tokenizer", "train", "--vocab-size", str(a.vocab), "--out", tok,
                        sample], check=True, capture_output=True)
        hf = Tokenizer.from_file(tok)
        print(f"{len(docs)} documents, {mb:.1f} MB; tokenizer: vocab {hf.get_vocab_size()} "
              f"learnt by fp8lm from a tenth of them; {cores} cores")
        print(f"{'threads':>7} {'fp8lm MB/s':>11} {'tokenizers MB/s':>16} {'ratio':>6}")
        for threads in sorted({1, cores}):
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            out = os.path.join(tmp, f"ds{threads}")
            t0 = time.perf_counter()
            subprocess.run([a.fp8lm, "data", "prepare", "--tokenizer", tok, "--out", out, corpus],
                           check=True, capture_output=True, env=env)
            ours = mb / (time.perf_counter() - t0)
            # RAYON_NUM_THREADS is read once per process: theirs runs in a child too.
            code = ("import json,sys,time;from tokenizers import Tokenizer;"
                    f"t=Tokenizer.from_file({tok!r});"
                    f"d=[json.loads(l)['text'] for l in open({corpus!r},encoding='utf-8')];"
                    "s=time.perf_counter();t.encode_batch(d);print(time.perf_counter()-s)")
            env_hf = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
            secs = float(subprocess.run(["python3", "-c", code], check=True, capture_output=True,
                                        text=True, env=env_hf).stdout)
            theirs = mb / secs
            print(f"{threads:>7} {ours:>11.1f} {theirs:>16.1f} {ours / theirs:>5.2f}x")


if __name__ == "__main__":
    main()
