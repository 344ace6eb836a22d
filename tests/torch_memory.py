"""The address check of ``toolkit.torch``'s kernel launches, and the random walks of the fuzz
test (``tests/test_torch_memory.py``), which runs them in a subprocess: ``python
tests/torch_memory.py SEED [SEED ...]`` runs one walk per seed with every launch checked, and
prints ``walked N`` at the end.

The check (:func:`checked_launches`) wraps :func:`toolkit.torch.rule_table.launch_addressed` and
:func:`toolkit.torch.rule_table.launch_addressed_mp`, the places ``toolkit.torch`` hands addresses
to a kernel: before each launch, every address of every row, with the row's size and its
column's dtype (the launch's; a multi-precision launch's float32 master and states, and its
gradient and weight of the launch's ``weight`` type), must lie inside the storage of a tensor
that is alive at that moment and has that dtype (found through ``gc``, not through anything the
optimizer keeps). Heap corruption does not always crash; this fails at the first bad row.
"""
from __future__ import annotations

import contextlib
import gc
import random
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch

import toolkit.torch
from toolkit.torch import rule_table

_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                 np.dtype(np.float16): torch.float16}


class BadAddress(AssertionError):
    pass


def live_storages():
    """``(start, end, dtype)`` of the storage of every live CPU tensor that ``gc`` tracks
    (outside its permanent generation: :func:`main` freezes what the imports made, so that a
    check walks the few thousand objects of the walks instead of torch's 400,000)."""
    out = []
    tensor = torch.Tensor
    for o in [o for o in gc.get_objects() if isinstance(o, tensor)]:
        if o.layout == torch.strided and o.is_cpu:
            try:
                storage = o.untyped_storage()
                start = storage.data_ptr()
            except RuntimeError:  # no memory of its own (torch.compile's fake tensors): none
                continue          # of the optimizer's addresses can lie in it

            out.append((start, start + storage.nbytes(), o.dtype))
    return out


def check_rows(dtype, ptrs, sizes, columns=None):
    """Raise :class:`BadAddress` unless every address in ``ptrs`` (rows of addresses, 0 for
    none) spans ``sizes[k]`` elements of ``dtype`` inside a live tensor of that dtype;
    ``columns``: a torch dtype per column instead."""
    ptrs = np.asarray(ptrs)
    if columns is None:
        columns = [_TORCH_DTYPES[np.dtype(dtype)]] * (ptrs.shape[1] if ptrs.ndim == 2 else 0)
    storages = live_storages()
    live = {want: [(s, e) for s, e, d in storages if d == want] for want in set(columns)}
    for k, row in enumerate(ptrs):
        for c, ptr in enumerate(row.tolist()):
            if ptr == 0:
                continue
            want = columns[c]
            nbytes = int(sizes[k]) * want.itemsize
            if not any(s <= ptr and ptr + nbytes <= e for s, e in live[want]):
                raise BadAddress(f"row {k}, column {c}: {nbytes} bytes at {ptr:#x} are in no "
                                 f"live {want} tensor")


@pytest.fixture
def only_this_test():
    """Before the test, what earlier tests left goes to gc's permanent generation (as
    collection's objects already did: ``tests/conftest.py``), so the address check walks the
    objects of this test only: a worker that compiled hundreds of kernels holds a large heap.
    A tensor made before the test (an earlier test's, a module-scoped fixture's) is then found
    by no check: a launch on one would fail it, never pass it wrongly."""
    gc.freeze()
    yield


@contextlib.contextmanager
def checked_launches():
    """Within the block every ``toolkit.torch`` launch is checked first (:func:`check_rows`);
    yields a list that counts the launches checked."""
    real, real_mp = rule_table.launch_addressed, rule_table.launch_addressed_mp
    seen = []

    def checked(factory, dtype, ptrs, sizes, table, planned=None):
        check_rows(dtype, ptrs, sizes)
        seen.append(len(sizes))
        return real(factory, dtype, ptrs, sizes, table, planned)

    def checked_mp(factory, ptrs, sizes, table, weight, planned=None):
        half = {"bfloat16": torch.bfloat16, "float16": torch.float16}[weight]
        n = np.asarray(ptrs).shape[1]
        check_rows(None, ptrs, sizes, [torch.float32, half] + [torch.float32] * (n - 3) + [half])
        seen.append(len(sizes))
        return real_mp(factory, ptrs, sizes, table, weight, planned)

    rule_table.launch_addressed, rule_table.launch_addressed_mp = checked, checked_mp
    try:
        yield seen
    finally:
        rule_table.launch_addressed, rule_table.launch_addressed_mp = real, real_mp


