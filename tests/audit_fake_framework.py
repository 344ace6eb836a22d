"""A tiny framework for tests/test_audit.py: the audit's machinery without torch or optax.

Two numpy optimizers written here from the equations (not the toolkit's): Adam as the guide
writes it, and SGD with a planted bug (weight decay with the wrong sign). Its float64 needs the
environment variable ``MXOPT_FAKE_X64`` (as JAX's float64 needs its x64 switch), so the audit
runs that dtype in a subprocess; ``make_step`` refuses float64 without it.
"""
import os

import numpy as np

from toolkit.oracle.frameworks import Adapter, Framework

ENV = "MXOPT_FAKE_X64"


def _check(dtype):
    if dtype == "float64" and os.environ.get(ENV) != "1":
        raise RuntimeError(f"float64 needs {ENV}=1 (a subprocess of the audit)")


def make_adam(dtype):
    def make_step(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        _check(dtype)
        w, m, v, t = w.copy(), np.zeros_like(w), np.zeros_like(w), [0]

        def step(g):
            t[0] += 1
            g = g + wd * w
            m[...] = beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            w[...] = w - learning_rate * (m / (1.0 - beta1 ** t[0])) / (
                np.sqrt(v / (1.0 - beta2 ** t[0])) + epsilon)
            return w
        return step
    return make_step


def make_sgd_with_a_bug(dtype):
    def make_step(w, learning_rate, wd, rescale_grad, clip_gradient, momentum):
        _check(dtype)
        w = w.copy()

        def step(g):
            w[...] = w - learning_rate * (g - wd * w)  # the planted bug: + wd*w is right
            return w
        return step
    return make_step


FIXED = {"rescale_grad": 1.0, "clip_gradient": None}


def adapters():
    return [Adapter("fake.adam", "adam", make_adam, fixed=FIXED),
            Adapter("fake.sgd(wd sign flipped)", "sgd", make_sgd_with_a_bug,
                    fixed={**FIXED, "momentum": 0.0, "wd": 0.01}, dtypes=("float32",))]


FRAMEWORK = Framework(name="audit_fake_framework", module="numpy", adapters=adapters,
                      versions=lambda: {"fake": "1.0"},
                      env=lambda dtype: {ENV: "1"} if dtype == "float64" else None)
