"""``python -m toolkit <command>`` (also the ``mxopt`` console script).

Commands: ``check`` (the oracle's proofs and every backend against the oracle, toolkit/check.py),
``demo`` (every optimizer trains softmax regression through the Trainer, toolkit/demo.py).
"""
import sys

COMMANDS = {
    "check": "the oracle's proofs and every optimizer x backend x dtype against the oracle",
    "demo": "every optimizer trains softmax regression on scikit-learn digits (Trainer)",
}


def _main(argv):
    if not argv or argv[0] not in COMMANDS:
        lines = "\n".join(f"  {name:6s} {what}" for name, what in COMMANDS.items())
        print(f"usage: python -m toolkit <command> [options]\n\ncommands:\n{lines}",
              file=sys.stderr)
        return 2
    if argv[0] == "check":
        from .check import main
    else:
        from .demo import main
    return main(argv[1:])


def console():
    """The ``mxopt`` console script."""
    sys.exit(_main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
