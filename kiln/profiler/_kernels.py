"""Names and timing plans for the kernels of compiled programs.

A compiled program (``kiln.compiler.build.executable.Executable``) runs native *segments* (C
functions; consecutive native steps share one) and *islands* (a primitive's NumPy
``impl``) in order. While a trace records, the executable times each entry of the plan
that :func:`timed_plan` gives it:

* with ``granularity == "step"`` (the default; ``KILN_PROFILE_KERNELS=segment`` changes
  it), the program is rendered again with one C function per step (``CRenderer
  .segment_per_step``) and built once, at its first profiled call (disk-cached like any
  build, shown as a ``build`` span; with ``kiln_compile="sync"`` the call waits for it,
  otherwise it builds in the background and the calls meanwhile time whole segments),
  so every fused kernel, GEMM, reduction and loop gets its own time. Steps that
  normally share a loop over rows (``row_groups``) then run one after another, so the
  kernels' sum can exceed the normal run's time a little;
* with ``"segment"``, the program's own segments are timed (no extra build).

Each entry is named by the lax primitives it computes (``dot_general``, ``add,max``,
``reduce_sum``...) and its shape, and carries the program's name and the user's source
lines: those of the equations the kernel computes (the lowering records which equation
made each fused expression node and each step: ``Program.expr_source`` and
``step_source``), in program order, the first one as ``source``; the line where the
jitted function is defined when equations carry no ``source_info``.

What it must not hold: recording (``_recorder``) or file formats.
"""
from __future__ import annotations

import logging
import os
import threading

from kiln.profiler import _recorder

logger = logging.getLogger("kiln")

#: "step" (one event per native step; builds a per-step variant once) or "segment".
granularity = os.environ.get("KILN_PROFILE_KERNELS", "step")

_lock = threading.Lock()
_SCATTER = {"set": "scatter", "sum": "scatter-add", "sub": "scatter-sub",
            "prod": "scatter-mul", "max": "scatter-max", "min": "scatter-min"}
_MAX_PRIMS = 6


def timed_plan(exe) -> tuple[list, list, tuple]:
    """``(plan, labels, whole)`` for a profiled call of ``exe``: the plan to run (its own,
    or a per-step build's over the same buffers); per entry, ``(name, category, info)``;
    and ``(name, info)`` of the event spanning the whole call."""
    cached = exe._timed
    if cached is not None:
        return cached
    with _lock:
        if exe._timed is None:
            exe._timed = _timed(exe, exe)
            if granularity == "step" and any(len(seg.steps) > 1 or _has_loop(seg.steps)
                                             for seg in exe._segments):
                from kiln.config import config
                if config.kiln_compile == "sync":
                    _swap_in_per_step(exe)
                else:       # as jit's own builds: in the background, whole segments meanwhile
                    threading.Thread(target=_swap_in_per_step, args=(exe,), daemon=True,
                                     name="kiln-profiler-build").start()
    return exe._timed


def _has_loop(steps) -> bool:
    from kiln.compiler.lower import program as P
    return any(isinstance(s, P.Loop) for s in steps)


def _timed(exe, src) -> tuple:
    labels = _labels(exe, src)
    whole = (f"jit({exe.name})", {"program": exe.name, "kernels": len(labels),
                                  "source": _where_text(exe.where)})
    return (src._plan, labels, whole, LoopBodies.of(exe, src))


