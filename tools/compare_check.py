#!/usr/bin/env python3
"""`fp8lm compare` (and `advise`) against its own runs, computed here from nothing but the runs' metrics.jsonl
and summary.json (issue 32).

1. A comparison of bf16 and FP8 (delayed and current scaling) over 3 seeds on byte-level text
   (/usr/share/common-licenses/GPL-3, Debian's base-files): compare.json's per-run values, each
   arm's mean and sample standard deviation over seeds, and the paired gap to the baseline with
   Student's t 95% interval (the t quantiles from a table here) agree with what this script
   computes from metrics.jsonl to 1e-9 relative (both in double; only the order of summation
   differs). The printed table names every arm; compare.html exists and holds no script.
2. The same comparison stopped with SIGTERM while its third run trains, then `compare --resume`:
   compare.json equals the uninterrupted one, apart from "measured" (tokens/s and memory, which
   are timings).
3. Bad input gets one line naming it and a non-zero exit, with nothing of the user's touched:
   a list that asks for nothing, --out on a directory holding something, --resume on a
   directory that is no comparison or with a damaged plan, --resume with a planning flag.
4. `fp8lm advise --json` on the demo model: 12 GEMMs (4 Linears x fprop, dgrad, wgrad), each
   with an estimate per GPU whose speedup is its BF16 time over its FP8 and cast time, and the
   step per GPU; a bad value is refused.
5. `--jobs 2` trains two runs at once (the second starts before the first ends), and a SIGTERM
   while both train stops both with checkpoints; `compare --resume --jobs 2` then gives the same
   compare.json again (its "measured" says 2 runs at once, as do its table and page). Without
   --threads (or a --config that sets threads), each of the two runs gets half the CPUs.
   `--jobs 0` is refused.
6. Where Open MPI's mpirun is installed and fp8lm was built with MPI: the comparison under
   `mpirun -np 2` (its runs spread over the two ranks) gives the same compare.json again.

Usage: tools/compare_check.py --fp8lm build/release/fp8lm
"""
import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TEXT = "/usr/share/common-licenses/GPL-3"
FLAGS = ["--precision", "bf16,fp8", "--recipe", "delayed,current", "--seeds", "3", "--data", TEXT,
         "--steps", "120", "--d-model", "32", "--n-layers", "2", "--n-heads", "2", "--ffn", "64",
         "--batch-size", "4", "--seq-len", "32", "--threads", "1", "--checkpoint-every", "20"]
# Two-sided 95% quantiles of Student's t for 1..5 degrees of freedom (standard tables).
T95 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706}


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def close(a, b, what):
    if a is None or b is None:
        if a is not b:
            fail(f"{what}: {a} vs {b}")
        return
    if abs(a - b) > 1e-9 * max(1.0, abs(b)):
        fail(f"{what}: compare.json has {a}, the runs give {b}")


def refused(binary, args, words):
    """The command fails with one line on stderr holding these words."""
    res = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    lines = res.stderr.strip().splitlines()
    if res.returncode == 0 or len(lines) != 1 or words not in lines[0] or "internal" in lines[0]:
        fail(f"fp8lm {' '.join(args)}: exit {res.returncode}, stderr {res.stderr!r}; expected one line with '{words}'")


def run_values(run_dir):
    """(final train loss, last validation loss) from metrics.jsonl alone."""
    losses, val = [], None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            losses.append(r.get("loss"))
            if r.get("val_loss") is not None:
                val = r["val_loss"]
    tail = [x for x in losses[-50:] if x is not None and math.isfinite(x)]
    return sum(tail) / len(tail), val


