#!/usr/bin/python3
"""report.html of a run, and compare.html of a comparison, render in headless Chromium: each is
self-contained (no network, no script), its elements exist in the DOM (report: training charts
and per-layer FP8 charts with data lines; compare: the table, the verdicts, the loss chart), and
its screenshots at 1400 and 390 px wide are not blank and log no console error. Arguments: the
fp8lm binary."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib


def png_pixels(path):
    """RGB(A) pixels of an 8-bit non-interlaced PNG, unfiltered (PNG spec, section 9)."""
    data = open(path, "rb").read()
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), "expected 8-bit RGB or RGBA"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return [r[i:i + 3] for r in rows for i in range(0, stride, channels)]


def main(binary):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        sys.exit("FAIL: chromium is not installed (scripts/test-deps installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        subprocess.run([binary, "train", "--precision", "fp8", "--steps", "40", "--vocab", "16", "--seq-len", "12",
                        "--d-model", "32", "--n-layers", "2", "--n-heads", "2", "--ffn", "64", "--batch-size", "4",
                        "--threads", "2", "--out", run], check=True, capture_output=True)
        report = os.path.join(run, "report.html")
        html = open(report).read()
        if "http://" in html or "https://" in html or "<script" in html:
            sys.exit("FAIL: report.html is not self-contained")
        flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1800"]
        dom = subprocess.run(flags + ["--dump-dom", "file://" + report], capture_output=True, text=True, timeout=120).stdout
        charts, lines = dom.count('<svg class="chart"'), dom.count("<polyline")
        titles = ["loss (train and validation)", "throughput (tokens/s)", "learning rate", "gradient norm",
                  "input · layer 0 · amax (newest)", "weight · layer 1 · scale",
                  "grad_output · layer 1 · amax (newest)"]
        missing = [t for t in titles if f'data-title="{t}"' not in dom]
        # Saturation: a chart per layer, or one sentence where nothing saturated.
        if 'data-title="input · layer 1 · saturated (%)"' not in dom and 'data-title="input saturated"' not in dom:
            missing.append("input saturation")
        if "<th>throughput</th>" not in dom:
            missing.append("the summary table")
        if charts < 4 + 3 * 2 or lines < 20 or missing:
            sys.exit(f"FAIL: {charts} charts, {lines} lines in the rendered DOM; missing {missing}")
        for width in (1400, 390):
            look(browser, report, os.path.join(tmp, f"report-{width}.png"), width)
        # compare.html: two arms, two seeds of the same small model.
        cmp = os.path.join(tmp, "cmp")
        subprocess.run([binary, "compare", "--precision", "bf16,fp8", "--seeds", "2", "--steps", "20",
                        "--vocab", "16", "--seq-len", "12", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
                        "--ffn", "64", "--batch-size", "4", "--threads", "2", "--out", cmp],
                       check=True, capture_output=True)
        page = os.path.join(cmp, "compare.html")
        html = open(page).read()
        if "http://" in html or "https://" in html or "<script" in html:
            sys.exit("FAIL: compare.html is not self-contained")
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://" + page],
                             capture_output=True, text=True, timeout=120).stdout
        if dom.count("<tr>") < 3 or 'data-title="train loss"' not in dom or "seed noise" not in dom:
            sys.exit("FAIL: compare.html lacks its table, verdicts or loss chart")
        for width in (1400, 390):
            look(browser, page, os.path.join(tmp, f"compare-{width}.png"), width)
    print("2 passed, 0 failed")


def look(browser, page, shot, width):
    """A screenshot at this width that is not blank, with no console error on the way."""
    res = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={width},1800", "--enable-logging=stderr", "--v=0",
                          f"--screenshot={shot}", "file://" + page], capture_output=True, text=True, timeout=120)
    errors = [line for line in res.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    if errors:
        sys.exit(f"FAIL: console errors in {os.path.basename(page)} at {width} px: {errors[:3]}")
    pixels = png_pixels(shot)
    colors = set(pixels)
    ink = sum(1 for p in pixels if p != b"\xff\xff\xff") / len(pixels)
    if len(colors) < 16 or ink < 0.01:
        sys.exit(f"FAIL: the {width} px screenshot of {os.path.basename(page)} looks blank "
                 f"({len(colors)} colors, {ink:.2%} non-white)")


if __name__ == "__main__":
    main(sys.argv[1])
