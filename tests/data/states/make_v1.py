"""Wrote tests/data/states/v1_adam_factor.states with the version-1 writer of commit fd86f83 (before
issue 19 introduced version 2); kept to show how the file was made, not to be rerun."""
import numpy as np
from toolkit import Parameter, Trainer, lr_scheduler

def build():
    params = [Parameter(f"p{i}", init=np.linspace(-1, 1, n, dtype=np.float32).reshape(s))
              for i, (n, s) in enumerate([(12, (3, 4)), (5, (5,))])]
    t = Trainer(params, "adam", {"learning_rate": 0.1,
                                 "lr_scheduler": lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1)})
    return t, params

t, params = build()
for k in range(3):
    for p in params:
        p.set_grad(np.full(p.shape, 0.25 * (k + 1), np.float32))
    t.step(1)
t.save_states("tests/data/states/v1_adam_factor.states")
