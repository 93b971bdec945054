"""fp8lm.torch: TE's recipes inside a PyTorch model. Its Linear equals fp8lm's own Linear bit
for bit under every recipe (forward, both gradients, the amax histories), FP32 mode is an
ordinary differentiable linear layer, and a converted GPT trains under FP8 as under BF16."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp8lm  # noqa: E402
import fp8lm.torch  # noqa: E402
from fp8lm import _fp8lm  # noqa: E402
from fp8lm.recipe import settings_of  # noqa: E402

RECIPES = {
    "delayed_hybrid": fp8lm.DelayedScaling(amax_history_len=4),
    "delayed_e4m3_most_recent": fp8lm.DelayedScaling(fp8_format=fp8lm.Format.E4M3, margin=1,
                                                     amax_compute_algo="most_recent"),
    "current": fp8lm.Float8CurrentScaling(),
    "block": fp8lm.Float8BlockScaling(),
    "mxfp8": fp8lm.MXFP8BlockScaling(),
    "nvfp4": fp8lm.NVFP4BlockScaling(),
}


def bits(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t,
                      np.float32).view(np.uint32)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_linear_equals_fp8lms_own_linear(name):
    recipe = RECIPES[name]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, 64, generator=g)          # 32 rows: NVFP4's RHT takes 16s
    dy = torch.randn(4, 8, 48, generator=g) * 1e-3   # small, as gradients are
    layer = fp8lm.torch.Linear(64, 48)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(48, 64, generator=g) * 0.05)
    steps = 3
    reference = _fp8lm._linear_reference_steps(
        x.numpy(), layer.weight.detach().numpy(), layer.bias.detach().numpy(), dy.numpy(), True,
        json.dumps(settings_of(recipe)), steps, 100)
    xr = x.clone().requires_grad_(True)
    for s in range(steps):
        xr.grad, layer.weight.grad, layer.bias.grad = None, None, None
        with fp8lm.torch.fp8_autocast(enabled=True, fp8_recipe=recipe, seed=100 + s):
            y = layer(xr)
        y.backward(dy)
        want = reference[s]
        assert np.array_equal(bits(y.reshape(32, 48)), bits(want["y"])), f"step {s}: y"
        assert np.array_equal(bits(xr.grad.reshape(32, 64)), bits(want["dx"])), f"step {s}: dx"
        assert np.array_equal(bits(layer.weight.grad), bits(want["dw"])), f"step {s}: dW"
        assert np.array_equal(bits(layer.bias.grad), bits(want["db"])), f"step {s}: db"
        meta = layer.fp8_meta
        for slot, state in want["fp8_meta"].items():
            assert np.array_equal(meta[slot]["amax_history"], state["amax_history"]), slot
            assert meta[slot]["scale"] == state["scale"], slot
    if name.startswith("delayed"):
        # The slots moved: scales from the amaxes the casts recorded, as TE's would.
        assert layer.fp8_meta["input"]["scale"] != 1.0


# gradcheck warns about float32 inputs: the layer computes in float32, the tolerances below
# are set for it.
@pytest.mark.filterwarnings("ignore:Input #0 requires gradient")
def test_fp32_mode_is_an_ordinary_linear_layer():
    torch.manual_seed(2)
    layer = fp8lm.torch.Linear(12, 5).double().float()
    x = torch.randn(3, 12, requires_grad=True)
    y = layer(x)
    want = torch.nn.functional.linear(x, layer.weight, layer.bias)
    # oneDNN's FP32 GEMM sums 12 products in another order than torch's: within 12 ulps.
    assert torch.allclose(y, want, rtol=12 * 2 ** -24, atol=1e-6)
    # Finite differences in float32: a step of 1e-2 on a linear function is exact up to
    # rounding, so 1e-3 bounds the difference.
    assert torch.autograd.gradcheck(lambda a: layer(a), (x,), eps=1e-2, atol=1e-3, rtol=1e-3)
    assert torch.autograd.gradcheck(
        lambda w: fp8lm.torch._LinearFunction.apply(x, w, layer.bias, layer, True),
        (layer.weight,), eps=1e-2, atol=1e-3, rtol=1e-3)


def test_convert_swaps_linears_and_keeps_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    weights = [model[0].weight, model[2].bias]
    fp8lm.torch.convert(model, skip=["2"])
    assert isinstance(model[0], fp8lm.torch.Linear) and type(model[2]) is torch.nn.Linear
    assert model[0].weight is weights[0] and model[2].bias is weights[1]
    assert list(fp8lm.torch.fp8_state(model)) == ["0"]


class TinyGPT(torch.nn.Module):
    """A small PyTorch GPT (pre-norm blocks, causal attention, GELU MLP), plain torch."""

    def __init__(self, vocab=64, d=128, layers=2, heads=4, seq=32):
        super().__init__()
        self.heads = heads
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(torch.nn.ModuleDict({
                "ln1": torch.nn.LayerNorm(d), "qkv": torch.nn.Linear(d, 3 * d),
                "proj": torch.nn.Linear(d, d), "ln2": torch.nn.LayerNorm(d),
                "fc1": torch.nn.Linear(d, 4 * d), "fc2": torch.nn.Linear(4 * d, d)}))
        self.lnf = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        B, T = idx.shape
        h = self.wte(idx) + self.wpe(torch.arange(T))
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](h)).split(h.shape[-1], dim=-1)
            q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-1, -2)) / k.shape[-1] ** 0.5
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -1e9)
            a = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
            h = h + blk["proj"](a)
            h = h + blk["fc2"](torch.nn.functional.gelu(blk["fc1"](blk["ln2"](h))))
        return self.head(self.lnf(h))


def stride_batch(g, B=16, T=32, vocab=64):
    start = torch.randint(0, vocab, (B, 1), generator=g)
    stride = torch.randint(1, 5, (B, 1), generator=g)
    seq = (start + stride * torch.arange(T + 1)) % vocab
    return seq[:, :-1], seq[:, 1:]


def train_converted(context, steps=100):
    torch.manual_seed(0)
    model = fp8lm.torch.convert(TinyGPT(), skip=["head"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = stride_batch(g)
        with context():
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return float(np.mean(losses[-10:])), model


def test_converted_gpt_trains_in_fp8_as_in_bf16():
    bf16, _ = train_converted(lambda: fp8lm.torch.gemm_precision("bf16"))
    delayed, model = train_converted(
        lambda: fp8lm.torch.fp8_autocast(enabled=True, fp8_recipe=fp8lm.DelayedScaling()))
    nvfp4, _ = train_converted(
        lambda: fp8lm.torch.fp8_autocast(enabled=True, fp8_recipe=fp8lm.NVFP4BlockScaling()))
    print(f"final loss (mean of the last 10 of 100 steps): bf16 {bf16:.4f}, "
          f"fp8 delayed {delayed:.4f} ({delayed / bf16 - 1:+.2%}), "
          f"nvfp4 {nvfp4:.4f} ({nvfp4 / bf16 - 1:+.2%})")
    assert bf16 < 2.5  # it learned: ln(64) = 4.16 at the start
    assert abs(delayed / bf16 - 1) <= 0.02
    assert abs(nvfp4 / bf16 - 1) <= 0.05
    state = fp8lm.torch.fp8_state(model)
    assert "blocks.0.qkv" in state and state["blocks.0.qkv"]["input"]["scale"] != 1.0


def test_bad_use_raises_fp8lm_error():
    layer = fp8lm.torch.Linear(8, 4)
    with pytest.raises(fp8lm.Error, match="in_features 8"):
        layer(torch.ones(2, 7))
    x = torch.ones(2, 8, requires_grad=True)
    with fp8lm.torch.fp8_autocast():
        y1 = layer(x)
        y2 = layer(x)
    with pytest.raises(fp8lm.Error, match="backward of an earlier FP8 forward"):
        y1.sum().backward()
    y2.sum().backward()
    # Outside FP8 the earlier forward is recomputed: both backwards give the same gradient.
    z1, z2 = layer(x), layer(x * 2)
    g1 = torch.autograd.grad(z1.sum(), x)[0]
    g2 = torch.autograd.grad(z2.sum(), x)[0]
    assert torch.equal(g1 * 2, g2)
    with pytest.raises(TypeError, match="expected a recipe"):
        fp8lm.torch.fp8_autocast(fp8_recipe="delayed")
