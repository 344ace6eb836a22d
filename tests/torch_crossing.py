"""A torch optimizer stepped once and its state_dict loaded into a toolkit.torch twin (the
crossing tests of the flags torch spells itself: amsgrad, decoupled_weight_decay)."""
from __future__ import annotations


def loaded_from_torch(torch_cls, mine_cls, **kw):
    """``(p, q, theirs, mine)``: ``theirs = torch_cls(p, lr=1e-2, **kw)`` after one step on
    gradient ones, ``mine = mine_cls(q, lr=1e-2, weight_decay=...)`` over a copy of the initial
    float64 parameter with ``theirs.state_dict()`` loaded (``weight_decay`` only: the flags must
    come from the state_dict)."""
    import torch
    p = [torch.nn.Parameter(torch.linspace(-1, 1, 3, dtype=torch.float64))]
    q = [torch.nn.Parameter(p[0].detach().clone())]
    theirs = torch_cls(p, lr=1e-2, **kw)
    p[0].grad = torch.ones(3, dtype=torch.float64)
    theirs.step()
    mine = mine_cls(q, lr=1e-2, weight_decay=kw.get("weight_decay", 0))
    mine.load_state_dict(theirs.state_dict())
    return p, q, theirs, mine
