#!/usr/bin/env python3
"""fp8lm's Hugging Face export and import against transformers (issue 15).

  check  trains two small models with fp8lm under FP8 (GPT-2 blocks; Llama blocks with
         rotary embeddings, 8 query heads sharing 2 key/value heads, no biases, an untied
         head), exports each with `fp8lm export`, loads the directory with transformers
         (GPT2LMHeadModel, LlamaForCausalLM), and compares transformers' logits with
         `fp8lm logits` on the same tokens; then imports the directory with `fp8lm import` and
         compares every weight with the original's, bit for bit. Then transformers' own files:
         each exported model saved by save_pretrained in two safetensors shards (F32, F16,
         BF16) imports bit for bit as the single file does (the 16-bit ones as the weights
         rounded to nearest even). And generation: a GPT-2 and a Llama trained on a token
         dataset whose documents end with <|endoftext|> are exported and loaded with
         AutoTokenizer and AutoModelForCausalLM; greedy model.generate gives `fp8lm generate`'s
         tokens, stops at the end-of-text token, and neither loading nor generating prints a
         warning. Exits 77 (ctest: skipped) when torch or transformers cannot be imported.
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
import contextlib
import functools
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import warnings

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
# Every other gated activation as Llama's MLP with its hidden_act (GeGLU: gelu_pytorch_tanh).
ARCHS["llama-geglu"] = [("geglu" if f == "swiglu" else f) for f in ARCHS["llama"]]
# The fixtures: the smallest models that still have every feature (d16, 4 heads, 2 kv heads).
TINY = {
    "gpt2": ["--vocab", "32", "--seq-len", "12", "--d-model", "16", "--n-layers", "1",
             "--n-heads", "2", "--ffn", "32"],
    "llama": ["--vocab", "32", "--seq-len", "12", "--d-model", "16", "--n-layers", "1",
              "--n-heads", "4", "--n-kv-heads", "2", "--ffn", "16", *LLAMA],
}
CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM",
           "llama-geglu": "LlamaForCausalLM"}


def sh(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


@functools.lru_cache(None)
def takes_out_flag(fp8lm):
    return "--out" in sh(fp8lm, "export", "--help")


def export(fp8lm, run, hf):
    """`fp8lm export RUN --out DIR`, or the older `export RUN DIR` of a binary without --out."""
    if takes_out_flag(fp8lm):
        sh(fp8lm, "export", run, "--out", hf)
    else:
        sh(fp8lm, "export", run, hf)


def train_and_export(fp8lm, work, name, flags):
    run, hf = os.path.join(work, name + "-run"), os.path.join(work, name + "-hf")
    sh(fp8lm, "train", "--out", run, *COMMON, "--precision", "fp8", *flags)
    export(fp8lm, run, hf)
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


def rounded(x, dtype):
    """FP32 values (numpy) rounded to F16 or BF16 (nearest, ties to even) and widened back."""
    import numpy as np
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(np.float32)


def same_weights_rounded(a, b, dtype, what):
    from safetensors.numpy import load_file
    x, y = load_file(a), load_file(b)
    names = [n for n in x if ".fp8." not in n]
    diff = [n for n in names if n not in y or rounded(x[n], dtype).tobytes() != y[n].tobytes()]
    print(f"{what}: {len(names) - len(diff)} of {len(names)} weights equal the {dtype} values "
          f"bit for bit{'' if not diff else ' (differ: ' + ', '.join(diff[:5]) + ')'}")
    return not diff


def check_shards(fp8lm, work, arch, hf, imported):
    """transformers' save_pretrained of the exported model in two shards (F32, F16, BF16)
    imports as the single file did: bit for bit, the 16-bit ones as the rounded weights."""
    import torch
    from transformers import AutoModelForCausalLM
    ok = True
    for dtype in ["float32", "float16", "bfloat16"]:
        model = AutoModelForCausalLM.from_pretrained(hf).to(getattr(torch, dtype))
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        sharded = os.path.join(work, f"{arch}-{dtype}-sharded")
        # Over half the weights per shard: two shards (save_pretrained fills each in turn).
        model.save_pretrained(sharded, safe_serialization=True, max_shard_size=size * 6 // 10)
        with open(os.path.join(sharded, "model.safetensors.index.json")) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        if len(shards) != 2 or os.path.exists(os.path.join(sharded, "model.safetensors")):
            print(f"{arch} {dtype}: save_pretrained wrote {shards}, not two shards FAILED")
            ok = False
            continue
        back = os.path.join(work, f"{arch}-{dtype}-sharded-imported")
        sh(fp8lm, "import", sharded, "--out", back)
        single = os.path.join(imported, "model.safetensors")
        mine = os.path.join(back, "model.safetensors")
        what = f"{arch} import of transformers' 2 {dtype} shards"
        ok &= (same_weights(single, mine, what) if dtype == "float32" else
               same_weights_rounded(single, mine, dtype, what))
    return ok


def quietly(f):
    """f()'s value, and every warning that loading or generating printed or would print:
    transformers' logging (warning_once's memory cleared, so nothing said before hides),
    Python's warnings, and anything else written to stderr."""
    from transformers.utils import logging as hf_logging
    said = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    keep = Keep(level=logging.WARNING)
    hf_logging.set_verbosity_warning()
    root = hf_logging.get_logger()
    root.addHandler(keep)
    logging.Logger.warning_once.cache_clear()
    err = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            value = f()
    finally:
        root.removeHandler(keep)
    said += [f"{w.category.__name__}: {w.message}" for w in caught]
    if err.getvalue().strip():
        said.append(err.getvalue().strip())
    return value, said


