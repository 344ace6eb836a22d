"""The known variants of the same equations, each defined once: what :func:`toolkit.oracle.verify`
re-runs a failed case under to explain the failure.

A variant is the same algorithm written or rounded differently (hyperparameters rounded to
float32 or not, constants in the weight's precision, a lerp, epsilon or weight decay elsewhere,
no bias correction). A spec declares which apply (``Spec.variants``); :data:`VARIANTS` says what
each is. A change of the hyperparameters' precision is a change of the inputs, so it is made
around the reference (``hyper_f32``, ``hyper_f64``); every other variant changes a line of the
equations, which only the reference can write on its bound-tracked values
(``reference.error_bound``), so it is the reference's ``step(..., form=name)``, listed in its
``FORMS``. The reference knows the form names only, not this registry.
``tests/test_oracle_variants.py`` checks that the specs and ``FORMS`` agree with :data:`VARIANTS`.

The variants of :data:`CONTRACT` are not variants of any optimizer's equations but of the
oracle's contract: an implementation that never applies the ``rescale_grad`` and
``clip_gradient`` it is handed (torch's optimizers have neither: :data:`GRADIENT_AS_GIVEN`), or
never clips (:data:`CLIP_NOT_APPLIED`). No spec declares them and no discriminating case aims
at them; a failed run is tried under each, alone and then with each declared variant of the
asked convention (:class:`Together`), last (``toolkit.oracle.explanation``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Variant", "VARIANTS", "GRADIENT_AS_GIVEN", "CLIP_NOT_APPLIED", "CONTRACT", "Together",
           "variants_of", "check_declared"]


@dataclass(frozen=True)
class Variant:
    """One known variant: ``name``, a one-line ``description`` (it reads after "variant
    <name>: "), and where the change is made: ``in_reference`` (the reference module's
    ``step(form=name)``, under the conventions its ``FORMS`` gives) or around it, for the
    conventions ``around`` lists (``"*mxnet"``: every convention but "mxnet"). ``rounding``:
    the variant changes only how the result is rounded (the same equations, rounded
    differently), not where a term enters (the same algorithm, written differently)."""
    name: str
    description: str
    in_reference: bool = True
    around: tuple = ()
    rounding: bool = False

    def applies(self, ref, convention):
        """Whether this variant changes anything for reference module ``ref`` run under
        ``convention`` (a resolved one: "pytorch" where the module has a branch of its own)."""
        if self.in_reference:
            return convention in getattr(ref, "FORMS", {}).get(self.name, ())
        if "*mxnet" in self.around:
            return convention != "mxnet"
        if "*" in self.around:
            return True
        return convention in self.around

    def changes(self, hyper, ref):
        """``(hyper, step_kwargs)``: the hyperparameters (MXNet's names, as a case holds them)
        and the extra keywords of ``ref.step`` for this variant."""
        if self.in_reference:
            return dict(hyper), {"form": self.name}
        if self.name == "hyper_f32":
            return {k: _round32(v) for k, v in hyper.items()}, {}
        if self.name == "gradient_as_given":
            return {**hyper, "rescale_grad": 1.0, "clip_gradient": None}, {}
        if self.name == "clip_not_applied":
            return {**hyper, "clip_gradient": None}, {}
        return dict(hyper), {"hyper_f32": False}  # hyper_f64


def _round32(v):
    """A float hyperparameter rounded to float32 (bools, ints, None and strings kept)."""
    return float(np.float32(v)) if isinstance(v, float) else v


#: every known variant, by name (the order is the order in which they are tried)
VARIANTS = {v.name: v for v in (
    Variant("hyper_f32", "the hyperparameters rounded to float32 before use, as MXNet's kernels "
                         "take them", in_reference=False, around=("*mxnet",), rounding=True),
    Variant("hyper_f64", "the hyperparameters used in double precision, where MXNet's kernels "
                         "round them to float32", in_reference=False, around=("mxnet",),
            rounding=True),
    Variant("constants_in_dtype", "the step constants (1 - beta^t, the bias corrections) formed "
                                  "in the weight's precision instead of in double precision",
            rounding=True),
    Variant("lerp", "the moving average written as a lerp, m + (1 - beta1)*(g - m), as "
                    "torch.optim writes its first moments (m.lerp_(g, 1 - beta1))",
            rounding=True),
    Variant("eps_inside_root", "epsilon inside the square root, sqrt(v + epsilon), instead of "
                               "added to it"),
    Variant("eps_uncorrected", "epsilon added to the root of the uncorrected second moment, "
                               "before the bias correction (as MXNet's kernel adds it)"),
    Variant("eps_corrected", "epsilon added to the root of the bias-corrected second moment, "
                             "after the bias correction (as the guide, torch's Adam and "
                             "optax.radam add it)"),
    Variant("wd_before_clip", "weight decay added to the gradient before clipping (MXNet's "
                              "order)"),
    Variant("wd_after_clip", "weight decay added to the gradient after clipping (the guide's "
                             "order)"),
    Variant("no_bias_correction", "no bias correction of the moments"),
    Variant("momentum_first", "the momentum updated before the update's interpolation is "
                              "formed: sign(beta1*m_t + (1 - beta1)*g) with m_t already "
                              "averaged (Lion's lines 5 and 7 swapped)"),
    Variant("wd_coupled", "weight decay added to the gradient (an L2 term, as torch's Adam "
                          "adds it) instead of decoupled from it"),
    Variant("var_first", "the second moment updated with this step's gradient before the "
                         "gradient is normalised by it (Adam's order; ADOPT's lines 7 and 5 "
                         "swapped)"),
    Variant("decay_first_step", "the decoupled weight decay applied on the first step too, "
                                "where ADOPT only initialises its second moment"),
    Variant("residual_old_mean", "the deviation squared into AdaBelief's second moment taken "
                                 "from the mean before this step's gradient enters it, "
                                 "(g - m_{t-1})^2, instead of (g - m_t)^2"),
    Variant("eps_outside_s", "epsilon added only to the denominator, as Adam adds it, not to "
                             "AdaBelief's second moment s at every step"),
    Variant("backtracking", "Riedmiller and Braun's weight-backtracking: where the gradient's "
                            "sign flipped, the weight also takes back its last step (torch's "
                            "Rprop does not)"),
    Variant("no_forget", "the gradient kept where its sign flipped, so that the weight steps "
                         "against the new sign at once (torch's Rprop zeroes it and waits)"),
    Variant("unclamped_kept", "the step size kept unclamped where no sign is seen (the "
                              "gradient product 0), as torch's documentation box and optax "
                              "keep it; torch's code clamps it at every step"),
    Variant("lag", "each update applied one step late: the weight moves by the previous step's "
                   "update (none where this step's sign flips), so the first step moves "
                   "nothing, as optax.rprop applies them"),
    Variant("scalars_f32", "ASGD's step size eta_t and averaging weight mu_t held in float32 "
                           "whatever the weight's precision, as torch.optim.ASGD keeps them "
                           "(tensors of torch's default dtype)", rounding=True),
    Variant("no_decay", "ASGD's decay of the weight, w*(1 - lambd*eta_t), left out of the step"),
    Variant("schedule_product_f32", "the running product of NAdam's momentum schedule held in "
                                    "float32 whatever the weight's precision, as "
                                    "torch.optim.NAdam keeps its mu_product in the default "
                                    "dtype", rounding=True),
    Variant("unfactored", "Adafactor's second moment kept whole for a matrix too (Algorithm 5 "
                          "for every weight: RMSProp with Adafactor's decay schedule), not "
                          "factored into row and column statistics"),
    Variant("rms_after_decay", "Adafactor's relative step scaled by the RMS of the weight after "
                               "the weight decay, not before it"),
    Variant("no_update_clipping", "Adafactor's update not clipped: u not divided by "
                                  "max(1, RMS(u)/d)"),
    Variant("no_relative_step", "Adafactor's step scaled by the learning rate itself, "
                                "rho_t = lr, without the relative step's cap 1/sqrt(t) (as "
                                "optax.adafactor scales it)"),
    Variant("bfloat16", "Muon's Newton-Schulz iteration run in bfloat16 (its input, norm, "
                        "division and each matrix product rounded to bfloat16, as "
                        "torch.optim.Muon and the post run it), not in the weight's precision",
            rounding=True),
    Variant("warmup_lag", "Schedule-Free's step taken with the warmup's learning rate one step "
                          "late, lr*min(1, (t-1)/warmup_steps), so that the first step moves "
                          "nothing, while its averaging weights take lr*min(1, t/warmup_steps) "
                          "(as optax.contrib's schedule_free_adamw and schedule_free_sgd count "
                          "their warmup)"),
    Variant("warmup_f32", "Schedule-Free's warmup values, lr*min(1, t/warmup_steps) for the "
                          "step and for its averaging weights, formed in float32 whatever the "
                          "weight's precision (as optax's warmup_constant_schedule forms them; "
                          "after the warmup, lr rounded to float32)"),
)}


#: the gradient taken as the implementation is handed it: ``rescale_grad`` and
#: ``clip_gradient`` (MXNet's preprocessing, which the oracle hands to ``make_step``) not
#: applied. Every convention, every optimizer; not in :data:`VARIANTS` (no spec declares it)
GRADIENT_AS_GIVEN = Variant(
    "gradient_as_given", "make_step is handed MXNet's rescale_grad and clip_gradient and must "
                         "apply them where the convention does (for torch's and the papers' "
                         "optimizers g = clip(rescale_grad*grad, clip_gradient); the optimizer's "
                         "docs page says where weight decay enters), or the run must pin them: "
                         "fixed={'rescale_grad': 1.0, 'clip_gradient': None} (mxopt verify "
                         "--fixed rescale_grad=1 --fixed clip_gradient=None)",
    in_reference=False, around=("*",))
#: the gradient rescaled but never clipped: ``clip_gradient`` not applied (every convention,
#: every optimizer; not in :data:`VARIANTS`)
CLIP_NOT_APPLIED = Variant(
    "clip_not_applied", "make_step is handed MXNet's clip_gradient and must clip the (rescaled) "
                        "gradient to it where the convention does, or the run must pin it: "
                        "fixed={'clip_gradient': None} (mxopt verify --fixed clip_gradient=None)",
    in_reference=False, around=("*",))
#: the variants of the oracle's contract, not of any optimizer's equations, in the order tried
CONTRACT = (CLIP_NOT_APPLIED, GRADIENT_AS_GIVEN)


@dataclass(frozen=True)
class Together:
    """Two variants at once (a contract variant, :data:`CONTRACT`, and a declared one; or two
    declared ones, each a form of the reference's equations: the step then takes both, as a
    tuple, where its module takes a tuple of forms, else it raises a ValueError); ``name`` is
    both names joined by ``+``."""
    first: Variant
    second: Variant

    @property
    def name(self):
        """``"<first>+<second>"``."""
        return f"{self.first.name}+{self.second.name}"

    def changes(self, hyper, ref):
        """The first variant's changes of the hyperparameters and step keywords, then the
        second's on top of them."""
        h, extra = self.first.changes(hyper, ref)
        h, more = self.second.changes(h, ref)
        if "form" in extra and "form" in more:
            more = {**more, "form": (extra["form"], more["form"])}
        return h, {**extra, **more}


#: variants that are the convention's own equations in float64 (the reference forms its
#: constants in double): no case tells them apart and they explain no failure there
SAME_IN_FLOAT64 = ("constants_in_dtype",)


def variants_of(spec):
    """The :class:`Variant` s an optimizer's spec declares, in :data:`VARIANTS` order."""
    check_declared(spec)
    return [v for n, v in VARIANTS.items() if n in spec.variants]


def check_declared(spec):
    """A ValueError naming the spec and the known variants if it declares an unknown one."""
    unknown = [n for n in spec.variants if n not in VARIANTS]
    if unknown:
        raise ValueError(f"Spec {spec.name!r} declares unknown variant(s) {unknown}; known: "
                         f"{', '.join(VARIANTS)} (toolkit/oracle/variants.py)")