class LoopBodies:
    """The steps of loop bodies in a per-step build, timed inside the C loop (each step's
    total time and number of runs accumulate in the library's ``kiln_loop_t`` /
    ``kiln_loop_n``; ``CRenderer.time_loop_bodies``). After each profiled call of a
    segment, :meth:`emit` records one ``loop kernel`` event per body step that ran, laid
    end to end inside the segment's event (a nested loop's steps inside their loop's),
    each as long as the step's total time in that call."""

    def __init__(self, exe, src, timers):
        import ctypes
        n = len(timers)
        self._t = (ctypes.c_double * n).in_dll(src.lib, "kiln_loop_t")
        self._n = (ctypes.c_longlong * n).in_dll(src.lib, "kiln_loop_n")
        self._bytes = ctypes.sizeof(self._t), ctypes.sizeof(self._n)
        slot_of_step = {id(step): k for k, step, _, _ in timers}
        seg_index = {seg.name: i for i, seg in enumerate(src._segments)}
        self.children: dict = {}      # (segment index, parent slot or None) -> [slots]
        self.labels = {}
        fallback = _where_text(exe.where)
        for k, step, loop, seg in timers:
            parent = slot_of_step.get(id(loop))
            self.children.setdefault((seg_index.get(seg), parent), []).append(k)
            kind, shape, prims = describe_step(step)
            sources = _source_texts(exe.prog, [step])
            name = f"{','.join(_short(_merge(prims)))} {shape}".strip()
            self.labels[k] = (name, {"program": exe.name, "kind": kind,
                                     "primitives": ",".join(_merge(prims)), "shape": shape,
                                     "loop_body": True,
                                     "source": sources[0] if sources else
                                     fallback or f"jit({exe.name}) loop body"})

    @classmethod
    def of(cls, exe, src):
        timers = getattr(src, "_loop_timers", None)
        if not timers:
            return None
        try:
            return cls(exe, src, timers)
        except (ValueError, AttributeError):     # a library without the timer arrays
            return None

    def reset(self) -> None:
        import ctypes
        ctypes.memset(self._t, 0, self._bytes[0])
        ctypes.memset(self._n, 0, self._bytes[1])

    def emit(self, seg_index: int, t0: int, record) -> None:
        self._place(seg_index, None, t0, record)

    def _place(self, seg_index, parent, t, record) -> None:
        for k in self.children.get((seg_index, parent), ()):
            runs = int(self._n[k])
            if runs == 0:
                continue
            dur = int(self._t[k])
            name, info = self.labels[k]
            record(f"{name} (loop body, {runs} runs)", "loop kernel", t, t + dur,
                   dict(info, runs=runs))
            self._place(seg_index, k, t, record)
            t += dur


def _swap_in_per_step(exe) -> None:
    variant = _per_step_build(exe)
    if variant is not None:
        exe._timed = _timed(exe, variant)


def _per_step_build(exe):
    """The same program with one C function per step (None when that build fails)."""
    from kiln.compiler.build.build import load_library
    from kiln.compiler.lower import blas_support
    from kiln.compiler.render import cmath_support
    from kiln.compiler.render.render_c import CRenderer
    try:
        with _recorder.span(f"per-kernel build of jit({exe.name}) for the profiler", "build",
                            program=exe.name):
            # The same renderer and flags as kiln.backends.cpu.compile_closed.
            src_math, fns = cmath_support.math()
            renderer = CRenderer(src_math, fns, blas_support.declarations())
            renderer.segment_per_step = True
            renderer.time_loop_bodies = True
            source, segments = renderer.render(exe.prog)
            lib = load_library(source, extra_flags=["-fwrapv"], name="kiln")
            blas_support.init(lib)
            variant = type(exe)(exe.prog, lib, segments, source)   # (an Executable)
            variant._loop_timers = list(renderer.loop_timers)
            return variant
    except Exception as e:      # noqa: BLE001 - profiles then time whole segments
        logger.warning("kiln.profiler: building jit(%s) with one function per kernel failed "
                       "(%s: %s); timing whole segments instead", exe.name,
                       type(e).__name__, e)
        return None


def _where_text(where) -> str | None:
    if where is None:
        return None
    f, line, fn = where
    return f"{f}:{line} ({fn})"


def _eqn_source(eqn) -> str | None:
    si = getattr(eqn, "source_info", None)
    return None if si is None else _eqn_source_text(si)


def step_sources(prog, step) -> list:
    """The source_infos of the equations behind a native step, first made first (the
    step's own equation, then those of the fused expression nodes it evaluates)."""
    from kiln.compiler.lower import program as P
    from kiln.compiler.lower.walk import walk
    found = {}
    own = prog.step_source.get(id(step))
    if own is not None and not isinstance(step, P.Kernel):
        found[-1] = own         # a GEMM, reduction, loop...: its equation first
    roots = []
    if isinstance(step, P.Kernel):
        roots = [e for _, e in step.outs]
    elif isinstance(step, (P.Reduce, P.Scan, P.Scatter)):
        roots = [step.body]
    elif isinstance(step, P.Conv):
        roots = [step.col]
    if roots and prog.expr_source:
        for e in walk(prog, roots):
            si = prog.expr_source.get(e.uid)
            if si is not None and e.kind != "load":
                found[e.uid] = si
    if not found and own is not None:
        found[-1] = own
    out, seen = [], set()
    for _, si in sorted(found.items(), key=lambda kv: kv[0]):
        key = (getattr(si, "file", None), getattr(si, "lineno", None), str(si))
        if key[:2] == (None, None):
            key = (str(si),)
        if key not in seen:
            seen.add(key)
            out.append(si)
    return out


def _source_texts(prog, steps) -> list[str]:
    texts = []
    for step in steps:
        for si in step_sources(prog, step):
            t = _eqn_source_text(si)
            if t not in texts:
                texts.append(t)
    return texts


