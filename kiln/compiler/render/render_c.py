"""The C renderer: a :class:`~.program.Program`'s native steps become C functions.

One renderer, driven by attributes (tinygrad's ``CStyleLanguage`` idea): a dialect
for another C-like target (CUDA) subclasses :class:`CRenderer` and changes the
attributes and the few methods that differ.

Each run of native steps between two islands is one *segment*: a C function
``void segN(void **b)`` whose argument array holds the data pointers of the buffers
it touches, in the order of ``Segment.buffers``.

Rendering is plan, then print. ``plan_steps.py`` splits a run of steps into row
groups and gives each its loop plan (``plan_loops.py``: nests, streamed kernels,
convolution tiles; ``plan_reduce.py``: reductions, row groups and their skew), from the
program and a :class:`~.plan_loops.LoopTarget` (this renderer's numbers: the parallel
threshold, chunk and tile sizes, prefetch distance). The printers then read the plans:
``kernels.py`` (loop nests, scatters, GEMM calls), ``reductions.py``, ``rows.py`` (row
groups), ``control.py`` (loops, branches, convolutions), with ``c_expr.py`` (the C of
each operation) and ``body.py`` (:class:`~.body.Body`: an expression graph's statements;
it names every temporary and symbol as it prints it).

Semantics follow XLA on the CPU: NaN-propagating ``max``/``min``, saturating
float->int conversion, integer division by zero, out-of-range shifts. Signed
integer arithmetic wraps (compiled with ``-fwrapv``).

:class:`CRenderer` combines the printers' mixins and assembles segments and
translation units. What it must not hold: fusion decisions (``lower/``), loop structure
decisions (the plans), building (``build/``).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from kiln.compiler import csrc
from kiln.compiler.build.blas import DEFINITIONS_MARK as BLAS_DEFINITIONS_MARK
from kiln.compiler.build.build import PCH_MARK, UNIT_MARK, intel_avx512, pch_enabled
from kiln.compiler.lower import random as lower_random
from kiln.compiler.lower.index import Sym
from kiln.compiler.lower.program import (
    Branch,
    Conv,
    Gemm,
    Island,
    Kernel,
    Loop,
    Program,
    Reduce,
    Scan,
    Scatter,
    walk_steps,
)
from kiln.compiler.lower.walk import step_buffers
from kiln.compiler.render.c_expr import C_TYPES, ExprMixin, c_literal  # noqa: F401 - c_literal: public here
from kiln.compiler.render.control import ControlMixin, ConvMixin
from kiln.compiler.render.kernels import KernelMixin
from kiln.compiler.render.plan_loops import (  # noqa: F401 - SMALL_ELEMENTS: public here
    SMALL_ELEMENTS,
    ConvPlan,
    KernelPlan,
    LoopTarget,
    is_small,
)
from kiln.compiler.render.plan_reduce import RowGroupPlan
from kiln.compiler.render.plan_steps import plan_steps
from kiln.compiler.render.reductions import ReduceMixin
from kiln.compiler.render.rows import RowsMixin

#: Non-temporal stores (``kiln_stream``), for programs that stream large outputs.
STREAM_C = csrc.text("stream.h")
STEAL_C = csrc.text("steal.h")
#: Every program's includes and small helpers (index arithmetic, XLA's min/max/sign).
PRELUDE = csrc.text("prelude.h")


def _int_helpers() -> str:
    """XLA's integer division, remainder and shifts for each integer type (every program)."""
    return csrc.text("int_helpers.h")


@dataclass
class Segment:
    """A C function running consecutive native steps."""

    name: str
    steps: list
    buffers: list = field(default_factory=list)   # Buffer objects, argument order



#: The host-call machinery of a program whose loop or branch bodies call back into Python
#: (``kiln.compiler.build.host_entry``): the callback's pointer, set when the library is
#: loaded, and the thread's failure flag, which stops every loop of the program.
HOST_CALL_C = """typedef int (*kiln_host_fn_t)(int);
static kiln_host_fn_t kiln_host_fn;
static __thread int kiln_host_failed;
void kiln_set_host_fn(void *f) { kiln_host_fn = (kiln_host_fn_t)f; }"""

