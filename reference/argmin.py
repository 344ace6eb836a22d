r"""FTRL and FTML as argmin problems (guide:233 and guide:250), solved numerically with scipy from
the raw gradient history: the independent proof that the closed-form updates of
``reference.ftrl`` and ``reference.ftml`` (guide:239-241, 256-259) minimise the objectives they
claim to. This is the only reference module that uses scipy.

Nothing here reads the closed forms' state (``z``, ``n``, ``d``, ``v``): every quantity is rebuilt
from the history of the gradients ``G_1..G_i`` (each the convention's preprocessed gradient of a
raw gradient at the weight ``w_j`` where it was evaluated) and of those weights ``w_1..w_i``
(``w_1`` the initial weight). ``n_j``, ``v_j`` are recomputed as explicit sums, the objective's
optimality condition is evaluated term by term, and scipy solves it.

FTRL (guide:233, McMahan et al. 2013, "Ad click prediction: a view from the trenches", Alg. 1)
--------------------------------------------------------------------------------------------------
guide:233 as printed sums ``grad(w_i)`` over ``j``; the index is read ``grad(w_j)``. Its
``sigma_j`` is McMahan's per-coordinate learning-rate schedule: with ``n_0 = 0``,
``n_j = sum_{r<=j} G_r^2`` (per coordinate) and ``sigma_j = (sqrt(n_j) - sqrt(n_{j-1}))/lr``, so
``sum_{j<=i} sigma_j = sqrt(n_i)/lr``. Which objective does the closed form minimise? Per
coordinate, take

    Phi_i(x) = sum_{j=1}^i G_j*x + 1/2*sum_{j=1}^i sigma_j*(x - w_j)^2
               + beta/(2*lr)*x^2 + lamda1*|x| + lamda2/2*x^2 .

The kernel's ``z`` obeys ``z_j = z_{j-1} + G_j - sigma_j*w_j`` with ``z_0 = 0``, so
``z_i = sum_{j<=i} (G_j - sigma_j*w_j)``, and expanding the squares,

    Phi_i(x) = z_i*x + 1/2*A_i*x^2 + lamda1*|x| + const,   A_i = (beta + sqrt(n_i))/lr + lamda2 .

``Phi_i`` is strictly convex when ``A_i > 0``. (``A_i = 0`` only with ``beta = lamda2 = 0`` and no
nonzero gradient yet; then ``z_i = 0``, ``Phi_i = lamda1*|x|`` and the minimiser is 0 -- which the
reference's selection gives, while MXNet's mask product gives ``0/0*0 = NaN``.) Its
subdifferential at 0 is
``[z_i - lamda1, z_i + lamda1]``: if ``|z_i| <= lamda1`` the minimiser is exactly 0. Otherwise it
solves ``z_i + A_i*x + lamda1*sign(x) = 0``, ``x = -(z_i - lamda1*sign(z_i))/A_i``: McMahan's closed
form, ``w = -(z - lamda1*sign z)/((beta + sqrt n)/lr + lamda2)``. So the closed form minimises
guide:233 with (a) ``grad(w_j)`` in the sum, (b) McMahan's ``sigma_j``, (c) one extra proximal
term ``beta/(2*lr)*||w||^2`` **centred at the origin** -- equivalently the proximal sum started at
``j = 0`` with ``sigma_0 = beta/lr`` and ``w_0 = 0``, which is how ``beta`` enters McMahan's
per-coordinate rate ``1/eta_i = (beta + sqrt(n_i))/lr = sum_{j=0}^i sigma_j`` -- and (d) an L2
term ``lamda2/2*||w||^2``: ``lamda2 = wd`` in the "mxnet" convention (MXNet's ``+ wd`` in the
denominator), ``lamda2 = 0`` in the "guide" convention, whose ``wd`` is linearised into
``G_j = clip(rs*g_j, c) + wd*w_j`` (FTRL on the linearised losses ``f_j + wd/2*||w||^2``; so the
guide convention with ``wd != 0`` has an argmin meaning too). Centring the ``beta`` term at the
initial weight instead (``sigma_1 = (beta + sqrt(n_1))/lr``) would add ``-beta*w_1/lr`` to ``z``:
a different algorithm unless ``w_1 = 0`` (tested). guide:233's ``lambda`` is ``lamda1``.

Here each coordinate's optimality condition is solved with ``scipy.optimize.brentq`` on the side of
0 where the minimiser lies (``xtol`` 1e-300, ``rtol`` 4*eps, the smallest brentq accepts), and the
zero is returned exactly where 0 is in the subdifferential.

FTML (guide:250, Zheng and Kwok 2017)
-------------------------------------
With ``d_0 = 0``, ``v_j = sum_{r<=j} (1-beta2)*beta2^(j-r)*G_r^2``,
``d_j = (1 - beta1^t_j)/lr_j*(sqrt(v_j/(1 - beta2^t_j)) + eps)`` and
``sigma_j = d_j - beta1*d_{j-1}``, the kernel's ``z`` is
``z_i = sum_{j<=i} beta1^(i-j)*((1-beta1)*G_j - sigma_j*w_j)`` and
``sum_{j<=i} beta1^(i-j)*sigma_j = d_i`` (telescoping). Hence ``w_{i+1} = -z_i/d_i`` is the
minimiser of

    Psi_i(w) = sum_{j=1}^i beta1^(i-j) * [ (1-beta1)*G_j.w + 1/2*sigma_j*||w - w_j||^2 ] ,

a quadratic with Hessian ``diag(d_i)``. Two readings of guide:250 are needed: ``grad(w_i)`` inside
the sum is ``grad(w_j)``, and the discount ``beta1^(i-j)`` multiplies the proximal term as well as
the linear one (the whole per-step term; a positive factor common to all terms, such as a
normalisation ``1/(1-beta1^i)``, would not move the argmin). As printed, with undiscounted
proximal terms, the
quadratic coefficient would be ``sum_j sigma_j = d_i + (1-beta1)*sum_{j<i} d_j``, not ``d_i``,
and guide:256-259 would not minimise it (tested). ``sigma_j`` may be negative (e.g. when
``beta2 < beta1^2`` and ``v`` shrinks); the sum is still ``d_i > 0``, so the argmin exists. It is
solved with ``scipy.optimize.minimize(method="trust-exact")`` with the exact gradient and Hessian,
the objective written relative to the starting point so that its decrease is computed accurately,
and a gradient tolerance at the rounding floor of the gradient evaluation.

Derivative-free cross-checks (``method="Powell"``) solve the same objectives
from their values alone, to about 1e-8, as an independent check of the solvers above.
"""
from __future__ import annotations

