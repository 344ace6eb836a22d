"""optax (on JAX) for the audit: its optimizers that are one of the toolkit's, in float32 and
float64 (float64 in a subprocess with ``JAX_ENABLE_X64=1``: JAX's x64 switch is process-wide).

optax names no MXNet counterparts, so the mapping is a table (:data:`TABLE`; a test checks every
registry name in it). MXNet's names -> optax's: ``learning_rate``, ``(beta1, beta2)`` = ``b1,
b2``, ``epsilon`` = ``eps``, RMSProp's ``gamma1`` = ``decay`` and ``gamma2`` = ``momentum``
(centered), AdaDelta's ``rho``, AdaGrad's and LARS's ``eps``, LARS's ``eta`` =
``trust_coefficient``, Signum's ``momentum`` = ``beta``, AdamW's ``learning_rate`` =
``eta*learning_rate``, ``wd`` = ``weight_decay`` where optax has one (adamw, adadelta, lamb,
lars, lion, contrib.schedule_free_adamw, contrib.schedule_free_sgd; pinned to 0 elsewhere:
optax's sgd, adam, adagrad, rmsprop, adamax, nadam, radam, signum, adabelief and contrib.adopt
have no weight decay). Pinned: ``rescale_grad=1``, ``clip_gradient=None`` (optax chains ``clip``
separately), AdaGrad's ``initial_accumulator_value=0`` (MXNet's accumulator starts at 0; optax's
default 0.1 is another algorithm), RMSProp's ``clip_weights=None``, LAMB without trust-ratio
bounds and with bias correction, and NAdam's ``schedule_decay=1e4``: optax's ``nadam`` is
Dozat's update with a constant momentum ``mu_t = beta1``, which is MXNet's schedule ``beta1*(1 -
0.5*0.96^(t*schedule_decay))`` once ``0.96^schedule_decay`` is below float64's resolution,
Schedule-Free AdamW's ``r=0`` and ``lr_bias_correction=False`` (optax's ``schedule_free_adamw``
has no ``r`` and corrects ``v`` under the root), and Schedule-Free SGD's ``r=0``
(``schedule_free_sgd``, whose ``b1`` is the toolkit's ``momentum``); their ``warmup_steps`` is
None for the toolkit's 0; Adafactor's ``epsilon2=1e-3`` (optax's parameter scale has that floor)
and ``wd=0`` (optax's ``weight_decay_rate`` is not multiplied by the learning rate). Hyperparameters are handed to optax as Python floats, as users do (JAX
rounds them to the array's precision).
"""
from __future__ import annotations

import numpy as np

from . import Adapter, Framework

#: what optax's optimizers lack, pinned for every adapter
FIXED = {"rescale_grad": 1.0, "clip_gradient": None}