# --- the random walks -----------------------------------------------------------------------
def _optimizer(rng):
    """A registered optimizer (its class name) and the keywords of its recorded configuration
    (what its golden files and tests use), drawn from the registry."""
    from toolkit.optimizer import registry, specs
    names = sorted(specs())
    name = names[rng.randrange(len(names))]
    kwargs = {**specs()[name].record, **specs()[name].fixed}
    return registry()[name].__name__, kwargs


#: what a step may refuse with: a changed parameter or state it cannot go on with
REFUSALS = (TypeError, ValueError)


def _params(rng, dtype=torch.float32, matrix=False):
    """2 to 4 parameters; with ``matrix`` (an optimizer of matrices only, ``Spec.matrix``:
    torch.optim.Muon refuses anything else as it is given one, and so does the toolkit's) 2-D
    ones of the same sizes."""
    shapes = [(4, 5), (4, 1), (2, 12), (6, 1)] if matrix else [(4, 5), (4,), (2, 3, 2, 2), (6,)]
    return [torch.nn.Parameter(torch.randn(*s).to(dtype)) for s in shapes[:rng.randint(2, 4)]]


def _grads(params, rng):
    for p in params:
        if rng.random() < 0.85:
            p.grad = torch.randn(p.shape, dtype=p.dtype) if p.dtype.is_floating_point else None
        else:
            p.grad = None


def _pick(params, rng):
    return params[rng.randrange(len(params))]


def _slot(opt, p, rng):
    entry = opt.state.get(p)
    if not entry:
        return None
    names = [n for n in entry if n != "step" and isinstance(entry[n], torch.Tensor)]
    return names[rng.randrange(len(names))] if names else None


