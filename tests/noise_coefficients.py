"""Derivation of the polynomial coefficients in toolkit/backends/noise.py (``log53``,
``cos_0_2pi``).

Run ``python tests/noise_coefficients.py`` (needs mpmath) to derive them again: a Remez exchange
in 200-bit arithmetic for the best weighted uniform approximation on the reduced interval, then
each coefficient rounded to float64. ``error_bound`` measures the weighted error of the rounded
coefficients on a dense grid; tests/test_noise_math.py holds the module's coefficients to the
bounds printed here.

* ``log``: ``R(z) = 2 atanh(s)/s - 2`` (``z = s*s``) as ``z*(c1 + c2 z + ... + c7 z**6)`` on
  ``0 <= z <= ((sqrt(2)-1)/(sqrt(2)+1))**2``; weight ``z`` (the error of ``R`` itself, which enters
  ``log(1+f) = 2s + s*R`` relative to ``2s`` halved).
* ``sin``: ``(sin t - t)/t**3`` as ``c1 + ... + c6 z**5`` on ``0 <= z <= (pi/4)**2``; weight ``z``
  (relative to ``sin t ~ t``).
* ``cos``: ``(cos t - 1 + z/2)/z**2`` as ``c1 + ... + c6 z**5``; weight ``z**2`` (relative to
  ``cos t >= 0.7``).

The intervals are widened by 1e-6 (relative) for the rounding of ``s`` and ``t``.
"""
from __future__ import annotations


def _setup():
    import mpmath as mp
    mp.mp.prec = 200
    return mp


def functions():
    """``{name: (target(z), weight(z), upper end of z, number of coefficients)}``."""
    mp = _setup()
    widen = 1 + mp.mpf(10) ** -6
    smax = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)

    def log_q(z):
        s = mp.sqrt(z)
        return (2 * mp.atanh(s) / s - 2) / z

    def sin_q(z):
        t = mp.sqrt(z)
        return (mp.sin(t) - t) / (z * t)

    def cos_q(z):
        return (mp.cos(mp.sqrt(z)) - 1 + z / 2) / (z * z)
    return {"log": (log_q, lambda z: z, smax ** 2 * widen, 7),
            "sin": (sin_q, lambda z: z, (mp.pi / 4) ** 2 * widen, 6),
            "cos": (cos_q, lambda z: z * z, (mp.pi / 4) ** 2 * widen, 6)}


def remez(target, weight, a, b, ncoef, iterations=30, grid_size=4000):
    """Coefficients ``c`` of ``p(z) = sum c[j] z**j`` minimising ``max |weight*(target - p)|``
    on ``[a, b]`` (Remez exchange: solve for equioscillation on a reference set, move the
    reference to the extrema of the error, repeat until the levelled error is the maximum)."""
    mp = _setup()
    n = ncoef + 1
    ref = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * i / (n - 1)) for i in range(n)]
    grid = [a + (b - a) * (1 - mp.cos(mp.pi * k / grid_size)) / 2 for k in range(grid_size + 1)]
    coef = None
    for _ in range(iterations):
        m = mp.matrix(n, n)
        rhs = mp.matrix(n, 1)
        for i, x in enumerate(ref):
            for j in range(ncoef):
                m[i, j] = x ** j
            m[i, ncoef] = (-1) ** i / weight(x)
            rhs[i] = target(x)
        sol = mp.lu_solve(m, rhs)
        coef, level = [sol[j] for j in range(ncoef)], abs(sol[ncoef])

        def err(x, coef=coef):
            return weight(x) * (target(x) - _horner(coef, x))
        vals = [err(x) for x in grid]
        peaks = [k for k in range(len(grid)) if k in (0, len(grid) - 1)
                 or (vals[k] - vals[k - 1]) * (vals[k + 1] - vals[k]) <= 0]
        alternating = []
        for k in peaks:                   # one extremum per run of equal sign, the largest
            if alternating and mp.sign(vals[k]) == mp.sign(vals[alternating[-1]]):
                if abs(vals[k]) > abs(vals[alternating[-1]]):
                    alternating[-1] = k
            else:
                alternating.append(k)
        while len(alternating) > n:       # drop the smaller end
            alternating.pop(0 if abs(vals[alternating[0]]) < abs(vals[alternating[-1]]) else -1)
        if len(alternating) < n:
            break
        ref = []
        for k in alternating:             # refine interior extrema: err' = 0 near the grid point
            x = grid[k]
            if 0 < k < len(grid) - 1:
                try:
                    root = mp.findroot(lambda y: mp.diff(err, y), x)
                    if isinstance(root, mp.mpf) and grid[k - 1] <= root <= grid[k + 1]:
                        x = root
                except (ValueError, ZeroDivisionError):
                    pass
            ref.append(x)
        worst = max(abs(v) for v in vals)
        if worst - level < level * mp.mpf(10) ** -8:
            break
    return coef


def _horner(coef, x):
    """``sum(coef[j] * x**j)`` by Horner's rule (lowest degree first; mpmath's ``polyval``
    changed its coefficient order between versions)."""
    acc = 0
    for c in reversed(coef):
        acc = acc * x + c
    return acc


def error_bound(name, coefficients, points=20000):
    """The largest weighted error of float64 ``coefficients`` for ``name`` on a uniform grid
    (as a float)."""
    mp = _setup()
    target, weight, b, _ = functions()[name]
    c = [mp.mpf(x) for x in coefficients]
    return float(max(abs(weight(z) * (target(z) - _horner(c, z)))
                     for z in (b * mp.mpf(k) / points for k in range(1, points + 1))))


def derive():
    """``{name: float64 coefficients}`` for log, sin and cos."""
    mp = _setup()
    out = {}
    for name, (target, weight, b, ncoef) in functions().items():
        # the weight vanishes at z = 0, where the error does not matter: start just above it
        out[name] = [float(c) for c in remez(target, weight, b * mp.mpf(10) ** -8, b, ncoef)]
    return out


if __name__ == "__main__":
    import math
    for name, coefficients in derive().items():
        bound = error_bound(name, coefficients)
        print(f"{name}: weighted error {bound:.3e} = 2**{math.log2(bound):.2f}")
        for c in coefficients:
            print(f"    float.fromhex({c.hex()!r}),")
