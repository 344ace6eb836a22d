"""What the Trainer and ``toolkit.torch`` call on an optimizer beside ``update``: a kernel step as
a value (``step_launches``, ``planned_step``) or run through a launcher (``launch_step``,
``plan_step``), the bookkeeping put back when a planned step fails (``restored_on_error``),
norms asked for first (``norm_inputs``), per-index host buffers and host-side state for the
states file. ``Optimizer`` derives from
:class:`TrainerHooks`."""
from __future__ import annotations

import contextlib

from ..backends import launches
from .bookkeeping import Counts

__all__ = ["TrainerHooks"]


class TrainerHooks:
    """The Trainer's seams (methods of ``Optimizer``)."""

    @contextlib.contextmanager
    def restored_on_error(self):
        """While the block runs, the optimizer's attributes (the bookkeeping a step changes:
        counts, ``num_update``, Nadam's schedule, LBSGD's phases...) are kept; if it raises,
        they are put back as they were (a shallow copy, its dicts copied; a
        ``toolkit.lr_scheduler`` schedule's ``state_dict``), so a step that plans every index
        before writing any array leaves nothing half-committed."""
        saved = {k: (dict(v) if isinstance(v, dict) else
                     v.copy() if isinstance(v, (Counts, set)) else v)
                 for k, v in self.__dict__.items()}
        # the schedule's state too (Factor's decays), where it can be saved: the toolkit's
        from ..lr_scheduler import LRScheduler
        sched = self.lr_scheduler
        sched_state = sched.state_dict() if isinstance(sched, LRScheduler) else None
        try:
            yield self
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            if sched_state is not None:
                sched.load_state_dict(sched_state)
            raise

    @property
    def takes_norms(self):
        """Whether this optimizer's steps may ask for per-tensor norms first
        (:meth:`norm_inputs` is its own)."""
        return type(self).norm_inputs is not TrainerHooks.norm_inputs

    def step_launches(self, index, weight, grad, state, t, lr, wd):
        """What the kernel step of ``index`` with the scalars ``(t, lr, wd)`` (from
        :meth:`step_scalars`) runs, as a value (``toolkit.backends.launches``): a ``Launch``, or
        a generator of them and of the requests their rows read; nothing runs until it is
        driven, and nothing is committed (the caller commits the counts of the whole step
        with :meth:`commit_counts`)."""
        return self.keyed(index, t, self._kernel_step(index, weight, grad, state, t, lr, wd))

    def launch_step(self, index, weight, grad, state, t, lr, wd, launcher):
        """:meth:`step_launches` run through ``launcher`` (a backend launcher), on arrays the
        caller has validated."""
        launches.run(self.step_launches(index, weight, grad, state, t, lr, wd), launcher)

    def planned_step(self, index, weight, grad, state):
        """One kernel step of ``index`` with its own scalars, as a generator of launches and
        requests (``launches.drive``), on arrays the caller has validated; the count is
        committed when it ends. For a step whose host code reads per-index state (Nadam's
        schedule, LBSGD's phase): the Trainer plans those index by index, in index order."""
        t, lr, wd = self._step_scalars(index)
        yield from launches.steps_of(self.step_launches(index, weight, grad, state, t, lr, wd))
        self._commit_step(index, t, lr)

    def plan_step(self, index, weight, grad, state, launcher):
        """:meth:`planned_step` run through ``launcher`` (a backend launcher)."""
        launches.run(self.planned_step(index, weight, grad, state), launcher)

    def host_buffers(self):
        """Names of per-index arrays shaped like the weight that the optimizer keeps outside
        ``state``; the Trainer binds views of its flat buffers to them."""
        return ()

    def bind_host_buffer(self, name, index, array):  # pragma: no cover - no buffers by default
        """Keep ``array`` (a view of the Trainer's flat buffer) as the ``name`` buffer of
        ``index`` (one of ``host_buffers()``)."""
        raise KeyError(name)

    def norm_inputs(self, index):
        """None, or what the next step of ``index`` takes per-tensor norms of (LBSGD's 'lars'):
        the Trainer computes them for a whole group in one reduction first."""
        return None

    def host_state(self):
        """``(json_dict, arrays)``: optimizer state kept outside ``state`` (e.g. Nadam's momentum
        schedule), for saving. Most optimizers keep none."""
        return {}, {}

    def check_host_state(self, data, host_arrays):
        """Check what ``host_state`` saved and return a function that restores it (called only
        once every other check of a load has passed)."""
        if data or host_arrays:
            raise ValueError(f"{type(self).__name__} keeps no host-side state, the file has "
                             f"{sorted(data) + sorted(host_arrays)}")
        return lambda: None