#: (label, registry name, pinned hyperparameters, ``build(optax, lr, wd, own)``)
TABLE = (  # checked against the registry by tests/test_audit.py::test_every_adapter_names_a_registered_optimizer_and_valid_fixed_values
    ("optax.sgd(learning_rate)", "sgd", {"wd": 0.0, "momentum": 0.0},
     lambda o, lr, wd, h: o.sgd(lr)),
    ("optax.sgd(learning_rate, momentum)", "sgd", {"wd": 0.0},
     lambda o, lr, wd, h: o.sgd(lr, momentum=h["momentum"])),
    ("optax.sgd(learning_rate, momentum, nesterov=True)", "nag", {"wd": 0.0},
     lambda o, lr, wd, h: o.sgd(lr, momentum=h["momentum"], nesterov=True)),
    ("optax.adam", "adam", {"wd": 0.0},
     lambda o, lr, wd, h: o.adam(lr, b1=h["beta1"], b2=h["beta2"], eps=h["epsilon"])),
    ("optax.adamw", "adamw", {},
     lambda o, lr, wd, h: o.adamw(h["eta"] * lr, b1=h["beta1"], b2=h["beta2"],
                                  eps=h["epsilon"], weight_decay=wd)),
    ("optax.adagrad(initial_accumulator_value=0)", "adagrad", {"wd": 0.0},
     lambda o, lr, wd, h: o.adagrad(lr, initial_accumulator_value=0.0, eps=h["eps"])),
    ("optax.rmsprop", "rmsprop", {"wd": 0.0, "centered": False, "clip_weights": None},
     lambda o, lr, wd, h: o.rmsprop(lr, decay=h["gamma1"], eps=h["epsilon"])),
    ("optax.rmsprop(centered=True, momentum)", "rmsprop",
     {"wd": 0.0, "centered": True, "clip_weights": None},
     lambda o, lr, wd, h: o.rmsprop(lr, decay=h["gamma1"], eps=h["epsilon"], centered=True,
                                    momentum=h["gamma2"])),
    ("optax.adadelta", "adadelta", {},
     lambda o, lr, wd, h: o.adadelta(lr, rho=h["rho"], eps=h["epsilon"], weight_decay=wd)),
    # the oracle draws no epsilon for Adamax: optax's default 1e-8 (the pytorch convention's)
    ("optax.adamax", "adamax", {"wd": 0.0},
     lambda o, lr, wd, h: o.adamax(lr, b1=h["beta1"], b2=h["beta2"], eps=1e-8)),
    ("optax.nadam", "nadam", {"wd": 0.0, "schedule_decay": 1e4},
     lambda o, lr, wd, h: o.nadam(lr, b1=h["beta1"], b2=h["beta2"], eps=h["epsilon"])),
    ("optax.lamb", "lamb", {"lower_bound": None, "upper_bound": None, "bias_correction": True},
     lambda o, lr, wd, h: o.lamb(lr, b1=h["beta1"], b2=h["beta2"], eps=h["epsilon"],
                                 weight_decay=wd)),
    ("optax.lars(weight_decay=0)", "lars", {"wd": 0.0},
     lambda o, lr, wd, h: o.lars(lr, trust_coefficient=h["eta"], eps=h["eps"],
                                 momentum=h["momentum"])),
    ("optax.lars(weight_decay)", "lars", {},
     lambda o, lr, wd, h: o.lars(lr, weight_decay=wd, trust_coefficient=h["eta"], eps=h["eps"],
                                 momentum=h["momentum"])),
    ("optax.sign_sgd", "signum", {"wd": 0.0, "momentum": 0.0, "wd_lh": 0.0},
     lambda o, lr, wd, h: o.sign_sgd(lr)),
    ("optax.signum", "signum", {"wd": 0.0, "wd_lh": 0.0},
     lambda o, lr, wd, h: o.signum(lr, beta=h["momentum"])),
    # optax.lion's weight_decay is Lion's decoupled lambda (times the learning rate), the wd of
    # the paper convention
    ("optax.lion", "lion", {},
     lambda o, lr, wd, h: o.lion(lr, b1=h["beta1"], b2=h["beta2"], weight_decay=wd)),
    # optax.radam: no weight decay; rectified from rho_t >= 5, epsilon on the corrected root
    ("optax.radam", "radam", {"wd": 0.0, "decoupled_weight_decay": False},
     lambda o, lr, wd, h: o.radam(lr, b1=h["beta1"], b2=h["beta2"], eps=h["epsilon"])),
    # optax.adabelief: Algorithm 2 without weight decay or rectification; its eps_root is the
    # epsilon summed into s, its eps the one added to the root (both the paper's epsilon)
    ("optax.adabelief", "adabelief", {"wd": 0.0, "weight_decouple": False, "fixed_decay": False,
                                      "rectify": False, "degenerated_to_sgd": True},
     lambda o, lr, wd, h: o.adabelief(lr, b1=h["beta1"], b2=h["beta2"], eps=h["epsilon"],
                                      eps_root=h["epsilon"])),
    # optax.rprop: no weight decay (nor has Rprop); its step-size bounds are keywords
    ("optax.rprop", "rprop", {},
     lambda o, lr, wd, h: o.rprop(lr, eta_minus=h["etaminus"], eta_plus=h["etaplus"],
                                  min_step_size=h["step_size_min"],
                                  max_step_size=h["step_size_max"])),
    # optax.contrib.adopt: no weight decay; its clip is the paper's (t-1)^(1/4) (use_clipping)
    ("optax.contrib.adopt", "adopt", {"wd": 0.0, "decouple": False},
     lambda o, lr, wd, h: o.contrib.adopt(lr, b1=h["beta1"], b2=h["beta2"], eps=h["epsilon"],
                                          use_clipping=h["use_clipping"])),
    # optax.contrib.schedule_free_adamw: the authors' AdamWScheduleFree (scale_by_rms's bias
    # correction inside the root, lr_bias_correction=False), weight decay at y, no r (its
    # averaging weight is max_lr**weight_lr_power alone); no warmup is warmup_steps=None (its
    # docs ask a positive warmup_steps: 0 builds a schedule that is 0 at every step)
    ("optax.contrib.schedule_free_adamw", "adamwschedulefree",
     {"r": 0.0, "lr_bias_correction": False},
     lambda o, lr, wd, h: o.contrib.schedule_free_adamw(
         lr, warmup_steps=h["warmup_steps"] or None, b1=h["beta1"], b2=h["beta2"],
         eps=h["epsilon"], weight_decay=wd, weight_lr_power=h["weight_lr_power"])),
    # optax.contrib.schedule_free_sgd: the authors' SGDScheduleFree (optax's sgd inside
    # schedule_free, b1 the interpolation's momentum), weight decay added to the gradient at y
    # (add_decayed_weights before sgd), no r; warmup_steps None for none, as for AdamW's row
    ("optax.contrib.schedule_free_sgd", "sgdschedulefree", {"r": 0.0},
     lambda o, lr, wd, h: o.contrib.schedule_free_sgd(
         lr, warmup_steps=h["warmup_steps"] or None, b1=h["momentum"], weight_decay=wd,
         weight_lr_power=h["weight_lr_power"])),
    # optax.adafactor: Algorithms 4 and 5's statistics (epsilon added to g^2, the paper's
    # "paper" convention) but factored only where both of a weight's two largest dimensions are
    # >= min_dim_size_to_factor (128: no weight the oracle draws), the step lr*max(1e-3,
    # RMS(w)) without the relative step's cap; its weight decay (not times lr) pinned off
    ("optax.adafactor", "adafactor", {"wd": 0.0, "epsilon2": 1e-3},
     lambda o, lr, wd, h: o.adafactor(lr, decay_rate=-h["beta2_decay"],
                                      clipping_threshold=h["clip_threshold"],
                                      eps=h["epsilon1"])),
    # optax.contrib.muon: its momentum an EMA with Adam's bias correction (which the
    # iteration's normalisation removes, but not from the Nesterov mix), |X|_F + eps (the
    # "paper" convention's), the step lr*O with no shape scaling; its weight decay decoupled
    # (add_decayed_weights before the learning rate), as the toolkit's wd
    ("optax.contrib.muon", "muon", {"adjust_lr": None},
     lambda o, lr, wd, h: o.contrib.muon(
         lr, ns_coeffs=tuple(h["ns_coefficients"]), ns_steps=h["ns_steps"],
         beta=h["momentum"], eps=h["epsilon"], weight_decay=wd, nesterov=h["nesterov"])),
)


