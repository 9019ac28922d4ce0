"""SPMD execution: one program per device, each on that device's worker thread.

``run_spmd(closed, placements, args_per_device)`` runs the same closed jaxpr (traced
once, with the mesh's axis names bound) on every device's block of the inputs. Each
virtual device owns one worker thread for the life of the process; NumPy and the
compiled kernels release the GIL, so devices really run at the same time. A device
thread gives its compiled kernels ``cores // device_count`` OpenMP threads, so N
devices share the machine instead of each spawning a full thread team.

Collectives (``psum``, ``all_gather``, ``ppermute``, ...) are rendezvous between the
threads of one call: every participant puts its operand in a slot, waits at a barrier,
and computes its result from the slots (two slot sets alternate, see :class:`Group`).
Their primitives' ``impl`` (``kiln.parallel.collectives``) finds the calling thread's
:class:`DeviceContext`; outside one they raise the usual unbound-axis ``NameError``.
If one device fails, the call's barriers are aborted so the others stop too, and the
first real error is raised.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import queue
import threading
from concurrent.futures import Future

from kiln.config import config, with_overrides

_tls = threading.local()


def current_context():
    """The :class:`DeviceContext` of the calling device thread, or ``None``."""
    return getattr(_tls, "ctx", None)


_ptrs_lock = threading.Lock()


class Group:
    """The participants of one collective: ``n`` devices (``local`` of them, by group
    rank, in this process; the rest in other processes, reached through ``world``, an
    MPI communicator) sharing slots and a barrier.

    Consecutive collectives of a group alternate between two sets of slots (each thread
    counts its own calls; all make the same calls), so no barrier is needed after the
    results are read: a participant can only reuse a set after every other has arrived
    at the next collective, i.e. has finished reading this one."""

    __slots__ = ("n", "local", "world", "barrier", "_slots", "_shared", "_turn", "_ptrs")
    step = False        # see StepGroup

    def __init__(self, n: int, local: list, world=None):
        from kiln.parallel.native import make_barrier
        self.n = n
        self.local = local
        self.world = world if len(local) < n else None
        self.barrier = make_barrier(len(local))
        self._slots = ([None] * n, [None] * n)
        self._shared: list = [None, None]
        self._turn = threading.local()
        self._ptrs: list = [None, None]

    def pointers(self, turn: int, n: int):
        """A per-turn array of ``n`` addresses for the native all-reduce."""
        p = self._ptrs[turn]
        if p is None or p.size != n:
            with _ptrs_lock:
                p = self._ptrs[turn]
                if p is None or p.size != n:
                    import numpy as np
                    p = self._ptrs[turn] = np.zeros(n, np.uintp)
        return p

    def begin(self) -> int:
        """This thread's next collective on the group: the slot set (0 or 1) to use."""
        t = getattr(self._turn, "k", 0)
        self._turn.k = t ^ 1
        return t

    def slots(self, turn: int) -> list:
        return self._slots[turn]

    def shared(self, turn: int, value=None):
        if value is not None:
            self._shared[turn] = value
        return self._shared[turn]

    def wait(self) -> int:
        """Barrier between this process's participants; 0 for exactly one of them."""
        if len(self.local) <= 1:
            return 0
        return 0 if self.barrier.wait() == 0 else 1

    def exchange(self, rank: int, value, combine):
        """Every participant's ``value`` in, ``combine(slots, rank)`` out."""
        turn = self.begin()
        slots = self._slots[turn]
        # A copy: ``value`` may be a view of a buffer of this device's compiled program,
        # which this thread can overwrite (its next call reuses the memory) while a slower
        # participant still reads this collective's slots.
        slots[rank] = value.copy() if hasattr(value, "copy") and hasattr(value, "shape") \
            else value
        leader = self.wait() == 0
        if self.world is not None:
            if leader:
                mine = [(r, slots[r]) for r in self.local]
                for part in self.world.allgather(mine):
                    for r, v in part:
                        slots[r] = v
            self.wait()
        return combine(slots, rank)


class StepGroup:
    """A group of a multi-process call whose collective has several groups spanning
    processes: every device of the call exchanges its operand through the call-wide
    group (one MPI ``allgather`` per process, made by one thread), and each device
    combines its own group's operands. So the processes' MPI calls come in program order,
    one at a time, whatever the mesh layout."""

    __slots__ = ("n", "world", "_all", "_me", "_members")
    step = True

    def __init__(self, everyone: Group, me: int, members: list):
        self.n = len(members)
        self.world = everyone.world
        self._all = everyone
        self._me = me
        self._members = members

    def exchange(self, rank: int, value, combine):
        members = self._members
        return self._all.exchange(self._me, value,
                                  lambda slots, _: combine([slots[m] for m in members], rank))


