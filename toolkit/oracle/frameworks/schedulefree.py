"""The authors' Schedule-Free optimizers (``schedulefree``, facebookresearch/schedule_free;
``Spec.torch_peer`` of ``adamwschedulefree`` and of ``sgdschedulefree``) for the audit, one
framework for the package's two optimizers (:class:`._peers.Peer` each):

* Schedule-Free AdamW, in two configurations: ``schedulefree.AdamWScheduleFree``, the authors'
  default, with the bias correction inside the root (``lr_bias_correction=False``), and
  ``schedulefree.AdamWScheduleFreePaper``, the paper's Algorithm 1, with ``sqrt(1 - beta2^t)``
  in the learning rate (``lr_bias_correction=True``). ``lr``, ``betas = (beta1, beta2)``,
  ``eps`` = ``epsilon``, ``weight_decay`` = ``wd`` (added to the normalised gradient, at
  ``y``), ``warmup_steps``, ``r``, ``weight_lr_power``.
* Schedule-Free SGD, ``schedulefree.SGDScheduleFree``: ``lr``, ``momentum``, ``weight_decay``
  = ``wd`` (added to the gradient, at ``y``), ``warmup_steps``, ``r``, ``weight_lr_power``.

Each on its default path (``foreach`` where torch has it). The optimizers refuse to step until
``opt.train()`` (the weight is then ``y``, the point the toolkit steps): the adapter calls it
once, as a user must, before the first step."""
from __future__ import annotations

from ._peers import Peer, framework


def _train(opt):
    """Train mode (``y`` in the weight), as the authors' optimizers need before a step."""
    opt.train()


def _averaging(h):
    """The keywords of the family's warmup and averaging weights, shared by both optimizers."""
    return {"warmup_steps": h["warmup_steps"], "r": h["r"],
            "weight_lr_power": h["weight_lr_power"]}


FRAMEWORK = framework(
    "schedulefree", "schedulefree", "schedulefree",
    Peer("adamwschedulefree",
         lambda lr, wd, h: {"lr": lr, "betas": (h["beta1"], h["beta2"]), "eps": h["epsilon"],
                            "weight_decay": wd, **_averaging(h)},
         (("", {"lr_bias_correction": False}),
          ("", {"lr_bias_correction": True}, "AdamWScheduleFreePaper"))),
    Peer("sgdschedulefree",
         lambda lr, wd, h: {"lr": lr, "momentum": h["momentum"], "weight_decay": wd,
                            **_averaging(h)},
         (("", {}),)),
    prepare=_train)
