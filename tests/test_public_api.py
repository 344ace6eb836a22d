"""Every public name is documented: it has a docstring (classes, functions, methods and
properties; inherited ones count) and is named in docs/api.md."""
from __future__ import annotations

import importlib
import inspect
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLIC = ["toolkit", "toolkit.optimizer", "toolkit.lr_scheduler", "toolkit.oracle",
          "toolkit.oracle.space", "toolkit.oracle.variants", "toolkit.oracle.conformance",
          "toolkit.oracle.frameworks", "toolkit.error_bounds", "toolkit.held_bounds",
          "toolkit.trainer",
          "toolkit.backends", "toolkit.backends.arrays", "toolkit.backends.launches", "reference", "reference.error_bound",
          "reference.noise"]
API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


def _undocumented(obj):
    missing = []
    if (inspect.isclass(obj) or callable(obj)) and not inspect.getdoc(obj):
        missing.append("")
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        for name, member in inspect.getmembers(obj):
            if name.startswith("_"):
                continue
            if (inspect.isfunction(member) or inspect.ismethod(member)
                    or isinstance(inspect.getattr_static(obj, name), property)):
                if not inspect.getdoc(member) and not inspect.getdoc(getattr(obj, name)):
                    missing.append(name)
    return missing


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_name_has_a_docstring_and_is_in_docs_api(module):
    mod = importlib.import_module(module)
    assert (mod.__doc__ or "").strip(), f"{module} has no docstring"
    names = getattr(mod, "__all__", None)
    assert names, f"{module} has no __all__"
    for name in names:
        obj = getattr(mod, name)
        assert re.search(rf"`{re.escape(name)}`", API), f"{module}.{name} is not in docs/api.md"
        if inspect.ismodule(obj):
            assert (obj.__doc__ or "").strip(), f"{module}.{name} has no docstring"
            continue
        missing = _undocumented(obj)
        assert not missing, f"{module}.{name}: no docstring for {missing}"


def test_toolkit_verify_is_a_deprecated_alias_of_error_bounds():
    """``toolkit.verify`` (the old name of ``toolkit.error_bounds``), kept for one release:
    importing it warns ``DeprecationWarning`` naming the new module, and it gives the same
    public names bound to the same objects; docs/api.md says so."""
    import sys
    import warnings
    import toolkit.error_bounds
    sys.modules.pop("toolkit.verify", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import toolkit.verify as old
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert "toolkit.error_bounds" in str(caught[0].message)
    assert caught[0].filename == __file__, caught[0].filename   # points at the importer
    assert old.__all__ == toolkit.error_bounds.__all__
    for name in toolkit.error_bounds.__all__:
        assert getattr(old, name) is getattr(toolkit.error_bounds, name), name
    assert re.search(r"`toolkit\.verify`[^\n]*\n[^\n]*DeprecationWarning", API)


def test_optimizer_module_names_the_registry():
    """``toolkit.optimizer`` imports each built-in optimizer's class by name (explicit imports,
    so that go-to-definition finds them): the names are exactly the registry's built-in classes,
    each bound to the registered class, plus ``FTRL`` (the guide's spelling of ``Ftrl``)."""
    import json
    import subprocess
    import sys
    # a fresh process: other tests register (and replace) optimizers
    code = ("import json; from toolkit import optimizer; from toolkit.optimizers import registry; "
            "built = {k.__name__: k for k in registry().values()}; "
            "print(json.dumps([sorted(built), list(optimizer.__all__), "
            "all(getattr(optimizer, n) is k for n, k in built.items()), "
            "optimizer.FTRL is built['Ftrl'], "
            "sorted(n for n in vars(optimizer) if not n.startswith('_'))]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       cwd=str(ROOT))
    assert r.returncode == 0, r.stderr
    built, names, same_objects, ftrl, public = json.loads(r.stdout)
    api = ["Optimizer", "ElementwiseOptimizer", "Spec", "BenchSetting", "create", "register",
           "registry", "specs", "spec_of", "unregister"]
    assert sorted(names) == sorted(api + built + ["FTRL"]) and len(names) == len(set(names))
    assert same_objects and ftrl
    assert public == sorted(names)


def test_toolkit_optimizers_spaces_is_a_deprecated_alias_of_spec_spaces():
    """``toolkit.optimizers.spaces`` (the old name of ``spec_spaces``, which docs/
    custom-optimizer.md had plug-ins import from), kept for one release: each name used warns
    ``DeprecationWarning`` naming the new module and is the same object; importing the module
    alone (as ``toolkit.optimizers`` does with each of its modules) does not warn."""
    import warnings
    import toolkit.optimizers.spec_spaces as new
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import toolkit.optimizers.spaces as old
        assert caught == []
        from toolkit.optimizers.spaces import Interval
    assert Interval is new.Interval
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert "toolkit.optimizers.spec_spaces" in str(caught[0].message)
    assert caught[0].filename == __file__, caught[0].filename   # points at the importer
    assert old.__all__ == new.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in new.__all__:
            assert getattr(old, name) is getattr(new, name), name