def _op_weight(opt, group, rng):
    p = _pick(group, rng)
    kind = rng.choice(["double", "float", "half", "grow", "shrink", "clone", "set_", "resize_",
                       "channels_last", "transpose", "int"])
    with torch.no_grad():
        if kind == "double":
            p.data = p.data.double()
        elif kind == "float":
            p.data = p.data.float()
        elif kind == "half":
            p.data = p.data.half()
        elif kind == "grow":
            p.data = torch.randn(p.numel() + rng.randint(1, 64), dtype=p.dtype)
        elif kind == "shrink":
            p.data = p.data.flatten()[: max(1, p.numel() // 2)].clone()
        elif kind == "clone":
            p.data = p.data.clone()
        elif kind == "set_":
            p.set_(torch.randn(p.shape, dtype=p.dtype))
        elif kind == "resize_":
            p.data.resize_(p.numel() * rng.randint(2, 5))
        elif kind == "channels_last" and p.dim() == 4:
            p.data = p.data.contiguous(memory_format=torch.channels_last)
        elif kind == "transpose" and p.dim() == 2:
            p.data = p.data.t()
        elif kind == "int":
            p.data = p.data.view(torch.int32) if p.dtype == torch.float32 else \
                p.data.view(torch.int16) if p.dtype == torch.bfloat16 else p.data
    return f"{kind} {tuple(p.shape)} {p.dtype}"


def _op_state(opt, group, rng):
    p = _pick(group, rng)
    slot = _slot(opt, p, rng)
    kind = rng.choice(["zeros", "wrong_shape", "wrong_dtype", "del_slot", "del", "reset",
                       "clear", "set_", "data", "shrink", "grow", "not_a_tensor", "plain_dict"])
    if slot is None and kind not in ("reset", "del", "clear"):
        return f"{kind}: no state"
    with torch.no_grad():
        if kind == "zeros":
            opt.state[p][slot] = torch.zeros_like(opt.state[p][slot])
        elif kind == "wrong_shape":
            opt.state[p][slot] = torch.zeros(3)
        elif kind == "wrong_dtype":
            opt.state[p][slot] = opt.state[p][slot].double()
        elif kind == "del_slot":
            del opt.state[p][slot]
        elif kind == "del":
            opt.state.pop(p, None)
        elif kind == "reset":
            opt.state = defaultdict(dict)
        elif kind == "clear":
            opt.state.clear()
        elif kind == "set_":
            t = opt.state[p][slot]
            t.set_(torch.randn(t.shape, dtype=t.dtype).abs())
        elif kind == "data":
            t = opt.state[p][slot]
            t.data = torch.zeros(t.numel() + 7, dtype=t.dtype)
        elif kind == "shrink":
            opt.state[p][slot].resize_(1)
        elif kind == "grow":
            opt.state[p][slot].resize_(10_000)
        elif kind == "not_a_tensor":
            opt.state[p][slot] = 0.0
        elif kind == "plain_dict":
            opt.state[p] = {n: v.clone() if isinstance(v, torch.Tensor) else v
                            for n, v in opt.state[p].items()}
    return f"state {kind} {slot}"


def _op_group(opt, params, rng):
    kind = rng.choice(["swap", "replace", "load", "add_group", "del_group"])
    if kind == "swap" and len(params) > 1:
        i, j = rng.sample(range(len(params)), 2)
        params[i], params[j] = params[j], params[i]
    elif kind == "replace":
        i = rng.randrange(len(params))
        params[i] = torch.nn.Parameter(torch.randn(params[i].shape))
    elif kind == "load":
        opt.load_state_dict(opt.state_dict())
    elif kind == "add_group":
        extra = torch.nn.Parameter(torch.randn(rng.randint(1, 9)))
        extra.grad = torch.randn(extra.shape)
        opt.add_param_group({"params": [extra]})
    elif kind == "del_group" and len(opt.param_groups) > 1:
        del opt.param_groups[rng.randrange(1, len(opt.param_groups))]
    return kind


def walk(seed, steps=40, log=None):
    """One random walk: an optimizer over a few parameters, steps interleaved with changes to
    the parameters, the state and the groups. A step either runs or refuses (``REFUSALS``);
    anything else raises. Every fourth seed's parameters are bfloat16 (``multi_precision``)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    name, kwargs = _optimizer(rng)
    matrix = getattr(toolkit.torch, name).toolkit_class.spec.matrix
    if seed % 4 == 3:
        params = _params(rng, torch.bfloat16, matrix)
        kwargs = {**kwargs, "multi_precision": True}
    else:
        params = _params(rng, matrix=matrix)
    opt = getattr(toolkit.torch, name)(params, **kwargs)
    # the train/eval switch (Schedule-Free AdamW): in train mode, and moved to eval and back
    # before some steps (a draw of its own walks only: the others' walks stay as they were)
    switch = callable(getattr(opt, "train", None))
    if switch:
        opt.train()
    params = opt.param_groups[0]["params"]  # the group's own list, which the walk changes
    log = [] if log is None else log
    log.append(f"{name}({kwargs}) over {[tuple(p.shape) for p in params]}")
    for _ in range(steps):
        r = rng.random()
        stepping = r < 0.55
        try:
            if stepping:
                if switch and rng.random() < 0.3:
                    log.append("eval, train")
                    opt.eval()
                    opt.train()
                log.append("step")
                _grads(params, rng)
                opt.step()
            elif r < 0.75:
                log.append(_op_weight(opt, params, rng))
            elif r < 0.93:
                log.append(_op_state(opt, params, rng))
            else:
                log.append(_op_group(opt, params, rng))
        except REFUSALS as e:  # the step refused, or torch refused the change
            log.append(f"  refused: {type(e).__name__}: {str(e)[:160]}")
        except RuntimeError as e:  # torch refusing the user's own change (never a step)
            if stepping:
                raise
            log.append(f"  torch refused the change: {str(e)[:160]}")
    return log


def main(seeds):
    # what the imports made goes to gc's permanent generation, which gc.get_objects() leaves
    # out: no tensor the walks make is in it, so the check is as strict and 50x faster
    gc.collect()
    gc.freeze()
    with checked_launches() as seen:
        for seed in seeds:
            log = []
            try:
                walk(seed, log=log)
            except BaseException:
                print(f"walk {seed} failed after:\n  " + "\n  ".join(log), flush=True)
                raise
    print(f"walked {len(seeds)} ({len(seen)} launches checked)", flush=True)


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]])