class Communicator:
    """The groups of one SPMD call, created on first use (keyed by axes and by the
    participants' coordinates on the other mesh axes).

    In a multi-process call (``world``, with ``layout``: ``(coords, process)`` of every
    device of the mesh) a collective whose groups each sit in one process is local; one
    with a single group over all devices uses that group's MPI path (``Allreduce`` for
    the reductions); any other uses :class:`StepGroup`s."""

    def __init__(self, placements: list, world=None, layout=None):
        self._groups: dict = {}
        self._lock = threading.Lock()
        self._placements = placements
        self.world = world
        self.aborted = False
        self._layout = layout
        self._modes: dict = {}

    def _full_layout(self, sizes: dict) -> list:
        """``layout``, or pmap's: flattened position ``j`` lives in process
        ``j // local device count``."""
        if self._layout is None:
            import itertools
            names, per = tuple(sizes), len(self._placements)
            self._layout = [(dict(zip(names, idx)), j // per) for j, idx in enumerate(
                itertools.product(*(range(sizes[a]) for a in names)))]
        return self._layout

    def step_group(self, ctx, axes: tuple, axis_index_groups):
        """The :class:`StepGroup` of ``ctx``'s device for this collective, or ``None``
        when the collective's groups are local or one group spans every device."""
        key = (axes, None if axis_index_groups is None
               else tuple(tuple(g) for g in axis_index_groups))
        mode = self._modes.get(key)
        if mode is None:
            mode = self._modes[key] = self._mode(ctx, axes, key[1])
        if mode[0] != "step":
            return None
        index, members = mode[1], mode[2]
        coords = tuple(ctx.coords[a] for a in ctx.names)
        me = index[coords]
        everyone = self.group(("__call__",), len(index),
                              lambda c: index[tuple(c[a] for a in ctx.names)])
        return StepGroup(everyone, me, members[me])

    def _mode(self, ctx, axes, groups):
        lay = self._full_layout(ctx.sizes)
        procs: dict = {}
        where: dict = {}
        for j, (c, p) in enumerate(lay):
            others = tuple(c[a] for a in ctx.names if a not in axes)
            rank = 0
            for a in axes:
                rank = rank * ctx.sizes[a] + c[a]
            gid = None
            if groups is not None:
                gid = next((i for i, g in enumerate(groups) if rank in g), None)
                if gid is None:
                    continue
                rank = groups[gid].index(rank)
            procs.setdefault((others, gid), set()).add(p)
            where.setdefault((others, gid), {})[rank] = j
        if len(procs) == 1:
            return ("whole",)
        if all(len(s) == 1 for s in procs.values()):
            return ("local",)
        index = {tuple(c[a] for a in ctx.names): j for j, (c, _) in enumerate(lay)}
        members: dict = {}
        for ranks in where.values():
            ordered = [ranks[r] for r in sorted(ranks)]
            for j in ordered:
                members[j] = ordered
        return ("step", index, members)

    def group(self, key, n: int, rank_of) -> Group:
        g = self._groups.get(key)
        if g is None:
            with self._lock:
                g = self._groups.get(key)
                if g is None:
                    local = sorted(r for r in (rank_of(c) for _, c in self._placements)
                                   if r is not None)
                    g = self._groups[key] = Group(n, local, self.world)
                    if self.aborted:
                        g.barrier.abort()
        return g

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            for g in self._groups.values():
                g.barrier.abort()


class DeviceContext:
    """Where the calling thread sits: its device, its index on each mesh axis, the
    axis sizes, and the call's communicator."""

    __slots__ = ("device", "coords", "sizes", "names", "comm")

    def __init__(self, device, coords: dict, sizes: dict, comm: Communicator):
        self.device = device
        self.coords = coords
        self.sizes = sizes
        self.names = tuple(sizes)
        self.comm = comm

    def has(self, axes) -> bool:
        return all(a in self.sizes for a in axes)

    def _rank(self, coords, axes, others, axis_index_groups):
        """Group rank of the device at ``coords`` if it is in the group, else None."""
        if tuple(coords[a] for a in self.names if a not in axes) != others:
            return None
        rank = 0
        for a in axes:
            rank = rank * self.sizes[a] + coords[a]
        if axis_index_groups is None:
            return rank
        for members in axis_index_groups:
            if rank in members:
                return list(members).index(rank)
        return None

    def group_of(self, axes: tuple, axis_index_groups=None):
        """``(rank, group)`` of this device among those differing only along ``axes``
        (and, with ``axis_index_groups``, in the same group of positions)."""
        others = tuple(self.coords[a] for a in self.names if a not in axes)
        rank = 0
        for a in axes:
            rank = rank * self.sizes[a] + self.coords[a]
        n, gid = math.prod(self.sizes[a] for a in axes), None
        if axis_index_groups is not None:
            for gi, members in enumerate(axis_index_groups):
                if rank in members:
                    gid, n = gi, len(members)
                    break
            else:
                raise ValueError(f"axis index {rank} is in none of axis_index_groups "
                                 f"{axis_index_groups}")
            groups = [tuple(m) for m in axis_index_groups]
            members = groups[gid]
            rank = members.index(rank)
        else:
            groups = None

        def rank_of(c):
            if groups is None:
                return self._rank(c, axes, others, None)
            r = self._rank(c, axes, others, None)
            return None if r is None or r not in members else members.index(r)
        if self.comm.world is not None:
            step = self.comm.step_group(self, axes, axis_index_groups)
            if step is not None:
                return rank, step
        return rank, self.comm.group((axes, others, gid), n, rank_of)


