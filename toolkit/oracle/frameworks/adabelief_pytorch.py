"""adabelief-pytorch's ``AdaBelief`` (the authors' code; ``Spec.torch_peer`` of ``adabelief``)
for the audit: ``lr``, ``betas = (beta1, beta2)``, ``eps`` = ``epsilon``, ``weight_decay`` =
``wd``, and the options ``weight_decouple``, ``fixed_decay``, ``rectify`` and
``degenerated_to_sgd`` as the oracle draws them (the paper's Algorithm 2 is all four at their
off values; the authors' defaults turn on ``weight_decouple`` and ``rectify``); what its
constructor prints is kept off the audit's output."""
from __future__ import annotations

from ._peers import Peer, framework

FRAMEWORK = framework(
    "adabelief_pytorch", "adabelief_pytorch", "adabelief-pytorch",
    Peer("adabelief",
         lambda lr, wd, h: {"lr": lr, "betas": (h["beta1"], h["beta2"]), "eps": h["epsilon"],
                            "weight_decay": wd, "weight_decouple": h["weight_decouple"],
                            "fixed_decay": h["fixed_decay"], "rectify": h["rectify"],
                            "degenerated_to_sgd": h["degenerated_to_sgd"],
                            "print_change_log": False},
         (("", {}),)))