def make_step_of(build, dtype):
    """``make_step`` around the optax transformation ``build(optax, lr, wd, own)`` on a JAX
    array of ``dtype`` (float64 needs JAX's x64 switch: this process's ``JAX_ENABLE_X64``)."""
    import jax.numpy as jnp
    import optax

    def make_step(weight0, learning_rate, wd, rescale_grad, clip_gradient, **own):
        tx = build(optax, learning_rate, wd, own)
        box = {"params": jnp.asarray(np.asarray(weight0), dtype=dtype)}
        if box["params"].dtype != np.dtype(dtype):
            raise RuntimeError(f"JAX made a {box['params'].dtype} array for {dtype}: float64 "
                               "needs JAX_ENABLE_X64=1 (the audit sets it in a subprocess)")
        box["state"] = tx.init(box["params"])

        def step(grad):
            g = jnp.asarray(np.asarray(grad), dtype=dtype)
            updates, box["state"] = tx.update(g, box["state"], box["params"])
            box["params"] = optax.apply_updates(box["params"], updates)
            return np.asarray(box["params"])
        return step
    return make_step


def adapters():
    return [Adapter(label=label, optimizer=name, fixed={**FIXED, **fixed},
                    make=lambda dtype, b=build: make_step_of(b, dtype))
            for label, name, fixed, build in TABLE]


def versions():
    import jax
    import jaxlib
    import optax
    return {"optax": optax.__version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__}


def env(dtype):
    """float64 needs JAX's x64 switch, set before JAX is imported: a fresh process."""
    return {"JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu"} if dtype == "float64" else None


FRAMEWORK = Framework(name="optax", module="optax", adapters=adapters, versions=versions,
                      env=env, install="pip install 'mxopt-toolkit[audit]' (optax and JAX's "
                                       "CPU build)")
