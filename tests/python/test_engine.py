"""fp8lm.Training, Model and Tokenizer: the same runs as the command line, bit for bit, the
same one-line errors, and a clean stop on Ctrl-C."""
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fp8lm
from conftest import REPO

# A small stride run: a few seconds on 2 cores.
FLAGS = {"steps": 30, "d_model": 64, "n_layers": 2, "n_heads": 4, "ffn": 128, "seq_len": 32,
         "batch_size": 8, "precision": "fp8", "recipe": "delayed", "amax_history_len": 16}


def cli_flags(settings):
    out = []
    for k, v in settings.items():
        out += [f"--{k.replace('_', '-')}", str(v)]
    return out


def tensors(path):
    """safetensors file -> {name: bytes}: its tensors as stored."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


@pytest.mark.parametrize("recipe", ["delayed", "mxfp8"])
def test_training_equals_fp8lm_train(run_cli, tmp_path, recipe):
    settings = dict(FLAGS, recipe=recipe)
    if recipe != "delayed":
        del settings["amax_history_len"]
    run_cli("train", *cli_flags(settings), "--out", tmp_path / "cli")
    cli_losses = [json.loads(line)["loss"]
                  for line in open(tmp_path / "cli" / "metrics.jsonl")
                  if json.loads(line).get("event", "step") == "step" and "loss" in json.loads(line)]
    cli_val = [json.loads(line)["val_loss"] for line in open(tmp_path / "cli" / "metrics.jsonl")
               if "val_loss" in json.loads(line)]
    run = fp8lm.Training(settings)
    losses, val = [], []
    while not run.done():
        stats = run.step()
        losses.append(stats.loss)
        if stats.val_loss is not None:
            val.append(stats.val_loss)
    # The command line keeps the model before its evaluation (whose forward passes move the
    # FP8 forward scales): saved here at the same point.
    run.save(tmp_path / "py.safetensors")
    result = run.finish()
    assert np.array_equal(np.float32(losses), np.float32(cli_losses))
    assert len(cli_losses) == settings["steps"] and val == cli_val and len(val) == 2
    assert tensors(tmp_path / "py.safetensors") == tensors(tmp_path / "cli" / "model.safetensors")
    summary = json.load(open(tmp_path / "cli" / "summary.json"))
    assert result.stride_accuracy == pytest.approx(summary["stride_accuracy"], abs=0)


def test_recipe_objects_and_keywords_are_settings():
    run = fp8lm.Training({"steps": 3, "d_model": 32, "n_layers": 1, "n_heads": 2, "ffn": 64},
                         precision="fp8", seq_len=16, batch_size=4,
                         recipe=fp8lm.DelayedScaling(amax_history_len=8, margin=1))
    assert run.config["amax_history_len"] == 8 and run.config["margin"] == 1
    assert run.config["seq_len"] == 16 and run.precision.startswith("fp8")
    stats = run.step()
    assert stats.step == 1 and stats.total == 3 and np.isfinite(stats.loss)
    state = run.fp8_state()
    assert set(state["layers.0.fc1"]) == {"input", "weight", "output", "grad_output",
                                          "grad_input"}
    slot = state["layers.0.fc1"]["input"]
    assert isinstance(slot["amax_history"], np.ndarray) and slot["amax_history"].shape == (8,)
    # After a step the forward slots rolled: the newest amax at the end, the scale from it.
    amax = slot["amax_history"].max()
    assert amax > 0 and slot["scale"] == np.float32(448) / np.float32(amax) / 2
    with pytest.raises(fp8lm.Error, match="contradicts"):
        fp8lm.Training(recipe=fp8lm.DelayedScaling(margin=1), margin=2, precision="fp8")


def test_errors_are_the_command_lines(run_cli):
    cli = run_cli("train", "--n-heads", "7", "--no-save", check=False)
    assert cli.returncode != 0
    message = cli.stderr.strip().removeprefix("error: ")
    with pytest.raises(fp8lm.Error) as e:
        fp8lm.Training(n_heads=7)
    assert str(e.value) == message
    with pytest.raises(fp8lm.Error, match="precison.*precision"):
        fp8lm.Training(precison="fp8")
    with pytest.raises(fp8lm.Error, match="README.md: header length .* exceeds file size"):
        fp8lm.Model.load(os.path.join(REPO, "README.md"))


def test_model_generates_and_scores(run_cli, tmp_path):
    run = fp8lm.Training(dict(FLAGS, steps=60))
    while not run.done():
        run.step()
    run.save(tmp_path / "m.safetensors")
    result = run.finish()
    model = fp8lm.Model.load(tmp_path / "m.safetensors")
    assert model.config["d_model"] == 64 and model.config["precision"] == "fp8"
    prompt = [5, 8, 11, 14, 17, 20, 23, 26]
    new = model.generate([prompt], max_new_tokens=6)
    cli = json.loads(run_cli("generate", "--checkpoint", tmp_path / "m.safetensors", "--prompt",
                             " ".join(map(str, prompt)), "--max-new-tokens", "6",
                             "--json").stdout)
    assert new == [cli["generated"]]
    logits = model.logits([prompt])
    assert logits.shape == (1, 8, 128) and logits.dtype == np.float32
    assert int(np.argmax(logits[0, -1])) == new[0][0]  # greedy: the most likely token
    # A model's FP8 forward scales move with each call (as under TE's fp8_autocast): the file's
    # own, loaded afresh, is what `fp8lm eval` scores.
    scored = fp8lm.Model.load(tmp_path / "m.safetensors").eval()
    cli = json.loads(run_cli("eval", "--checkpoint", tmp_path / "m.safetensors",
                             "--json").stdout)
    assert scored["loss"] == cli["loss"] and scored["stride_accuracy"] == cli["stride_accuracy"]
    assert result.stride_accuracy > 0
    tokens = np.array([prompt + [29]])
    assert np.isfinite(model.eval(tokens)["loss"])
    with pytest.raises(fp8lm.Error, match="outside the model's vocabulary"):
        model.generate([[500]])
    with pytest.raises(fp8lm.Error, match="exceed the model's seq_len"):
        model.generate([prompt], max_new_tokens=100)


def test_tokenizer_gives_hugging_faces_ids():
    data = REPO / "tests" / "data" / "tokenizer"
    tok = fp8lm.Tokenizer.load(data / "tokenizer.json")
    expected = json.load(open(data / "expected.json"))["documents"]
    for doc in expected:
        assert tok.encode(doc["text"]) == doc["ids"]
        assert tok.decode(doc["ids"]) == doc["text"]


def test_python_dash_m_runs_the_program():
    r = subprocess.run([sys.executable, "-m", "fp8lm", "--version"], capture_output=True,
                       text=True, env=dict(os.environ))
    assert r.returncode == 0 and fp8lm.__version__ in r.stdout
    r = subprocess.run([sys.executable, "-m", "fp8lm", "train", "--bogus"], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "--bogus" in r.stderr


def test_ctrl_c_stops_between_steps_and_the_run_goes_on():
    # SIGINT lands while the run trains; KeyboardInterrupt comes out of step() once the step
    # has finished (or between steps), never out of half of one: the run, taken up again, gives
    # the losses of a run never interrupted, bit for bit.
    script = textwrap.dedent("""
        import os, signal, threading, fp8lm
        # Python keeps SIGINT ignored where it started so (a background job of a shell without
        # job control): Ctrl-C's default handling, whatever this process inherited.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        settings = dict(steps=40, d_model=128, n_layers=2, n_heads=4, ffn=256, batch_size=16,
                        seq_len=32, precision="fp8")
        run = fp8lm.Training(settings)
        losses, interrupts = {}, 0
        while not run.done():
            try:
                stats = run.step()
                losses[stats.step] = stats.loss
                if stats.step == 10:  # a Ctrl-C a moment later, as the next step runs
                    threading.Timer(0.002, os.kill, (os.getpid(), signal.SIGINT)).start()
            except KeyboardInterrupt:
                interrupts += 1
        straight = fp8lm.Training(settings)
        want = {s: straight.step().loss for s in range(1, 41)}
        same = all(want[s] == loss for s, loss in losses.items())
        print(interrupts, len(losses), same)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    interrupts, recorded, same = r.stdout.split()
    # One interrupt; the step it came out of (if any) left unrecorded; every other step the
    # uninterrupted run's.
    assert interrupts == "1" and int(recorded) in (39, 40) and same == "True", r.stdout
