"""Record MXNet 1.9.1 learning-rate schedules as exact numbers, for the parity test.

Run it with the Python that has MXNet 1.9.1 installed (a separate virtualenv; MXNet 1.9.1 needs
numpy < 1.24), from the repository root:

    /tmp/mxvenv/bin/python tests/data/mxnet/lr_scheduler_gen.py [--force] [--output PATH]

For each configuration in CASES it builds the MXNet scheduler, optionally overwrites its
``base_lr`` after construction (what an optimizer with its own ``learning_rate`` does), calls it
with the listed update counts in order on that one object (schedulers are stateful) and stores
every returned rate as ``float.hex()``, so the test compares bit for bit. The output,
``lr_scheduler.json`` next to this script, also holds a provenance block. An existing output is
never overwritten unless ``--force`` is given.

``tests/test_lr_scheduler.py`` reads the JSON; it does not need MXNet.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import sys
import tempfile

ONE_TO_SIXTY = list(range(1, 61))

# (name, class name, constructor kwargs, base_lr assigned after construction or None, calls)
CASES = [
    ("factor_step7_factor0.9", "FactorScheduler",
     dict(step=7, factor=0.9, base_lr=0.1), None, ONE_TO_SIXTY),
    ("factor_stop_factor_lr_reached", "FactorScheduler",
     dict(step=4, factor=0.3, stop_factor_lr=2e-5, base_lr=0.05), None, ONE_TO_SIXTY),
    ("factor_dyadic_stop_factor_lr_reached", "FactorScheduler",
     dict(step=3, factor=0.5, stop_factor_lr=1e-4, base_lr=0.1), None, ONE_TO_SIXTY),
    ("factor_base_lr_below_stop_factor_lr", "FactorScheduler",
     dict(step=5, factor=0.5, stop_factor_lr=1e-3, base_lr=1e-4), None, ONE_TO_SIXTY),
    ("factor_warmup_linear", "FactorScheduler",
     dict(step=5, factor=0.7, base_lr=0.05, warmup_steps=8, warmup_begin_lr=0.001,
          warmup_mode="linear"), None, ONE_TO_SIXTY),
    ("factor_warmup_constant_stop", "FactorScheduler",
     dict(step=4, factor=0.8, stop_factor_lr=0.01, base_lr=0.3, warmup_steps=10,
          warmup_begin_lr=0.01, warmup_mode="constant"), None, ONE_TO_SIXTY),
    ("factor_warmup_linear_base_lr_overwritten", "FactorScheduler",
     dict(step=6, factor=0.5, base_lr=1.0, warmup_steps=5), 0.001, ONE_TO_SIXTY),
    ("factor_jumps_repeats_and_decreases", "FactorScheduler",
     dict(step=4, factor=0.9, stop_factor_lr=1e-3, base_lr=0.2),
     None, [0, 1, 9, 9, 8, 3, 17, 40, 39, 41, 60, 1000, 7]),
    ("multifactor", "MultiFactorScheduler",
     dict(step=[10, 20, 35], factor=0.3, base_lr=0.2), None, ONE_TO_SIXTY),
    ("multifactor_warmup_linear", "MultiFactorScheduler",
     dict(step=[12, 30, 45, 50], factor=0.5, base_lr=0.1, warmup_steps=10,
          warmup_begin_lr=0.02, warmup_mode="linear"), None, ONE_TO_SIXTY),
    ("multifactor_warmup_constant_base_lr_overwritten", "MultiFactorScheduler",
     dict(step=[5, 15, 25], factor=0.7, base_lr=0.5, warmup_steps=8, warmup_begin_lr=0.05,
          warmup_mode="constant"), 0.01, ONE_TO_SIXTY),
    ("poly_pwr2", "PolyScheduler",
     dict(max_update=50, base_lr=0.1, pwr=2), None, ONE_TO_SIXTY),
    ("poly_pwr1_final_lr", "PolyScheduler",
     dict(max_update=45, base_lr=0.3, pwr=1, final_lr=0.01), None, ONE_TO_SIXTY),
    ("poly_pwr2_final_lr_warmup_constant", "PolyScheduler",
     dict(max_update=55, base_lr=0.1, pwr=2, final_lr=0.001, warmup_steps=6,
          warmup_begin_lr=0.005, warmup_mode="constant"), None, ONE_TO_SIXTY),
    ("poly_pwr0.9_final_lr_warmup_linear_base_lr_overwritten", "PolyScheduler",
     dict(max_update=40, base_lr=0.02, pwr=0.9, final_lr=1e-4, warmup_steps=5,
          warmup_begin_lr=0.0, warmup_mode="linear"), 0.5, ONE_TO_SIXTY),
    ("cosine", "CosineScheduler",
     dict(max_update=40, base_lr=0.1), None, ONE_TO_SIXTY),
    ("cosine_final_lr_warmup_linear", "CosineScheduler",
     dict(max_update=50, base_lr=0.5, final_lr=0.05, warmup_steps=10, warmup_begin_lr=0.0,
          warmup_mode="linear"), None, ONE_TO_SIXTY),
    ("cosine_final_lr_warmup_constant_base_lr_overwritten", "CosineScheduler",
     dict(max_update=30, base_lr=1.0, final_lr=0.1, warmup_steps=3, warmup_begin_lr=0.2,
          warmup_mode="constant"), 0.001, ONE_TO_SIXTY),
    ("cosine_first_call_past_max_update_then_jumps", "CosineScheduler",
     dict(max_update=20, base_lr=0.4, final_lr=0.02), 0.003, [25, 5, 30, 19, 40, 20, 60]),
]


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _format(provenance, cases):
    """JSON with one line per field of a case, so that a diff shows which values changed."""
    lines = ["{", ' "provenance": ' + json.dumps(provenance, indent=2).replace("\n", "\n ") + ",",
             ' "cases": [']
    for i, case in enumerate(cases):
        fields = [f'   {json.dumps(k)}: {json.dumps(v)}' for k, v in case.items()]
        lines.append("  {\n" + ",\n".join(fields) + "\n  }" + ("," if i + 1 < len(cases) else ""))
    lines += [" ]", "}"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "lr_scheduler.json"))
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")
    args = parser.parse_args(argv)
    if os.path.exists(args.output) and not args.force:
        sys.exit(f"refusing to overwrite {args.output}; pass --force to regenerate it")

    import mxnet
    import numpy
    from mxnet import lr_scheduler

    if mxnet.__version__ != "1.9.1":
        sys.exit(f"these numbers must come from MXNet 1.9.1, this is {mxnet.__version__}")

    cases = []
    for name, cls_name, kwargs, set_base_lr, calls in CASES:
        sched = getattr(lr_scheduler, cls_name)(**kwargs)
        if set_base_lr is not None:
            sched.base_lr = set_base_lr
        lrs = []
        for n in calls:
            lr = sched(n)
            if not isinstance(lr, (int, float)):
                raise TypeError(f"{name}: MXNet returned {type(lr).__name__} at n={n}")
            lrs.append(float(lr).hex())
        cases.append({"name": name, "class": cls_name, "kwargs": kwargs,
                      "set_base_lr": set_base_lr, "calls": list(calls), "lrs": lrs})

    provenance = {
        "what": "learning rates returned by mxnet.lr_scheduler classes, one scheduler object per "
                "case, called with 'calls' in order; 'set_base_lr' (if not null) was assigned to "
                "the scheduler's base_lr right after construction; values are float.hex()",
        "mxnet_version": mxnet.__version__,
        "mxnet_lr_scheduler_py_sha256": _sha256(lr_scheduler.__file__),
        "numpy_version": numpy.__version__,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "libc": " ".join(platform.libc_ver()),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "command": "/tmp/mxvenv/bin/python tests/data/mxnet/lr_scheduler_gen.py"
                   + "".join(" " + a for a in (argv if argv is not None else sys.argv[1:])),
        "generator": "tests/data/mxnet/lr_scheduler_gen.py",
    }
    text = _format(provenance, cases)
    if json.loads(text) != {"provenance": provenance, "cases": cases}:
        raise AssertionError("formatted JSON does not read back as the recorded data")

    out_dir = os.path.dirname(os.path.abspath(args.output))
    fd, tmp = tempfile.mkstemp(prefix=".lr_scheduler.", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the data file is meant to be shared
        os.replace(tmp, args.output)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"wrote {len(cases)} cases to {args.output}")


if __name__ == "__main__":
    main()
