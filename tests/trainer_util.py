"""Shared helpers of the Trainer tests (CPU and CUDA): a Trainer and its per-parameter twin."""
from __future__ import annotations

import numpy as np

from toolkit import Parameter, Trainer, optimizer
from toolkit.backends import arrays, launches
from toolkit.optimizer import spec_of, specs
from optim_db import launch_kind

SHAPES = [(3, 4), (5,), (2, 2, 3), (1,), (7,)]
#: the parameters of an optimizer that takes matrices only (GroupAdaGrad: one history value per
#: row), one per entry of SHAPES; (2, 19) is wider than a block of the simulator's row kernel
#: (8 threads), so its threads take several columns
MATRIX_SHAPES = [(3, 4), (5, 1), (2, 19), (1, 3), (4, 2)]

#: one configuration per optimizer x state layout (``Spec.trainer``, in its order), optimizers
#: sorted by name; the test cases add both conventions where they exist (:func:`conventions`)
CONFIGS = [(name, dict(kw)) for name, spec in specs(oracle=True).items() for kw in spec.trainer]


def shapes_for(name):
    """The parameters' shapes for optimizer ``name``: SHAPES, or MATRIX_SHAPES for one that
    takes matrices only (``Spec.matrix``)."""
    return MATRIX_SHAPES if spec_of(name).matrix else SHAPES


def conventions(name):
    """The conventions the optimizer's kernels implement (``Spec.conventions``)."""
    return tuple(spec_of(name).conventions)


def _exists(cfg, conv):
    """Whether the configuration exists under the convention (AMSGrad: not under "mxnet")."""
    try:
        optimizer.create(cfg[0], convention=conv, **cfg[1])
    except ValueError:
        return False
    return True


#: (configuration, convention) for each configuration of the specs under each convention that
#: takes it
CASES = [(cfg, conv) for cfg in CONFIGS for conv in conventions(cfg[0]) if _exists(cfg, conv)]


def config_id(cfg):
    name, kw = cfg
    return name + "".join(f"-{k}={v}" for k, v in kw.items())


#: per-parameter multipliers: p0 and p2 share theirs, p1 and p3 theirs, p4 has its own (a
#: Trainer plans a scalar-only step once per distinct (t, lr, wd): shared and distinct rows)
LR_MULT = (1.0, 1.25, 1.0, 1.25, 1.5)
WD_MULT = (0.0, 0.5, 0.0, 0.5, 1.0)
#: at step 1 parameter 2 gets no gradient and is skipped (ignore_stale_grad): from then on its
#: count t differs from p0's, with which it shares its multipliers
SKIP = {1: (2,)}


def expected_calls(name, kw, convention):
    """``(segmented calls over the 3 steps, kernel calls of the last step)`` of a
    :func:`twin_run`: one segmented call per step, and an optimizer with a first pass
    (``Spec.first_pass``: LARS and LBSGD's 'lars' their norms, LAMB its moments and norms) adds
    that one reduction call.
    LBSGD with batch_scale (MXNet's accumulation): after the skip, p2 finishes its batch while
    the others start a new one; members in different phases run different rules, one call each,
    so the last step makes no segmented call and one call per member (docs/trainer.md).
    Muon's matrix step (a launch kind outside ``launches.SEGMENTED``: its products are per
    matrix) makes no segmented call either: one launch per member.
    GroupAdaGrad (a row rule, its history laid out per row) runs one segmented call too, and so
    does Adafactor (a factored step: its statistics, sums and update are passes of one call)."""
    if name == "lbsgd" and kw.get("batch_scale", 1) > 1 and convention == "mxnet":
        return 2, len(SHAPES)
    opt = optimizer.create(name, convention=convention, **kw)
    if launch_kind(opt) not in launches.SEGMENTED:
        return 0, len(shapes_for(name))
    first_pass = spec_of(name).first_pass_reads(opt)
    return 3, 1 + (first_pass > 0 and not spec_of(name).tensor)


def twin_run(name, kw, convention, dtype="float32", mp=False, steps=3, device="cpu",
             seed=0, batch_size=4, to_device=None):
    """Run a Trainer and the per-parameter ``update_multi_precision`` calls it replaces on the
    same gradients (skipping :data:`SKIP`); return ``(trainer, params, [(weight, state) of the
    twin], twin)``."""
    rng = np.random.default_rng(seed)
    shapes = shapes_for(name)
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    wd = spec_of(name).fixed.get("wd", 0.01)  # GroupAdaGrad refuses weight decay
    common = dict(learning_rate=0.05, wd=wd, rescale_grad=2.0, clip_gradient=3.0,
                  convention=convention, multi_precision=mp, **kw)
    params = [Parameter(f"p{i}_weight", init=a, dtype=dtype, lr_mult=LR_MULT[i],
                        wd_mult=WD_MULT[i], device=device) for i, a in enumerate(init)]
    trainer = Trainer(params, name, dict(common))
    twin = optimizer.create(name, **common)
    twin.param_dict = {i: p for i, p in enumerate(params)}
    put = to_device or (lambda a: a.copy())
    ws = [put(a) for a in init]
    ss = [twin.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
    for step in range(steps):
        grads = [rng.standard_normal(s).astype(dtype) for s in shapes]
        skip = SKIP.get(step, ())
        for i, (p, g) in enumerate(zip(params, grads)):
            if i not in skip:
                p.set_grad(g)
        trainer.step(batch_size, ignore_stale_grad=bool(skip))
        twin.rescale_grad = 2.0 / batch_size
        for i, g in enumerate(grads):
            if i not in skip:
                twin.update_multi_precision(i, ws[i], put(g), ss[i])
    return trainer, params, list(zip(ws, ss)), twin


def host_leaves(state):
    if state is None:
        return []
    if isinstance(state, tuple):
        return [x for s in state for x in host_leaves(s)]
    return [arrays.to_host(state)]
