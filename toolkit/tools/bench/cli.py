"""``mxopt bench``'s command line (``python -m toolkit bench``; ``benchmarks/suite.py``)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .report import markdown_summary, print_report, write_plots
from .settings import DEFAULT_SIZES, DTYPES, FULL_SIZES, QUICK_SIZES, select_settings
from .suite import default_out, run_suite
from .torch_case import TORCH_CASES

__all__ = ["main", "build_parser"]


def _log2_list(text):
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated log2 sizes, got {text!r}")
    if not out or any(not 1 <= x <= 30 for x in out):
        raise argparse.ArgumentTypeError(f"log2 sizes must be in 1..30, got {text!r}")
    return out


def build_parser():
    ap = argparse.ArgumentParser(
        prog="mxopt bench",
        description="every optimizer against its memory-traffic floor, numpy and torch "
                    "(ratios measured interleaved in one run; table, JSON and plots)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the optimizers run (default: %(default)s)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help=f"sizes 2^{QUICK_SIZES[0]} and 2^{QUICK_SIZES[1]}, one setting per "
                           "optimizer, 3 repeats (default: neither: sizes 2^"
                           f"{', 2^'.join(map(str, DEFAULT_SIZES['cpu']))} on the CPU, to "
                           f"2^{DEFAULT_SIZES['cuda'][-1]} on CUDA)")
    mode.add_argument("--full", action="store_true",
                      help="every even power of two from 2^12 to 2^26 (CUDA: 2^28) "
                           "(default: off)")
    ap.add_argument("--sizes", type=_log2_list, default=None,
                    help="comma-separated log2 sizes (overrides --quick/--full; default: "
                         "those of the mode)")
    ap.add_argument("--optimizers", default=None,
                    help="comma-separated optimizer names or setting labels (default: all)")
    ap.add_argument("--dtypes", default="float32,float16",
                    help="float32 and/or float16 (float16 runs with multi_precision; "
                         "default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repetitions (default 5)")
    ap.add_argument("--batch-ms", type=float, default=5.0,
                    help="calls per timed batch: enough for about this many ms (default: "
                         "%(default)s)")
    ap.add_argument("--resnet-repeats", type=int, default=20,
                    help="timed repetitions of the Trainer cases (ResNet-50, many tensors, "
                         "toolkit.torch; default: %(default)s, --quick: 5)")
    ap.add_argument("--no-resnet", action="store_true",
                    help="skip the ResNet-50 Trainer case (default: run it)")
    ap.add_argument("--no-many", action="store_true",
                    help="skip the many-tensor Trainer case (2000 tensors of 1024; default: "
                         "run it)")
    ap.add_argument("--no-torch", action="store_true",
                    help="do not compare against torch (default: compare where torch is "
                         "installed)")
    ap.add_argument("--torch-cases", default=None, metavar="LIST",
                    help="the toolkit.torch cases to run, comma-separated, of "
                         f"{','.join(label for label, _ in TORCH_CASES)} (default: all; "
                         "--quick: many_tensors; 'none': none); they need torch")
    ap.add_argument("--no-kernel-cache", action="store_true",
                    help="compile the toolkit's CPU kernels in this process instead of loading "
                         "numba's on-disk cache (a diagnostic; compiling adds a minute or two; "
                         "default: the cache)")
    ap.add_argument("--no-plot", action="store_true", help="write no PNGs (default: write them)")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress on stderr (default: progress)")
    ap.add_argument("--markdown", default=None, metavar="PATH",
                    help="also write the headline (machine, ratio table, targets) as Markdown "
                         "(default: none)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="directory for suite_<device>.json and its PNGs (default: the working "
                         "directory; the repository's recorded results only when asked: --out "
                         "benchmarks/results); a path ending in .json names the JSON itself")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    if args.device == "cuda":
        from ...backends import cuda_available
        ok, why = cuda_available()
        if ok and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
            ok, why = False, "NUMBA_ENABLE_CUDASIM is set: the simulator cannot be benchmarked"
        if not ok:
            print(f"mxopt bench: --device cuda cannot run: {why}", file=sys.stderr)
            return 2
    try:
        settings = select_settings(args.optimizers.split(",") if args.optimizers else None,
                                   quick=args.quick and not args.optimizers)
    except ValueError as exc:
        print(f"mxopt bench: {exc}", file=sys.stderr)
        return 2
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not dtypes or any(d not in DTYPES for d in dtypes):
        print(f"mxopt bench: --dtypes must be among {DTYPES}, got {args.dtypes!r}",
              file=sys.stderr)
        return 2
    if args.sizes:
        sizes = args.sizes
    elif args.quick:
        sizes = list(QUICK_SIZES)
    elif args.full:
        sizes = list(FULL_SIZES[args.device])
    else:
        sizes = list(DEFAULT_SIZES[args.device])
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 5)
    if repeats < 1:
        print("mxopt bench: --repeats must be >= 1", file=sys.stderr)
        return 2
    known = [label for label, _ in TORCH_CASES]
    if args.torch_cases is None:
        adapter_cases = ["many_tensors"] if args.quick else known
    elif args.torch_cases == "none":
        adapter_cases = []
    else:
        adapter_cases = [c.strip() for c in args.torch_cases.split(",") if c.strip()]
        unknown = [c for c in adapter_cases if c not in known]
        if unknown:
            print(f"mxopt bench: unknown --torch-cases {unknown}; known: {', '.join(known)} "
                  "or none", file=sys.stderr)
            return 2
    result = run_suite(device=args.device, settings=settings, sizes=sizes, dtypes=dtypes,
                       repeats=repeats, batch_ms=args.batch_ms, resnet=not args.no_resnet,
                       resnet_repeats=(5 if args.quick else args.resnet_repeats),
                       use_torch=not args.no_torch, many=not args.no_many,
                       progress=not args.no_progress,
                       console=Console(stderr=True), kernel_cache=not args.no_kernel_cache,
                       adapter_cases=adapter_cases)
    print_report(result, console)
    out = default_out(args.device, args.out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    console.print(f"wrote {out}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_summary(result))
        console.print(f"wrote {args.markdown}")
    if not args.no_plot:
        paths = write_plots(result, out)
        for p in paths:
            console.print(f"wrote {p}")
        if not paths:
            console.print("matplotlib is not installed: no plots")
    return 0
