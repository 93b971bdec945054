"""fp8lm.Training, fp8lm.Model and fp8lm.Tokenizer: the engine's runs, model files and
tokenizers from Python."""
import json
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from fp8lm import _fp8lm
from fp8lm.recipe import RECIPES, settings_of


def _settings_from(config, kwargs):
    settings = {}
    if config is not None:
        if not isinstance(config, dict):
            raise TypeError(f"config: expected a dict of settings, got {type(config).__name__}")
        settings.update(config)
    settings.update(kwargs)
    recipe = settings.get("recipe")
    if isinstance(recipe, RECIPES):
        del settings["recipe"]
        for key, value in settings_of(recipe).items():
            if key in settings and settings[key] != value:
                raise _fp8lm.Error(f"{key}={settings[key]!r} contradicts the recipe object's "
                                   f"{value!r}")
            settings[key] = value
    return settings


def _settings_doc():
    lines = []
    group = None
    for key, grp, type_name, default, help_text in _fp8lm._settings():
        if grp != group:
            lines.append(f"\n    {grp}:")
            group = grp
        shown = f" = {default}" if default != "" else ""
        lines.append(f"      {key} ({type_name}{shown}): {help_text}")
    return "\n".join(lines)


class Training:
    """One training run, as `fp8lm train` runs it, a step at a time.

        run = fp8lm.Training(precision="fp8", recipe=fp8lm.DelayedScaling(), steps=120)
        while not run.done():
            stats = run.step()            # loss, lr, grad_norm, tokens_per_s, val_loss, ...
        run.save("model.safetensors")     # what Model.load, `fp8lm generate` and `eval` read
        result = run.finish()             # stride accuracy or validation loss, final loss

    The steps are `fp8lm train`'s with the same settings, bit for bit, held-out losses
    included (StepStats.val_loss, every 20th step and the last); the command line saves its
    model.safetensors at the same point, before finish() evaluates (whose forward passes, like
    any inference under FP8, move the FP8 forward scales).

    Settings come as a dict (a run's config.json holds one), as keyword arguments, or both
    (keywords win); the same names as `fp8lm train`'s flags with underscores. `recipe` takes
    a recipe object (fp8lm.DelayedScaling(...), ...) or its name. `device` is "auto" (the
    default, as for `fp8lm train`: a GPU where there is one), "cpu", "cuda" or "cuda:N". Nothing is written to disk unless saved.
    A bad setting raises fp8lm.Error with the command line's one-line message; Ctrl-C during
    step() raises KeyboardInterrupt once the step has finished, the run whole.

    Settings:{settings}
    """

    def __init__(self, config: Optional[Dict[str, Any]] = None, *, device: str = "auto",
                 **kwargs: Any) -> None:
        settings = _settings_from(config, kwargs)
        self._run = _fp8lm._Training(json.dumps(settings), device)

    @classmethod
    def resume(cls, checkpoint_dir: "os.PathLike[str] | str") -> "Training":
        """Continues a run from a checkpoint directory (save_checkpoint's, or a run
        directory's checkpoints/step-N): the steps that follow are those of the run never
        stopped, bit for bit."""
        run = cls.__new__(cls)
        run._run = _fp8lm._Training.resume(os.fspath(checkpoint_dir))
        return run

    def step(self) -> _fp8lm.StepStats:
        """Trains one step; returns its StepStats."""
        return self._run.step()

    def done(self) -> bool:
        """Whether every step of the run has been taken."""
        return self._run.done()

    def finish(self) -> _fp8lm.TrainResult:
        """Evaluates (stride accuracy, or validation loss and a sample) and returns the run's
        TrainResult. Save the model before it to keep what `fp8lm train` keeps."""
        return self._run.finish()

    def save(self, path: "os.PathLike[str] | str") -> None:
        """Writes the model file (model.safetensors) Model.load and `fp8lm generate` read."""
        self._run.save_model(os.fspath(path))

    def save_checkpoint(self, directory: "os.PathLike[str] | str") -> None:
        """Writes a checkpoint (weights, optimizer, FP8 state, data position) Training.resume
        continues from."""
        self._run.save_checkpoint(os.fspath(directory))

    @property
    def config(self) -> Dict[str, Any]:
        """Every setting of the run, as a dict (what a run's config.json holds)."""
        return self._run.settings()

    @property
    def precision(self) -> str:
        """What the run trains in, e.g. "fp8 (emulated)"."""
        return self._run.precision()

    def fp8_state(self) -> Dict[str, Dict[str, Dict[str, Any]]]:
        """Every GEMM's FP8 slots: {gemm: {slot: {scale, scale_inv, amax_history (numpy),
        saturated_fraction, flushed_fraction}}}, slots input, weight, output, grad_output,
        grad_input (TE's fp8_meta)."""
        return self._run.fp8_state()


