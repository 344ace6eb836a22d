"""``python -m toolkit.oracle.frameworks FRAMEWORK DTYPE``: one framework's audit rows in one
dtype as JSON on stdout (the subprocess of ``mxopt audit``; :func:`toolkit.oracle.conformance.
worker`)."""
import sys

from ..conformance import worker

sys.exit(worker(sys.argv[1:]))
