"""torch-adopt's ``ADOPT`` (``adopt.ADOPT``, the authors' code; ``Spec.torch_peer`` of ``adopt``)
for the audit: ``lr``, ``betas = (beta1, beta2)``, ``eps`` = ``epsilon``, ``weight_decay`` = ``wd``,
``decouple``, and ``clip_lambda`` the paper's ``step**0.25`` with ``use_clipping`` (None
without); its default path."""
from __future__ import annotations

from ._peers import Peer, framework


def _schedule(step):
    """The paper's clipping schedule, as the authors' default ``clip_lambda``."""
    return step ** 0.25


FRAMEWORK = framework(
    "torch_adopt", "adopt", "torch-adopt",
    Peer("adopt",
         lambda lr, wd, h: {"lr": lr, "betas": (h["beta1"], h["beta2"]), "eps": h["epsilon"],
                            "weight_decay": wd, "decouple": h["decouple"],
                            "clip_lambda": _schedule if h["use_clipping"] else None},
         (("", {}),)))