# Documents that all end "... eight nine." (then the dataset's <|endoftext|>), each beginning
# at another word: a prompt's continuation and where it ends are determined, so greedy decoding
# meets no near-ties that the two implementations' roundings could break differently.
WORDS = "zero one two three four five six seven eight nine".split()
TEXT = ["--steps", "100", "--batch-size", "8", "--lr", "3e-3", "--seed", "3",
        "--threads", "2", "--device", "cpu", "--precision", "fp32"]
PROMPT, MAX_NEW = "three four", 20


def token_dataset(fp8lm, work):
    docs, tok = os.path.join(work, "docs.txt"), os.path.join(work, "tokenizer.json")
    with open(docs, "w") as f:
        for i in range(300):
            f.write(" ".join(WORDS[i % 9:]) + ".\n")
    sh(fp8lm, "tokenizer", "train", docs, "--out", tok, "--vocab-size", "300")
    data = os.path.join(work, "data")
    sh(fp8lm, "data", "prepare", docs, "--tokenizer", tok, "--out", data, "--split-lines",
       "--val-fraction", "0.05")
    with open(os.path.join(data, "manifest.json")) as f:
        return data, json.load(f)["eot"]


def check_generation(fp8lm, work, arch, data, eot):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    run, hf = os.path.join(work, arch + "-text-run"), os.path.join(work, arch + "-text-hf")
    flags = ARCHS[arch]
    at = flags.index("--vocab")  # the dataset's vocabulary instead
    sh(fp8lm, "train", "--out", run, "--data", data, *TEXT, *flags[:at], *flags[at + 2:])
    export(fp8lm, run, hf)
    ours = json.loads(sh(fp8lm, "generate", "--checkpoint", os.path.join(run, "model.safetensors"),
                         "--prompt", PROMPT, "--max-new-tokens", str(MAX_NEW), "--json"))
    prompt_ids = json.loads(sh(fp8lm, "tokenizer", "encode", "--tokenizer",
                               os.path.join(hf, "tokenizer.json"), PROMPT, "--json"))

    def load_and_generate():
        tok = AutoTokenizer.from_pretrained(hf)
        model = AutoModelForCausalLM.from_pretrained(hf).eval()
        enc = tok(PROMPT, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=MAX_NEW, do_sample=False)
            bare = model.generate(enc["input_ids"], max_new_tokens=MAX_NEW)  # no mask given
        return tok, model, enc, out[0].tolist(), bare[0].tolist()

    (tok, model, enc, out, bare), said = quietly(load_and_generate)
    theirs = out[len(prompt_ids):]
    mine = ours["generated_ids"]
    checks = {
        "the tokenizer's eos is the dataset's end-of-text token":
            tok.eos_token_id == eot and model.generation_config.eos_token_id == eot,
        "AutoTokenizer gives fp8lm's prompt ids (and no token_type_ids)":
            enc["input_ids"][0].tolist() == prompt_ids and list(enc.keys()) == [
                "input_ids", "attention_mask"],
        "generate gives fp8lm generate's tokens": theirs == mine,
        "it stops at the end-of-text token": mine[-1:] == [eot] and len(mine) < MAX_NEW,
        "the same without an attention mask": bare == out,
        "decoded as fp8lm decodes": tok.decode(theirs) == ours["generated"],
        "nothing printed": not said,
    }
    print(f"{arch} generate: fp8lm {mine}, transformers {theirs}")
    for what, good in checks.items():
        print(f"  {what}: {'ok' if good else 'FAILED'}")
    for line in said:
        print(f"  printed: {line}")
    return all(checks.values())


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
            ok &= check_shards(a.fp8lm, work, arch, hf, back)
        data, eot = token_dataset(a.fp8lm, work)
        for arch in ARCHS:
            ok &= check_generation(a.fp8lm, work, arch, data, eot)
    return 0 if ok else 1


def make(a):
    import shutil
    with tempfile.TemporaryDirectory() as work:
        for arch, flags in TINY.items():
            run = os.path.join(work, arch + "-run")
            sh(a.fp8lm, "train", "--out", run, *COMMON, "--precision", "fp32", *flags)
            out = os.path.join(FIXTURES, arch)
            shutil.rmtree(out, ignore_errors=True)
            export(a.fp8lm, run, out)
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
