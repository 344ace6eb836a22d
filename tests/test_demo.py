"""The demo: every optimizer reduces the softmax-regression loss on scikit-learn's digits through
the Trainer, reaches a test accuracy a user would call trained, and the command writes its plot."""
from __future__ import annotations

import importlib.util

import pytest

from toolkit.tools import demo

missing = [m for m in ("sklearn", "matplotlib", "rich") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"the demo extra is not installed: "
                                                      f"{missing} (pip install -e '.[demo]')")


@pytest.fixture(scope="module")
def digits():
    return demo.load_digits()


def test_every_optimizer_has_demo_settings():
    """The demo's optimizers are those whose spec declares settings: every registered one."""
    from toolkit import optimizer
    assert list(demo.settings()) == list(optimizer.specs())
    assert all(demo.settings()[n] == dict(s.demo) for n, s in optimizer.specs().items())


@pytest.mark.parametrize("name", sorted(demo.settings()))
def test_every_optimizer_trains(name, digits):
    train_set, test_set = digits
    losses, accuracy = demo.train(name, demo.settings()[name], train_set, test_set, epochs=12,
                                  batch=64, device="cpu")
    assert losses[-1] < 0.5 * losses[0], losses
    assert accuracy >= demo.TRAINED, accuracy


def test_demo_command_writes_table_and_plot(tmp_path, capsys):
    png = tmp_path / "loss.png"
    code = demo.main(["--epochs", "12", "--optimizers", "adam,sgd,ftrl", "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("adam", "sgd", "ftrl"):
        assert name in out


def test_demo_writes_its_plot_to_out_and_says_where(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "plots"
    code = demo.main(["--epochs", "2", "--optimizers", "sgd", "--out", str(out)])
    text = " ".join(capsys.readouterr().out.split())
    assert code in (0, 1)  # two epochs may not train: the files are what is checked here
    png = out / "mxopt-demo-loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(tmp_path.iterdir()) == [out]  # nothing in the working directory but --out
    assert f"loss curves written to {png}" in text
    assert "JIT compil" in text and "first step" in text  # the compile time is named, apart
    demo.main(["--epochs", "1", "--optimizers", "sgd"])  # default: the working directory
    assert (tmp_path / "mxopt-demo-loss.png").exists()
    assert str(tmp_path / "mxopt-demo-loss.png") in " ".join(capsys.readouterr().out.split())


def test_demo_holds_moments_in_bfloat16_for_those_that_have_them(tmp_path, capsys):
    code = demo.main(["--epochs", "12", "--optimizers", "adam,lion", "--state-dtype",
                      "bfloat16", "--state-rounding", "stochastic", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "moments held in bfloat16 (rounded stochastic)" in " ".join(out.split())
    with pytest.raises(SystemExit):  # FTRL has no moments to hold: refused by name
        demo.main(["--optimizers", "adam,ftrl", "--state-dtype", "int8"])
    assert "['ftrl'] have no moments to hold" in capsys.readouterr().err
    code = demo.main(["--epochs", "1", "--optimizers", "sgd", "--state-dtype", "int8",
                      "--out", str(tmp_path)])
    assert "below 4096, so its moments stay float32" in " ".join(
        capsys.readouterr().out.split())