Training.__doc__ = Training.__doc__.replace("{settings}", _settings_doc())


def _token_rows(tokens, what):
    a = np.asarray(tokens)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.dtype.kind not in "iu":
        raise _fp8lm.Error(f"{what}: expected token ids, a [batch, length] integer array")
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        raise _fp8lm.Error(f"{what}: token ids beyond int32")
    return np.ascontiguousarray(a, dtype=np.int32)


class Model:
    """A model file (model.safetensors, or a run directory's), for generation, logits and
    loss, in the precision it was trained in.

        model = fp8lm.Model.load("runs/demo")
        model.generate([[3, 5, 7]], max_new_tokens=8)       # [[9, 11, ...]]
        model.logits([[3, 5, 7]])                           # numpy [1, 3, vocab]

    In an FP8 model each call's forward passes update the FP8 forward scales, as inference
    under TE's fp8_autocast does (and as one `fp8lm generate` does): load the file again to
    start from its own scales.
    """

    def __init__(self, impl):
        self._impl = impl

    @classmethod
    def load(cls, path: "os.PathLike[str] | str", device: str = "auto") -> "Model":
        """Loads a model file or a run directory's; fp8lm.Error names what is wrong with it."""
        return cls(_fp8lm._Model(os.fspath(path), device))

    @property
    def config(self) -> Dict[str, Any]:
        """The settings the model was trained with, as a dict."""
        return self._impl.settings()

    def generate(self, prompts: Any, max_new_tokens: int = 16, *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 stop_tokens: Sequence[int] = ()) -> List[List[int]]:
        """Each prompt's new tokens (a list per prompt): greedy (temperature 0), or sampled
        at the temperature, cut to top_k and top_p, as `fp8lm generate` does. prompts: a
        [batch, length] array or list of equal-length id lists."""
        sampling = _fp8lm._Sampling()
        sampling.temperature = float(temperature)
        sampling.top_k = int(top_k)
        sampling.top_p = float(top_p)
        sampling.seed = int(seed)
        return self._impl.generate(_token_rows(prompts, "generate"), int(max_new_tokens),
                                   sampling, [int(t) for t in stop_tokens])

    def logits(self, tokens: Any) -> np.ndarray:
        """The logits after each position: numpy float32 [batch, length, vocab]."""
        return self._impl.logits(_token_rows(tokens, "logits"))

    def eval(self, tokens: Any = None, batches: int = 8) -> Dict[str, float]:
        """Mean next-token loss (and perplexity) over tokens [batch, length + 1] (each row's
        inputs and, one later, its targets). Without tokens, a stride-task model's held-out
        loss and stride accuracy, as `fp8lm eval` gives them."""
        rows = None if tokens is None else _token_rows(tokens, "eval")
        return self._impl.eval(rows, int(batches))

    def fp8_state(self) -> Dict[str, Dict[str, Dict[str, Any]]]:
        """Every GEMM's FP8 slots, as Training.fp8_state gives them."""
        return self._impl.fp8_state()


class Tokenizer:
    """A byte-level BPE tokenizer (Hugging Face's tokenizer.json, or GPT-2's vocab.json and
    merges.txt in a directory), with the ids Hugging Face's tokenizers give."""

    def __init__(self, impl):
        self._impl = impl

    @classmethod
    def load(cls, path: "os.PathLike[str] | str") -> "Tokenizer":
        """Reads a tokenizer.json, or a directory holding one (or vocab.json and merges.txt)."""
        return cls(_fp8lm._Tokenizer.load(os.fspath(path)))

    def encode(self, text: "str | bytes") -> List[int]:
        """Token ids of text (str, or bytes)."""
        return self._impl.encode(text)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text ids stand for (bytes that are not UTF-8 are replaced)."""
        raw = self._impl.decode([int(i) for i in ids], skip_special_tokens)
        return raw.decode("utf-8", errors="replace")

    @property
    def vocab_size(self) -> int:
        return self._impl.vocab_size

    def token_to_id(self, token: str) -> Optional[int]:
        """The id of a token (as stored, in the byte-level alphabet), or None."""
        return self._impl.token_to_id(token)
