"""verify and identify with moments held low (toolkit.oracle.held): a numpy Adam whose moments
are bfloat16, or 8-bit blocks as bitsandbytes holds them, is named with its form and block size
and passes verify under it; a float32 Adam is not named low-bit and fails verify asked for a
low-bit form; the CLI shows the form; bitsandbytes' own optimizers where installed."""
from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np
import pytest

from reference import lowbit
from reference.error_bound import Tracked
from toolkit.oracle import held, identify, verify

BF16 = ml_dtypes.bfloat16


def _quantize(x, signed, block):
    """bitsandbytes' blockwise quantization, written plainly: each block's absolute maximum,
    the values scaled by it (a division), the nearest code of the dynamic map."""
    flat = np.asarray(x, np.float32).reshape(-1)
    n = flat.size
    padded = np.zeros(-(-n // block) * block, np.float32)
    padded[:n] = flat
    blocks = padded.reshape(-1, block)
    absmax = np.abs(blocks).max(axis=1)
    s = blocks / np.maximum(absmax, np.float32(1e-38))[:, None]
    qmap = lowbit.code_map(signed)
    codes = np.abs(s.reshape(-1, 1) - qmap.reshape(1, -1)).argmin(axis=1).astype(np.uint8)
    return codes[:n], absmax


def _dequantize(codes, absmax, signed, block):
    return lowbit.code_map(signed)[codes] * np.repeat(absmax, block)[:codes.size]


def adam(kind="float32", block=256):
    """A numpy Adam (torch's equations: L2 weight decay, epsilon after the bias correction)
    whose moments are held in ``kind``: "float32", "bfloat16" or "int8" (blocks of
    ``block``; weights below 4096 elements keep float32 moments, as bitsandbytes keeps them)."""
    def make_step(weight0, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2,
                  epsilon, **_):
        w, t = weight0.copy(), [0]
        low = kind == "bfloat16" or (kind == "int8" and w.size >= 4096)
        state = {}

        def load(name, signed):
            if name not in state:
                return np.zeros_like(w)
            if kind == "int8" and low:
                return _dequantize(*state[name], signed, block).reshape(w.shape)
            return state[name].astype(np.float32)

        def store(name, x, signed):
            if kind == "int8" and low:
                state[name] = _quantize(x, signed, block)
            else:
                state[name] = x.astype(BF16) if low else x

        def step(g):
            t[0] += 1
            g = g * np.float32(rescale_grad)
            if clip_gradient is not None:
                g = np.clip(g, -np.float32(clip_gradient), np.float32(clip_gradient))
            g = g + np.float32(wd) * w
            m = np.float32(beta1) * load("m", True) + np.float32(1 - beta1) * g
            v = np.float32(beta2) * load("v", False) + np.float32(1 - beta2) * g * g
            store("m", m, True)
            store("v", v, False)
            m_hat = m / np.float32(1 - beta1 ** t[0])
            v_hat = v / np.float32(1 - beta2 ** t[0])
            w[...] = w - np.float32(learning_rate) * m_hat / (np.sqrt(v_hat) +
                                                                np.float32(epsilon))
            return w.copy()
        return step
    return make_step


def test_held_cases_are_large_and_fixed():
    first, again = held.cases("adam", np.dtype("float32")), held.cases("adam", "float32")
    assert [c.weight.size for c in first] == [8192, 67 * 97]
    assert all(len(c.grads) == held.STEPS for c in first)
    for a, b in zip(first, again):
        assert a.hyper == b.hyper and np.array_equal(a.weight, b.weight)


def test_bfloat16_adam_is_named_and_verified():
    report = identify(adam("bfloat16"), "adam", cases=6, screen=60)
    assert (report.convention, report.state_dtype, report.block) == ("guide", "bfloat16", None)
    assert "follows the 'guide' convention with bfloat16 states" in report.summary
    ok = verify(adam("bfloat16"), "adam", convention="guide", state_dtype="bfloat16",
                examples=20)
    assert ok.passed, ok.summary
    assert "with bfloat16 states): PASSED" in ok.summary
    plain = verify(adam("bfloat16"), "adam", convention="guide", examples=20)
    assert not plain.passed
    assert plain.explanation.variant == "bfloat16_states", plain.summary
    assert "state_dtype='bfloat16'" in plain.explanation.text


def test_float32_adam_is_not_named_low_bit():
    report = identify(adam("float32"), "adam", cases=6, screen=60)
    assert report.convention == "guide" and report.state_dtype is None
    assert report.held_cases == held.CASES and report.held_error <= 1.0
    assert "states" not in report.summary and "state_dtype" not in report.to_dict()
    asked = verify(adam("float32"), "adam", convention="guide", state_dtype="int8",
                   examples=10)
    assert not asked.passed
    assert asked.explanation.variant == "states_not_held", asked.summary


@pytest.mark.parametrize("block", [256, 2048])
def test_int8_adam_is_named_with_its_block(block):
    report = identify(adam("int8", block), "adam", cases=6, screen=60)
    assert (report.convention, report.state_dtype, report.block) == ("guide", "int8", block)
    assert f"with 8-bit blockwise states, block {block}" in report.summary
    ok = verify(adam("int8", block), "adam", convention="guide", state_dtype="int8",
                block=block, examples=10)
    assert ok.passed, ok.summary
    other = 2048 if block == 256 else 256
    wrong = verify(adam("int8", block), "adam", convention="guide", state_dtype="int8",
                   block=other, examples=10)
    assert not wrong.passed
    assert wrong.explanation.variant == f"int8_states_{block}", wrong.summary


def test_verify_checks_its_state_arguments():
    with pytest.raises(ValueError, match="no element-wise moments"):
        verify(adam(), "ftrl", state_dtype="bfloat16")
    with pytest.raises(ValueError, match="state_dtype must be one of"):
        verify(adam(), "adam", state_dtype="int4")
    with pytest.raises(ValueError, match="describe int8 states"):
        verify(adam(), "adam", block=128)
    with pytest.raises(ValueError, match="block must be an int"):
        verify(adam(), "adam", state_dtype="int8", block=0)


def test_held_bound_covers_the_other_side_of_a_tie():
    """A value within its bound of a bfloat16 rounding boundary enters the next step with a
    bound that reaches the neighbouring bfloat16; one far from it, and exact zeros, exactly."""
    boundary = 1.0 + 2.0 ** -8  # halfway between bfloat16 1 and 1 + 2**-7
    x = Tracked(np.array([boundary, 1.1, 0.0]), err=np.array([1e-7, 1e-7, 0.0]),
                u=2.0 ** -24)
    h = lowbit.held(x, "bfloat16")
    assert h.err[0] >= 2.0 ** -8 and h.err[1] == 0.0 and h.err[2] == 0.0
    z = lowbit.held(Tracked(np.zeros(300), u=2.0 ** -24), "int8", signed=False)
    assert not z.err.any() and not z.value.any()


def test_cli_shows_the_held_form(tmp_path, capsys):
    from toolkit.__main__ import _main
    path = tmp_path / "held_adam.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
                    "from test_oracle_held import adam\nmake_step = adam('bfloat16')\n")
    assert _main(["verify", f"{path}:make_step", "adam", "--convention", "guide",
                  "--state-dtype", "bfloat16", "--examples", "10"]) == 0
    assert "with bfloat16 states): PASSED" in capsys.readouterr().out
    assert _main(["identify", f"{path}:make_step", "adam", "--cases", "6"]) == 0
    assert "convention with bfloat16 states" in capsys.readouterr().out


def _bitsandbytes():
    try:
        import bitsandbytes  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"bitsandbytes with torch is not installed here ({e})")
    from toolkit.oracle.frameworks import get
    return get("bitsandbytes")


