"""lion-pytorch's ``Lion`` (lucidrains, the most used PyTorch Lion; ``Spec.torch_peer`` of
``lion``) for the audit: ``lr``, ``betas = (beta1, beta2)``, ``weight_decay`` = ``wd`` (the paper's
decoupled lambda, ``p *= 1 - lr*wd``); its default path (``use_triton=False``)."""
from __future__ import annotations

from ._peers import Peer, framework

FRAMEWORK = framework(
    "lion_pytorch", "lion_pytorch", "lion-pytorch",
    Peer("lion",
         lambda lr, wd, h: {"lr": lr, "betas": (h["beta1"], h["beta2"]), "weight_decay": wd},
         (("", {}),)))
