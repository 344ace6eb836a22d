"""Issue 19, item 1's reproducer: rank 1 fails before anything imports mpi4py, while the other
ranks start MPI and build a distributed Trainer (whose MPI start-up then waits for rank 1).
With the argument ``sleep``, rank 1 starts MPI instead and then sleeps, never building a
Trainer: the others wait in the Trainer's duplication of the communicator."""
import os
if os.environ.get("PMI_RANK") == "1":
    import sys
    if sys.argv[1:] == ["sleep"]:
        import time
        from mpi4py import MPI  # noqa: F401 - MPI_Init
        time.sleep(120)
    raise RuntimeError("rank 1 fails before MPI is started")

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from toolkit import Parameter, Trainer  # noqa: E402

p = Parameter("w", shape=(3,), init=1.0)
t = Trainer([p], "sgd", kvstore="dist_sync")
print(f"rank {t.rank}: built a Trainer", flush=True)
