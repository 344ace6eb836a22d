"""The example outputs of docs/oracle.md are what the code prints: each is rerun here and every
line the docs show (``...`` elides the rest) must be a line of the report's summary. (The issue:
the second example showed another implementation's output.)"""
from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest

from toolkit import oracle

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "oracle.md")


def _text():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def _output(head):
    """The docs' ```text block whose first line starts with ``head``."""
    blocks = [b for b in re.findall(r"```text\n(.*?)```", _text(), re.S) if b.startswith(head)]
    assert len(blocks) == 1, (head, len(blocks))
    return blocks[0]


def _assert_shown(block, summary):
    have = summary.splitlines()
    for line in block.splitlines():
        if line.strip() in ("", "..."):
            continue
        assert line in have, f"docs/oracle.md shows a line the code does not print:\n{line}\n" \
                             f"--- the code prints:\n{summary}"


def _docs_make_step():
    """The guide's Adam that docs/oracle.md defines (its first python block with make_step)."""
    code = next(b for b in re.findall(r"```python\n(.*?)```", _text(), re.S)
                if b.lstrip().startswith("import numpy as np\n\ndef make_step("))
    space = {}
    exec(compile(code, DOC, "exec"), space)  # noqa: S102 - the docs' own example
    return space["make_step"]


def test_the_guide_adam_under_the_default_convention():
    r = oracle.verify(_docs_make_step(), "adam", dtype="float64", examples=20,
                      fixed=dict(learning_rate=0.1, beta2=0.999, epsilon=0.01))
    assert r.passes_under == "guide"
    _assert_shown(_output("adam (mxnet convention, float64): FAILED over 20 example(s); "
                          "worst normalised error 7.66e+15"), r.summary)


def _mxnet_adam_in_double(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2,
                          epsilon):
    """MXNet 1.9.1's Adam (weight decay before clipping, clipping off at 0, epsilon on the
    uncorrected root, the corrections folded into the rate) with the hyperparameters in double
    precision, where MXNet's kernel takes them as float32."""
    w, m, v, t = w.copy(), np.zeros_like(w), np.zeros_like(w), [0]

    def step(g):
        t[0] += 1
        lr = learning_rate * np.sqrt(1.0 - beta2 ** t[0]) / (1.0 - beta1 ** t[0])
        g = rescale_grad * g + wd * w
        g = np.clip(g, -clip_gradient, clip_gradient) if clip_gradient else g
        m[...] = beta1 * m + (1.0 - beta1) * g
        v[...] = beta2 * v + (1.0 - beta2) * g * g
        w[...] = w - lr * m / (np.sqrt(v) + epsilon)
        return w
    return step


def test_mxnets_adam_with_its_hyperparameters_in_double():
    r = oracle.verify(_mxnet_adam_in_double, "adam", dtype="float64", examples=20)
    assert r.explanation.variant == "hyper_f64"
    _assert_shown(_output("adam (mxnet convention, float64): FAILED over 20 example(s); "
                          "worst normalised error 1.63e+10"), r.summary)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (pip install torch): the example is "
                           "torch.optim.Adam's")
def test_torch_adam_at_seed_8():
    import torch

    def make_step(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        p = torch.nn.Parameter(torch.from_numpy(w.copy()))
        opt = torch.optim.Adam([p], lr=learning_rate, betas=(beta1, beta2), eps=epsilon)

        def step(g):
            p.grad = torch.from_numpy(g.copy())
            opt.step()
            return p.detach().clone()
        return step
    r = oracle.verify(make_step, "adam", convention="pytorch", dtype="float64", seed=8,
                      fixed=dict(wd=0.0, rescale_grad=1.0, clip_gradient=None))
    _assert_shown(_output("adam (pytorch convention, float64): FAILED over 100 example(s)"),
                  r.summary)
