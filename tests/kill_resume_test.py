#!/usr/bin/python3
"""Issue 30: a run killed 20 times at random moments (SIGKILL, a checkpoint written every step, so
every other kill lands inside a checkpoint's write) and resumed each time ends with the weights of the
run that was never interrupted, bit for bit. The fp8lm binary is the first argument."""
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time

KILLS = 20
STEPS = 150
TINY = ["--precision", "fp8", "--steps", str(STEPS), "--vocab", "16", "--seq-len", "12", "--d-model", "32",
        "--n-layers", "2", "--n-heads", "2", "--ffn", "64", "--batch-size", "4", "--threads", "2",
        "--checkpoint-every", "1", "--keep-checkpoints", "2"]


def tensors(path):
    """Each tensor's bytes in a safetensors file (the metadata, with its times, left out)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {name: body[t["data_offsets"][0]:t["data_offsets"][1]]
            for name, t in header.items() if name != "__metadata__"}


def last_step(run):
    """The last step metrics.jsonl records (0 before the first)."""
    try:
        with open(os.path.join(run, "metrics.jsonl"), "rb") as f:
            lines = f.read().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, ValueError, KeyError):
        return 0


def writing(run):
    """Whether a checkpoint is being written (or was, when the writer was killed)."""
    try:
        return any(name.startswith(".partial-") for name in os.listdir(os.path.join(run, "checkpoints")))
    except OSError:
        return False


def main(binary):
    random.seed(30)
    with tempfile.TemporaryDirectory() as tmp:
        whole = os.path.join(tmp, "whole")
        r = subprocess.run([binary, "train", "--out", whole] + TINY, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: the uninterrupted run: {r.stderr.strip()}")
        run = os.path.join(tmp, "run")
        start = [binary, "train", "--out", run] + TINY
        kills, mid_write = 0, 0
        while kills < KILLS:
            cmd = start
            if os.path.exists(os.path.join(run, "config.json")):
                cmd = [binary, "train", "--resume", run]
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            # Kills spread over the run (whatever this machine's speed): past a step drawn
            # from the kill's share of the steps, then at a random moment, or the moment a
            # checkpoint's write has begun.
            share = STEPS // (KILLS + 2)
            target = (kills + 1) * share + random.randrange(share)
            deadline = time.time() + 60
            while time.time() < deadline and last_step(run) < target and p.poll() is None:
                time.sleep(0.002)
            if kills % 2 == 0:
                time.sleep(random.uniform(0.0, 0.02))
            else:
                while time.time() < deadline and not writing(run) and p.poll() is None:
                    time.sleep(0.0005)
            if p.poll() is not None:
                _, err = p.communicate()
                if p.returncode != 0:
                    sys.exit(f"FAIL: after {kills} kills, {' '.join(cmd[1:3])} failed: {err.strip()}")
                sys.exit(f"FAIL: the run finished after {kills} kills; give it more steps")
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
            mid_write += writing(run)
        r = subprocess.run([binary, "train", "--resume", run], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: the last resume: {r.stderr.strip()}")
        want, got = tensors(os.path.join(whole, "model.safetensors")), tensors(
            os.path.join(run, "model.safetensors"))
        if want.keys() != got.keys():
            sys.exit(f"FAIL: tensors {sorted(want)} != {sorted(got)}")
        differ = [name for name in want if want[name] != got[name]]
        if differ:
            sys.exit(f"FAIL: after {KILLS} kills, tensors differ from the uninterrupted run: {differ}")
        print(f"{KILLS} kills ({mid_write} inside a checkpoint's write), resumed: "
              f"{len(want)} tensors bit-identical to the uninterrupted run")


if __name__ == "__main__":
    main(sys.argv[1])