def _eqn_source_text(si) -> str:
    f = getattr(si, "file", None)
    line = getattr(si, "lineno", None)
    if f is not None and line is not None:
        fn = getattr(si, "function", None)
        return f"{f}:{line}" + (f" ({fn})" if fn else "")
    return str(si)


def _labels(exe, src) -> list:
    fallback = _where_text(exe.where)
    labels = []
    segs = iter(src._segments)
    for k, p in enumerate(src._plan):
        if p[0] == "seg":
            steps = next(segs).steps
            sources = _source_texts(exe.prog, steps)
            parts = [describe_step(s) for s in steps]
            prims = _merge([pr for _, _, ps in parts for pr in ps])
            if len(parts) == 1:
                kind, shape, _ = parts[0]
                name = f"{','.join(_short(prims))} {shape}".strip()
            else:
                kind, shape = "segment", ""
                name = " | ".join(f"{','.join(_short(ps))} {sh}".strip()
                                  for _, sh, ps in parts)
                if len(name) > 160:
                    name = name[:157] + "..."
            info = {"program": exe.name, "index": k, "kind": kind, "primitives": ",".join(prims),
                    "shape": shape, "steps": len(steps),
                    "source": (sources[0] if sources else
                               fallback or f"jit({exe.name}) kernel {k}")}
            if len(sources) > 1:
                info["sources"] = "; ".join(sources)
        else:
            eqn = p[1].eqn
            prim = eqn.primitive.name
            shape = _shape_text([v.aval.shape for v in eqn.outvars if hasattr(v, "aval")])
            name = f"{prim} {shape} (host)".replace("  ", " ")
            info = {"program": exe.name, "index": k, "kind": "island", "primitives": prim,
                    "shape": shape, "steps": 1,
                    "source": _eqn_source(eqn) or fallback or f"jit({exe.name}) island {k}"}
        labels.append((name, "island" if info["kind"] == "island" else "kernel", info))
    return labels


def _short(prims):
    return prims if len(prims) <= _MAX_PRIMS else prims[:_MAX_PRIMS] + ["..."]


def _merge(names):
    seen = {}
    for n in names:
        seen.setdefault(n, None)
    return list(seen)


def _shape_text(shapes) -> str:
    return ",".join("x".join(str(d) for d in s) if len(s) else "scalar" for s in shapes)


def _expr_ops(exprs) -> list[str]:
    """Names of the primitives in fused scalar expressions, innermost first."""
    names: dict = {}
    seen = set()
    stack = [(e, False) for e in reversed(exprs)]
    while stack:
        e, done = stack.pop()
        if done:
            if e.kind == "op":
                names.setdefault(e.params[0], None)
            continue
        if e.uid in seen:
            continue
        seen.add(e.uid)
        stack.append((e, True))
        for a in reversed(e.args):
            stack.append((a, False))
    return list(names)


def describe_step(step) -> tuple[str, str, list[str]]:
    """``(kind, shape text, primitive names)`` of one native step."""
    from kiln.compiler.lower import program as P
    if isinstance(step, P.Gemm):
        batch = f"{step.batch}x" if step.batch > 1 else ""
        return "gemm", f"{batch}{step.m}x{step.k}@{step.k}x{step.n}", ["dot_general"]
    if isinstance(step, P.Conv):
        return ("conv", f"{step.n}x{'x'.join(map(str, step.out_sp))}x{step.groups * step.og}",
                ["conv_general_dilated"])
    if isinstance(step, P.Reduce):
        op = step.op if step.op.startswith("arg") else f"reduce_{step.op}"
        return "reduce", _shape_text([step.in_shape]), [op] + _expr_ops([step.body])
    if isinstance(step, P.Scan):
        return "cumulative", _shape_text([step.shape]), [f"cum{step.op}"] + _expr_ops([step.body])
    if isinstance(step, P.Scatter):
        return ("scatter", _shape_text([step.out.shape]),
                [_SCATTER.get(step.op, "scatter")] + _expr_ops([step.body]))
    if isinstance(step, P.Kernel):
        ops = _expr_ops([e for _, e in step.outs])
        shapes = _merge([tuple(b.shape) for b, _ in step.outs]) or [tuple(step.shape)]
        return ("fusion" if ops else "copy"), _shape_text(shapes), ops or ["copy"]
    if isinstance(step, (P.Loop, P.Branch)):
        kind = ("while" if step.kind == "while" else "scan") if isinstance(step, P.Loop) \
            else "cond"
        inner = [pr for steps in P.nested_steps(step) for s in steps
                 for pr in describe_step(s)[2]]
        shape = f"{step.length} iterations" if isinstance(step, P.Loop) and step.length else ""
        return kind, shape, _merge([kind] + inner)
    return type(step).__name__.lower(), "", [type(step).__name__.lower()]
