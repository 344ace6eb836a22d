"""``python -m toolkit <command>`` (also the ``mxopt`` console script).

One subcommand per job; each is a module's ``main(argv) -> exit code``:

=========  ==========================================================================  =========
command    what                                                                        module
=========  ==========================================================================  =========
check      the oracle's proofs and every optimizer x backend x dtype against it        check
verify     a user's optimizer (``module:function``) against the oracle                 oracle.cli
identify   which convention (mxnet, guide, pytorch) a user's optimizer follows         oracle.cli
list       optimizers, conventions and backends available here                         oracle.cli
regress    record golden trajectories, or compare this machine against them           regress
accuracy   distribution of normalised error per optimizer x backend x dtype            accuracy
demo       every optimizer trains softmax regression on scikit-learn digits            demo
=========  ==========================================================================  =========

Exit codes: 0 success, 1 a check failed (``verify``: not passed; ``identify``: no convention;
``check``, ``regress compare``, ``accuracy``: an error above its bound), 2 usage error.
"""
import importlib
import importlib.util
import sys

#: command -> (module, function, one line)
COMMANDS = {
    "check": ("check", "main",
              "the oracle's proofs and every optimizer x backend x dtype against the oracle"),
    "verify": ("oracle.cli", "main_verify",
               "check your optimizer (module:function) against the oracle"),
    "identify": ("oracle.cli", "main_identify",
                 "name the convention (mxnet, guide, pytorch) your optimizer follows"),
    "list": ("oracle.cli", "main_list", "optimizers, conventions and backends available here"),
    "regress": ("regress", "main", "record golden trajectories, or compare against them"),
    "accuracy": ("accuracy", "main",
                 "normalised error per optimizer x backend x dtype: table and plot"),
    "demo": ("demo", "main",
             "every optimizer trains softmax regression on scikit-learn digits (Trainer)"),
    "bench": ("bench", "main",
              "benchmark suite: every optimizer against its memory floor, numpy and torch"),
    "launch": ("launch", "main", "run a training script on N MPI ranks (kvstore='dist_sync')"),
}


def _available():
    return {name: spec for name, spec in COMMANDS.items()
            if importlib.util.find_spec(f"toolkit.{spec[0]}") is not None}


def _main(argv):
    commands = _available()
    if not argv or argv[0] not in commands:
        lines = "\n".join(f"  {name:9s} {spec[2]}" for name, spec in commands.items())
        print(f"usage: mxopt <command> [options]   (or python -m toolkit <command>)\n\n"
              f"commands:\n{lines}\n\nmxopt <command> --help for a command's options",
              file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module, function, _ = commands[argv[0]]
    main = getattr(importlib.import_module(f"toolkit.{module}"), function)
    return main(argv[1:])


def console():
    """The ``mxopt`` console script."""
    sys.exit(_main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
