"""The hyperparameters of an optimizer: the checked attributes made from each class's
``domains``, their aliases, ``settings()``, the checks an assignment runs (relations, state
layout, convention) and ``repr``. ``Optimizer`` derives from :class:`Hyperparameters`."""
from __future__ import annotations

import contextlib
import hashlib
import inspect

import numpy as np

from . import aliases
from .spec import DEFAULT_CONVENTIONS
from .validation import AliasAttribute, Domain, alias_attribute, checked_attribute, spelling

__all__ = ["Hyperparameters", "install_checked_attributes", "jsonable"]


def jsonable(value):
    """A hyperparameter's value as JSON holds it: a learning-rate scheduler as its type and
    configuration (``config()`` where it has one, else its repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):  # Muon's ns_coefficients
        return [jsonable(v) for v in value]
    if callable(value):
        kind = type(value).__module__ + "." + type(value).__qualname__
        text = repr(value)
        if hasattr(value, "config"):
            return {"type": kind, "config": value.config(), "repr": text}
        code = getattr(value, "__code__", None)
        if code is not None:   # a plain function: its name and what its code computes
            body = repr((code.co_code, code.co_consts, code.co_names)).encode()
            return {"type": kind, "name": getattr(value, "__qualname__", "?"),
                    "code": hashlib.sha256(body).hexdigest()[:16]}
        if " at 0x" not in text:
            return {"type": kind, "config": text}
        # a repr that holds an address differs in every process: the attributes instead
        return {"type": kind, "config": {k: jsonable(v) for k, v in
                                         sorted(getattr(value, "__dict__", {}).items())}}
    text = repr(value)
    return text if " at 0x" not in text else f"<{type(value).__module__}.{type(value).__qualname__}>"


def install_checked_attributes(cls):
    """Turn each name in ``cls.domains`` (the class's own declaration) into a checked
    attribute of ``cls``, and each of its other names (the keyword, the aliases) into an
    :class:`AliasAttribute` of it, unless the class chain defines that name otherwise (the
    ``learning_rate`` property, a hyperparameter of that name)."""
    own = cls.__dict__.get("domains", {})
    for attr, domain in own.items():
        if not isinstance(domain, Domain):
            raise TypeError(f"{cls.__name__}.domains[{attr!r}] must be a Domain, got {domain!r}")
        setattr(cls, attr, checked_attribute(attr, domain, Hyperparameters._after_hyperparameter_set))
    for attr, domain in own.items():
        for name in domain.other_names(attr):
            if name in own or not isinstance(getattr(cls, name, AliasAttribute()), AliasAttribute):
                continue
            setattr(cls, name, alias_attribute(name, attr))


class Hyperparameters:
    """Checked hyperparameters, their settings and repr (methods of ``Optimizer``)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "elementwise_step" in cls.__dict__:
            raise TypeError(f"{cls.__name__} sets elementwise_step, which is now "
                            "state_like_weight (False: a state not shaped like the weight)")
        install_checked_attributes(cls)

    @classmethod
    def hyperparameter_domains(cls):
        """Every checked hyperparameter of this class, attribute name -> :class:`Domain`:
        the base class's first, then each subclass's in order."""
        merged = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("domains", {}))
        return merged

    @classmethod
    def hyperparameter_aliases(cls):
        """Every other name a hyperparameter of this class goes by that is an attribute of it,
        alias -> attribute (AdaGrad's ``eps`` -> ``float_stable_eps``, RMSProp's ``rho`` ->
        ``gamma1``): reading the alias gives the attribute's value, assigning it runs the
        attribute's check (``Domain.keyword`` and ``Domain.aliases``)."""
        out = {}
        for attr, domain in cls.hyperparameter_domains().items():
            for name in domain.other_names(attr):
                if isinstance(getattr(cls, name, None), AliasAttribute):
                    out[name] = attr
        return out

    def settings(self):
        """Every setting that changes the numbers, by constructor keyword (``learning_rate``,
        ``rescale_grad``, ``wd``, ``clip_gradient``, ``lr_scheduler``, ``begin_num_update``,
        ``multi_precision``, ``convention`` and the optimizer's own), as JSON-able values: the
        learning-rate scheduler as its type and configuration. Two optimizers of the same class
        with equal ``settings()`` compute the same numbers from the same state."""
        out = {}
        for attr, domain in self.hyperparameter_domains().items():
            if domain.numeric:
                out[domain.keyword or attr] = jsonable(getattr(self, attr))
        return out

    def reference_hyper(self):
        """This optimizer's own hyperparameters as ``reference.<name>.step`` takes them, derived
        from the declared ``domains``: every one a subclass declares (the base class's are the
        step's own arguments: ``lr``, ``wd``, ...), by constructor keyword, in declaration
        order, but those whose domain says ``reference=False``. A class whose oracle names them
        otherwise overrides this."""
        base = next(k for k in reversed(type(self).__mro__) if "domains" in k.__dict__)
        return {domain.keyword or attr: getattr(self, attr)
                for attr, domain in self.hyperparameter_domains().items()
                if attr not in base.__dict__["domains"] and domain.reference}

    def check_relations(self):
        """Checks that tie two hyperparameters together (LAMB's bounds): run when construction
        ends and after every later assignment of a hyperparameter, which is undone when this
        raises; each refusal names the hyperparameters by :meth:`named`. Subclasses override
        it; the base class has none."""

    @classmethod
    def named(cls, attr):
        """How a refusal names the hyperparameter held in attribute ``attr``: by its keyword,
        as the caller spells it (``validation.spelling``: ``toolkit.torch``'s ``etas[0]
        (etaminus)``)."""
        domain = cls.hyperparameter_domains().get(attr)
        return spelling(domain.keyword or attr if domain is not None else attr)

    @contextlib.contextmanager
    def together(self):
        """Several assignments as one: inside, each is checked alone (its domain, the state's
        layout) and the checks that tie hyperparameters together (:meth:`check_relations`,
        the convention, ``state_dtype`` with ``state_rounding``) run once, at the end, on the
        values together (LAMB's bounds moved past each other; ``toolkit.torch`` hands a
        group's edits over so). Where anything inside or those checks refuse, every assignment
        made inside is put back before the error propagates (but one that state made inside
        the block, in the new layout, refuses to put back). Not for a step inside the block:
        its relations are not checked until the end."""
        d = self.__dict__
        if d.get("_together") is not None:  # nested: the outermost checks and puts back
            yield self
            return
        made = d["_together"] = []
        try:
            yield self
            d["_together"] = None
            self._check_ties()
        except BaseException:
            d["_together"] = []  # the values of before held together: not checked again
            for attr, old in reversed(made):
                try:
                    setattr(self, attr, old)
                except (TypeError, ValueError):  # a layout made inside: the error stands
                    pass
            raise
        finally:
            d["_together"] = None

    def _after_hyperparameter_set(self, attr, old):
        """Refuse an assignment after construction that breaks :meth:`check_relations` or that
        changes the layout of state already made (SGD's momentum turned on once its state is
        ``None``): the value is then put back."""
        d = self.__dict__
        d["_hyper_version"] = object()  # constants made from the old values: stale
        d.pop("_warm", None)  # a prepared step assumed the layout and backend of before
        if not d.get("_constructed"):
            return
        made = d.get("_state_layout")
        if made is not None and self._state_layout_key() != made:
            domain = self.hyperparameter_domains()[attr]
            name = domain.keyword or attr
            now = self._state_layout_key()
            what = [f"slots {made[0][0]} -> {self.state_slots()}"] if made[0] != now[0] else []
            if made[1] != now[1]:
                what.append(f"multi_precision {made[1]} -> {self.multi_precision}")
            if made[2] != now[2]:  # the state's meaning, each convention's own
                what.append(f"what it holds, by convention: {made[2]} -> {now[2]}")
            raise ValueError(
                f"{name} cannot change from {old!r} to {getattr(self, attr)!r}: that changes the "
                f"state {type(self).__name__} keeps ({', '.join(what)}), "
                "and this optimizer has already made state in the old layout. Create a new "
                f"optimizer with {name}={getattr(self, attr)!r}, or set it before the first "
                "create_state (a Trainer makes its states at construction)")
        if attr == "begin_num_update":
            self._follow_begin_num_update(old)
        made = d.get("_together")
        if made is not None:  # inside together(): checked once, at its end
            made.append((attr, old))
            return
        self._check_ties()

    def _check_ties(self):
        """Every check that ties hyperparameters together: :meth:`check_relations`, the
        convention against the kernels, ``state_dtype`` against ``state_rounding``."""
        self.check_relations()
        self._check_convention()
        self.check_state_dtype()

    def _check_convention(self):
        """Refuse a convention this optimizer's kernels do not implement (its spec's
        ``conventions``; "mxnet" and "guide" for an optimizer without a spec)."""
        spec = type(self).spec
        implemented = DEFAULT_CONVENTIONS if spec is None else spec.conventions
        if self.convention not in implemented:
            extra = (" (torch.optim has no such optimizer, or the toolkit does not implement "
                     "its update)" if self.convention == "pytorch" else "")
            raise ValueError(f"convention={self.convention!r} is not available for "
                             f"{type(self).__name__}{extra}; it implements {implemented}")

    def _follow_begin_num_update(self, old):
        """``begin_num_update`` is where the counts start: before any step it moves
        ``num_update`` with it; after one, it may not exceed a count already taken (a states
        file holds counts >= it)."""
        new = self.begin_num_update
        if not self._index_update_count and self.num_update == old:
            self.num_update = new
        elif new > min([self.num_update, *self._index_update_count.values()]):
            raise ValueError(f"begin_num_update {new} exceeds the update counts already taken "
                             f"(num_update {self.num_update}); set it before the first step")

    def __repr__(self):
        """``SGD(learning_rate=0.1, wd=0.0, momentum=0.9, convention='mxnet', backend='auto')``:
        the learning rate, weight decay, convention and backend, and every other hyperparameter
        (the checked attributes, by constructor keyword) that was given or now differs from its
        constructor's default."""
        given = self.__dict__.get("_given", {})
        defaults = dict(aliases.constructor_parameters(type(self)))
        shown = {"learning_rate": self.lr, "wd": self.wd}
        own_first = {}      # the class's own hyperparameters first, then its bases'
        for klass in type(self).__mro__:
            for attr, domain in klass.__dict__.get("domains", {}).items():
                own_first.setdefault(attr, domain)
        for attr, domain in own_first.items():
            name = domain.keyword or attr
            if name in shown or name in ("convention", "backend"):
                continue
            value = getattr(self, attr)
            default = defaults.get(name, inspect.Parameter.empty)
            if name in given or differs(value, default):
                shown[name] = value
        shown.update(convention=self.convention, backend=self.backend)
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def differs(value, default):
    try:
        return bool(value != default)
    except (TypeError, ValueError):  # an array: shown
        return True
