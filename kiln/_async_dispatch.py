"""Asynchronous dispatch of compiled programs (JAX's ``jax_cpu_enable_async_dispatch``).

A cached ``jit`` call whose compiled program is ready returns at once: the program is
queued to one dispatch thread, and the call's outputs are Arrays holding a
:class:`Pending` (their shape and dtype, known from the program's output types) until it
has run. Anything that reads an output's values (``np.asarray``, printing, an eager
operation, ``block_until_ready``) waits for it; metadata (``shape``, ``dtype``) does not;
a later ``jit`` call taking a pending output is queued behind the program that makes it
(one thread, first in first out, so its inputs are ready when it runs). Python thus
prepares the next step (the next batch, the next call) while the current one runs, as
with JAX. An error raised while a program runs is raised where its outputs are read.

Only what is safe to run off the calling thread is dispatched this way (the caller,
``kiln.jitting``, decides): calls from the main thread, of programs with no host islands
(no Python on the dispatch thread), outside ``kiln.profiler`` traces, with no donated or
laid-out (sharded) arguments and results. Everything else runs synchronously as before.

At most :data:`MAX_IN_FLIGHT` programs wait; a call beyond that waits for the oldest.
``fork`` drains the queue first (the child gets no thread; it starts its own when it
needs one), and so does interpreter exit.

What it must not hold: which calls are dispatched asynchronously (``kiln.jitting``) or
how a program runs (``kiln.backends.cpu``).
"""
from __future__ import annotations

import atexit
import os
import queue
import threading

import numpy as np

#: Programs queued or running at most; a call beyond this waits for the oldest.
MAX_IN_FLIGHT = 512


class _Job:
    """One queued program run: its outputs, or the exception it raised, once done."""

    __slots__ = ("done", "outs", "error")

    def __init__(self):
        self.done = threading.Event()
        self.outs = None
        self.error = None

    def result(self, i: int):
        if not self.done.is_set():
            self.done.wait()
        if self.error is not None:
            raise self.error
        return self.outs[i]


class Pending:
    """What an Array holds while the program computing it is queued or running: its
    shape and dtype; :meth:`wait` gives the value (or raises the program's error)."""

    __slots__ = ("job", "index", "shape", "dtype")

    def __init__(self, job: _Job, index: int, shape, dtype):
        self.job = job
        self.index = index
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def ready(self) -> bool:
        return self.job.done.is_set()

    def wait(self):
        return self.job.result(self.index)


_state = {"thread": None, "queue": None, "slots": None}
_start_lock = threading.Lock()


def _worker(q, slots) -> None:
    while True:
        item = q.get()
        fn, vals, job = item
        item = None
        try:
            vals = [v.wait() if type(v) is Pending else v for v in vals]
            job.outs = fn(vals)
        except BaseException as e:     # reported where an output is read
            job.error = e
        finally:
            job.done.set()
            slots.release()
            fn = vals = job = None


def _queue():
    q = _state["queue"]
    if q is not None and _state["thread"] is not None:
        return q
    with _start_lock:
        if _state["queue"] is None or _state["thread"] is None:
            q = queue.SimpleQueue()
            slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
            t = threading.Thread(target=_worker, args=(q, slots), name="kiln-dispatch",
                                 daemon=True)
            _state.update(queue=q, slots=slots, thread=t)
            t.start()
    return _state["queue"]


def submit(fn, vals: list, out_avals) -> list[Pending]:
    """Queue ``fn(values)`` (a list of output arrays) for the dispatch thread; ``vals``
    may hold :class:`Pending` values of earlier calls. Returns one :class:`Pending` per
    output type in ``out_avals``."""
    q = _queue()
    _state["slots"].acquire()
    job = _Job()
    q.put((fn, vals, job))
    return [Pending(job, i, tuple(a.shape), np.dtype(a.dtype))
            for i, a in enumerate(out_avals)]


def drain() -> None:
    """Wait until every program queued so far has run (``jax.effects_barrier``, fork,
    exit, unloading programs)."""
    if _state["thread"] is None:
        return
    q = _queue()
    _state["slots"].acquire()
    job = _Job()
    q.put((lambda vals: [], [], job))
    job.done.wait()


def _after_fork_in_child() -> None:
    # The parent's thread does not exist here; the next call starts a new one.
    global _start_lock
    _start_lock = threading.Lock()
    _state.update(queue=None, slots=None, thread=None)


os.register_at_fork(before=drain, after_in_child=_after_fork_in_child)
atexit.register(drain)
