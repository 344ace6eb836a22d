"""``toolkit.torch.X(..., convention="pytorch")`` is ``torch.optim.X``: a torch user's own
keywords, unchanged, give torch's numbers (float64, bit for bit with torch's square root taken
as IEEE's: tests/test_pytorch_convention.py says why), state under torch's names; and torch's
spellings (``Adagrad``, ``RMSprop``, ``Adadelta``, ``NAdam``) are torch's optimizers, defaults
included."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="toolkit.torch needs PyTorch")

import toolkit.torch as tt  # noqa: E402
from toolkit.optimizer import registry, specs  # noqa: E402
from toolkit.oracle.frameworks.torch import gradient_for  # noqa: E402
from test_pytorch_convention import CASES, IDS, IEEESqrt, _data, single_tensor  # noqa: E402


def _run(make, w0, grads, tname):
    """Steps of ``make([p])``, each gradient as ``torch.optim.<tname>`` takes it (SparseAdam's
    sparse, every row held: toolkit.torch takes it through its row-sparse path)."""
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = make([p])
    out = []
    with IEEESqrt():
        for g in grads:
            p.grad = gradient_for(tname, torch.from_numpy(g.copy()))
            opt.step()
            out.append((p.detach().numpy().copy(),
                        {k: v.detach().numpy().copy() for k, v in opt.state[p].items()
                         if isinstance(v, torch.Tensor) and v.dim() > 0}))
    return out


SPELLED = [n for n in sorted(specs()) if specs()[n].torch and "pytorch" in specs()[n].conventions
           and specs()[n].torch != registry()[n].__name__ and not specs()[n].torch_flags]
SPELLED_AS = {specs()[n].torch for n in SPELLED}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_convention_pytorch_with_torchs_own_keywords_is_torch_optim(case):
    name, _, tname, tkw, _ = case
    w0, grads = _data(np.float64, 11)
    # torch's spelling where it differs (Adagrad: torch's defaults too), else the namesake
    klass = getattr(tt, tname) if tname in SPELLED_AS else \
        tt.optimizer_class(registry()[name])
    mine = _run(lambda ps: klass(ps, convention="pytorch", **tkw), w0, grads, tname)
    theirs = _run(lambda ps: getattr(torch.optim, tname)(ps, **single_tensor(tname), **tkw),
                  w0, grads, tname)
    for (w, s), (v, t) in zip(mine, theirs):
        assert w.tobytes() == v.tobytes()
        for key, value in t.items():
            assert s[key].tobytes() == value.tobytes(), key




@pytest.mark.parametrize("name", SPELLED)
def test_torch_spelling_is_torchs_optimizer_with_torchs_defaults(name):
    """``toolkit.torch.Adagrad(params)``, no keyword: torch.optim.Adagrad(params)'s numbers."""
    tname = specs()[name].torch
    assert getattr(tt, tname) is not getattr(tt, registry()[name].__name__)
    w0, grads = _data(np.float64, 5)
    mine = _run(lambda ps: getattr(tt, tname)(ps), w0, grads, tname)
    theirs = _run(lambda ps: getattr(torch.optim, tname)(ps, **single_tensor(tname)), w0,
                  grads, tname)
    for (w, _), (v, _) in zip(mine, theirs):
        assert w.tobytes() == v.tobytes()
    assert getattr(tt, tname)([torch.nn.Parameter(torch.zeros(2))]).param_groups[0][
        "convention"] == "pytorch"


def test_every_torch_spelling_has_torchs_update():
    """Every torch spelling is torch's optimizer (NAdam too, since the kernels have its
    update): none is left with MXNet's numbers under torch's name. MXNet's Nadam under torch's
    defaults is still there, asked for by convention."""
    spelled = {n for n in sorted(specs()) if specs()[n].torch and not specs()[n].torch_flags
               and specs()[n].torch != registry()[n].__name__}
    assert set(SPELLED) == spelled and "nadam" in spelled
    opt = tt.NAdam([torch.nn.Parameter(torch.zeros(2))], convention="mxnet")
    group = opt.param_groups[0]
    assert group["convention"] == "mxnet" and group["lr"] == 0.002
    assert issubclass(tt.NAdam, tt.Nadam)
