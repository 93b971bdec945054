#!/usr/bin/python3
"""An independent reader of fp8lm checkpoints: the header with Python's json, the data with
numpy. Trains tiny fp8 (with --fp8-weights) and fp32 runs with the fp8lm binary given as the
first argument, then checks every name, shape and dtype against
docs/reference/checkpoint-names.md."""
import json
import struct
import subprocess
import sys
import tempfile

import numpy as np

NUMPY = {"F32": np.float32, "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "I64": np.int64, "U8": np.uint8}
V, T, D, L, H, F, HIST = 16, 12, 32, 2, 2, 64, 6


def read(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=NUMPY[e["dtype"]]).reshape(e["shape"])
        tensors[name] = (e["dtype"], list(e["shape"]), arr)
    return meta, tensors


def expect(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")


def check(binary, precision, extra):
    with tempfile.TemporaryDirectory() as tmp:
        run = f"{tmp}/run"
        cmd = [binary, "train", "--precision", precision, "--steps", "3", "--vocab", str(V), "--seq-len", str(T),
               "--d-model", str(D), "--n-layers", str(L), "--n-heads", str(H), "--ffn", str(F), "--batch-size", "2",
               "--threads", "2", "--out", run] + extra
        if precision == "fp8":  # an FP8 setting: refused by name without FP8
            cmd += ["--amax-history-len", str(HIST)]
        subprocess.run(cmd, check=True, capture_output=True)
        meta, t = read(f"{run}/model.safetensors")
    fp8 = precision == "fp8"
    expect(json.loads(meta["config"])["d_model"] == D, "metadata holds the model config")
    expect(meta["step"] == "3" and "precision" in meta, "metadata holds step and precision")
    want = {"wte": [V, D], "wpe": [T, D], "lnf.weight": [D], "lnf.bias": [D]}
    for i in range(L):
        p = f"layers.{i}"
        want.update({f"{p}.ln1.weight": [D], f"{p}.ln1.bias": [D], f"{p}.qkv.weight": [3 * D, D], f"{p}.qkv.bias": [3 * D],
                     f"{p}.proj.weight": [D, D], f"{p}.proj.bias": [D], f"{p}.ln2.weight": [D], f"{p}.ln2.bias": [D],
                     f"{p}.fc1.weight": [F, D], f"{p}.fc1.bias": [F], f"{p}.fc2.weight": [D, F], f"{p}.fc2.bias": [D]})
        if fp8:
            for g in ("qkv", "proj", "fc1", "fc2"):
                want[f"{p}.{g}.weight_scale_inv"] = [1]
                for d, n in (("fwd", 3), ("bwd", 2)):
                    for k in ("scale", "scale_inv", "saturated_fraction", "flushed_fraction"):
                        want[f"{p}.{g}.fp8.{d}.{k}"] = [n]
                    want[f"{p}.{g}.fp8.{d}.amax_history"] = [HIST, n]
    expect(set(t) == set(want), f"names: extra {sorted(set(t) - set(want))}, missing {sorted(set(want) - set(t))}")
    for name, shape in want.items():
        dtype, got, arr = t[name]
        expect(got == shape, f"{name} shape {got} != {shape}")
        is_fp8_weight = fp8 and name.endswith(".weight") and ".ln" not in name and name.startswith("layers.")
        expect(dtype == ("F8_E4M3" if is_fp8_weight else "F32"), f"{name} dtype {dtype}")
        if dtype == "F32":
            expect(np.isfinite(arr).all(), f"{name} is finite")
    if fp8:
        s, si = t["layers.0.fc1.fp8.fwd.scale"][2], t["layers.0.fc1.fp8.fwd.scale_inv"][2]
        expect(np.allclose(s * si, 1.0, rtol=1e-6), "scale * scale_inv == 1")
        expect((s != 1.0).any(), "scales moved away from 1 after the first steps")


if __name__ == "__main__":
    check(sys.argv[1], "fp8", ["--fp8-weights"])
    check(sys.argv[1], "fp32", [])
    print("1 passed, 0 failed")
