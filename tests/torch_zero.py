"""``ZeroRedundancyOptimizer`` over ``toolkit.torch.Adam`` with int8 states, in two gloo
processes (``tests/test_torch_held.py`` runs it in a subprocess with a time limit): ``python
tests/torch_zero.py DIR`` steps 4 parameters (2 a rank) three times, consolidates the state on
rank 0 and saves it, loads it into a fresh ZeroRedundancyOptimizer on both ranks, steps both two
more times, and prints one line per rank: ``rank R equal E keys K``: whether the loaded run's
weights equal the uninterrupted run's bit for bit, and the keys of the consolidated state of
parameter 0 (rank 0) or of the local optimizer's state after the load (rank 1)."""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

import toolkit.torch as tt


def _params():
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(64, 128, generator=g)) for _ in range(4)]


def _step(opt, params, s):
    g = torch.Generator().manual_seed(100 + s)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    opt.step()


def _run(rank, world, where):
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(where, 'init')}",
                            rank=rank, world_size=world)
    params = _params()
    opt = ZeroRedundancyOptimizer(params, optimizer_class=tt.Adam, lr=0.01, state_dtype="int8")
    for s in range(3):
        _step(opt, params, s)
    opt.consolidate_state_dict(to=0)
    path = os.path.join(where, "consolidated.pt")
    if rank == 0:
        sd = opt.state_dict()
        keys = sorted(sd["state"][0])
        torch.save(sd, path)
    dist.barrier()
    mine = [torch.nn.Parameter(p.detach().clone()) for p in params]
    other = ZeroRedundancyOptimizer(mine, optimizer_class=tt.Adam, lr=0.01, state_dtype="int8")
    other.load_state_dict(torch.load(path, weights_only=True))
    for s in range(3, 5):
        _step(opt, params, s)
        _step(other, mine, s)
    if rank == 1:
        keys = sorted(k for entry in other.optim.state.values() for k in entry)
    equal = all(torch.equal(a, b) for a, b in zip(params, mine))
    # each rank's line in a file of its own, printed by the parent: two processes printing
    # to one pipe interleaved their lines once
    with open(os.path.join(where, f"rank{rank}.txt"), "w") as f:
        f.write(f"rank {rank} equal {equal} keys {','.join(keys)}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(_run, args=(2, sys.argv[1]), nprocs=2, join=True)
    for r in range(2):
        with open(os.path.join(sys.argv[1], f"rank{r}.txt")) as f:
            print(f.read(), end="")
