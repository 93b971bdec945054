#!/usr/bin/env python3
"""fp8lm's byte-level BPE tokenizer against Hugging Face's `tokenizers` library (issue 15).

  make   trains a small byte-level BPE with `tokenizers` on the committed test documents and this
         repository's text, and writes the fixtures the C++ tests read without it:
         tests/data/tokenizer/{tokenizer.json, gpt2/vocab.json, gpt2/merges.txt, expected.json}
         (expected.json: each document's ids as `tokenizers` encodes it).
  check  encodes a few MB of varied text (the test documents; this repository's sources and
         docs; Debian's license texts and copyright files) with `tokenizers` and with
         `fp8lm tokenizer encode --jsonl`, for the committed tokenizer.json, one `tokenizers`
         trains on that text and one `fp8lm tokenizer train` learns from it (which the library
         must load), and compares every document's ids. Exits 77 (ctest: skipped) when
         `tokenizers` is not installed.

Usage: tools/tokenizer_check.py make
       tools/tokenizer_check.py check --fp8lm build/release/fp8lm [--mb 3]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
# Pinned: the version whose ids the fixtures hold (it loads tokenizer.json files of 0.14-0.21).
VERSION = "0.19.1"


def documents():
    with open(os.path.join(DATA, "documents.json"), encoding="utf-8") as f:
        return json.load(f)


def repo_texts():
    pats = ["README.md", "docs/*.md", "src/**/*.cpp", "src/**/*.h", "src/**/*.cu", "tests/*.cpp",
            "bench/*.py", "scripts/*", "tools/*.py"]
    out = []
    for p in pats:
        for path in sorted(glob.glob(os.path.join(ROOT, p), recursive=True)):
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    out.append(f.read())
    return out


def debian_texts():
    out = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*") +
                       glob.glob("/usr/share/doc/*/copyright")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                out.append(f.read())
    return out


def corpus(mb):
    """Documents of a few MB in all: each file cut at blank lines into pieces of <= 64 KiB."""
    docs = documents() * 4  # the varied scripts, emoji and white space weigh in too
    limit = int(mb * 1e6)
    for text in repo_texts() + debian_texts():
        piece = ""
        for para in text.split("\n\n"):
            if len(piece) + len(para) > 65536 and piece:
                docs.append(piece)
                piece = ""
            piece += para + "\n\n"
        docs.append(piece)
        if sum(len(d) for d in docs) > limit:
            break
    return docs


def train(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def make():
    tok = train(documents() * 20 + repo_texts(), 2000)
    tok.save(os.path.join(DATA, "tokenizer.json"))
    os.makedirs(os.path.join(DATA, "gpt2"), exist_ok=True)
    tok.model.save(os.path.join(DATA, "gpt2"))
    expected = [{"text": d, "ids": tok.encode(d).ids} for d in documents()]
    with open(os.path.join(DATA, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers": VERSION, "documents": expected}, f, ensure_ascii=False)
    print(f"wrote {DATA}: vocab {tok.get_vocab_size()}, {len(expected)} documents")


def ours(fp8lm, tokenizer, docs):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        path = f.name
    try:
        out = subprocess.run([fp8lm, "tokenizer", "encode", "--tokenizer", tokenizer, "--jsonl",
                              "--file", path], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return [json.loads(line) for line in out.splitlines()]


def check(fp8lm, mb):
    try:
        import tokenizers
    except ImportError:
        print(f"skipped: the `tokenizers` library is not installed (pip install tokenizers=={VERSION});"
              " the committed fixtures still run in test_tokenizer")
        return 77
    from tokenizers import Tokenizer
    docs = corpus(mb)
    total = sum(len(d.encode("utf-8")) for d in docs)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        trained = os.path.join(tmp, "tokenizer.json")
        train(docs, 8000).save(trained)
        # And one that fp8lm learnt, which the library must load and encode with alike.
        ours_trained = os.path.join(tmp, "fp8lm.json")
        corpus_file = os.path.join(tmp, "corpus.jsonl")
        with open(corpus_file, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        subprocess.run([fp8lm, "tokenizer", "train", "--vocab-size", "8000", "--out", ours_trained,
                        corpus_file], check=True, capture_output=True)
        for name, path in [("committed", os.path.join(DATA, "tokenizer.json")),
                           ("trained by tokenizers", trained), ("trained by fp8lm", ours_trained)]:
            hf = Tokenizer.from_file(path)
            want = [e.ids for e in hf.encode_batch(docs)]
            got = ours(fp8lm, path, docs)
            bad = [i for i in range(len(docs)) if got[i] != want[i]]
            print(f"{name} tokenizer.json (vocab {hf.get_vocab_size()}): {len(docs)} documents, "
                  f"{total / 1e6:.2f} MB, {sum(map(len, want))} tokens, {len(bad)} differ"
                  f" (tokenizers {tokenizers.__version__})")
            for i in bad[:3]:
                k = next((j for j, (a, b) in enumerate(zip(got[i], want[i])) if a != b),
                         min(len(got[i]), len(want[i])))
                print(f"  document {i}: first difference at token {k}: ours {got[i][k:k + 8]}, "
                      f"tokenizers {want[i][k:k + 8]} near {hf.decode(want[i][max(0, k - 4):k + 4])!r}")
            failed += len(bad)
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["make", "check"])
    ap.add_argument("--fp8lm", default=os.path.join(ROOT, "build", "release", "fp8lm"))
    ap.add_argument("--mb", type=float, default=3.0)
    a = ap.parse_args()
    if a.what == "make":
        make()
        return 0
    return check(a.fp8lm, a.mb)


if __name__ == "__main__":
    sys.exit(main())