def mean_std(xs):
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def check_statistics(out):
    j = json.load(open(os.path.join(out, "compare.json")))
    seeds = j["seeds"]
    if seeds != [1, 2, 3] or j["baseline"] != "bf16" or j["headline"] != "val_loss":
        fail(f"seeds {seeds}, baseline {j['baseline']}, headline {j['headline']}")
    labels = [a["label"] for a in j["arms"]]
    if labels != ["bf16", "fp8-delayed-hybrid", "fp8-current-hybrid"]:
        fail(f"arms {labels}")
    values = {}
    for arm in j["arms"]:
        train, val = [], []
        for seed, run in zip(seeds, arm["runs"]):
            path = os.path.join(out, "runs", arm["label"], f"seed-{seed}")
            if run["dir"] != os.path.relpath(path, out) or not run["ok"]:
                fail(f"{arm['label']} seed {seed}: {run}")
            t, v = run_values(path)
            close(run["train_loss"], t, f"{arm['label']} seed {seed} train loss")
            close(run["val_loss"], v, f"{arm['label']} seed {seed} val loss")
            train.append(t)
            val.append(v)
        values[arm["label"]] = (train, val)
        for key, xs in (("train_loss", train), ("val_loss", val)):
            m, s = mean_std(xs)
            close(arm[key]["mean"], m, f"{arm['label']} {key} mean")
            close(arm[key]["std"], s, f"{arm['label']} {key} std")
    for arm in j["arms"][1:]:
        for key, i in (("gap_train_loss", 0), ("gap_val_loss", 1)):
            d = [a - b for a, b in zip(values[arm["label"]][i], values["bf16"][i])]
            m, s = mean_std(d)
            half = T95[len(d) - 1] * s / math.sqrt(len(d))
            base = sum(values["bf16"][i]) / len(d)
            g = arm[key]
            what = f"{arm['label']} {key}"
            close(g["mean"], m, what + " mean")
            # The program's t quantile has more digits than this table's 4 decimals.
            if abs(g["low"] - (m - half)) > 1e-4 * abs(half) + 1e-12:
                fail(f"{what} interval low: {g['low']} vs {m - half}")
            close(g["relative"], m / base, what + " relative")
            if g["distinguishable"] != (m - half > 0 or m + half < 0):
                fail(f"{what}: distinguishable {g['distinguishable']}, interval {m - half}..{m + half}")
        if "seed noise" not in arm["verdict"] or arm["label"] not in arm["verdict"]:
            fail(f"verdict: {arm['verdict']}")
        sat = arm["saturated"]
        if sorted(sat) != ["grad_output", "input", "weight"] or arm["saturated_of"] != "values":
            fail(f"{arm['label']} saturation: {sat}, of {arm['saturated_of']}")
    return j


def comparable(j):
    j = dict(j)
    j.pop("measured")
    return j


