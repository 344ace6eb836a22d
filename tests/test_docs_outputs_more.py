"""The example outputs of the README's oracle section and of docs/regression-testing.md are what
the code prints (docs/oracle.md's are tests/test_oracle_docs_outputs.py's; the regression
example's worked run is tests/test_regress_user.py's and its entry count tests/test_regress.py's):
each shown command is run and the page's lines compared with what it prints."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from toolkit import oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def _readme_oracle_section():
    text = _read("README.md")
    return text.split("## Verify your own optimizer", 1)[1].split("\n## ", 1)[0]


def _readme_make_adam():
    block = re.findall(r"```python\n(.*?)```", _readme_oracle_section(), re.S)[0]
    code = block.split("report = oracle.verify(")[0]
    space = {}
    exec(compile(code, "README.md oracle example", "exec"), space)  # noqa: S102
    return space["make_adam"], block


def test_the_readmes_identify_comment_is_what_identify_prints():
    make_adam, block = _readme_make_adam()
    comment = re.search(r"print\(oracle\.identify\(make_adam, \"adam\"\)\.summary\)\s+#(.*)",
                        block).group(1)
    assert comment.strip() == "follows 'guide'; PyTorch's Adam is the same"
    summary = oracle.identify(make_adam, "adam").summary
    assert summary.splitlines()[0] == "adam: your implementation follows the 'guide' convention"
    assert "  PyTorch's adam is the same update as the 'guide' convention" in summary.splitlines()


def test_the_readmes_region_is_docs_oracles_tested_example():
    # the README quotes the region of docs/oracle.md's torch.optim.Adam example, which
    # tests/test_oracle_docs_outputs.py reruns
    (quoted,) = re.findall(r'\("(only for beta1 < [0-9.e-]+)"\)', _readme_oracle_section())
    blocks = re.findall(r"```text\n(.*?)```", _read("docs", "oracle.md"), re.S)
    torch_adam = [b for b in blocks if b.startswith("adam (pytorch convention, float64)")]
    assert len(torch_adam) == 1 and f"{quoted} (the worst case" in torch_adam[0], quoted


def test_the_golden_directory_compares_as_shown():
    text = _read("docs", "regression-testing.md")
    block = text.split("$ mxopt regress compare tests/data/golden\n", 1)[1].split("```", 1)[0]
    (shown,) = [line for line in block.splitlines() if line.strip()]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "toolkit", "regress", "compare",
                        os.path.join("tests", "data", "golden")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    printed = r.stdout.strip().splitlines()[-1]
    # the split between "same" and "within" (1 ulp) may differ with another libm (the page
    # says so); the count, the bound and the verdict may not
    total = re.match(r"(\d+) entries: ", shown).group(1)
    if " within" in printed:
        assert printed.startswith(f"{total} entries: ") and printed.endswith(
            "; bound 0 ulps; OK"), printed
    else:
        assert printed == shown, f"the page shows {shown!r}, the command prints {printed!r}"


def _oracle_md():
    return " ".join(_read("docs", "oracle.md").split())


def test_docs_oracles_refused_nan_message_is_the_codes():
    import pytest
    with pytest.raises(ValueError) as e:
        oracle.verify(lambda w, **h: (lambda g: w), "adam",
                      fixed={"learning_rate": float("nan")})
    assert str(e.value) == ("fixed['learning_rate'] = nan is refused by Adam: learning_rate "
                            "must be finite, got nan")
    assert f"`ValueError: {e.value}`" in _oracle_md()


def test_docs_oracles_region_between_two_pieces_is_the_codes():
    # docs/oracle.md: 'both give "only for momentum between 0 and 0.3" (an SGD wrong for
    # 0 < momentum < 0.3 only: 0 and 0.9 pass)', tests/test_oracle_variants_more.py's SGD
    from toolkit.oracle.space import Interval
    from test_oracle_variants_more import EXAMPLES, make_sgd_wrong_in_the_gap
    r = oracle.verify(make_sgd_wrong_in_the_gap, "sgd", convention="guide", dtype="float64",
                      examples=EXAMPLES, fixed=dict(clip_gradient=None),
                      ranges={"momentum": Interval(0.01, 0.29)})
    shown = "only for momentum between 0 and 0.3"
    assert f'both give "{shown}"' in _oracle_md()
    assert r.region.startswith(shown + " ("), r.region