class CRenderer(KernelMixin, RowsMixin, ReduceMixin, ControlMixin, ConvMixin, ExprMixin):
    """Renders programs as C. Attributes describe the dialect."""

    restrict = "restrict"
    # Every parallel region flushes denormals on its threads, as XLA (prelude.h).
    ftz_clause = " reduction(kiln_ftz:kiln_ftz_tok)"
    parallel_for = "#pragma omp parallel for schedule(static)" + ftz_clause
    parallel_region = "#pragma omp parallel" + ftz_clause
    for_in_region = "#pragma omp for schedule(static)"
    simd_reduce = "#pragma omp simd reduction({op}:{acc})"
    simd = "#pragma omp simd"
    # Before the innermost loop of an elementwise kernel whose elements are independent
    # (kernels.independent_elements): no alias versioning needed to vectorize it. None
    # disables.
    ivdep: str | None = "#pragma GCC ivdep"
    parallel_reduce = ("#pragma omp parallel for schedule(static) reduction({op}:{acc})" +
                       ftz_clause)
    # The numbers below are the plans' LoopTarget (plan_loops.LoopTarget.of).
    # Elements of work above which a loop runs on all cores.
    parallel_threshold = 1 << 17
    # An elementwise kernel over fewer elements than this runs in parallel only from
    # `small_kernel_threshold` units of work (plan_loops.plan_kernel). mnist_vae's
    # 32x512 ReLU gradient (131072 units) and 32x784 select-multiply (175616) take
    # 3 and 5 us on one core (AVX2) and 20-22 us on two on this busy 2-core VM;
    # its softplus (802816) and Bernoulli sample (1279488) take 110 and 60 us on
    # one core and stay parallel (benchmarks/NOTES.md, session 18).
    small_kernel_elements = 1 << 16
    small_kernel_threshold = 1 << 19
    # GEMMs of at least this many multiply-adds are split over threads by the BLAS glue
    # (kiln/compiler/build/blas.py, PARALLEL_MIN_MACS); a batch of smaller ones whose
    # total reaches the second number runs its products in parallel (render_gemm).
    gemm_split_min_macs = 1 << 22
    gemm_batch_parallel_min_macs = 1 << 20
    # One C function per step (for timing each step; see Executable.profile).
    segment_per_step = False
    # Time each step of a loop body inside the C loop (the profiler's per-step build):
    # `loop_timers` lists the slots (render/control.py); one translation unit then.
    time_loop_bodies = False
    # Programs whose steps render to at least this many characters are split into
    # `build_units` translation units that the build compiles in parallel (the
    # MLP-gradient program: one gcc of 0.28 s, or two of ~0.15 s side by side).
    build_units = max(1, min(2, os.cpu_count() or 1))
    split_min_chars = 6000
    # Steps whose C differs only in the buffers it names are compiled once, as a function
    # each of them calls (``_share_kernels``).
    share_kernels = True
    # Reductions longer than this accumulate in chunks of this many elements.
    chunk = 1024
    # Kernels writing at least this many bytes store through a small tile copied out
    # with streaming stores (kiln_stream); None disables. Below it, outputs are likely
    # read again while still in cache.
    stream_min_bytes = 1 << 24
    stream_tile = 1024      # elements per tile
    # Software prefetch for the streams of expensive chunked loops: `{addr}` is read
    # soon. Compute-heavy loops (an exp per element) keep too few loads in flight for
    # the hardware to stream memory: prefetching two chunks ahead halved logsumexp's
    # time on 100 MB inputs (benchmarks/NOTES.md). None disables.
    prefetch = "__builtin_prefetch({addr}, 0, 0)"
    prefetch_min_cost = 8
    prefetch_row = "__builtin_prefetch({addr}, 0, 3)"
    prefetch_ahead = 2048       # elements
    # Software prefetch in the chunked inner loop of a skewed row group (rows.py): each
    # chunk first prefetches its lines of the row after the next one into L2. "auto":
    # on Intel processors with AVX-512 only (build.intel_avx512), where the 16-lane exp
    # loop of logsumexp reads the next row faster than the hardware prefetchers stream
    # it (one core: 14-17 -> 10-14 ms); on AMD (AVX2) the same loop is compute-bound
    # and the prefetches cost 12% (benchmarks/NOTES.md, session 16). None disables.
    skew_prefetch: str | None = "auto"
    # Software prefetch, `prefetch_ahead` elements ahead into L2, in chunked float sums
    # of cheap bodies (memory-bound: `sum(x*x)` over 100 MB). "auto": on Intel processors
    # with AVX-512 only, where one core streamed 12-15% faster with it (CPU time,
    # benchmarks/NOTES.md, session 16); elsewhere (AMD) not measured to help. Only
    # where the sum's team is one thread (`kiln_team_solo()`): two threads streaming at
    # once were 12-17% slower with it on an idle machine (session 19). None disables.
    cheap_prefetch: str | None = "auto"

    def resolved_hint(self, hint: str | None) -> str | None:
        """A prefetch attribute's C text: "auto" is the L2 hint on Intel processors with
        AVX-512 (``build.intel_avx512``), None elsewhere."""
        if hint == "auto":
            return "__builtin_prefetch({addr}, 0, 1)" if intel_avx512() else None
        return hint

    def __init__(self, math_source: str | None = None, math_functions: dict | None = None,
                 blas_declarations: str | None = None):
        self.math_source = math_source
        self.math_functions = math_functions or {}
        self.blas_declarations = blas_declarations

    # ---- program ------------------------------------------------------------------------
    def render(self, prog: Program) -> tuple[str, list[Segment]]:
        self._shared = getattr(prog, "slots", {}) or {}
        # Islands in loop/branch bodies: the C calls back for them (HOST_CALL_C).
        self._host = bool(getattr(prog, "host_calls", None))
        self._needs: set[str] = set()      # headers the plans printed call for
        segments: list[Segment] = []
        cur: list = []
        for step in prog.steps:
            if isinstance(step, Island):
                if cur:
                    segments.append(Segment(f"seg{len(segments)}", cur))
                    cur = []
            else:
                cur.append(step)
                if self.segment_per_step:
                    segments.append(Segment(f"seg{len(segments)}", cur))
                    cur = []
        if cur:
            segments.append(Segment(f"seg{len(segments)}", cur))
        self.loop_timers: list = []
        rendered = []
        for seg in segments:
            self._cur_segment = seg.name
            rendered.append(self._render_steps(prog, seg))
        self._shared_defs = {}
        if self.share_kernels:
            rendered, self._shared_defs = self._share_kernels(prog, rendered)
        total = sum(len(t) for r in rendered for _, t in r)
        total += sum(len(d) for d, _ in self._shared_defs.values())
        units = self.build_units if total >= self.split_min_chars else 1
        if self.loop_timers or self._host:
            units = 1       # the timer arrays / the host-call pointer are defined once
        # One unit or several, each segment's steps go to functions by their size class:
        # a small step's bits (an `omp simd` reduction's order follows how gcc vectorizes
        # it) must not depend on whether the program around it is large enough to split
        # (a small program compiled as one -O3 function summed its 10-class softmax rows
        # in another order than the same program built in parts).
        return self._render_units(prog, segments, rendered, units)

    def _share_kernels(self, prog: Program, rendered):
        """Steps whose C is the same but for the buffers it names (the MLP gradient's
        two tanh layers, its two ``g * (1 - t*t)`` kernels and their column sums) are
        compiled once: one function ``kiln_sharedN`` taking the buffers as arguments, called
        where each step was. gcc's time goes into each function it optimizes (an
        OpenMP region with an inlined polynomial is ~25 ms), not into calls.

        Only top-level kernels, reductions and row groups without a reduction clause
        other than the flushing one: their elements do not depend on how gcc vectorizes
        the loop, so the function computes the same bits as the inlined text. Returns
        the rendered steps (shared ones replaced by their call) and ``{name: (definition,
        first step)}``."""
        shared = getattr(self, "_shared", {})
        self._shared_calls: set = set()
        groups: dict = {}
        restricts: dict = {}
        keyed = []
        for steps in rendered:
            row = []
            for step, text in steps:
                key = None
                head, nl, body = text.partition("\n")
                if (nl and head.startswith("  /* ") and
                        (isinstance(step, (Kernel, Reduce)) or isinstance(step, list)) and
                        _order_free(body) and "kiln_loop" not in body):
                    ids = list(dict.fromkeys(int(m) for m in _BUF.findall(body)))
                    if ids:
                        index = {bid: j for j, bid in enumerate(ids)}
                        canon = _BUF.sub(lambda m: f"b{index[int(m.group(1))]}", body)
                        temps: dict = {}    # temporaries are named program-wide: renumber
                        canon = _TMP.sub(lambda m: f"t{temps.setdefault(m.group(1), len(temps))}",
                                         canon)
                        sig = tuple(C_TYPES[prog.buffers[bid].dtype] for bid in ids)
                        key = (canon, sig, is_small(step))
                        groups.setdefault(key, []).append(step)
                        # restrict where the buffer shares no memory (plan_buffers): the
                        # function's parameter only where it holds at every call
                        restrict = tuple(bid not in shared for bid in ids)
                        prev = restricts.get(key)
                        restricts[key] = restrict if prev is None else tuple(
                            a and b for a, b in zip(prev, restrict))
                row.append((step, text, key, ids if key else None))
            keyed.append(row)
        names: dict = {}
        defs: dict = {}
        out = []
        for row in keyed:
            new = []
            for step, text, key, ids in row:
                if key is None or len(groups[key]) < 2:
                    new.append((step, text))
                    continue
                name = names.get(key)
                if name is None:
                    name = names[key] = f"kiln_shared{len(names)}"
                    canon, sig, small = key
                    params = ", ".join(f"{ct} *{self.restrict + ' ' if r else ''}b{j}"
                                       for j, (ct, r) in enumerate(zip(sig, restricts[key])))
                    defs[name] = (f"{'KILN_SMALL_O1 ' if small else ''}{_SHARED_ATTR} void "
                                  f"{name}({params}) {{\n{canon}\n}}", step)
                head = text.partition("\n")[0]
                args = ", ".join(f"b{bid}" for bid in ids)
                self._shared_calls.add(id(step))
                new.append((step, f"{head}\n  {name}({args});"))
            out.append(new)
        return out, defs

    def _shared_prototypes(self) -> str:
        return "\n".join(d.partition(" {\n")[0] + ";"
                          for d, _ in getattr(self, "_shared_defs", {}).values())

    def _assemble(self, prog: Program, units: list[list[str]]) -> str:
        """Preludes, then each unit's functions after a ``UNIT_MARK`` line when there
        are several (the build compiles them in parallel); BLAS glue in the first."""
        bodies = [t for unit in units for t in unit]
        parts = [PRELUDE, _int_helpers()]
        if self.math_source:
            parts.append(self.math_source)
        extra = lower_random.preludes("\n".join(bodies))
        if pch_enabled():
            # XLA's math in every program's precompiled part (unused static inline
            # functions cost nothing once precompiled; ~18M gcc instructions of parsing
            # per translation unit after the mark, for the programs that call it).
            xla = lower_random.xla_math_prelude()
            parts.append(xla)
            extra = [p for p in extra if p != xla]
        # What precedes this line is the same in every program: the build compiles it
        # once into a precompiled header (build.PCH_MARK).
        parts.append(PCH_MARK)
        parts += extra
        if getattr(self, "loop_timers", None):
            n = len(self.loop_timers)
            parts.append("#include <time.h>\n"
                         f"double kiln_loop_t[{n}];\nlong long kiln_loop_n[{n}];\n"
                         "static inline double kiln_loop_now(void) {\n"
                         "  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);\n"
                         "  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec; }")
        if getattr(self, "_host", False):
            parts.append(HOST_CALL_C)
        needs = getattr(self, "_needs", set())
        if "stdlib" in needs:           # convolution tiles' scratch
            parts.append("#include <stdlib.h>")
        if "stream" in needs:
            # Only then: <immintrin.h> alone takes 0.1 s to compile.
            parts.append(STREAM_C)
        if "steal" in needs:            # parallel chunked sums
            parts.append(STEAL_C)
        blas = self.blas_declarations and any(isinstance(s, (Gemm, Conv))
                                              for s in walk_steps(prog.steps))
        if len(units) == 1:
            if blas:
                parts.append(self.blas_declarations)
            parts += units[0]
            return "\n".join(parts)
        # Prototypes shared, so any unit may call a GEMM; the definitions in the first.
        protos, _, defs = (self.blas_declarations or "").partition(BLAS_DEFINITIONS_MARK)
        if blas:
            parts.append(protos)
        if getattr(self, "_shared_defs", None):
            parts.append(self._shared_prototypes())
        for k, unit in enumerate(units):
            parts.append(UNIT_MARK)
            if k == 0 and blas:
                parts.append(defs)
            parts += unit
        return "\n".join(parts)

    def _render_steps(self, prog: Program, seg: Segment) -> list[tuple[object, str]]:
        used = {}
        for step in seg.steps:
            for b in step_buffers(prog, step):
                used.setdefault(b.id, b)
        seg.buffers = [used[k] for k in sorted(used)]
        return self.render_step_list(prog, seg.steps)

    def render_step_list(self, prog: Program, steps: list) -> list[tuple[object, str]]:
        """(step or row group, C text) for consecutive native steps, in order."""
        out = []
        target = LoopTarget.of(self)
        for group, plan in plan_steps(prog, steps, target):
            if isinstance(plan, ConvPlan):
                self._needs.add("stdlib")
            elif isinstance(plan, KernelPlan) and plan.stream is not None:
                self._needs.add("stream")
            if isinstance(plan, RowGroupPlan):
                names = "+".join(st.name for st in group)
                out.append((group, f"  /* {names}: one loop over rows */\n" +
                            self.render_row_group(prog, plan)))
                continue
            (step,) = group
            if isinstance(step, Island):        # in a body: a call back into Python
                out.append((step, f"  /* host: {step.eqn.primitive.name} */\n"
                                  f"  if (kiln_host_fn({step.host_id})) kiln_host_failed = 1;"))
                continue
            if isinstance(step, Kernel):
                text = self.render_kernel(prog, step, plan)
            elif isinstance(step, Reduce):
                text = self.render_reduce(prog, step, plan)
            elif isinstance(step, Scan):
                text = self.render_scan(prog, step, plan)
            elif isinstance(step, Scatter):
                text = self.render_scatter(prog, step, plan)
            elif isinstance(step, Loop):
                text = self.render_loop(prog, step)
            elif isinstance(step, Branch):
                text = self.render_branch(prog, step)
            elif isinstance(step, Conv):
                text = self.render_conv(prog, step, plan)
            else:
                text = self.render_gemm(step)
            out.append((step, f"  /* {step.name} */\n" + text))
        return out

    def _segment_function(self, seg: Segment, texts: list[str], name: str | None = None,
                          small: bool | str = False) -> str:
        """``small``: ``True`` marks the function ``KILN_SMALL``, ``"O1"``
        ``KILN_SMALL_O1`` (see :func:`_size_class`)."""
        mark = {True: "KILN_SMALL ", "O1": "KILN_SMALL_O1 "}.get(small, "")
        lines = [f"{mark}void {name or seg.name}(void **b) {{",
                 "  const unsigned kiln_csr = kiln_ftz_enter();    /* XLA's DAZ/FTZ */"]
        if getattr(self, "_host", False):
            lines.append("  kiln_host_failed = 0;")
        shared = getattr(self, "_shared", {})
        # Only the buffers these steps name (a part of a split segment names a few of
        # the segment's: each unused declaration is still parsed and optimized away).
        named = {int(m) for t in texts for m in _BUF.findall(t)}
        for j, b in enumerate(seg.buffers):
            if b.id not in named:
                continue
            # Buffers sharing memory with another (plan_buffers) may alias: no restrict.
            qual = "" if b.id in shared else f"{self.restrict} "
            lines.append(f"  {C_TYPES[b.dtype]} *{qual}b{b.id} = "
                         f"({C_TYPES[b.dtype]} *)b[{j}];")
        lines += texts
        lines.append("  kiln_ftz_leave(kiln_csr);")
        lines.append("}")
        return "\n".join(lines)

    def _render_units(self, prog: Program, segments, rendered, n_units: int):
        """Spread the steps over ``n_units`` translation units, balanced by their compile
        weight. A segment's steps are cut into runs of consecutive steps that share a
        ``KILN_SMALL`` mark (GEMM calls and calls of shared functions go with either);
        a run heavier than a quarter of a unit's share is cut again. Each run becomes a
        function ``segN_pK``; runs and shared functions go, heaviest first, to the
        lightest unit; ``segN`` (first unit) calls the runs in order. gcc spends ~3 ms
        on each function however small, so fewer, larger runs build faster."""
        units: list[list[str]] = [[] for _ in range(n_units)]
        defs = getattr(self, "_shared_defs", {})
        calls_shared = getattr(self, "_shared_calls", set())
        seg_runs = []
        for steps in rendered:
            runs: list[list] = []      # [size class (None: any), texts, weight]
            for step, text in steps:
                small = (None if isinstance(step, Gemm) or id(step) in calls_shared
                         else _size_class(step, text))
                w = _compile_weight(text, small)
                if runs and None in (small, runs[-1][0]) or runs and runs[-1][0] == small:
                    if runs[-1][0] is None:
                        runs[-1][0] = small
                    runs[-1][1].append(text)
                    runs[-1][2] += w
                else:
                    runs.append([small, [text], w])
            seg_runs.append(runs)
        total = (sum(r[2] for runs in seg_runs for r in runs) +
                 sum(_compile_weight(d, "O1" if is_small(st) else False)
                     for d, st in defs.values()))
        # Runs heavier than a quarter of a unit's share are cut (balance); with one unit
        # there is nothing to balance.
        cap = max(1, total // (4 * n_units)) if n_units > 1 else total + 1
        for j, runs in enumerate(seg_runs):
            cut = []
            for small, texts, _ in runs:
                piece, w = [], 0
                for t in texts:
                    if piece and w >= cap:
                        cut.append([small, piece, w])
                        piece, w = [], 0
                    piece.append(t)
                    w += _compile_weight(t, small)
                cut.append([small, piece, w])
            seg_runs[j] = cut
        items = [(_compile_weight(d, "O1" if is_small(st) else False), ("def", name))
                 for name, (d, st) in defs.items()]
        items += [(r[2], ("run", j, k)) for j, runs in enumerate(seg_runs)
                  for k, r in enumerate(runs)]
        size = [0] * n_units
        where = {}
        for w, item in sorted(items, key=lambda it: -it[0]):     # stable: ties in order
            u = min(range(n_units), key=size.__getitem__)
            size[u] += w
            where[item] = u
        for name, (d, _) in defs.items():
            units[where[("def", name)]].append(d)
        for j, (seg, runs) in enumerate(zip(segments, seg_runs)):
            if len(runs) == 1:          # one run: the segment's function itself
                small, texts, _ = runs[0]
                units[where[("run", j, 0)]].append(
                    self._segment_function(seg, texts, seg.name, small or False))
                continue
            calls = []
            for k, (small, texts, _) in enumerate(runs):
                part = f"{seg.name}_p{k}"
                units[where[("run", j, k)]].append(
                    self._segment_function(seg, texts, part, small or False))
                calls.append(part)
            units[0].append("\n".join(f"void {c}(void **b);" for c in calls) + "\n" +
                            f"void {seg.name}(void **b) {{\n" +
                            "".join(f"  {c}(b);\n" for c in calls) + "}")
        return self._assemble(prog, units), segments

    # XLA's own float32 exp/log/log1p/expm1/tanh/erf/erfc/lgamma/digamma (and float64's), reproduced bit for
    # bit in kiln/compiler/csrc/xla_math.h: vectorizable, and JAX's exact results. They
    # win over the generic math library for these names.
    xla_math = {("exp", "f"): "xexp32", ("log", "f"): "xlog32", ("log1p", "f"): "xlog1p32",
                ("exp", "d"): "xexp64", ("log1p", "d"): "xlog1p64",
                ("tanh", "f"): "xtanh32", ("tanh", "d"): "xtanh64", ("erf", "f"): "xerf32",
                ("expm1", "f"): "xexpm132", ("expm1", "d"): "xexpm164", ("log", "d"): "xlog64",
                ("erf", "d"): "xerf64", ("rsqrt", "f"): "xrsqrt32", ("rsqrt", "d"): "xrsqrt64",
                ("erfc", "f"): "xerfc32", ("erfc", "d"): "xerfc64",
                ("lgamma", "f"): "xlgamma32", ("lgamma", "d"): "xlgamma64",
                ("digamma", "f"): "xdigamma32", ("digamma", "d"): "xdigamma64",
                ("zeta", "f"): "xzeta32", ("zeta", "d"): "xzeta64",
                ("bessel_i0e", "f"): "xi0e32", ("bessel_i0e", "d"): "xi0e64",
                ("bessel_i1e", "f"): "xi1e32", ("bessel_i1e", "d"): "xi1e64",
                ("polygamma", "f"): "xpolygamma32", ("polygamma", "d"): "xpolygamma64",
                ("igamma", "f"): "xigamma32", ("igamma", "d"): "xigamma64",
                ("igammac", "f"): "xigammac32", ("igammac", "d"): "xigammac64",
                ("igamma_grad_a", "f"): "xigammagrada32", ("igamma_grad_a", "d"): "xigammagrada64",
                ("random_gamma_grad", "f"): "xrandgammagrad32",
                ("random_gamma_grad", "d"): "xrandgammagrad64",
                # XLA's expansions of the CHLO ops (xla_math.h)
                **{(op, w): f"x{op}{n}" for op in ("asin", "acos", "atan", "sinh", "cosh",
                                                    "asinh", "acosh", "atanh")
                   for w, n in (("f", 32), ("d", 64))}}


def _order_free(text: str) -> bool:
    """No reduction clause but the flushing one: each value the text computes is the same
    scalar arithmetic however gcc vectorizes or optimizes it (``omp simd reduction``
    sums in an order that follows the vectorization)."""
    return text.count("reduction(") == text.count("reduction(kiln_ftz:")


#: Small steps with at least this many elements that call XLA's math (``_MATH_CALL``:
#: exp, tanh, log...) are built at full optimization all the same: scalar at -Og, the
#: MLP's 128x10 softmax exp took 31 us a step, vectorized ~2 (session 19); below it the
#: build time saved is worth more than the run.
SMALL_MATH_ELEMENTS = 512


def _elements(step) -> int:
    """The most elements a loop of ``step`` (or row group, a list) runs over."""
    if isinstance(step, list):
        return max((_elements(s) for s in step), default=0)
    return math.prod(step.in_shape if isinstance(step, Reduce) else step.shape)


def _size_class(step, text: str) -> bool | str:
    """``False`` (full optimization), ``True`` (``KILN_SMALL``) or ``"O1"``
    (``KILN_SMALL_O1``: small and :func:`_order_free`)."""
    if not is_small(step):
        return False
    if _elements(step) >= SMALL_MATH_ELEMENTS and _MATH_CALL.search(text):
        return False
    return "O1" if _order_free(text) else True


def _mark(classes: list) -> bool | str:
    """One function's class for steps of the given classes: the weakest of them."""
    if not all(classes):
        return False
    return "O1" if all(c == "O1" for c in classes) else True


def _compile_weight(text: str, small: bool | str = False) -> int:
    """A step's share of its unit's compile time, to balance units: its length, plus a
    lump per OpenMP region (an outlined function) and per vectorized math call (the
    inlined polynomial is vectorized again; not in a ``KILN_SMALL`` function), and a
    smaller one per loop. By length alone the MLP gradient's units compiled in 0.20 and
    0.15 s; by this, 0.15 and 0.15 (gcc 12, -O3). Measured per step (session 16, Xeon):
    an OpenMP region ~45 ms, a small loop nest 5-30 ms, a GEMM call ~5 ms."""
    lumps = text.count("omp parallel") + (0 if small else len(_MATH_CALL.findall(text)))
    weight = len(text) + 2500 * lumps + 300 * text.count("for (")
    # A forced-SIMD reduction (session 17, gcc instructions): ~20-30M each, a max/min
    # one (with its NaN flag) ~80M, where an OpenMP region is ~75M.
    for line in _SIMD_REDUCTION.findall(text):
        weight += 2300 if ("reduction(max:" in line or "reduction(min:" in line) else 800
    return weight // 3 if small == "O1" else weight     # KILN_SMALL_O1 (-Og): a third


_SIMD_REDUCTION = re.compile(r"#pragma omp simd[^\n]*reduction\([^\n]*")
_BUF = re.compile(r"\bb(\d+)\b")
_TMP = re.compile(r"\bt(\d+)\b")
# A shared step's function: called from each of its steps, never inlined back into them
# (that would compile it once per call again); hidden, as the units call across.
_SHARED_ATTR = '__attribute__((noinline, visibility("hidden")))'

_MATH_CALL = re.compile(r"\bx[a-z0-9]+(?:32|64)\(|\bkiln_[a-z]+_xla(?:32|64)\(|\bk(?:sin|cos|tan)32\(")


__all__ = ["CRenderer", "Segment", "c_literal", "Sym"]