def check_jobs(binary, tmp, first):
    """Part 5: two runs at once, both stopped by one SIGTERM, resumed to the same compare.json."""
    refused(binary, ["compare", "--precision", "bf16", "--jobs", "0"], "--jobs 0")
    both = os.path.join(tmp, "both")
    at = FLAGS.index("--threads")
    flags = FLAGS[:at] + FLAGS[at + 2:]
    proc = subprocess.Popen([binary, "compare", *flags, "--jobs", "2", "--out", both],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = [os.path.join(both, "runs", label, "seed-1") for label in ("bf16", "fp8-delayed-hybrid")]
    # A checkpoint (every 20 steps): the run has trained past its start and stops with another.
    started = lambda r: os.path.isdir(os.path.join(r, "checkpoints"))
    ended = lambda r: os.path.exists(os.path.join(r, "summary.json"))
    # One run at a time, the second would start only after the first wrote its summary.json.
    deadline = time.time() + 300
    while not all(map(started, runs)) and not any(map(ended, runs)) and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.005)
    if not all(map(started, runs)) or any(map(ended, runs)):
        proc.kill()
        fail(f"compare --jobs 2 did not train two runs at once: started {list(map(started, runs))}, "
             f"ended {list(map(ended, runs))}")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    if proc.returncode != 128 + signal.SIGTERM or "--resume" not in err:
        fail(f"a stopped compare --jobs 2 exited {proc.returncode}: {err[-1000:]}")
    if any(map(ended, runs)) or not all(os.path.isdir(os.path.join(r, "checkpoints")) for r in runs):
        fail("a SIGTERM did not stop both runs of compare --jobs 2 with a checkpoint")
    threads = {json.load(open(os.path.join(r, "config.json")))["threads"] for r in runs}
    if threads != {max(1, len(os.sched_getaffinity(0)) // 2)}:
        fail(f"compare --jobs 2 gave its runs {threads} threads on {len(os.sched_getaffinity(0))} CPUs")
    res = subprocess.run([binary, "compare", "--resume", both, "--jobs", "2"], capture_output=True,
                         text=True, timeout=600)
    if res.returncode != 0 or res.stdout.count("(resuming)") != 2:
        fail(f"compare --resume --jobs 2 exited {res.returncode}, resuming "
             f"{res.stdout.count('(resuming)')} runs: {res.stderr[-2000:]}")
    if comparable(first) != comparable(check_statistics(both)):
        fail("compare.json of compare --jobs 2 differs from one run at a time's")
    # Threads a --config file sets are the runs' own, as --threads's are.
    if len(os.sched_getaffinity(0)) >= 2:
        config = os.path.join(tmp, "threads.json")
        json.dump({"threads": 2}, open(config, "w"))
        own = os.path.join(tmp, "own")
        run = subprocess.run([binary, "compare", "--precision", "bf16", "--seeds", "1", "--data", TEXT,
                              "--steps", "10", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
                              "--ffn", "64", "--seq-len", "32", "--batch-size", "4",
                              "--config", config, "--jobs", "2", "--out", own],
                             capture_output=True, text=True, timeout=300)
        got = json.load(open(os.path.join(own, "runs", "bf16", "seed-1", "config.json")))["threads"]
        if run.returncode != 0 or got != 2:
            fail(f"compare --jobs 2 --config with threads 2: exit {run.returncode}, the run got {got} threads")
    # Its speeds were taken with the runs sharing the machine, and it says so.
    runs_at_once = json.load(open(os.path.join(both, "compare.json")))["measured"]["runs_at_once"]
    html = open(os.path.join(both, "compare.html")).read()
    if runs_at_once != 2 or "shared the machine" not in res.stdout or "shared the machine" not in html:
        fail(f"compare --jobs 2: runs_at_once {runs_at_once}; its table or page does not say the "
             f"runs shared the machine:\n{res.stdout}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fp8lm", required=True)
    a = p.parse_args()
    if not os.path.exists(TEXT):
        print(f"{TEXT} is missing (Debian's base-files): skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        whole = os.path.join(tmp, "whole")
        res = subprocess.run([a.fp8lm, "compare", *FLAGS, "--out", whole], capture_output=True,
                             text=True, timeout=600)
        if res.returncode != 0:
            fail(f"compare exited {res.returncode}: {res.stderr[-2000:]}")
        for label in ("bf16", "fp8-delayed-hybrid", "fp8-current-hybrid", "seed noise"):
            if label not in res.stdout:
                fail(f"the printed table lacks '{label}':\n{res.stdout}")
        if "shared the machine" in res.stdout:
            fail(f"one run at a time, the table says the runs shared the machine:\n{res.stdout}")
        html = open(os.path.join(whole, "compare.html")).read()
        if "<script" in html or "http://" in html or "<table>" not in html:
            fail("compare.html is not a self-contained page with a table")
        first = check_statistics(whole)

        # Stopped while its third run (seed 1 of fp8-current-hybrid) trains, then resumed.
        parted = os.path.join(tmp, "parted")
        proc = subprocess.Popen([a.fp8lm, "compare", *FLAGS, "--out", parted],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        third = os.path.join(parted, "runs", "fp8-current-hybrid", "seed-1", "checkpoints")
        deadline = time.time() + 300
        while not os.path.isdir(third) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        if proc.returncode != 128 + signal.SIGTERM or "--resume" not in err:
            fail(f"a stopped compare exited {proc.returncode}: {err[-1000:]}")
        if os.path.exists(os.path.join(parted, "compare.json")):
            fail("a stopped compare wrote compare.json")
        res = subprocess.run([a.fp8lm, "compare", "--resume", parted], capture_output=True,
                             text=True, timeout=600)
        if res.returncode != 0:
            fail(f"compare --resume exited {res.returncode}: {res.stderr[-2000:]}")
        if "resuming" not in res.stdout:
            fail(f"compare --resume resumed no run:\n{res.stdout}")
        second = check_statistics(parted)
        if comparable(first) != comparable(second):
            fail("compare.json after a stop and --resume differs from the uninterrupted one")

        refused(a.fp8lm, ["compare", "--precision", "bf16", "--recipe", "delayed"], "--precision has no fp8")
        mine = os.path.join(tmp, "mine")
        os.makedirs(mine)
        open(os.path.join(mine, "notes.txt"), "w").write("keep me")
        refused(a.fp8lm, ["compare", "--precision", "bf16", "--seeds", "1", "--out", mine], "is not empty")
        if os.listdir(mine) != ["notes.txt"]:
            fail(f"compare --out on a directory holding a file changed it: {os.listdir(mine)}")
        refused(a.fp8lm, ["compare", "--resume", mine], "not a comparison")
        refused(a.fp8lm, ["compare", "--resume", whole, "--seeds", "5"], "drop --seeds")
        plan = json.load(open(os.path.join(whole, "compare-plan.json")))
        plan["arms"][0]["label"] = "../escape"
        json.dump(plan, open(os.path.join(parted, "compare-plan.json"), "w"))
        refused(a.fp8lm, ["compare", "--resume", parted], "is not an arm's name")

        refused(a.fp8lm, ["advise", "--batch-size", "-1"], "--batch-size")
        res = subprocess.run([a.fp8lm, "advise", "--json", "--device", "cpu", "--recipe", "delayed,mxfp8"],
                             capture_output=True, text=True, timeout=60)
        advice = json.loads(res.stdout)
        for r in advice["recipes"]:
            if len(r["gemms"]) != 12 or sorted(r["step"]) != ["B200", "H100 SXM", "H200 SXM"]:
                fail(f"advise --json: {len(r['gemms'])} GEMMs, steps for {sorted(r['step'])}")
            for g in r["gemms"]:
                for gpu, e in g["estimate"].items():
                    if abs(e["speedup"] - e["bf16_s"] / (e["fp8_s"] + e["cast_s"])) > 1e-12 * e["speedup"]:
                        fail(f"advise --json: {g['gemm']} on {gpu}: {e}")
        native = {r["recipe"]: r["gemms"][0]["estimate"]["H100 SXM"]["native"] for r in advice["recipes"]}
        if native != {"delayed": True, "mxfp8": False}:
            fail(f"advise --json: native on H100 {native}")

        check_jobs(a.fp8lm, tmp, first)

        mpirun = shutil.which("mpirun")
        if not mpirun:
            print("mpirun is not installed: the spread over ranks not checked")
            print("5 passed, 0 failed")
            return
        spread = os.path.join(tmp, "spread")
        res = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2",
                              a.fp8lm, "compare", *FLAGS, "--out", spread],
                             capture_output=True, text=True, timeout=600)
        if res.returncode != 0 and "built without MPI" in res.stderr:
            print("fp8lm was built without MPI: the spread over ranks not checked")
            print("5 passed, 0 failed")
            return
        if res.returncode != 0:
            fail(f"compare under mpirun exited {res.returncode}: {res.stderr[-2000:]}")
        # Each rank ran its own share (run i on rank i mod 2).
        if res.stdout.count(" on rank 0") != 5 or res.stdout.count(" on rank 1") != 4:
            fail(f"compare under mpirun did not spread the runs over the ranks:\n{res.stdout}")
        if comparable(first) != comparable(check_statistics(spread)):
            fail("compare.json under mpirun -np 2 differs from one process's")
    print("6 passed, 0 failed")


if __name__ == "__main__":
    main()
