"""examples/python run and say what they should: the tutorial's runs, scaling factors and
stride-keeping generation; GPT-2 fine-tuned under MXFP8 with a falling loss."""
import re
import subprocess
import sys

import pytest

from conftest import REPO


def run_example(name, *args):
    r = subprocess.run([sys.executable, str(REPO / "examples" / "python" / name), *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_tutorial():
    out = run_example("tutorial.py", "--steps", "60")
    for name in ("fp32", "bf16", "fp8 e4m3", "fp8 hybrid"):
        assert re.search(rf"{name}: final loss \d+\.\d+ · stride accuracy", out), out
    assert re.search(r"grad_output: scale \S+ +scale_inv", out), out
    assert "keeps the stride" in out, out


def test_gpt2_finetune_under_mxfp8():
    pytest.importorskip("transformers")
    out = run_example("finetune_gpt2_mxfp8.py", "--steps", "6")
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", out)]
    assert len(losses) == 6 and losses[-1] < losses[0], out
    assert "converted 8 projections" in out, out
    assert "E8M0 scales" in out, out
