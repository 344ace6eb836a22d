"""torchao's low-bit optimizers (``torchao.optim``) for the audit: ``AdamW8bit`` (moments in
8-bit blocks of 256 with bitsandbytes' dynamic maps, for a weight of 4096 elements and more whose
size is a multiple of the block; float32 moments otherwise: ``whole_blocks``), ``AdamW4bit``
(4-bit blocks of 128, a map the oracle does not hold) and ``AdamWFp8`` (float8 blocks), each a
``torch.compile`` d step, float32. Keywords as torch.optim.AdamW's (``lr`` =
``eta*learning_rate``, ``weight_decay`` = ``wd``, decoupled); ``rescale_grad`` and
``clip_gradient`` pinned (torchao has neither)."""
from __future__ import annotations

import importlib.metadata

from . import Adapter, Framework
from .torch import FIXED, TRANSLATE, make_step_of

#: class -> how torchao says it holds the moments (verify's keywords), where the oracle has it
CLASSES = {"AdamW8bit": {"state_dtype": "int8", "block": 256, "whole_blocks": True},
           "AdamW4bit": {}, "AdamWFp8": {}}


def adapters():
    """One :class:`Adapter` per class of :data:`CLASSES`, in float32."""
    import torchao.optim as optim
    return [Adapter(label=f"torchao.optim.{cls}()", optimizer="adamw",
                    make=lambda dtype, k=getattr(optim, cls): make_step_of(
                        k, TRANSLATE["adamw"][0], dtype),
                    fixed=dict(FIXED), dtypes=("float32",), held=held)
            for cls, held in CLASSES.items()]


def versions():
    """torch's and torchao's."""
    import torch
    return {"torch": str(torch.__version__), "torchao": importlib.metadata.version("torchao")}


FRAMEWORK = Framework(name="torchao", module="torchao", adapters=adapters, versions=versions,
                      install="pip install torchao (with torch)", package="torchao")
