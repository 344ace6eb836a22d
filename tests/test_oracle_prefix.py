"""More examples never turn a failure into a pass: the cases of ``verify(examples=N, seed=s)`` are
the first ``N`` of those of ``examples=M > N`` at the same seed, in both domains
(``toolkit.oracle.cases``: case ``k`` is a function of the seed, the domain and ``k``)."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import oracle
from toolkit.oracle import cases

from test_oracle import make_sgd

M = 300


def _recorded(examples, seed, name="sgd", make=None):
    """The cases verify hands to make_step, in order: ``(full, usual)``."""
    calls = []
    make = make or make_sgd()

    def recording(w, **hyper):
        calls.append((w.tobytes(), w.shape, tuple(sorted(hyper.items(), key=str))))
        return make(w, **hyper)
    r = oracle.verify(recording, name, convention="guide", examples=examples, seed=seed)
    assert r.passed, r.summary  # a correct implementation: no rerun for an explanation
    full = r.domains["full"].examples
    return calls[:full], calls[full:]


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_cases_of_fewer_examples_are_a_prefix(seed):
    full, usual = _recorded(M, seed)
    assert len(full) == M and len(usual) == M // 2
    for n in (1, 2, 3, 10, 17, 50, 100, 150, 299):
        f, u = _recorded(n, seed)
        assert f == full[:n] and u == usual[:max(1, n // 2)], n


def test_every_case_is_a_function_of_seed_domain_and_index():
    from toolkit.oracle import space
    hyper = space.hyper_space("adam", {})
    ranges = ((-3, 2), (-4, 3))

    def draw(seed, domain, k):
        c = cases.draw("adam", hyper, np.dtype("float32"), ranges, seed, domain, k,
                       lambda h: True)
        return c.hyper, c.weight.tolist(), [g.tolist() for g in c.grads]
    assert draw(0, "full", 5) == draw(0, "full", 5)
    assert draw(0, "full", 5) != draw(0, "full", 6) != draw(1, "full", 6)
    assert draw(0, "full", 5) != draw(0, "usual", 5)


def _sgd_wrong_at_small_momentum():
    correct = make_sgd()

    def make(w, **hyper):
        step = correct(w, **hyper)
        wrong = 0.0 < hyper["momentum"] < 0.05
        return lambda g: step(g) * (1.5 if wrong else 1.0)
    return make


def test_a_failure_found_at_n_examples_stays_a_failure_at_every_m_above():
    make = _sgd_wrong_at_small_momentum()
    first = next(n for n in range(1, M + 1)
                 if not oracle.verify(make, "sgd", convention="guide", examples=n,
                                      usual_examples=1).domains["full"].passed)
    for m in (first + 1, first + 7, 2 * first + 3, M):
        assert not oracle.verify(make, "sgd", convention="guide", examples=m,
                                 usual_examples=1).domains["full"].passed, m


def _adam_with_float32_constants():
    """The issue's Adam: PyTorch's (the guide's) equations with the bias corrections 1 - beta^t
    formed in float32 (what JAX code with an int32 step count does)."""
    f = np.float32

    def make(w, learning_rate, wd, rescale_grad, clip_gradient, beta1, beta2, epsilon):
        w, m, v, t = w.copy(), np.zeros_like(w), np.zeros_like(w), [0]

        def step(g):
            t[0] += 1
            g = rescale_grad * g
            g = g if clip_gradient is None else np.clip(g, -clip_gradient, clip_gradient)
            g = g + wd * w
            m[...] = beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            c1, c2 = f(1) - f(beta1) ** f(t[0]), f(1) - f(beta2) ** f(t[0])
            w[...] = w - learning_rate * (m / c1) / (np.sqrt(v / c2) + epsilon)
            return w
        return step
    return make


def test_the_issues_float32_constants_adam_fails_at_every_count_and_seed():
    # it passed at 100, 150, 200 and 300 examples and at seeds 1, 3 and 5 (hypothesis' search)
    make = _adam_with_float32_constants()
    for n in (10, 30, 50, 100, 150, 200, 300):
        r = oracle.verify(make, "adam", convention="guide", examples=n)
        assert not r.passed and r.explanation.variant == "constants_in_dtype", (n, r.summary)
    for seed in range(6):
        assert not oracle.verify(make, "adam", convention="guide", seed=seed).passed, seed
