#!/usr/bin/env python3
"""fp8lm's Hugging Face export and import against transformers (issue 15).

  check  trains two small models with fp8lm under FP8 (GPT-2 blocks; Llama blocks with
         rotary embeddings, 8 query heads sharing 2 key/value heads, no biases, an untied
         head), exports each with `fp8lm export`, loads the directory with transformers
         (GPT2LMHeadModel, LlamaForCausalLM), and compares transformers' logits with
         `fp8lm logits` on the same tokens; then imports the directory with `fp8lm import` and
         compares every weight with the original's, bit for bit. Exits 77 (ctest: skipped)
         when torch or transformers cannot be imported.
  make   writes the fixtures the C++ tests read without transformers: tests/data/hf/{gpt2,llama}
         (a tiny exported model each) and their expected.json (tokens and transformers' logits).

Tolerance: both sides run FP32 with different summation orders (oneDNN against PyTorch's
BLAS); the logits then differ by a few FP32 roundings of the values summed, ~1e-6 of their
scale here. 1e-4 of the largest logit (and at least 1e-4) bounds that with margin, and is far
below what a wrong layout or rule gives (differences of the order of the logits themselves).

Usage: tools/hf_check.py check --fp8lm build/release/fp8lm
       tools/hf_check.py make --fp8lm build/release/fp8lm
Pinned for the test: transformers 4.40.2 (loads with Debian 12's PyTorch 1.13 and numpy < 2).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "data", "hf")
VERSION = "4.40.2"
COMMON = ["--steps", "6", "--batch-size", "4", "--seed", "3", "--threads", "2", "--device", "cpu",
          "--max-stride", "2"]
# Llama's blocks: rotary embeddings, SwiGLU, RMSNorm, no biases, an untied head.
LLAMA = ["--normalization", "rmsnorm", "--activation", "swiglu", "--rope-theta", "10000",
         "--bias", "false", "--tie-embeddings", "false"]
ARCHS = {
    "gpt2": ["--vocab", "64", "--seq-len", "32", "--d-model", "64", "--n-layers", "2",
             "--n-heads", "4", "--ffn", "128"],
    "llama": ["--vocab", "64", "--seq-len", "32", "--d-model", "128", "--n-layers", "2",
              "--n-heads", "8", "--n-kv-heads", "2", "--ffn", "160", *LLAMA],
}
# The fixtures: the smallest models that still have every feature (d16, 4 heads, 2 kv heads).
TINY = {
    "gpt2": ["--vocab", "32", "--seq-len", "12", "--d-model", "16", "--n-layers", "1",
             "--n-heads", "2", "--ffn", "32"],
    "llama": ["--vocab", "32", "--seq-len", "12", "--d-model", "16", "--n-layers", "1",
              "--n-heads", "4", "--n-kv-heads", "2", "--ffn", "16", *LLAMA],
}
CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}


def sh(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def train_and_export(fp8lm, work, name, flags):
    run, hf = os.path.join(work, name + "-run"), os.path.join(work, name + "-hf")
    sh(fp8lm, "train", "--out", run, *COMMON, "--precision", "fp8", *flags)
    sh(fp8lm, "export", run, hf)
    return run, hf


def hf_logits(hf, tokens, arch):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(hf)
    if type(model).__name__ != CLASSES[arch]:
        sys.exit(f"{hf}: transformers built {type(model).__name__}, not {CLASSES[arch]}")
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].tolist()


def compare(ours, theirs, what):
    scale = max(1.0, max(abs(x) for row in theirs for x in row))
    worst = max(abs(a - b) for ra, rb in zip(ours, theirs) for a, b in zip(ra, rb))
    ok = len(ours) == len(theirs) and worst <= 1e-4 * scale
    print(f"{what}: max |fp8lm - transformers| = {worst:.3g} (largest logit {scale:.3g}) "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def same_weights(a, b, what):
    from safetensors.numpy import load_file
    x, y = load_file(a), load_file(b)
    names = [n for n in x if ".fp8." not in n]  # the weights, not the FP8 scaling state
    diff = [n for n in names if n not in y or x[n].tobytes() != y[n].tobytes()]
    print(f"{what}: {len(names) - len(diff)} of {len(names)} weights equal bit for bit"
          f"{'' if not diff else ' (differ: ' + ', '.join(diff[:5]) + ')'}")
    return not diff


def check(a):
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as e:
        print(f"skipped: {e} (pip install transformers=={VERSION} 'numpy<2' beside PyTorch)")
        return 77
    if transformers.__version__ != VERSION:
        print(f"note: transformers {transformers.__version__}, not the pinned {VERSION}")
    ok = True
    with tempfile.TemporaryDirectory() as work:
        for arch, flags in ARCHS.items():
            run, hf = train_and_export(a.fp8lm, work, arch, flags)
            tokens = [(7 * i + 3) % 64 for i in range(32)]
            ours = json.loads(sh(a.fp8lm, "logits", "--checkpoint", run,
                                 "--tokens", " ".join(map(str, tokens))))
            ok &= compare(ours, hf_logits(hf, tokens, arch), f"{arch} ({CLASSES[arch]}) logits")
            back = os.path.join(work, arch + "-imported")
            sh(a.fp8lm, "import", hf, "--out", back)
            ok &= same_weights(os.path.join(run, "model.safetensors"),
                               os.path.join(back, "model.safetensors"), f"{arch} import")
    return 0 if ok else 1


def make(a):
    import shutil
    with tempfile.TemporaryDirectory() as work:
        for arch, flags in TINY.items():
            run = os.path.join(work, arch + "-run")
            sh(a.fp8lm, "train", "--out", run, *COMMON, "--precision", "fp32", *flags)
            out = os.path.join(FIXTURES, arch)
            shutil.rmtree(out, ignore_errors=True)
            sh(a.fp8lm, "export", run, out)
            tokens = [(5 * i + 1) % 32 for i in range(8)]
            logits = hf_logits(out, tokens, arch)
            with open(os.path.join(out, "expected.json"), "w") as f:
                json.dump({"transformers": VERSION, "tokens": tokens, "logits": logits}, f)
            print(f"wrote {out}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["check", "make"])
    ap.add_argument("--fp8lm", default=os.path.join(ROOT, "build", "release", "fp8lm"))
    a = ap.parse_args()
    sys.exit(check(a) if a.mode == "check" else make(a))


if __name__ == "__main__":
    main()
