"""bitsandbytes' optimizers on the CPU for the audit: its 8-bit ``Adam8bit``, ``AdamW8bit`` and
``Lion8bit`` (and their paged siblings, the same step on the CPU), whose moments ``identify``
finds held in 8-bit blocks (``toolkit.oracle.held``) on weights of 4096 elements and more (and
in float32 below, bitsandbytes' ``min_8bit_size``), and the 32-bit ``Adam32bit``,
``AdamW32bit`` and ``Lion32bit``. Float32 only (its kernels take float32, float16 and bfloat16
weights). Keywords as torch.optim's Adam and AdamW (``weight_decay`` = ``wd``, AdamW's ``lr`` =
``eta*learning_rate``) and lion-pytorch's Lion; ``rescale_grad`` and ``clip_gradient`` pinned
(bitsandbytes has neither)."""
from __future__ import annotations

import contextlib
import importlib.metadata
import io
import logging
import warnings

from . import Adapter, Framework
from .torch import FIXED, TRANSLATE, make_step_of

#: registry name -> (keywords of the toolkit's hyperparameters, bitsandbytes' classes)
CLASSES = {
    "adam": (TRANSLATE["adam"][0], ("Adam8bit", "PagedAdam8bit", "Adam32bit")),
    "adamw": (TRANSLATE["adamw"][0], ("AdamW8bit", "PagedAdamW8bit", "AdamW32bit")),
    "lion": (lambda lr, wd, h: {"lr": lr, "betas": (h["beta1"], h["beta2"]),
                                "weight_decay": wd},
             ("Lion8bit", "PagedLion8bit", "Lion32bit")),
}


#: how bitsandbytes holds its 8-bit moments (its optimizers' ``blocksize = 256`` on the CPU,
#: ``backends/cpu/ops.py``; measured: 33 block maxima for 8256 elements), audited so
HELD = {"state_dtype": "int8", "block": 256}
#: bitsandbytes' Adam decays the weight as AdamW does (``p *= 1 - lr*weight_decay``, its CPU
#: kernels and its 32-bit one), not as Adam's L2 term: its rows pin ``wd`` to 0 (AdamW's rows
#: audit the decay)
NOTE = "wd pinned to 0: bitsandbytes' Adam decays the weight decoupled, as AdamW"


def _quiet(make_step):
    """``make_step`` with bitsandbytes' import-time and first-step messages (a missing
    optional ``kernels`` package, a CPU fallback) kept off the audit's output."""
    def quiet(*args, **kwargs):
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
            return make_step(*args, **kwargs)
    return quiet


def adapters():
    """One :class:`Adapter` per class of :data:`CLASSES`, in float32."""
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import bitsandbytes.optim as optim
    return [Adapter(label=f"bitsandbytes.optim.{cls}()", optimizer=name,
                    make=lambda dtype, k=getattr(optim, cls), kw=kwargs: _quiet(
                        make_step_of(k, kw, dtype)),
                    fixed={**FIXED, **({"wd": 0.0} if name == "adam" else {})},
                    dtypes=("float32",), held=HELD if "8bit" in cls else {},
                    note=NOTE if name == "adam" else "")
            for name, (kwargs, classes) in CLASSES.items() for cls in classes]


def versions():
    """torch's and bitsandbytes'."""
    import torch
    return {"torch": str(torch.__version__),
            "bitsandbytes": importlib.metadata.version("bitsandbytes")}


FRAMEWORK = Framework(name="bitsandbytes", module="bitsandbytes", adapters=adapters,
                      versions=versions, install="pip install bitsandbytes (with torch)",
                      package="bitsandbytes")
