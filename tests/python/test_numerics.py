"""fp8lm.quantize and fp8lm.formats against independent oracles: ml_dtypes' casts for the
element formats, `fp8lm fp8 encode` for per-tensor casts and single blocks, and plain numpy
implementations of each block recipe's published rules."""
import json

import ml_dtypes
import numpy as np
import pytest

import fp8lm

ML_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
             "e2m1": ml_dtypes.float4_e2m1fn, "e8m0": ml_dtypes.float8_e8m0fnu}


def same_floats(a, b):
    """Equal bit for bit, except that any NaN equals any NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    return a.shape == b.shape and np.array_equal(nan, np.isnan(b)) and \
        np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))


def wide_values(n, seed):
    """Magnitudes from far below the formats' subnormals to past their max, both signs, and
    the specials."""
    rng = np.random.default_rng(seed)
    x = (rng.choice([-1, 1], n) * 2.0 ** rng.uniform(-30, 20, n)).astype(np.float32)
    return np.concatenate([x, np.float32([0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 480,
                                          57344, 61440, 6, 7, 0.25, 0.75])])


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1", "e8m0"])
def test_format_tables_equal_ml_dtypes(name):
    info = fp8lm.formats[name]
    codes = np.arange(len(info.values), dtype=np.uint8)
    assert same_floats(info.values, codes.view(ML_DTYPES[name]).astype(np.float32))
    assert info.max == float(ml_dtypes.finfo(ML_DTYPES[name]).max)


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_fp8_encode_equals_ml_dtypes(name):
    x = wide_values(20000, seed=1)
    ours = fp8lm.formats[name].encode(x, saturate=False)
    theirs = x.astype(ML_DTYPES[name])
    # ml_dtypes casts without saturation: overflow goes to Inf (E5M2) or NaN (E4M3), as ours.
    assert same_floats(fp8lm.formats[name].decode(ours), theirs.astype(np.float32))
    finite = ~np.isnan(x)
    assert np.array_equal(ours[finite], theirs.view(np.uint8)[finite])


def test_e2m1_encode_equals_ml_dtypes():
    x = wide_values(20000, seed=2)
    x = x[~np.isnan(x)]  # E2M1 has no NaN: ours gives ±6, ml_dtypes an unspecified code
    ours = fp8lm.formats["e2m1"].encode(x)
    theirs = x.astype(ML_DTYPES["e2m1"]).astype(np.float32)
    assert same_floats(fp8lm.formats["e2m1"].decode(ours), theirs)


def test_e8m0_encode_equals_ml_dtypes_on_its_values():
    # E8M0 holds powers of two; ours rounds anything between them up (the MX scale rule,
    # so that a block's largest value never overflows), ml_dtypes to nearest: they agree on
    # every value the format has, and ours is never below the input.
    values = fp8lm.formats["e8m0"].values[:255]
    assert np.array_equal(fp8lm.formats["e8m0"].encode(values),
                          values.astype(ML_DTYPES["e8m0"]).view(np.uint8))
    x = np.abs(wide_values(5000, seed=3))
    x = x[np.isfinite(x) & (x > 2.0 ** -126) & (x < 2.0 ** 127)]
    assert np.all(fp8lm.formats["e8m0"].decode(fp8lm.formats["e8m0"].encode(x)) >= x)


@pytest.mark.parametrize("fmt,scale", [("e4m3", "1"), ("e4m3", "0.0625"), ("e5m2", "3"),
                                       ("e2m1", "0.5")])
def test_per_tensor_quantize_equals_fp8_encode(run_cli, fmt, scale):
    x = wide_values(300, seed=4)
    x = x[~np.isnan(x)]
    q = fp8lm.quantize(x, format=fmt, scale=float(scale))
    rows = json.loads(run_cli("fp8", "encode", "--format", fmt, "--scale", scale, "--json",
                              "--", *[repr(float(v)) for v in x]).stdout)
    assert [int(r["code"], 16) for r in rows] == q.codes.tolist()
    cli_values = np.float32([float(r["value"]) for r in rows])
    assert same_floats(q.dequantize(), cli_values)


# MXFP8's recipe casts in E4M3 (the CLI's e5m2 block has no recipe twin); NVFP4's in E2M1.
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
def test_one_block_equals_fp8_encode_block(run_cli, fmt):
    rng = np.random.default_rng(5)
    n = 32 if fmt != "e2m1" else 16
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    out = json.loads(run_cli("fp8", "encode", "--block", "--format", fmt, "--json", "--",
                             *[repr(float(v)) for v in x]).stdout)
    codes = [int(v["code"], 16) for v in out["values"]]
    if fmt == "e2m1":
        # The CLI's block is the whole tensor (its amax is the global amax).
        q = fp8lm.quantize(x[None, :], fp8lm.NVFP4BlockScaling())
        assert q.scale_inv.tolist() == [[int(out["block"]["e4m3"], 16)]]
    else:
        q = fp8lm.quantize(x[None, :], fp8lm.MXFP8BlockScaling())
        assert q.scale_inv.tolist() == [[int(out["block"]["e8m0"], 16)]]
    assert q.codes[0].tolist() == codes
    assert same_floats(q.dequantize()[0], [float(v["value"]) for v in out["values"]])


# Plain numpy twins of each recipe's published rule (fp8lm's docs/reference/numerics.md and
# TE's kernels), the casts through ml_dtypes: each rule maps one row-wise block of values to
# (its stored scale, its codes).
def rowwise(x, size, rule, scale_dtype):
    rows, cols = x.shape
    blocks = -(-cols // size)
    scales = np.zeros((rows, blocks), scale_dtype)
    codes = np.zeros(x.shape, np.uint8)
    for r in range(rows):
        for b in range(blocks):
            scales[r, b], codes[r, size * b:size * (b + 1)] = rule(x[r, size * b:size * (b + 1)])
    return codes, scales


def e4m3_codes(v):
    return np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def mxfp8_block(v):
    ratio = np.float32(np.float32(np.max(np.abs(v))) * np.float32(1 / 448))
    e = 0 if ratio == 0 else int(np.ceil(np.log2(np.float64(ratio)))) + 127
    e = min(max(e, 0), 254)
    recip = np.float32(1.0) if e == 0 else np.float32(2.0 ** (127 - e))
    return e, e4m3_codes(v * recip)


def fp8_block(v):
    amax = np.float32(np.max(np.abs(v)))
    scale = np.float32(1) if amax == 0 else np.float32(448) / amax
    scale = np.float32(2.0 ** np.floor(np.log2(np.float64(scale))))  # power_2_scale
    return np.float32(1) / scale, e4m3_codes(v * scale)


def nvfp4_block(S):
    def rule(v):
        amax = np.float32(np.max(np.abs(v)))
        bcode = np.float32(np.clip(amax * (S * np.float32(1 / 6)), -448, 448)).astype(
            ml_dtypes.float8_e4m3fn)
        decoded = np.float32(bcode.astype(np.float32)) * (np.float32(1) / S)
        mult = np.float32(np.finfo(np.float32).max) if decoded == 0 else \
            min(np.float32(1) / decoded, np.finfo(np.float32).max)
        q = (v * np.float32(mult)).astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
        return bcode.view(np.uint8), fp8lm.formats["e2m1"].encode(q)
    return rule


def test_block_recipes_equal_their_rules():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((6, 300)) * np.float32(2.0) ** rng.integers(-8, 8, (6, 1)))
    x = x.astype(np.float32)
    x[2, :40] = 0  # an all-zero block
    codes, scales = rowwise(x, 32, mxfp8_block, np.uint8)
    q = fp8lm.quantize(x, fp8lm.MXFP8BlockScaling())
    assert np.array_equal(q.codes, codes) and np.array_equal(q.scale_inv, scales)
    assert q.block_shape == (1, 32)
    codes, scale_inv = rowwise(x, 128, fp8_block, np.float32)
    q = fp8lm.quantize(x, fp8lm.Float8BlockScaling())
    assert np.array_equal(q.codes, codes) and same_floats(q.scale_inv, scale_inv)
    S = np.float32(2688) / np.float32(np.max(np.abs(x)))  # the tensor scale, from its amax
    codes, scales = rowwise(x, 16, nvfp4_block(S), np.uint8)
    q = fp8lm.quantize(x, fp8lm.NVFP4BlockScaling())
    assert np.array_equal(q.codes, codes) and np.array_equal(q.scale_inv, scales)
    assert q.tensor_scale_inv == np.float32(1) / (np.float32(2688) / np.max(np.abs(x)))


def test_dequantize_is_codes_times_scales():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    q = fp8lm.quantize(x, fp8lm.MXFP8BlockScaling(), role="weight", columnwise=True)
    assert q.block_shape == (32, 1)
    per_value = np.repeat(fp8lm.formats["e8m0"].decode(q.scale_inv), 32, axis=0)[:64]
    assert same_floats(q.dequantize(), fp8lm.formats["e4m3"].decode(q.codes) * per_value)
    # Float8BlockScaling's weights: 128x128 blocks serving both directions.
    q = fp8lm.quantize(x, fp8lm.Float8BlockScaling(), role="weight")
    assert q.block_shape == (128, 128) and q.scale_inv.shape == (1, 1)
    # NVFP4's weights: 16x16 blocks. A block's scale takes its amax to about 6, E2M1's top,
    # where the widest gap between E2M1 values is 2 (4 to 6): rounding moves a value by at
    # most half that, 1/6 of the block's amax, itself at most the tensor's.
    q = fp8lm.quantize(x, fp8lm.NVFP4BlockScaling(), role="weight")
    assert q.block_shape == (16, 16) and q.format == "e2m1"
    assert np.max(np.abs(q.dequantize() - x)) <= np.max(np.abs(x)) / 6


def test_delayed_and_current_scaling():
    x = np.float32([[0.5, -3, 100], [7, 0, -0.001]])
    d = fp8lm.quantize(x, fp8lm.DelayedScaling(), scale=2.0)
    assert d.format == "e4m3" and d.scale == 2.0 and d.scale_inv == 0.5 and d.amax == 100
    g = fp8lm.quantize(x, fp8lm.DelayedScaling(), role="grad_output")
    assert g.format == "e5m2"  # HYBRID
    c = fp8lm.quantize(x, fp8lm.Float8CurrentScaling(margin=1))
    assert c.scale == np.float32(448) / np.float32(100) / 2
    assert same_floats(c.codes, fp8lm.formats["e4m3"].encode(x * np.float32(c.scale)))


def test_torch_tensors_come_in_as_numpy_does():
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 64, requires_grad=True)
    a = fp8lm.quantize(x, fp8lm.MXFP8BlockScaling())
    b = fp8lm.quantize(x.detach().numpy(), fp8lm.MXFP8BlockScaling())
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.scale_inv, b.scale_inv)
    # float64 and non-contiguous inputs are converted first.
    c = fp8lm.quantize(np.asfortranarray(x.detach().numpy().astype(np.float64)),
                       fp8lm.MXFP8BlockScaling())
    assert np.array_equal(a.codes, c.codes)


def test_bad_requests_raise_fp8lm_error():
    x = np.ones((16, 32), np.float32)
    with pytest.raises(fp8lm.Error, match="role 'output'"):
        fp8lm.quantize(x, fp8lm.MXFP8BlockScaling(), role="output")
    with pytest.raises(fp8lm.Error, match="format 'e3m4'"):
        fp8lm.quantize(x, format="e3m4")
    with pytest.raises(fp8lm.Error, match="positive normal"):
        fp8lm.quantize(x, format="e4m3", scale=0.0)
    with pytest.raises(fp8lm.Error, match="drop scale"):
        fp8lm.quantize(x, fp8lm.MXFP8BlockScaling(), scale=2.0)
    with pytest.raises(fp8lm.Error, match="multiples of 16"):
        fp8lm.quantize(np.ones((3, 32), np.float32), fp8lm.NVFP4BlockScaling(),
                       role="grad_output", columnwise=True)
    with pytest.raises(TypeError, match="expected a recipe"):
        fp8lm.quantize(x, "mxfp8")
    with pytest.raises(fp8lm.Error, match="amax-history-len 0 is out of range"):
        fp8lm.Training(recipe=fp8lm.DelayedScaling(amax_history_len=0), precision="fp8")
