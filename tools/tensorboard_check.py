#!/usr/bin/env python3
"""fp8lm's TensorBoard event files against the tensorboard package's own reader (issue 32).

Trains the demo a few steps under FP8 delayed scaling (a snapshot of every FP8 slot at step
1), then loads
OUT/tb with tensorboard's EventAccumulator and checks that every number of every
metrics.jsonl record (nested keys joined by '/', "step" left out) is a scalar of the same
tag and step, equal to the value rounded to float32 (TensorBoard's simple_value), bit for bit,
and that the final checkpoint's amax history of every FP8 slot is a histogram of its values.
Exits 77 (ctest: skipped) when tensorboard cannot be imported.

Usage: tools/tensorboard_check.py --fp8lm build/release/fp8lm
Pinned for the test: tensorboard 2.17.1.
"""
import argparse
import json
import struct
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed: skipped")
    sys.exit(77)


def numbers(prefix, record, out):
    for key, value in record.items():
        tag = f"{prefix}/{key}" if prefix else key
        if isinstance(value, dict):
            numbers(tag, value, out)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if prefix or key != "step":
                out[tag] = value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp8lm", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = tmp + "/run"
        subprocess.run([args.fp8lm, "train", "--precision", "fp8", "--steps", "6", "--out", run],
                       check=True, stdout=subprocess.DEVNULL)
        acc = EventAccumulator(run + "/tb", size_guidance={"scalars": 0})
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        want = {}
        with open(run + "/metrics.jsonl") as f:
            for line in f:
                record = json.loads(line)
                flat = {}
                numbers("", record, flat)
                for tag, value in flat.items():
                    want.setdefault(tag, {})[record["step"]] = value
        failures = []
        if set(want) != tags:
            failures.append(f"tags differ: only in metrics {sorted(set(want) - tags)[:5]}, "
                            f"only in tb {sorted(tags - set(want))[:5]}")
        for tag, series in want.items():
            if tag not in tags:
                continue
            got = {e.step: e.value for e in acc.Scalars(tag)}
            for step, value in series.items():
                as_f32 = struct.unpack("<f", struct.pack("<f", value))[0]
                if step not in got or struct.pack("<f", got[step]) != struct.pack("<f", as_f32):
                    failures.append(f"{tag} step {step}: tb {got.get(step)}, metrics {value}")
        if not any("/" in t for t in tags):
            failures.append("no FP8 slot's scalars (fp8/<gemm>/<slot>/...)")
        # The checkpoint at the end: every FP8 slot's amax history (1024 long by default).
        histograms = acc.Tags()["histograms"]
        if not histograms or not all(t.startswith("amax_history/") for t in histograms):
            failures.append(f"no amax history histograms: {histograms[:5]}")
        for tag in histograms:
            h = acc.Histograms(tag)[-1].histogram_value
            if h.num != 1024 or sum(h.bucket) != h.num:
                failures.append(f"{tag}: {h.num} values, buckets hold {sum(h.bucket)}")
        for f in failures[:20]:
            print(f)
        print(f"{len(tags)} tags, {sum(len(s) for s in want.values())} values: "
              f"{'ok' if not failures else 'FAILED'}")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
