"""``python -m toolkit <command>`` (also the ``mxopt`` console script).

One subcommand per job; each is a module's ``main(argv) -> exit code``:

=========  ==========================================================================  =========
command    what                                                                        module
=========  ==========================================================================  =========
check      the oracle's proofs and every optimizer x backend x dtype against it        check
verify     a user's optimizer (``module:function``) against the oracle                 oracle.cli
identify   which convention (mxnet, guide, pytorch) a user's optimizer follows         oracle.cli
list       optimizers, conventions and backends available here                         oracle.cli
audit      conformance table of the installed frameworks' optimizers (torch, optax)   oracle.conformance
regress    record golden trajectories, or compare this machine against them           regress
accuracy   distribution of normalised error per optimizer x backend x dtype            accuracy
demo       every optimizer trains softmax regression on scikit-learn digits            demo
=========  ==========================================================================  =========

``mxopt --version`` prints the version; an unknown command is a usage error that names it and
lists the commands.

Exit codes: 0 success, 1 a check failed (``verify``: not passed; ``identify``: no convention;
``check``, ``regress compare``, ``accuracy``: an error above its bound), 2 usage error, 3 an
internal error of ``verify`` or ``identify`` (a bug of the oracle; the message asks for a report).
"""
import importlib
import importlib.util
import sys

#: command -> (module, function, one line)
COMMANDS = {
    "check": ("tools.check", "main",
              "the oracle's proofs and every optimizer x backend x dtype against the oracle"),
    "verify": ("oracle.cli", "main_verify",
               "check your optimizer (module:function) against the oracle"),
    "identify": ("oracle.cli", "main_identify",
                 "name the convention (mxnet, guide, pytorch) your optimizer follows"),
    "list": ("oracle.cli", "main_list", "optimizers, conventions and backends available here"),
    "audit": ("oracle.conformance", "main",
              "the conformance table of the installed frameworks' optimizers (torch, optax)"),
    "regress": ("tools.regress", "main", "record golden trajectories, or compare against them"),
    "accuracy": ("tools.accuracy", "main",
                 "normalised error per optimizer x backend x dtype: table and plot"),
    "demo": ("tools.demo", "main",
             "every optimizer trains softmax regression on scikit-learn digits (Trainer)"),
    "bench": ("tools.bench", "main",
              "benchmark suite: every optimizer against its memory floor, numpy and torch"),
    "launch": ("mpi_jobs", "main", "run a training script on N MPI ranks (kvstore='dist_sync')"),
}


def _available():
    return {name: spec for name, spec in COMMANDS.items()
            if importlib.util.find_spec(f"toolkit.{spec[0]}") is not None}


def _parser(commands):
    import argparse
    from . import __version__
    lines = "\n".join(f"  {name:9s} {spec[2]}" for name, spec in commands.items())
    ap = argparse.ArgumentParser(
        prog="mxopt", usage="mxopt [-h] [--version] <command> [options]   "
                            "(or python -m toolkit <command>)",
        description="The MXNet 1.x optimizers, their oracle and fast kernels.",
        epilog=f"commands:\n{lines}\n\nmxopt <command> --help for a command's options",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"mxopt {__version__}")
    ap.add_argument("command", choices=list(commands), metavar="<command>",
                    help="one of the commands below")
    return ap


def _main(argv):
    commands = _available()
    argv = list(argv)
    if not argv or argv[0].startswith("-") or argv[0] not in commands:
        # the command line before the command (--help, --version, or an unknown command):
        # argparse says what was wrong ("invalid choice: ... (choose from ...)")
        ap = _parser(commands)
        if not argv:
            ap.print_usage(sys.stderr)
            print(f"\n{ap.epilog}", file=sys.stderr)
            return 2
        try:
            if argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
                ap.error(f"unrecognized option {argv[0]!r} (the command comes first: "
                         f"mxopt <command> {argv[0]} ...)")
            ap.parse_args(argv[:1])
        except SystemExit as exc:
            if exc.code:
                print(ap.epilog, file=sys.stderr)
            return int(exc.code or 0)
    module, function, _ = commands[argv[0]]
    main = getattr(importlib.import_module(f"toolkit.{module}"), function)
    return main(argv[1:])


def console():
    """The ``mxopt`` console script."""
    sys.exit(_main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
