"""Run on every rank by tests/dist/test_dist_nonfinite.py: a distributed step with
``skip_nonfinite=True`` where a NaN or an infinity is on one rank only. Writes one JSON file
per rank into the folder ``sys.argv[1]``: the skipped names of each step and the SHA-256 of the
final weights' bytes."""
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root

from toolkit import Parameter, Trainer  # noqa: E402

SHAPES = [(3, 4), (5,), (300,)]

params = [Parameter(f"p{k}", shape=s, init=0.5 + k) for k, s in enumerate(SHAPES)]
trainer = Trainer(params, "adam", {"learning_rate": 0.01}, kvstore="dist_sync")
rank = trainer.rank
skipped = []
for step in range(3):
    for k, p in enumerate(params):
        g = np.random.default_rng([step, rank, k]).standard_normal(p.shape).astype(np.float32)
        if step == 1 and rank == 1 and k == 0:
            g[2, 1] = np.nan            # on rank 1 only: the sum is NaN on every rank
        if step == 2 and rank == 0 and k == 2:
            g[-1] = np.inf
        p.grad()[...] = g
    skipped.append(list(trainer.step(4, skip_nonfinite=True)))
result = {"rank": rank, "skipped": skipped, "num_update": trainer.optimizer.num_update,
          "weights": [hashlib.sha256(np.asarray(p.data()).tobytes()).hexdigest() for p in params]}
# a file per rank: the ranks' printed lines can be interleaved in the job's output
with open(os.path.join(sys.argv[1], f"nonfinite-rank{rank}.json"), "w") as f:
    json.dump(result, f)
