"""The demo: every optimizer reduces the softmax-regression loss on scikit-learn's digits through
the Trainer, reaches a test accuracy a user would call trained, and the command writes its plot."""
from __future__ import annotations

import importlib.util

import pytest

from toolkit import demo

missing = [m for m in ("sklearn", "matplotlib", "rich") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"the demo extra is not installed: "
                                                      f"{missing} (pip install -e '.[demo]')")


@pytest.fixture(scope="module")
def digits():
    return demo.load_digits()


@pytest.mark.parametrize("name", sorted(demo.SETTINGS))
def test_every_optimizer_trains(name, digits):
    train_set, test_set = digits
    losses, accuracy = demo.train(name, demo.SETTINGS[name], train_set, test_set, epochs=12,
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
