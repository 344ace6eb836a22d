"""Data-parallel training on several MPI ranks: the demo's softmax regression on scikit-learn's
digits (``toolkit/tools/demo.py``), each rank on its own shard of every global batch.

    mxopt launch -n 2 examples/train_dist.py                # or: mpiexec -n 2 python this.py
    mxopt launch -n 2 examples/train_dist.py --compress 0.01 --epochs 5 --checkpoint /tmp/ck

Every rank builds the same Trainer with ``kvstore="dist_sync"``; each step sums the ranks'
gradients and divides by the **global** batch (``step(global_batch)``: MXNet's Gluon divides the
worker-summed gradient by what ``step`` is given), so the run follows one process training on the
concatenated batch. ``docs/distributed.md`` explains the numbers, compression, checkpoints and
faults.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolkit import Parameter, Trainer  # noqa: E402
from toolkit.tools.demo import load_digits, softmax_loss_grad  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    ap.add_argument("--compress", type=float, default=None,
                    help="2-bit gradient compression with this threshold")
    ap.add_argument("--checkpoint", default=None,
                    help="folder: rank 0 saves weights and trainer states after every epoch")
    args = ap.parse_args(argv)

    (x, y), (xt, yt) = load_digits()
    w = Parameter("softmax_weight", shape=(10, x.shape[1]))
    b = Parameter("softmax_bias", shape=(10,), wd_mult=0.0)
    comp = None if args.compress is None else {"type": "2bit", "threshold": args.compress}
    trainer = Trainer({"softmax_weight": w, "softmax_bias": b}, args.optimizer,
                      {"learning_rate": args.lr}, kvstore="dist_sync", compression_params=comp)
    rank, workers = trainer.rank, trainer.num_workers
    global_batch = args.batch * workers
    rng = np.random.default_rng(1)   # the same permutation on every rank
    for epoch in range(args.epochs):
        order = rng.permutation(len(y))
        total = 0.0
        for start in range(0, len(y) - global_batch + 1, global_batch):
            shard = order[start + rank * args.batch:start + (rank + 1) * args.batch]
            loss, gw, gb = softmax_loss_grad(w.data(), b.data(), x[shard], y[shard])
            total += loss
            w.set_grad(gw)
            b.set_grad(gb)
            trainer.step(global_batch)
        accuracy = float(np.mean(np.argmax(xt @ w.data().T + b.data(), axis=1) == yt))
        if rank == 0:
            sent = trainer.kvstore.last_step_bytes
            print(f"epoch {epoch + 1}: loss on rank 0's shards {total / (len(y) / workers):.4f}, "
                  f"test accuracy {accuracy:.3f}, {sent['payload_bytes']} bytes per rank per "
                  f"step ({sent['uncompressed_bytes']} uncompressed)", flush=True)
        if args.checkpoint:
            os.makedirs(args.checkpoint, exist_ok=True)
            trainer.save_states(os.path.join(args.checkpoint, "trainer.states"))  # rank 0 writes
            if rank == 0:
                np.savez(os.path.join(args.checkpoint, "weights.npz"), w=w.data(), b=b.data())
    digest = trainer.kvstore.check_in_sync()    # raises on every rank if any rank differs
    if rank == 0:
        print(f"{workers} ranks hold the same parameters and states (sha256 {digest[:16]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