import numpy as np
from scipy import optimize

__all__ = ["convention_gradient", "ftrl_sigmas", "ftrl_objective", "ftrl_argmin",
           "ftrl_error_scale", "ftrl_argmin_derivative_free", "ftrl_argmin_trajectory",
           "ftml_schedule", "ftml_objective", "ftml_argmin", "ftml_error_scale",
           "ftml_argmin_derivative_free", "ftml_argmin_trajectory"]

_EPS = float(np.finfo(np.float64).eps)


def _clip(x, c):
    return np.minimum(np.maximum(x, -c), c)


def convention_gradient(name, grad, w, *, convention, wd=0.0, rescale_grad=1.0,
                        clip_gradient=None):
    """The gradient the argmin sums, from a raw gradient ``grad`` evaluated at ``w``, and the
    exact L2 coefficient ``lamda2`` of the objective: ``(G, lamda2)``.

    * ftrl, "mxnet": ``G = clip(rs*grad, c)`` (clipping only when ``c`` is truthy),
      ``lamda2 = wd``;
    * ftrl, "guide": ``G = clip(rs*grad, c) + wd*w`` (clipping when ``c is not None``),
      ``lamda2 = 0``;
    * ftml, "mxnet": ``G = clip(rs*grad + wd*w, c)`` (clipping only when ``c`` is truthy);
    * ftml, "guide": ``G = clip(rs*grad, c) + wd*w``.
    """
    grad = np.asarray(grad, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    if convention not in ("mxnet", "guide"):
        raise ValueError(f"unknown convention {convention!r}")
    if name == "ftrl":
        if convention == "mxnet":
            G = rescale_grad * grad
            return (_clip(G, clip_gradient) if clip_gradient else G), float(wd)
        G = rescale_grad * grad
        if clip_gradient is not None:
            G = _clip(G, clip_gradient)
        return G + wd * w, 0.0
    if name == "ftml":
        if convention == "mxnet":
            G = rescale_grad * grad + wd * w
            return (_clip(G, clip_gradient) if clip_gradient else G), 0.0
        G = rescale_grad * grad
        if clip_gradient is not None:
            G = _clip(G, clip_gradient)
        return G + wd * w, 0.0
    raise ValueError(f"unknown optimizer {name!r}")


# --------------------------------------------------------------------------------------------
# FTRL
# --------------------------------------------------------------------------------------------

def ftrl_sigmas(G_hist, lr):
    """McMahan's per-coordinate ``sigma_j = (sqrt(n_j) - sqrt(n_{j-1}))/lr`` for ``j = 1..i``,
    with ``n_j`` summed afresh from the history (shape ``(i,) + weight shape``); also the
    ``sqrt(n_j)`` (``j = 0..i``) for error scales."""
    G = np.asarray(G_hist, dtype=np.float64)
    i = G.shape[0]
    roots = [np.zeros(G.shape[1:])]
    for j in range(1, i + 1):
        roots.append(np.sqrt(np.sum(G[:j] * G[:j], axis=0)))
    roots = np.array(roots)
    return (roots[1:] - roots[:-1]) / lr, roots


def ftrl_objective(x, G_hist, w_hist, *, lr, lamda1, beta, lamda2=0.0):
    """``Phi_i(x)`` summed over coordinates (see the module docstring)."""
    x = np.asarray(x, dtype=np.float64)
    G = np.asarray(G_hist, dtype=np.float64)
    W = np.asarray(w_hist, dtype=np.float64)
    sig, _ = ftrl_sigmas(G, lr)
    val = np.sum(G * x) + 0.5 * np.sum(sig * (x - W) ** 2)
    val += beta / (2 * lr) * np.sum(x * x) + lamda1 * np.sum(np.abs(x)) + lamda2 / 2 * np.sum(x * x)
    return float(val)


def _ftrl_coordinate(Gk, Wk, sigk, *, lr, lamda1, beta, lamda2):
    """Minimiser of one coordinate's ``Phi`` from its optimality condition (brentq)."""
    slope_extra = beta / lr + lamda2

    def smooth_derivative(x):
        # d/dx [ sum_j G_j x + 1/2 sum_j sigma_j (x - w_j)^2 + (beta/lr + lamda2) x^2 / 2 ]
        return float(np.sum(Gk + sigk * (x - Wk)) + slope_extra * x)

    a = smooth_derivative(0.0)                # the subdifferential at 0 is [a - l1, a + l1]
    if abs(a) <= lamda1:
        return 0.0
    # The minimiser has the sign of -a; on that side the condition is h(x) = 0 with
    if a < 0:
        def h(x):
            return smooth_derivative(x) + lamda1
        side = 1.0
    else:
        def h(x):
            return smooth_derivative(x) - lamda1
        side = -1.0
    # h(0) has the sign of a (nonzero); bracket the root by doubling away from 0.
    curvature = float(np.sum(sigk)) + slope_extra
    hi = side * max(2.0 * abs(h(0.0)) / curvature, 1e-300)
    for _ in range(4000):
        if np.sign(h(hi)) != np.sign(h(0.0)):
            break
        hi *= 2.0
    else:  # pragma: no cover - a strictly increasing h always changes sign
        raise RuntimeError("ftrl argmin: could not bracket the root")
    lo, up = (0.0, hi) if side > 0 else (hi, 0.0)
    root, info = optimize.brentq(h, lo, up, xtol=1e-300, rtol=4 * _EPS, maxiter=500,
                                 full_output=True)
    if not info.converged:  # pragma: no cover
        raise RuntimeError(f"ftrl argmin: brentq did not converge: {info.flag}")
    return float(root)


def ftrl_argmin(G_hist, w_hist, *, lr, lamda1, beta, lamda2=0.0):
    """``w_{i+1} = argmin Phi_i`` per coordinate, from the gradients ``G_1..G_i`` and the weights
    ``w_1..w_i`` where they were evaluated (arrays of shape ``(i,) + weight shape``)."""
    G = np.asarray(G_hist, dtype=np.float64)
    W = np.asarray(w_hist, dtype=np.float64)
    if G.shape != W.shape or G.shape[0] < 1:
        raise ValueError("G_hist and w_hist must have the same shape (i, ...), i >= 1")
    sig, _ = ftrl_sigmas(G, lr)
    shape = G.shape[1:]
    Gf, Wf, Sf = G.reshape(G.shape[0], -1), W.reshape(W.shape[0], -1), sig.reshape(sig.shape[0], -1)
    out = np.empty(Gf.shape[1])
    for k in range(Gf.shape[1]):
        out[k] = _ftrl_coordinate(Gf[:, k], Wf[:, k], Sf[:, k], lr=lr, lamda1=lamda1, beta=beta,
                                  lamda2=lamda2)
    return out.reshape(shape)


def ftrl_error_scale(G_hist, w_hist, *, lr, lamda1, beta, lamda2=0.0):
    """Per coordinate, ``S/A``: the sum of the magnitudes of the terms of ``z_i`` (including the
    cancellation inside each ``sigma_j*w_j``) over the curvature ``A_i``. Two correct evaluations
    of the minimiser differ by a modest multiple of ``eps*S/A``."""
    G = np.asarray(G_hist, dtype=np.float64)
    W = np.asarray(w_hist, dtype=np.float64)
    _, roots = ftrl_sigmas(G, lr)
    S = np.sum(np.abs(G) + (roots[1:] + roots[:-1]) / lr * np.abs(W), axis=0) + lamda1
    A = (beta + roots[-1]) / lr + lamda2
    # A = 0 only with beta = lamda2 = 0 and no nonzero gradient yet: then z = 0, the minimiser
    # is exactly 0 and there is nothing to round
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(A > 0, S / np.where(A > 0, A, 1.0), np.where(S > lamda1, np.inf, 0.0))


def ftrl_argmin_derivative_free(G_hist, w_hist, *, lr, lamda1, beta, lamda2=0.0):
    """Cross-check: minimise ``Phi_i`` (all coordinates) with Powell's method from values only.
    Accurate to about 1e-8 relative; for small, well-scaled cases."""
    G = np.asarray(G_hist, dtype=np.float64)
    W = np.asarray(w_hist, dtype=np.float64)
    shape = G.shape[1:]
    scale = max(1.0, float(np.max(np.abs(W))))

    def f(x):
        return ftrl_objective(x.reshape(shape) * scale, G, W, lr=lr, lamda1=lamda1, beta=beta,
                              lamda2=lamda2)

    res = optimize.minimize(f, W[-1].ravel() / scale, method="Powell",
                            options={"xtol": 1e-13, "ftol": 1e-15, "maxiter": 100000,
                                     "maxfev": 1000000})
    if not res.success:  # pragma: no cover
        raise RuntimeError(f"ftrl derivative-free argmin failed: {res.message}")
    return res.x.reshape(shape) * scale


def ftrl_argmin_trajectory(w0, grads, *, lr, lamda1, beta, wd=0.0, rescale_grad=1.0,
                           clip_gradient=None, convention="mxnet", weights=None):
    """The FTRL weights ``w_2..w_{T+1}`` as successive argmins, from the raw gradients ``grads``
    (shape ``(T,) + weight shape``). With ``weights=None`` the argmin runs free: the gradient
    ``j`` is preprocessed at the argmin's own ``w_j``. With ``weights`` (the ``w_1..w_T`` of another
    run) the history is that run's, which checks every step from the same inputs."""
    grads = np.asarray(grads, dtype=np.float64)
    w = np.array(w0, dtype=np.float64)
    Gs, Ws, out = [], [], []
    for j in range(grads.shape[0]):
        wj = w if weights is None else np.asarray(weights[j], dtype=np.float64)
        G, lamda2 = convention_gradient("ftrl", grads[j], wj, convention=convention, wd=wd,
                                        rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        Gs.append(G)
        Ws.append(wj)
        w = ftrl_argmin(np.array(Gs), np.array(Ws), lr=lr, lamda1=lamda1, beta=beta,
                        lamda2=lamda2)
        out.append(w)
    return np.array(out), np.array(Gs), np.array(Ws)


# --------------------------------------------------------------------------------------------
# FTML
# --------------------------------------------------------------------------------------------

def ftml_schedule(G_hist, *, lrs, ts, beta1, beta2, epsilon):
    """``d_0..d_i`` (``d_0 = 0``) and ``sigma_1..sigma_i`` from the history, ``v_j`` summed afresh
    as ``sum_{r<=j} (1-beta2)*beta2^(j-r)*G_r^2``. ``lrs`` and ``ts`` give each step's learning
    rate and update count (scalars or sequences of length i)."""
    G = np.asarray(G_hist, dtype=np.float64)
    i = G.shape[0]
    lrs = np.broadcast_to(np.asarray(lrs, dtype=np.float64), (i,))
    ts = np.broadcast_to(np.asarray(ts), (i,))
    d = [np.zeros(G.shape[1:])]
    for j in range(1, i + 1):
        wts = np.array([(1 - beta2) * beta2 ** (j - r) for r in range(1, j + 1)])
        v = np.tensordot(wts, G[:j] * G[:j], axes=1)
        t = int(ts[j - 1])
        d.append((1 - beta1 ** t) / lrs[j - 1] * (np.sqrt(v / (1 - beta2 ** t)) + epsilon))
    d = np.array(d)
    return d, d[1:] - beta1 * d[:-1]


def _ftml_terms(G_hist, w_hist, *, lrs, ts, beta1, beta2, epsilon):
    G = np.asarray(G_hist, dtype=np.float64)
    W = np.asarray(w_hist, dtype=np.float64)
    i = G.shape[0]
    d, sig = ftml_schedule(G, lrs=lrs, ts=ts, beta1=beta1, beta2=beta2, epsilon=epsilon)
    disc = np.array([beta1 ** (i - j) for j in range(1, i + 1)]).reshape((i,) + (1,) * (G.ndim - 1))
    return G, W, d, sig, disc


def ftml_objective(x, G_hist, w_hist, *, lrs, ts, beta1, beta2, epsilon, discount_prox=True):
    """``Psi_i(x)``; with ``discount_prox=False`` the literal guide:250 (undiscounted proximal
    terms), which the closed form does not minimise."""
    G, W, d, sig, disc = _ftml_terms(G_hist, w_hist, lrs=lrs, ts=ts, beta1=beta1, beta2=beta2,
                                     epsilon=epsilon)
    pdisc = disc if discount_prox else np.ones_like(disc)
    x = np.asarray(x, dtype=np.float64)
    return float(np.sum(disc * (1 - beta1) * G * x) + 0.5 * np.sum(pdisc * sig * (x - W) ** 2))


def ftml_argmin(G_hist, w_hist, *, lrs, ts, beta1, beta2, epsilon, discount_prox=True):
    """``w_{i+1} = argmin Psi_i`` with ``minimize(method="trust-exact")``, exact gradient and
    Hessian, from the gradients ``G_1..G_i`` and the weights ``w_1..w_i``. Raises if the solver
    does not report success."""
    G, W, d, sig, disc = _ftml_terms(G_hist, w_hist, lrs=lrs, ts=ts, beta1=beta1, beta2=beta2,
                                     epsilon=epsilon)
    pdisc = disc if discount_prox else np.ones_like(disc)
    shape = G.shape[1:]
    x0 = W[-1].ravel().copy()
    Wf = W.reshape(W.shape[0], -1)
    Gf = (disc * (1 - beta1) * G).reshape(G.shape[0], -1)
    Sf = (pdisc * sig).reshape(sig.shape[0], -1)
    H = np.sum(Sf, axis=0)
    if not np.all(H > 0):  # d_i > 0 whenever epsilon > 0 (and the undiscounted sum is larger)
        raise ValueError("ftml argmin: the objective is not strictly convex")

    def solve(start, gtol):
        def f(x):
            # Psi(x) - Psi(start), written so that small decreases are computed accurately
            dx = x - start
            return float(np.sum(Gf * dx) + np.sum(Sf * dx * (0.5 * dx + (start - Wf))))

        def jac(x):
            return np.sum(Gf + Sf * (x - Wf), axis=0)

        def hess(x):
            return np.diag(H)

        res = optimize.minimize(f, start, method="trust-exact", jac=jac, hess=hess,
                                options={"gtol": gtol, "initial_trust_radius": 1e150,
                                         "max_trust_radius": 1e151, "maxiter": 200})
        if not res.success:
            raise RuntimeError(f"ftml argmin: trust-exact failed: {res.message}")
        return res.x

    def floor(x):
        # the rounding floor of evaluating jac at x: |terms| summed, times eps and the count
        terms = np.sum(np.abs(Gf) + np.abs(Sf) * (np.abs(x) + np.abs(Wf)), axis=0)
        return 8.0 * (G.shape[0] + 2) * _EPS * float(np.linalg.norm(terms)) + 1e-300

    # A first solve to a loose tolerance locates the minimiser; the second, from there, stops at
    # the rounding floor of the gradient at the minimiser (a tighter gtol cannot be met).
    grad0 = float(np.linalg.norm(np.sum(Gf + Sf * (x0 - Wf), axis=0)))
    x1 = solve(x0, max(floor(x0), 1e-6 * grad0))
    return solve(x1, floor(x1)).reshape(shape)


def ftml_error_scale(G_hist, w_hist, *, lrs, ts, beta1, beta2, epsilon):
    """``S/d_i`` per coordinate: the magnitudes of the terms of ``z_i`` (with the cancellation in
    each ``sigma_j = d_j - beta1*d_{j-1}``) over the curvature ``d_i``."""
    G, W, d, sig, disc = _ftml_terms(G_hist, w_hist, lrs=lrs, ts=ts, beta1=beta1, beta2=beta2,
                                     epsilon=epsilon)
    S = np.sum(disc * ((1 - beta1) * np.abs(G) + (d[1:] + beta1 * d[:-1]) * np.abs(W)), axis=0)
    return S / d[-1]


def ftml_argmin_derivative_free(G_hist, w_hist, *, lrs, ts, beta1, beta2, epsilon):
    """Cross-check: minimise ``Psi_i`` with Powell's method from values only (about 1e-8; small,
    well-scaled cases). The value is taken relative to the starting point (``Psi(x) - Psi(x0)``,
    evaluated without forming the large constant terms), so that its rounding noise does not
    hide decreases of the size the tolerance asks for."""
    G, W, d, sig, disc = _ftml_terms(G_hist, w_hist, lrs=lrs, ts=ts, beta1=beta1, beta2=beta2,
                                     epsilon=epsilon)
    shape = G.shape[1:]
    x0 = W[-1].ravel().copy()
    Wf = W.reshape(W.shape[0], -1)
    Gf = (disc * (1 - beta1) * G).reshape(G.shape[0], -1)
    Sf = (disc * sig).reshape(sig.shape[0], -1)

    def f(x):
        dx = x - x0
        return float(np.sum(Gf * dx) + np.sum(Sf * dx * (0.5 * dx + (x0 - Wf))))

    res = optimize.minimize(f, x0, method="Powell",
                            options={"xtol": 1e-12, "ftol": 1e-16, "maxiter": 100000,
                                     "maxfev": 1000000})
    if not res.success:  # pragma: no cover
        raise RuntimeError(f"ftml derivative-free argmin failed: {res.message}")
    return res.x.reshape(shape)


def ftml_argmin_trajectory(w0, grads, *, lrs, beta1, beta2, epsilon, t0=0, wd=0.0,
                           rescale_grad=1.0, clip_gradient=None, convention="mxnet",
                           weights=None, discount_prox=True):
    """The FTML weights ``w_2..w_{T+1}`` as successive argmins from the raw gradients (see
    :func:`ftrl_argmin_trajectory` for ``weights``). Step ``j`` (1-based) has update count
    ``t0 + j`` and learning rate ``lrs[j-1]`` (or the scalar ``lrs``)."""
    grads = np.asarray(grads, dtype=np.float64)
    T = grads.shape[0]
    lrs = np.broadcast_to(np.asarray(lrs, dtype=np.float64), (T,))
    w = np.array(w0, dtype=np.float64)
    Gs, Ws, out = [], [], []
    for j in range(T):
        wj = w if weights is None else np.asarray(weights[j], dtype=np.float64)
        G, _ = convention_gradient("ftml", grads[j], wj, convention=convention, wd=wd,
                                   rescale_grad=rescale_grad, clip_gradient=clip_gradient)
        Gs.append(G)
        Ws.append(wj)
        w = ftml_argmin(np.array(Gs), np.array(Ws), lrs=lrs[:j + 1],
                        ts=np.arange(t0 + 1, t0 + j + 2), beta1=beta1, beta2=beta2,
                        epsilon=epsilon, discount_prox=discount_prox)
        out.append(w)
    return np.array(out), np.array(Gs), np.array(Ws)
