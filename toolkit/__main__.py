"""``python -m toolkit check``: see toolkit/check.py."""
import sys


def _main(argv):
    if not argv or argv[0] != "check":
        print("usage: python -m toolkit check [--seed N] [--cases N]", file=sys.stderr)
        return 2
    from .check import main
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
