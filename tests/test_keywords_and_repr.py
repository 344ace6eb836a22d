"""A new user's first calls: another framework's keyword names the MXNet one meant (one table,
toolkit/optimizers/aliases.py, for create and direct construction alike), and the reprs of an
optimizer and a Trainer show what they were built with."""
from __future__ import annotations

import numpy as np
import pytest

from toolkit import Parameter, Trainer, optimizer
from toolkit.optimizers import aliases


#: a foreign keyword given to an optimizer that does not take it, and what its error must say
FOREIGN = [  # checked against the registry by test_foreign_cases_are_foreign_to_their_optimizer
    ("adam", {"lr": 0.01}, "learning_rate=0.01"),
    ("adam", {"weight_decay": 1e-4}, "wd=0.0001"),
    ("adam", {"betas": (0.8, 0.99)}, "beta1=0.8, beta2=0.99"),
    ("adam", {"eps": 1e-7}, "epsilon=1e-07"),
    ("adam", {"momentum": 0.9}, "beta1"),
    ("adagrad", {"epsilon": 1e-6}, "eps=1e-06"),
    ("signum", {"nesterov": True}, "'nag'"),
    ("rmsprop", {"alpha": 0.95}, "gamma1=0.95"),
    ("lamb", {"lr": 0.1, "weight_decay": 0.01}, "learning_rate=0.1"),
    ("rprop", {"etas": (0.3, 1.5)}, "etaminus=0.3, etaplus=1.5"),
    ("rprop", {"step_sizes": (1e-5, 1.0)}, "step_size_min=1e-05, step_size_max=1.0"),
    ("lion", {"betas": 0.9}, "beta1=0.9, beta2=0.99"),   # not a pair: Lion's defaults shown
]


def test_foreign_cases_are_foreign_to_their_optimizer():
    """Each case names a built-in optimizer, and a keyword its class does not take but the
    alias table knows (its check raises), so each case tests a hint."""
    for name, kwargs, _ in FOREIGN:
        klass = optimizer.registry()[name]
        assert klass.__module__.startswith("toolkit.optimizers."), name
        assert not set(kwargs) & aliases.accepted_keywords(klass), (name, kwargs)
        with pytest.raises(TypeError):
            aliases.check_keywords(klass, kwargs)


@pytest.mark.parametrize("name, kwargs, meant", FOREIGN)
def test_foreign_keyword_names_the_mxnet_one(name, kwargs, meant):
    with pytest.raises(TypeError) as create_error:
        optimizer.create(name, **kwargs)
    key = next(iter(kwargs))
    assert f"unexpected keyword argument {key!r}" in str(create_error.value)
    assert meant in str(create_error.value)
    klass = optimizer.registry()[name]
    with pytest.raises(TypeError) as direct_error:  # the class itself, not only create
        klass(**kwargs)
    assert str(direct_error.value) == str(create_error.value)


def test_own_keywords_are_not_aliases():
    # AdaGrad's eps, RMSProp's momentum, LARS's eps are their own MXNet keywords
    assert optimizer.create("adagrad", eps=1e-6).float_stable_eps == 1e-6
    optimizer.create("rmsprop", momentum=0.5, centered=True)
    optimizer.create("lars", eps=1e-9)
    # every registered optimizer accepts the MXNet spelling of the aliases it is hinted to
    for name, klass in optimizer.registry().items():
        accepted = aliases.accepted_keywords(klass)
        assert {"learning_rate", "wd", "lr_scheduler", "clip_gradient"} <= accepted, name


def test_unknown_keyword_is_still_a_type_error():
    with pytest.raises(TypeError, match="betta1"):
        optimizer.create("adam", betta1=0.9)


def test_optimizer_repr_shows_the_hyperparameters_given_or_changed():
    assert "momentum=0.9" in repr(optimizer.SGD(momentum=0.9))
    assert "momentum" not in repr(optimizer.SGD())
    r = repr(optimizer.create("adam", learning_rate=0.01, beta1=0.8, clip_gradient=1.0))
    assert r.startswith("Adam(learning_rate=0.01, wd=0.0, beta1=0.8,")
    assert "clip_gradient=1.0" in r and "beta2" not in r and r.endswith(
        "convention='mxnet', backend='auto')")
    assert "eps=1e-06" in repr(optimizer.create("adagrad", eps=1e-6))  # stored under another name
    assert "centered=True" in repr(optimizer.create("rmsprop", centered=True))
    assert "seed=3" in repr(optimizer.create("sgld", seed=3))
    opt = optimizer.create("sgd")
    opt.set_learning_rate(0.5)
    assert "learning_rate=0.5" in repr(opt)  # the value now, not the one given
    for name in optimizer.registry():  # one implementation serves every optimizer
        r = repr(optimizer.create(name))
        assert r.startswith(type(optimizer.create(name)).__name__ + "(learning_rate=")


def test_trainer_repr():
    params = {"fc_weight": Parameter("fc_weight", shape=(10, 64)),
              "fc_bias": Parameter("fc_bias", shape=(10,), wd_mult=0.0),
              "half": Parameter("half", shape=(4,), dtype=np.float16)}
    trainer = Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9,
                                      "multi_precision": True})
    r = repr(trainer)
    assert r.startswith("Trainer(SGD(learning_rate=0.1, wd=0.0, momentum=0.9,")
    assert "3 parameters in 2 groups (" in r and "float16 on cpu" in r and "float32 on cpu" in r
    assert r.endswith("kvstore='device', backend='auto')")


@pytest.mark.parametrize("name, kwargs, meant", [
    ("adam", {"learning_rat": 0.1}, "did you mean learning_rate? Adam(learning_rate=0.1)"),
    ("sgd", {"clip_gradients": 1.0}, "did you mean clip_gradient?"),
    ("adam", {"epsilom": 1e-7}, "did you mean epsilon?"),
    ("lamb", {"lower_bnd": 1e-3}, "did you mean lower_bound?"),
])
def test_a_misspelt_keyword_names_the_nearest_one(name, kwargs, meant):
    with pytest.raises(TypeError, match="unexpected keyword argument") as error:
        optimizer.create(name, **kwargs)
    assert meant in str(error.value)


def test_a_keyword_far_from_every_name_lists_the_optimizers_keywords():
    """No alias and no near name: the error names the class (not Optimizer.__init__) and the
    keywords it takes."""
    with pytest.raises(TypeError) as error:
        optimizer.create("adam", colour="blue")
    message = str(error.value)
    assert "did you mean" not in message
    assert message.startswith("Adam() got an unexpected keyword argument 'colour'; its keywords:")
    assert "beta1" in message and "learning_rate" in message


def test_a_users_own_init_keeps_its_extra_keywords():
    """A subclass whose ``__init__`` takes more through ``**kwargs`` is not second-guessed:
    its keyword near one of the toolkit's (``beta3``, ``beta1``) is its own."""
    class Three(optimizer.Adam):
        def __init__(self, **kwargs):
            self.beta3 = kwargs.pop("beta3", 0.5)
            super().__init__(**kwargs)

    assert Three(beta3=0.25).beta3 == 0.25
