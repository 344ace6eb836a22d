"""Benchmark suite: every optimizer against its memory-traffic floor, unfused numpy and PyTorch,
float32 and float16 multi-precision, 2^12 to 2^26 elements, plus one Trainer step over ResNet-50's
161 tensors against torch's fused Adam. The logic lives in the package ``toolkit/tools/bench/`` (also
``python -m toolkit bench`` / ``mxopt bench``); see its docstring for the method.

    python benchmarks/suite.py [--quick | --full] [--device cpu|cuda] [--out DIR | PATH.json]

Writes suite_<device>.json and, beside it, suite_<device>_bandwidth.png and
suite_<device>_ratios.png to the working directory or ``--out DIR`` (the recorded results:
``--out benchmarks/results``). The default run takes a few minutes on a 2-core machine.
"""
from __future__ import annotations

import os
import sys

try:
    from toolkit.tools.bench import main
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from toolkit.tools.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