def test_bitsandbytes_blocks_are_256_on_the_cpu():
    """bitsandbytes' 8-bit optimizers keep one maximum per 256 elements on the CPU (the block
    size the audit holds them to), and float32 moments below 4096 elements."""
    _bitsandbytes()
    import bitsandbytes.optim as optim
    import torch
    for cls in (optim.Adam8bit, optim.Lion8bit):
        big, small = torch.nn.Parameter(torch.ones(64, 129)), torch.nn.Parameter(torch.ones(64))
        opt = cls([big, small], lr=1e-3)
        big.grad, small.grad = torch.ones_like(big), torch.ones_like(small)
        opt.step()
        assert opt.state[big]["absmax1"].shape == (33,)
        assert opt.state[small]["state1"].dtype == torch.float32


def test_bitsandbytes_adapters_take_valid_values():
    from toolkit import optimizer
    from toolkit.oracle import space
    adapters = _bitsandbytes().adapters()
    assert {a.optimizer for a in adapters} == {"adam", "adamw", "lion"}
    for a in adapters:
        space.hyper_space(a.optimizer, dict(a.fixed))
        optimizer.registry()[a.optimizer](**a.fixed)
        assert a.held == ({"state_dtype": "int8", "block": 256} if "8bit" in a.label else {})


def test_bitsandbytes_cpu_encoder_moves_weights_whose_gradient_is_zero():
    """docs/conformance.md's finding: bitsandbytes 0.50.2's native CPU encoder holds an exact
    zero moment as code 131 (about 2e-5 of its block's maximum), so Lion8bit steps every weight
    of a block by a full learning rate where only one element had a gradient (Lion32bit, and
    the oracle's int8 states, leave them still). A fixed bitsandbytes fails this: audit again."""
    _bitsandbytes()
    import bitsandbytes.optim as optim
    import torch
    moved = {}
    for cls in (optim.Lion8bit, optim.Lion32bit):
        p = torch.nn.Parameter(torch.zeros(4096))
        opt = cls([p], lr=1e-3)
        g = torch.zeros(4096)
        g[0] = 1.0
        for _ in range(2):
            p.grad = g.clone()
            opt.step()
        moved[cls.__name__] = int((p.detach()[1:] != 0).sum())
    assert moved == {"Lion8bit": 255, "Lion32bit": 0}
