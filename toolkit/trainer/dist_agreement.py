"""What the ranks of a distributed Trainer must hold alike, and how a difference is told: each
rank's description compared setting by setting (:func:`differences`), the settings a step's
numbers depend on (:func:`step_settings`) and their 8-byte digest, which every step compares
(:func:`settings_digest`).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np


def _ranks(ranks):
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def same(a, b):
    """Whether two JSON-able values are equal as JSON."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def spread(values):
    """``"0.1 on ranks 0, 2; 0.2 on rank 1"``: each distinct value (JSON-able) and its ranks."""
    seen = {}
    for r, v in enumerate(values):
        seen.setdefault(json.dumps(v, sort_keys=True), (v, []))[1].append(r)
    return "; ".join(f"{v!r} on {_ranks(rs)}" for v, rs in seen.values())


def differences(descs):
    """What differs between the ranks' descriptions, each naming the setting and the ranks."""
    out = []
    keys = sorted(set().union(*descs))
    for key in keys:
        values = [d.get(key) for d in descs]
        if key == "params" or all(same(v, values[0]) for v in values):
            continue
        if key == "hyperparameters" and all(isinstance(v, dict) for v in values):
            for name in sorted(set().union(*values)):
                sub = [v.get(name, "(not set)") for v in values]
                if any(not same(x, sub[0]) for x in sub):
                    out.append(f"the optimizer's {name} differs: {spread(sub)}")
            continue
        out.append(f"{key} differs: {spread(values)}")
    plists = [d.get("params", []) for d in descs]
    if any(len(pl) != len(plists[0]) for pl in plists):
        out.append(f"the number of parameters differs: {spread([len(pl) for pl in plists])}")
    for k, row in enumerate(zip(*plists)):
        if all(same(x, row[0]) for x in row):
            continue
        for field in sorted(set().union(*row)):
            vals = [x.get(field) for x in row]
            if any(not same(v, vals[0]) for v in vals):
                out.append(f"parameter {k} ({row[0].get('name')!r} on rank 0): {field} differs: "
                           f"{spread(vals)}")
    return out


def step_settings(trainer):
    """What a step's numbers depend on beside the gradients, as one JSON-able dict: the
    optimizer's settings, each parameter's multipliers (they may change after construction) and
    whether the non-finite guard is on."""
    out = {f"the optimizer's {k}": v for k, v in trainer.optimizer.settings().items()}
    for p in trainer.parameters:
        out[f"parameter {p.name!r}'s lr_mult"] = float(p.lr_mult)
        out[f"parameter {p.name!r}'s wd_mult"] = float(p.wd_mult)
    out["skip_nonfinite"] = bool(trainer.skipping_nonfinite)
    return out


def settings_digest(trainer):
    """8 bytes that differ when :func:`step_settings` differs (the per-step check)."""
    text = json.dumps(step_settings(trainer), sort_keys=True).encode("utf-8")
    return np.frombuffer(hashlib.blake2b(text, digest_size=8).digest(), np.uint8)
