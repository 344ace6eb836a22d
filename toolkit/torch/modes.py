"""``train()`` and ``eval()`` of a ``toolkit.torch`` optimizer whose weight moves between two
points (Schedule-Free AdamW and SGD: the steps take gradients at ``y``, one evaluates the
average ``x``), as the authors' ``schedulefree`` optimizers have them.

:func:`toolkit.torch.optimizer_class` adds :class:`TrainEval` to the class of every toolkit
optimizer that has ``to_eval`` and ``to_train``. Each param group keeps ``train_mode``
(False when made, as the authors'); ``step()`` refuses a group that is not in train mode,
``eval()`` moves each parameter that has state from ``y`` to ``x`` with the authors' operation
(``p.lerp_(z, 1 - 1/b)``, ``b`` the class's ``interpolation``: AdamW's ``beta1``, SGD's
``momentum``) and ``train()`` back (``p.lerp_(z, 1 - b)``), so the numbers are theirs, bit for
bit.
"""
from __future__ import annotations

import torch

__all__ = ["TrainEval"]


def _interpolation(klass, group):
    """The group's interpolation weight ``b`` of ``y = (1-b)*z + b*x``: the toolkit class's
    ``interpolation`` option (AdamW's ``beta1``, torch's ``betas[0]``; SGD's ``momentum``)."""
    name = klass.interpolation
    if name == "beta1" and group.get("betas") is not None:
        return float(group["betas"][0])
    return float(group[name])


class TrainEval:
    """The train/eval switch (a base class of the generated ``toolkit.torch`` class)."""

    group_state_keys = ("train_mode",)

    def add_param_group(self, param_group):
        """torch's ``add_param_group``. The first group starts in eval mode unless it says
        ``train_mode`` (the authors' default: call ``train()`` before the first step); a later
        one in the mode of the first group (the authors' starts in eval mode, so that the
        next ``eval()`` skips it while its weights are ``y``)."""
        if isinstance(param_group, dict) and "train_mode" in param_group:
            param_group = dict(param_group)
            mode = param_group.pop("train_mode")
            if not isinstance(mode, bool):
                raise TypeError(f"train_mode must be a bool, got {mode!r}")
        else:
            groups = getattr(self, "param_groups", None)
            mode = bool(groups[0].get("train_mode", False)) if groups else False
        super().add_param_group(param_group)
        self.param_groups[-1]["train_mode"] = mode

    @torch.no_grad()
    def eval(self):
        """Put every group in train mode into eval mode: each parameter with state moves from
        ``y`` (where the steps take gradients) to the average ``x``, the point to evaluate
        and to save."""
        self._move(train=False)

    @torch.no_grad()
    def train(self):
        """Put every group in eval mode into train mode: each parameter with state moves from
        ``x`` back to ``y``."""
        self._move(train=True)

    def _move(self, train):
        moves = []  # every check first: nothing moves unless every parameter can
        for gi, group in enumerate(self.param_groups):
            if group.get("train_mode", False) is train:
                continue
            klass = type(self).toolkit_class
            b = _interpolation(klass, group)
            if not train and b == 0.0:
                raise ValueError(f"eval() needs {klass.interpolation} > 0: with 0 the weight is "
                                 "z itself and no average x is kept")
            fraction = 1.0 - b if train else 1.0 - 1.0 / b
            todo = []
            for j, p in enumerate(group["params"]):
                state = self.state[p] if p in self.state else None
                if not state or "z" not in state:
                    continue
                z, master = state["z"], state.get("weight32")
                for name, a in (("z", z), ("weight32", master)):
                    if a is not None and not (isinstance(a, torch.Tensor) and
                                              a.shape == p.shape and a.is_floating_point()):
                        raise ValueError(
                            f"{'train' if train else 'eval'}(): param group {gi}, parameter "
                            f"{j}: opt.state[p][{name!r}] is "
                            f"{tuple(a.shape) if isinstance(a, torch.Tensor) else type(a)}, "
                            f"not a floating tensor of the parameter's shape "
                            f"{tuple(p.shape)}; nothing was moved")
                todo.append((p, z, master))
            moves.append((group, fraction, todo))
        for group, fraction, todo in moves:
            for p, z, master in todo:
                if master is not None:  # the float32 master moves; the weight is its rounding
                    master.lerp_(z.to(master.device, master.dtype), fraction)
                    p.copy_(master)
                else:
                    p.lerp_(z.to(p.device, p.dtype), fraction)
            group["train_mode"] = train

    def step(self, closure=None):
        """One step (``toolkit.torch``'s), refused unless every group is in train mode."""
        for k, group in enumerate(self.param_groups):
            if not group.get("train_mode", False):
                raise RuntimeError(
                    f"{type(self).__name__}.step(): param group {k} is in eval mode; call "
                    "optimizer.train() before training steps and optimizer.eval() before "
                    "evaluating or saving (the weights are y while training, x in eval mode)")
        return super().step(closure)
