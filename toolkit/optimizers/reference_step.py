"""The reference backend's hooks: how an optimizer's step is handed to its float64 oracle
(``reference.<name>.step``): its hyperparameters as the oracle names them (``reference_hyper``),
the bookkeeping the oracle keeps beside the state arrays (``_reference_extra``,
``_reference_store_extra``), extra keyword arguments (``_reference_call_kwargs``), and the
step itself (``_reference_step``, backend "reference").

``Optimizer`` derives from :class:`ReferenceStep`.
"""
from __future__ import annotations

import numpy as np

__all__ = ["ReferenceStep"]


class _ReferenceName:
    """``reference_name``, derived from the class's spec: the last part of ``spec.reference``
    (a subclass without a spec of its own inherits its base's, as it inherits the rule)."""

    def __get__(self, obj, cls):
        spec = getattr(cls, "spec", None)
        return None if spec is None or spec.reference is None else spec.reference.rsplit(".", 1)[-1]


class ReferenceStep:
    """The reference backend (methods of ``Optimizer``)."""

    #: the name of this optimizer's reference module (``reference.<name>``), from the nearest
    #: spec along the class's bases; None for custom ones
    reference_name = _ReferenceName()

    def reference_hyper(self):
        """This optimizer's own hyperparameters as the reference module names them (none here;
        ``Optimizer.reference_hyper`` derives them from the class's ``domains``)."""
        return {}

    def reference_hyper_for(self, dtype):
        """:meth:`reference_hyper` for a step on weights of ``dtype``: the same, but where a
        hyperparameter's default depends on the weight's dtype (Adafactor's ``epsilon1=None``,
        torch's ``finfo(dtype).eps``), which the float64 oracle cannot know."""
        return self.reference_hyper()

    def _reference_extra(self, index, weight=None):
        """Bookkeeping the reference keeps in its state dict beside the state arrays (Nadam's
        m_schedule, LBSGD's accumulator and call count): scalars, and host arrays."""
        return {}

    def _reference_store_extra(self, index, new_state, weight):
        """Keep what the reference returned of ``_reference_extra``'s bookkeeping."""

    def _reference_call_kwargs(self, index, t):
        """Extra keywords of ``reference.<name>.step``: the form of the equations the kernels'
        "pytorch" rule computes (``Spec.pytorch_form``), under that convention."""
        spec = type(self).spec
        if self.convention == "pytorch" and spec is not None and spec.pytorch_form:
            return {"form": spec.pytorch_form}
        return {}

    def reference_module(self):
        """The oracle module of this optimizer (imported on first use), or None."""
        name = self.reference_name
        if name is None:
            return None
        spec = type(self).spec
        if spec is not None and spec.reference is not None and \
                spec.reference.rsplit(".", 1)[-1] == name:
            return spec.reference_module()
        import importlib
        return importlib.import_module(f"reference.{name}")  # a class that names it itself

    def _reference_step(self, index, weight, grad, state, t, lr, wd):
        ref = self.reference_module()
        if ref is None:
            raise ValueError(f"{type(self).__name__} has no reference implementation; "
                             "use backend='cpu'")
        slots = self.state_slots()
        state_arrays = self.state_arrays(state)
        # what the oracle reads beside the state arrays (``next_step``'s, without reading the
        # schedule a second time: a schedule of the user's own is read once per update)
        extra = dict(self._reference_extra(index, weight))
        kwargs = dict(self._reference_call_kwargs(index, t))
        # a held slot (state_dtype) enters as the values it stands for, exactly
        st = {name: self.slot_values(a) for name, a in zip(slots, state_arrays)}
        st.update({k: (np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v)
                   for k, v in extra.items()})
        w_new, st_new = ref.step(weight.astype(np.float64), grad.astype(np.float64), st, t=t,
                                 lr=lr, wd=wd, rescale_grad=self.rescale_grad,
                                 clip_gradient=self.clip_gradient, convention=self.convention,
                                 **self.reference_hyper_for(weight.dtype), **kwargs)
        weight[...] = w_new
        key = self.rounding_key(index, t)
        for j, (name, a) in enumerate(zip(slots, state_arrays)):
            self.store_values(a, st_new[name], key, j)
        self._reference_store_extra(index, st_new, weight)
