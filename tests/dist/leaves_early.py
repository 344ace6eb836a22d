"""A rank that leaves mid-training with ``sys.exit(0)`` (found by a review of issue 19, item
2): rank 1 takes one step and exits cleanly while the others go on to a second step."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from toolkit import Parameter, Trainer  # noqa: E402

p = Parameter("w", shape=(3,), init=1.0)
t = Trainer([p], "sgd", kvstore="dist_sync")
for step in range(2):
    if step == 1 and t.rank == 1:
        sys.exit(0)
    p.grad()[...] = 1.0
    t.step(1)