# -- worker threads -----------------------------------------------------------------------------

_workers: dict = {}
_workers_lock = threading.Lock()


def _set_omp_threads(n: int) -> None:
    """Give kernels run from this thread ``n`` OpenMP threads (a per-thread setting)."""
    name = ctypes.util.find_library("gomp") or "libgomp.so.1"
    try:
        lib = ctypes.CDLL(name)
        lib.omp_set_num_threads(ctypes.c_int(n))
    except (OSError, AttributeError):   # no OpenMP runtime: kernels are serial anyway
        pass


def threads_per_device() -> int:
    from kiln.devices import device_count
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover
        cores = os.cpu_count() or 1
    return max(1, cores // device_count())


class _Worker:
    def __init__(self, device):
        self.device = device
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"kiln-device-{device.id}",
                                       daemon=True)
        self.thread.start()

    def _loop(self):
        _set_omp_threads(threads_per_device())
        while True:
            fut, fn, args = self.tasks.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:   # noqa: BLE001 - handed to the caller
                fut.set_exception(e)

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        self.tasks.put((fut, fn, args))
        return fut


def _forget_workers_in_child() -> None:
    # a child made by fork has none of the parent's device threads: start them afresh
    global _workers_lock
    _workers.clear()
    _workers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_workers_in_child)


def worker(device) -> _Worker:
    w = _workers.get(device.id)
    if w is None:
        with _workers_lock:
            w = _workers.get(device.id)
            if w is None:
                w = _workers[device.id] = _Worker(device)
    return w


# -- running a program on every device ----------------------------------------------------------

def _run_one(closed, ctx: DeviceContext, args, name, overrides=None, axes=()):
    from kiln.backends import cpu
    from kiln.backends.reference import run_jaxpr
    from kiln.interpreters import batching
    _tls.ctx = ctx
    batching.thread_axes.sizes = ctx.sizes
    try:
        with with_overrides(overrides), batching.bound_axes(axes):
            if cpu.plain_mode():
                return cpu.run(closed, args, name)
            return run_jaxpr(closed.jaxpr, closed.consts, args)
    except BaseException:
        ctx.comm.abort()
        raise
    finally:
        _tls.ctx = None
        batching.thread_axes.sizes = None


def run_spmd(closed, sizes: dict, placements: list, args_per_device: list,
             name: str = "spmd", world=None, layout=None) -> list:
    """Run ``closed`` on every local device: ``placements[i] = (device, coords)`` gets
    ``args_per_device[i]`` (NumPy arrays); returns each device's list of outputs.
    With ``world`` (an MPI communicator), the mesh's other devices are in other
    processes, which run the same call; ``layout`` lists ``(coords, process index)`` of
    every device of the mesh (default: pmap's, flattened position ``j`` in process
    ``j // len(placements)``)."""
    from kiln.backends import cpu
    if current_context() is not None:
        raise RuntimeError("kiln: an SPMD program (pmap/shard_map) was started from inside "
                           "another one's device thread (a host callback?); call it outside.")
    if cpu.plain_mode():
        # Compile here (with the axis names bound, for the checks of abstract evaluation),
        # so device threads never race to build it.
        from kiln.interpreters import batching
        batching.axis_env.extend(sizes.items())
        try:
            cpu.prepare(closed, name)
        finally:
            del batching.axis_env[len(batching.axis_env) - len(sizes):]
    comm = Communicator(placements, world, layout)
    # Device threads act for this one: they run in its config context and with its
    # named axes (both per thread).
    overrides = config.thread_overrides()
    from kiln.interpreters import batching
    axes = batching.axis_env.snapshot()
    futures = []
    for (dev, coords), args in zip(placements, args_per_device):
        ctx = DeviceContext(dev, coords, sizes, comm)
        futures.append(worker(dev).submit(_run_one, closed, ctx, list(args), name,
                                          overrides, axes))
    results, first_error = [], None
    for f in futures:
        try:
            results.append(f.result())
        except threading.BrokenBarrierError as e:
            first_error = first_error or e
        except BaseException as e:   # noqa: BLE001 - re-raised below
            if first_error is None or isinstance(first_error, threading.BrokenBarrierError):
                first_error = e
    if first_error is not None:
        raise first_error
    return results
