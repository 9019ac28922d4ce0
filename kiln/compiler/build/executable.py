"""A compiled program ready to call: buffers in, buffers out.

An :class:`Executable` owns the loaded shared library and a plan: the native
segments (function address + the buffers it reads and writes, in argument order)
and the islands between them. Calling it allocates outputs (huge pages when
large), takes temporaries from a pool kept across calls, runs the plan and returns
the output arrays.

What it must not hold: lowering or rendering decisions.
"""
from __future__ import annotations

import ctypes
import threading
from contextlib import nullcontext

import numpy as np

from kiln import _async_dispatch as _async
from kiln import _fp_warnings
from kiln.compiler.build import host_entry
from kiln.compiler.build.runtime import HUGE_THRESHOLD, alloc, get_run, runtime_place, runtime_plan
from kiln.compiler.lower.program import Island, Program
from kiln.core.trace import apply_impl
from kiln.profiler import _kernels as _profiled_kernels
from kiln.profiler import _recorder as _profiler

# True while a ``kiln.profiler`` trace records (the profiler flips it): calls then go
# through ``Executable._call_timed``, which times each native segment and island. Off,
# the call path pays this one global test.
PROFILING = _profiler.active
#: The least memory (bytes of all buffers) of a program that asynchronous dispatch runs
#: on its thread (``Executable.runs_off_thread``).
OFF_THREAD_BYTES = 1 << 18
_NO_CONTEXT = nullcontext()


