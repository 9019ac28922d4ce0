"""Asynchronous dispatch of compiled programs (JAX's ``jax_cpu_enable_async_dispatch``).

A cached ``jit`` call whose compiled program is ready returns at once: the program is
queued to one dispatch thread, and the call's outputs are Arrays holding a
:class:`Pending` (their shape and dtype, known from the program's output types) until it
has run. Anything that reads an output's values (``np.asarray``, printing, an eager
operation, ``block_until_ready``) waits for it; metadata (``shape``, ``dtype``) does not;
a later ``jit`` call taking a pending output is queued behind the program that makes it
(one thread, first in first out, so its inputs are ready when it runs). Python thus
prepares the next step (the next batch, the next call) while the current one runs, as
with JAX.

The dispatch thread is native (``kiln_rt``'s queue, ``kiln/compiler/csrc/runtime.c``):
the calling thread prepares what a run needs (inputs converted, temporaries, the data
pointers of every buffer; an error such as a deleted argument is raised there, by the
call) and queues the program's segments; the thread allocates the outputs (a queued
program's outputs cost no memory before it runs: Python may run far ahead) and runs the
segments without ever taking the GIL, so a main thread busy in Python never delays it.
No memory for an output is raised where that output (or one computed from it) is read.
The buffers stay referenced here until their job has run (:data:`_in_flight`).

Only what is safe to run off the calling thread is dispatched this way (the caller,
``kiln.jitting``, decides): calls from the main thread, of programs with no host islands
(no Python on the dispatch thread), outside ``kiln.profiler`` traces, with no donated or
laid-out (sharded) arguments and results. Everything else runs synchronously as before.

At most :data:`MAX_IN_FLIGHT` programs wait; a call beyond that waits for the oldest.
``fork`` drains the queue first (the child starts its own thread when it needs one), and
so does interpreter exit.

What it must not hold: which calls are dispatched asynchronously (``kiln.jitting``) or
how a program runs (``kiln.backends.cpu``, ``kiln.compiler.build.executable``).
"""
from __future__ import annotations

import atexit
import collections
import math
import os
import threading

import numpy as np

#: Programs queued or running at most; a call beyond this waits for the oldest.
MAX_IN_FLIGHT = 512

# (seq, what the job's native run reads and writes) for each job not known to be done;
# oldest first.
_in_flight: collections.deque = collections.deque()
_queue: list = [None]       # the kiln_rt module (its queue functions), once loaded
_sweep_lock = threading.Lock()


class _Job:
    """One queued program run: its outputs, ``(kiln_rt.obuf, shape, dtype)`` each (memory
    allocated and written by the dispatch thread when job ``seq`` runs), and their arrays
    once read."""

    __slots__ = ("seq", "specs", "arrays")

    def __init__(self, seq: int, specs: list):
        self.seq = seq
        self.specs = specs
        self.arrays = None

    def done(self) -> bool:
        q = _queue[0]
        if q.completed() < self.seq:
            return False
        if _in_flight and _in_flight[0][0] <= self.seq:
            _sweep(q)
        return True

    def result(self, i: int):
        q = _queue[0]
        if q.completed() < self.seq:
            q.wait(self.seq)
        if _in_flight and _in_flight[0][0] <= self.seq:
            _sweep(q)       # what ran is no longer referenced from here
        arrays = self.arrays
        if arrays is None:
            arrays = self.arrays = [None] * len(self.specs)
        a = arrays[i]
        if a is None:
            buf, shape, dtype = self.specs[i]
            a = arrays[i] = buf.array(shape, dtype)   # MemoryError: no memory for it
            # the buffer stays with the queued programs still reading it (kiln.donation
            # counts references: this array is reusable once they have run)
            self.specs[i] = (None, shape, dtype)
        return a


class Pending:
    """What an Array holds while the program computing it is queued or running: its
    shape and dtype; :meth:`wait` gives the value (or raises the ``MemoryError`` of an
    output the program could not have)."""

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
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def ready(self) -> bool:
        return self.job.done()

    def wait(self):
        return self.job.result(self.index)

    def buffer(self):
        """The ``kiln_rt.obuf`` the queued program writes, or its array once read (for a
        later queued program's inputs: it runs after this one)."""
        job = self.job
        buf = job.specs[self.index][0]
        return buf if buf is not None else job.arrays[self.index]


def available() -> bool:
    """Whether the native queue exists (the runtime extension is built and loaded)."""
    q = _queue[0]
    if q is None:
        from kiln.compiler.build.runtime import native_queue
        q = _queue[0] = native_queue()
    return q is not None


def _sweep(q) -> None:
    with _sweep_lock:       # readers on any thread sweep too
        done = q.completed()
        while _in_flight and _in_flight[0][0] <= done:
            _in_flight.popleft()


def new_buffer(nbytes: int):
    """An output buffer for a queued program (``kiln_rt.obuf``: no memory until it runs)."""
    return _queue[0].obuf(nbytes)


def submit(plan, bufs: list, outs: list, keep, specs: list,
           out_avals) -> tuple[int, list[Pending]]:
    """Queue the native plan ``plan`` (``kiln_rt.make_plan``) over the buffer list
    ``bufs`` (inputs and temporaries in place: arrays, or buffers of programs queued
    before; its outputs: the buffers ``outs``, from :func:`new_buffer`, which the dispatch
    thread allocates when it runs the plan). ``keep`` (the executable) and ``bufs`` stay
    referenced until then. ``specs``: per output, ``(buffer, shape, dtype)``. Returns
    the job's sequence number and one :class:`Pending` per output type in
    ``out_avals``. Requires
    :func:`available`."""
    q = _queue[0]
    _sweep(q)
    if len(_in_flight) >= MAX_IN_FLIGHT:
        q.wait(_in_flight[0][0])
        _sweep(q)
    seq = q.submit_plan(plan, bufs, outs)
    _in_flight.append((seq, (keep, bufs)))
    job = _Job(seq, specs)
    return seq, [Pending(job, i, tuple(a.shape), np.dtype(a.dtype))
                 for i, a in enumerate(out_avals)]


def completed(seq: int) -> bool:
    """Whether job ``seq`` (0: none) has run."""
    q = _queue[0]
    return seq <= 0 or q is None or q.completed() >= seq


def drain() -> None:
    """Wait until every program queued so far has run (``jax.effects_barrier``, fork,
    exit, unloading programs)."""
    q = _queue[0]
    if q is None:
        return
    q.wait(q.submitted())
    _sweep(q)


def _after_fork_in_child() -> None:
    # The parent's thread does not exist here; the next call starts a new one.
    q = _queue[0]
    global _sweep_lock
    if q is not None:
        q.after_fork()
    _sweep_lock = threading.Lock()
    _in_flight.clear()


os.register_at_fork(before=drain, after_in_child=_after_fork_in_child)
atexit.register(drain)