class Executable:
    """Native code for one jaxpr (see the module docstring)."""

    # For profiles: the jit function's name and (file, line, function) where it was
    # defined (set by the cpu backend), and the timed plan (kiln.profiler._kernels).
    name = "jit"
    where = None
    _timed = None

    def __init__(self, prog: Program, lib, segments, source: str, build_seconds: float = 0.0):
        self.prog = prog
        self.source = source
        self.lib = lib
        self.build_seconds = build_seconds
        # Runs the program another way (the reference backend) when a guard has changed.
        self.fallback = None
        self._run = get_run()
        nbuf = len(prog.buffers)
        seg_by_first = {}
        for seg in segments:
            seg_by_first[id(seg.steps[0])] = seg
        plan = []
        for step in prog.steps:
            if isinstance(step, Island):
                # The island's result may be a view of a pooled temporary input: copy it,
                # unless the primitive promises fresh results (collectives, whose results
                # are shared by the devices and never written in place: plan_buffers).
                copy = (any(not isinstance(x[0], str) and x[0].kind == "tmp" for x in step.ins)
                        and not getattr(step.eqn.primitive, "island_result_fresh", False))
                plan.append(("island", step, copy))
            elif id(step) in seg_by_first:
                seg = seg_by_first[id(step)]
                fn = getattr(lib, seg.name)
                addr = ctypes.cast(fn, ctypes.c_void_p).value
                plan.append(("seg", addr, tuple(b.id for b in seg.buffers)))
        self._plan = plan
        self._segments = segments
        # Islands inside native loop and branch bodies, called back by the C code
        # (host_entry): such a program runs its segments one call each, inside a frame.
        self._host_steps = prog.host_calls
        self._has_islands = any(p[0] == "island" for p in plan) or bool(self._host_steps)
        # Only native code runs (no islands, no configuration guard whose change sends
        # a call to the reference backend): no Python code sees a call's values.
        self.no_host_code = not self._has_islands and not prog.guards
        # What call_native runs: each stretch of segments between islands packed into one
        # native plan (kiln_rt.run_plan: the GIL released once for all of them), the
        # islands as they are; None without the extension (segments one call each).
        self._runs = _pack(plan) if not self._host_steps else None
        self._whole = (self._runs[0][1] if self._runs is not None and len(self._runs) == 1
                       and self._runs[0][0] == "plan" else None)
        self._in_ids = [b.id for b in prog.inputs]
        self._in_dtypes = [np.dtype(b.dtype) for b in prog.inputs]
        self._place = runtime_place()
        self._outs_alloc = [(b.id, b.shape, b.dtype, np.empty if b.nbytes < HUGE_THRESHOLD
                             else alloc) for b in prog.buffers if b.kind == "out"]
        self._tmps = [b for b in prog.buffers if b.kind == "tmp"]
        # Worth a trip to the dispatch thread (asynchronous dispatch): programs that touch
        # enough memory to run for tens of microseconds or more. Smaller ones run on the
        # caller's thread (a thread handoff would cost more than they do).
        self._heavy = sum(b.nbytes for b in prog.buffers) >= OFF_THREAD_BYTES
        template = [None] * nbuf
        for buf, val in prog.consts:
            template[buf.id] = val
        self._template = template
        self._pool = None
        self._pool_lock = threading.Lock()
        # The queued job (kiln._async_dispatch) last given the pool: the pool is free
        # once it has run.
        self._pool_seq = 0
        self._outputs = prog.outputs
        # Asynchronous dispatch (dispatch): for each program output, (its position among
        # the "out" buffers, shape, dtype) when every output is its own "out" buffer.
        pos = {i: k for k, (i, _, _, _) in enumerate(self._outs_alloc)}
        ids = [o[1].id for o in prog.outputs if o[0] == "buf" and o[1].kind == "out"]
        self._lazy_outs = ([(pos[o[1].id], o[2], np.dtype(o[1].dtype))
                            for o in prog.outputs]
                           if len(ids) == len(prog.outputs) == len(set(ids)) == len(pos)
                           else None)
        self._out_nbytes = [prog.buffers[i].nbytes for i, _, _, _ in self._outs_alloc]
        # Outputs that may be (views of) arguments: an argument returned, or reshaped.
        self.aliasing_outputs = tuple(
            k for k, o in enumerate(prog.outputs)
            if o[0] == "in" or (o[0] == "buf" and o[1].kind == "in"))

    def _temps(self):
        slots = self.prog.slots
        if not slots:
            return [(b.id, alloc(b.shape, b.dtype)) for b in self._tmps]
        # One block per slot, sized for its largest member, viewed by each member.
        size: dict = {}
        for b in self._tmps:
            if b.id in slots:
                k = slots[b.id]
                size[k] = max(size.get(k, 0), b.nbytes)
        blocks = {k: alloc((n,), np.uint8) for k, n in size.items()}
        pool = []
        for b in self._tmps:
            if b.id in slots:
                raw = blocks[slots[b.id]][:b.nbytes]
                pool.append((b.id, raw.view(b.dtype).reshape(b.shape)))
            else:
                pool.append((b.id, alloc(b.shape, b.dtype)))
        return pool

    def _stale(self) -> bool:
        from kiln.config import config
        return any(getattr(config, k) != v for k, v in self.prog.guards.items())

    def _input_bufs(self, args) -> list:
        """The buffer list with the inputs in place: one C call (``kiln_rt.place``) when
        every input is already a C-contiguous ndarray of its dtype, else converted here."""
        bufs = list(self._template)
        place = self._place
        if place is None or type(args) is not list or not place(
                bufs, self._in_ids, args, self._in_dtypes):
            for i, x, dt in zip(self._in_ids, args, self._in_dtypes):
                if type(x) is not np.ndarray or not x.flags.c_contiguous or x.dtype != dt:
                    x = np.ascontiguousarray(x, dt)
                bufs[i] = x
        return bufs

    def __call__(self, args, reuse=()):
        if PROFILING:
            return self._call_timed(args)
        if self.prog.guards and self.fallback is not None and self._stale():
            return self.fallback(args)
        return self.call_native(args, reuse)

    def runs_off_thread(self) -> bool:
        """Whether :meth:`dispatch` may queue the program now (asynchronous dispatch): a
        program heavy enough to be worth the handoff, with no host islands (Python code,
        which reads the calling thread's configuration), no profiling, no configuration
        guard that has changed, and the native queue available."""
        return self._heavy and self._whole is not None and not (
            self._has_islands or PROFILING or (
                self.prog.guards and self.fallback is not None and self._stale())
        ) and _async.available()

    def dispatch(self, args, out_avals):
        """Queue the program on ``args`` (values or ``Pending`` outputs of programs queued
        before) for the native dispatch thread (``kiln._async_dispatch``). Everything but
        the outputs' memory is prepared here (inputs converted, temporaries); each output
        is a ``kiln_rt.obuf`` the thread allocates when the program runs. Returns the
        outputs' ``Pending`` values, or None when the program's outputs are not all its
        own distinct buffers (an argument returned: the synchronous path). Only when
        :meth:`runs_off_thread`."""
        lazy = self._lazy_outs
        if lazy is None:
            return None
        if any(type(a) is _async.Pending for a in args):
            bufs = list(self._template)
            for i, x, dt in zip(self._in_ids, args, self._in_dtypes):
                if type(x) is _async.Pending:
                    x = x.buffer()
                elif type(x) is not np.ndarray or not x.flags.c_contiguous or x.dtype != dt:
                    x = np.ascontiguousarray(x, dt)
                bufs[i] = x
        else:
            bufs = self._input_bufs(args)
        new = _async.new_buffer
        obufs = [new(n) for n in self._out_nbytes]
        for (i, _, _, _), ob in zip(self._outs_alloc, obufs):
            bufs[i] = ob
        specs = [(obufs[k], shape, dt) for k, shape, dt in lazy]
        plan = self._whole[0]
        if not self._tmps:
            return _async.submit(plan, bufs, obufs, self, specs, out_avals)[1]
        if not self._pool_lock.acquire(blocking=False):
            for i, a in self._temps():
                bufs[i] = a
            return _async.submit(plan, bufs, obufs, self, specs, out_avals)[1]
        try:        # held until the pool is marked as the new job's
            # Queued jobs run one after another on the dispatch thread: each may take the
            # pool, whatever earlier ones still queued do with it.
            if self._pool is None:
                self._pool = self._temps()
            for i, a in self._pool:
                bufs[i] = a
            seq, pendings = _async.submit(plan, bufs, obufs, self, specs, out_avals)
            self._pool_seq = seq
            return pendings
        finally:
            self._pool_lock.release()

    def _collect(self, bufs, args) -> list:
        out = []
        for o in self._outputs:
            if o[0] == "buf":
                a = bufs[o[1].id]
                out.append(a if a.shape == o[2] else a.reshape(o[2]))
            elif o[0] == "in":
                out.append(args[o[1]])
            else:
                out.append(np.array(o[1]))
        return out

    def has_host_code(self) -> bool:
        """Whether a call may run Python code on the arguments (host islands, a profiled
        call, the reference backend after a changed configuration guard): such code may
        keep them past the call."""
        return self._has_islands or PROFILING or bool(
            self.prog.guards and self.fallback is not None and self._stale())

    def call_native(self, args, reuse=()):
        """Run the native program on ``args`` (``__call__`` after its checks)."""
        bufs = self._input_bufs(args)
        if reuse:
            taken = self._take_donated(args, bufs, reuse)
            for i, shape, dt, make in self._outs_alloc:
                bufs[i] = taken[i] if i in taken else make(shape, dt)
        else:
            for i, shape, dt, make in self._outs_alloc:
                bufs[i] = make(shape, dt)
        pool = None
        locked = False
        if self._tmps:
            locked = self._pool_lock.acquire(blocking=False)
            if locked and self._pool_seq:
                if _async.completed(self._pool_seq):
                    self._pool_seq = 0
                else:
                    self._pool_lock.release()   # a queued program still uses the pool
                    locked = False
            if locked:
                if self._pool is None:
                    self._pool = self._temps()
                pool = self._pool
            else:
                pool = self._temps()
            for i, a in pool:
                bufs[i] = a
        try:
            if self._whole is not None:
                self._whole[1](self._whole[0], bufs)
            elif self._has_islands:
                with _fp_warnings.quiet():
                    self._execute(bufs)
            else:
                self._execute(bufs)
        finally:
            if locked:
                self._pool_lock.release()
        return self._collect(bufs, args)

    def _take_donated(self, args, bufs, reuse) -> dict:
        """``{output buffer id: donated input array}`` for the pairs of ``reuse`` the
        program can write in place (``plan_buffers.writes_into_input``, decided once per
        pair) whose argument reached the program without a conversion copy."""
        from kiln.compiler.lower.plan_buffers import writes_into_input
        cache = self.__dict__.setdefault("_into_input", {})
        taken = {}
        for k, j in reuse:
            bid = cache.get((k, j), False)
            if bid is False:
                bid = cache[(k, j)] = writes_into_input(self.prog, k, j)
            x = args[k]
            if bid is not None and bufs[self._in_ids[k]] is x and bid not in taken:
                shape = self.prog.buffers[bid].shape
                taken[bid] = x if x.shape == shape else x.reshape(shape)
        return taken

    def profile(self, args, repeat: int = 5) -> list[tuple[str, float]]:
        """Seconds per plan entry (best of ``repeat`` runs): segments and islands, named.
        Compile with ``CRenderer.segment_per_step = True`` to time each kernel alone."""
        import time
        best: dict = {}
        names = []
        for p in self._plan:
            if p[0] == "seg":
                names.append("seg@" + hex(p[1]))
            else:
                names.append("island:" + p[1].eqn.primitive.name)
        for _ in range(repeat):
            bufs = list(self._template)
            for i, x, dt in zip(self._in_ids, args, self._in_dtypes):
                bufs[i] = np.ascontiguousarray(x, dt)
            for i, shape, dt, make in self._outs_alloc:
                bufs[i] = make(shape, dt)
            for i, a in self._temps():
                bufs[i] = a
            plan = self._plan
            for k in range(len(plan)):
                t0 = time.perf_counter()
                with np.errstate(all="ignore"):
                    self._execute_steps(bufs, [plan[k]])
                dt_ = time.perf_counter() - t0
                best[k] = min(best.get(k, dt_), dt_)
        return [(names[k], best[k]) for k in range(len(self._plan))]

    def _call_timed(self, args):
        """``__call__`` while a profiler trace records: the same work, with one event per
        native segment and island (named by ``kiln.profiler._kernels``, which may swap in
        a build of the same program with one C function per step) inside one event for
        the whole call."""
        record = _profiler.record
        clock = _profiler.perf_ns
        t_start = clock()
        if self.prog.guards and self.fallback is not None and self._stale():
            out = self.fallback(args)
            record(f"jit({self.name}) on the reference backend", "reference", t_start,
                   clock())
            return out
        plan, labels, whole, loops = _profiled_kernels.timed_plan(self)
        t_ready = clock()
        bufs = self._input_bufs(args)
        for i, shape, dt, make in self._outs_alloc:
            bufs[i] = make(shape, dt)
        locked = False
        if self._tmps:
            locked = self._pool_lock.acquire(blocking=False)
            if locked and not _async.completed(self._pool_seq):
                self._pool_lock.release()       # a queued program still uses the pool
                locked = False
            if locked:
                if self._pool is None:
                    self._pool = self._temps()
                pool = self._pool
            else:
                pool = self._temps()
            for i, a in pool:
                bufs[i] = a
        times = []
        run = self._run
        loop_events = []
        try:
            with np.errstate(all="ignore") if self._has_islands else _NO_CONTEXT, \
                    host_entry.frame(self, bufs) if self._host_steps else _NO_CONTEXT as fr:
                n_seg = 0
                for p in plan:
                    if fr is not None and fr.error is not None:
                        break       # an island called back failed: raised by the frame
                    t0 = clock()
                    if p[0] == "seg":
                        if loops is not None:
                            loops.reset()
                        run(p[1], *[bufs[i] for i in p[2]])
                        if loops is not None:   # the loop bodies' steps, inside this one
                            loops.emit(n_seg, t0, lambda *a: loop_events.append(a))
                        n_seg += 1
                    else:
                        self._run_island(bufs, p[1], p[2])
                    times.append((t0, clock()))
        finally:
            if locked:
                self._pool_lock.release()
        out = self._collect(bufs, args)
        record(whole[0], "execute", t_ready, clock(), whole[1])
        for (t0, t1), (name, cat, info) in zip(times, labels):
            record(name, cat, t0, t1, info)
        for ev in loop_events:
            record(*ev)
        return out

    def _execute(self, bufs):
        runs = self._runs
        if runs is None:
            return self._execute_steps(bufs, self._plan)
        for p in runs:
            if p[0] == "plan":
                p[1][1](p[1][0], bufs)
            else:
                self._run_island(bufs, p[1], p[2])

    def _execute_steps(self, bufs, plan):
        """Run plan entries one native call per segment (the profiler's timings, the
        fallback without the extension, programs with host calls)."""
        run = self._run
        if self._host_steps:
            with host_entry.frame(self, bufs) as fr:
                for p in plan:
                    if p[0] == "seg":
                        run(p[1], *[bufs[i] for i in p[2]])
                    else:
                        self._run_island(bufs, p[1], p[2])
                    if fr.error is not None:
                        break       # raised by the frame
            return
        for p in plan:
            if p[0] == "seg":
                run(p[1], *[bufs[i] for i in p[2]])
                continue
            self._run_island(bufs, p[1], p[2])

    def run_host_call(self, bufs, k: int) -> None:
        """Island ``k`` of a loop or branch body, called back by the native code
        (``host_entry``): its impl on the buffers, its results written into its output
        buffers."""
        step = self._host_steps[k]
        host_entry.write_results(bufs, step.outs, _island_results(bufs, step))

    def _run_island(self, bufs, step, copy):
        res = _island_results(bufs, step)
        for b, r in zip(step.outs, res):
            r = np.asarray(r)
            if r.dtype != b.dtype:
                r = r.astype(b.dtype)
            if copy or not r.flags.c_contiguous:
                r = np.array(r, order="C", copy=True)
            bufs[b.id] = r


def _island_results(bufs, step) -> list:
    """An island's impl run on its operands (literals, or views of ``bufs``): its
    results as a list."""
    ins = []
    for x in step.ins:
        if x[0] == "lit":
            ins.append(x[1])
        else:
            buf, shape = x
            a = bufs[buf.id]
            ins.append(a if a.shape == shape else a.reshape(shape))
    eqn = step.eqn
    res = apply_impl(eqn.primitive, ins, eqn.params)
    return res if eqn.primitive.multiple_results else [res]


def _pack(plan):
    """``plan`` with each stretch of consecutive segments as one ``("plan", (packed,
    run_plan))`` entry (``kiln_rt.make_plan``), islands kept; None when the extension is
    not available."""
    fns = runtime_plan()
    if fns is None:
        return None
    make, run = fns
    out, stretch = [], []
    for p in plan:
        if p[0] == "seg":
            stretch.append((p[1], p[2]))
            continue
        if stretch:
            out.append(("plan", (make(stretch), run)))
            stretch = []
        out.append(p)
    if stretch or not out:
        out.append(("plan", (make(stretch), run)))
    return out
