"""The C renderer: a :class:`~.program.Program`'s native steps become C functions.

One renderer, driven by attributes (tinygrad's ``CStyleLanguage`` idea): a dialect
for another C-like target (CUDA) subclasses :class:`CRenderer` and changes the
attributes and the few methods that differ.

Each run of native steps between two islands is one *segment*: a C function
``void segN(void **b)`` whose argument array holds the data pointers of the buffers
it touches, in the order of ``Segment.buffers``.

Loops: a kernel is a loop nest over its shape, innermost loop contiguous; large
loops get ``#pragma omp parallel for`` (static schedule) over the outermost dimension.
Reductions keep a scalar accumulator when the reduced dimensions are innermost
(long sums are accumulated in chunks, for accuracy and vectorization), or
accumulate into the output buffer when a reduced dimension is outer (column sums).

Semantics follow XLA on the CPU: NaN-propagating ``max``/``min``, saturating
float->int conversion, integer division by zero, out-of-range shifts. Signed
integer arithmetic wraps (compiled with ``-fwrapv``).

What it must not hold: fusion decisions (``lower.py``), building (``build.py``).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from kiln.compiler.build.blas import DEFINITIONS_MARK as BLAS_DEFINITIONS_MARK
from kiln.compiler.build.build import UNIT_MARK
from kiln.compiler.lower import random as lower_random
from kiln.compiler.lower.expr import SExpr
from kiln.compiler.lower.index import Idx, Sym, row_major_strides
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
from kiln.compiler.lower.walk import idx_of, loop_dependent, step_buffers, walk
from kiln.compiler.render.control import ControlMixin, ConvMixin
from kiln.compiler.render.row_groups import lead_dims, loop_shape, row_count, row_groups

C_TYPES = {
    np.dtype(np.bool_): "uint8_t", np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t",
    np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t",
    np.dtype(np.float32): "float", np.dtype(np.float64): "double",
}
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


STREAM_C = r"""
#if defined(__AVX__)
#include <immintrin.h>
#endif
/* Copy n bytes to dst with non-temporal (streaming) stores where the processor has
   them: a large output then costs one write instead of a read-for-ownership plus a
   write, and does not evict the inputs from the cache. kiln_stream_fence follows. */
static inline void kiln_stream(void *dst, const void *src, int64_t n) {
#if defined(__AVX__)
  char *d = (char *)dst;
  const char *s = (const char *)src;
  int64_t head = (int64_t)((32 - ((uintptr_t)d & 31)) & 31);
  if (head > n) head = n;
  memcpy(d, s, (size_t)head);
  int64_t i = head;
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
  memcpy(d + i, s + i, (size_t)(n - i));
#else
  memcpy(dst, src, (size_t)n);
#endif
}
/* Orders this thread's streaming stores before what follows (each thread, once, after
   its last kiln_stream: a fence per tile would drain the write-combining buffers
   every 4 KB and halve the bandwidth). */
static inline void kiln_stream_fence(void) {
#if defined(__AVX__)
  _mm_sfence();
#endif
}
"""

PRELUDE = r"""
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
/* Functions holding only small loops (SMALL_ELEMENTS): gcc's loop vectorizer, peeling and
   unrolling cost compile time there that the run never earns back. `omp simd` loops still
   vectorize (OpenMP forces them), so reductions sum in the same order as elsewhere. */
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_SMALL __attribute__((optimize("no-tree-loop-vectorize", "no-tree-slp-vectorize", \
                                           "no-peel-loops", "no-unroll-loops")))
#else
#define KILN_SMALL
#endif
static inline int64_t kiln_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t kiln_floormod(int64_t a, int64_t b) {
  int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t kiln_clampi(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v); }
static inline float kiln_maxf(float a, float b) { return (a != a || a > b) ? a : b; }
static inline float kiln_minf(float a, float b) { return (a != a || a < b) ? a : b; }
static inline double kiln_maxd(double a, double b) { return (a != a || a > b) ? a : b; }
static inline double kiln_mind(double a, double b) { return (a != a || a < b) ? a : b; }
static inline float kiln_signf(float a) { return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : a); }
static inline double kiln_signd(double a) { return a > 0.0 ? 1.0 : (a < 0.0 ? -1.0 : a); }
static inline float kiln_logistic_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double kiln_logistic_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline float kiln_rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double kiln_rsqrtd(double x) { return 1.0 / sqrt(x); }
"""

_INT_HELPERS_TEMPLATE = r"""
static inline {T} kiln_div_{S}({T} a, {T} b) {{
  return b == 0 ? ({T})-1 : (b == -1 ? ({T})(({U})0 - ({U})a) : ({T})(a / b)); }}
static inline {T} kiln_rem_{S}({T} a, {T} b) {{
  return b == 0 ? a : (b == -1 ? ({T})0 : ({T})(a % b)); }}
static inline {T} kiln_shl_{S}({T} a, {T} b) {{
  return ({U})b < {N} ? ({T})(({U})a << ({U})b) : ({T})0; }}
static inline {T} kiln_shrl_{S}({T} a, {T} b) {{
  return ({U})b < {N} ? ({T})(({U})a >> ({U})b) : ({T})0; }}
static inline {T} kiln_shra_{S}({T} a, {T} b) {{
  return ({T})(({I})a >> (({U})b < {N} ? ({U})b : {N} - 1)); }}
"""
_UINT_HELPERS_TEMPLATE = r"""
static inline {T} kiln_div_{S}({T} a, {T} b) {{ return b == 0 ? ({T})~({T})0 : ({T})(a / b); }}
static inline {T} kiln_rem_{S}({T} a, {T} b) {{ return b == 0 ? a : ({T})(a % b); }}
static inline {T} kiln_shl_{S}({T} a, {T} b) {{
  return b < {N} ? ({T})(a << b) : ({T})0; }}
static inline {T} kiln_shrl_{S}({T} a, {T} b) {{
  return b < {N} ? ({T})(a >> b) : ({T})0; }}
static inline {T} kiln_shra_{S}({T} a, {T} b) {{
  return ({T})(({I})a >> (b < {N} ? b : {N} - 1)); }}
"""


def _int_helpers() -> str:
    out = []
    for bits in (8, 16, 32, 64):
        out.append(_INT_HELPERS_TEMPLATE.format(T=f"int{bits}_t", U=f"uint{bits}_t",
                                                S=f"i{bits}", N=bits, I=f"int{bits}_t"))
        out.append(_UINT_HELPERS_TEMPLATE.format(T=f"uint{bits}_t", S=f"u{bits}", N=bits,
                                                 I=f"int{bits}_t"))
    return "".join(out)


def _short(dt: np.dtype) -> str:
    return {"b": "u8", "i": "i", "u": "u"}[dt.kind] + ("" if dt.kind == "b" else
                                                      str(dt.itemsize * 8))


def c_literal(value, dtype) -> str:
    """Exact C text for a scalar of ``dtype``."""
    dtype = np.dtype(dtype)
    v = np.asarray(value, dtype)[()]
    if dtype.kind == "f":
        suffix = "f" if dtype == F32 else ""
        fv = float(v)
        if math.isnan(fv):
            return "((float)NAN)" if suffix else "((double)NAN)"
        if math.isinf(fv):
            return ("(-INFINITY)" if fv < 0 else "INFINITY") if suffix else \
                ("(-(double)INFINITY)" if fv < 0 else "((double)INFINITY)")
        return f"({fv.hex()}{suffix})"
    if dtype.kind == "b":
        return "1" if bool(v) else "0"
    iv = int(v)
    if dtype.kind == "u":
        return f"(({C_TYPES[dtype]}){iv}ULL)"
    if iv == -(2 ** 63):
        return "(-9223372036854775807LL - 1)"
    return f"(({C_TYPES[dtype]}){iv}LL)"


@dataclass
class Segment:
    """A C function running consecutive native steps."""

    name: str
    steps: list
    buffers: list = field(default_factory=list)   # Buffer objects, argument order


class CRenderer(ControlMixin, ConvMixin):
    """Renders programs as C. Attributes describe the dialect."""

    restrict = "restrict"
    parallel_for = "#pragma omp parallel for schedule(static)"
    parallel_region = "#pragma omp parallel"
    for_in_region = "#pragma omp for schedule(static)"
    simd_reduce = "#pragma omp simd reduction({op}:{acc})"
    simd = "#pragma omp simd"
    parallel_reduce = "#pragma omp parallel for schedule(static) reduction({op}:{acc})"
    # Elements of work above which a loop runs on all cores.
    parallel_threshold = 1 << 17
    # One C function per step (for timing each step; see Executable.profile).
    segment_per_step = False
    # Programs whose steps render to at least this many characters are split into
    # `build_units` translation units that the build compiles in parallel (the
    # MLP-gradient program: one gcc of 0.28 s, or two of ~0.15 s side by side).
    build_units = max(1, min(2, os.cpu_count() or 1))
    split_min_chars = 6000
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

    def __init__(self, math_source: str | None = None, math_functions: dict | None = None,
                 blas_declarations: str | None = None):
        self.math_source = math_source
        self.math_functions = math_functions or {}
        self.blas_declarations = blas_declarations

    # ---- program ------------------------------------------------------------------------
    def render(self, prog: Program) -> tuple[str, list[Segment]]:
        self._shared = getattr(prog, "slots", {}) or {}
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
        rendered = [self._render_steps(prog, seg) for seg in segments]
        total = sum(len(t) for r in rendered for _, t in r)
        units = self.build_units if total >= self.split_min_chars else 1
        if units > 1:
            return self._render_units(prog, segments, rendered, units)
        bodies = [self._segment_function(seg, [t for _, t in r],
                                         small=all(_is_small(st) for st, _ in r))
                  for seg, r in zip(segments, rendered)]
        return self._assemble(prog, [bodies]), segments

    def _assemble(self, prog: Program, units: list[list[str]]) -> str:
        """Preludes, then each unit's functions after a ``UNIT_MARK`` line when there
        are several (the build compiles them in parallel); BLAS glue in the first."""
        bodies = [t for unit in units for t in unit]
        parts = [PRELUDE, _int_helpers()]
        if self.math_source:
            parts.append(self.math_source)
        parts += lower_random.preludes("\n".join(bodies))
        if any("malloc(" in b for b in bodies):
            parts.append("#include <stdlib.h>")
        if any("kiln_stream(" in b for b in bodies):
            # Only then: <immintrin.h> alone takes 0.1 s to compile.
            parts.append(STREAM_C)
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
        for group in row_groups(prog, steps):
            if len(group) > 1:
                names = "+".join(st.name for st in group)
                out.append((group, f"  /* {names}: one loop over rows */\n" +
                            self.render_row_group(prog, group)))
                continue
            (step,) = group
            if isinstance(step, Kernel):
                text = self.render_kernel(prog, step)
            elif isinstance(step, Reduce):
                text = self.render_reduce(prog, step)
            elif isinstance(step, Scan):
                text = self.render_scan(prog, step)
            elif isinstance(step, Scatter):
                text = self.render_scatter(prog, step)
            elif isinstance(step, Loop):
                text = self.render_loop(prog, step)
            elif isinstance(step, Branch):
                text = self.render_branch(prog, step)
            elif isinstance(step, Conv):
                text = self.render_conv(prog, step)
            else:
                text = self.render_gemm(step)
            out.append((step, f"  /* {step.name} */\n" + text))
        return out

    def _segment_function(self, seg: Segment, texts: list[str], name: str | None = None,
                          small: bool = False) -> str:
        lines = [f"{'KILN_SMALL ' if small else ''}void {name or seg.name}(void **b) {{"]
        shared = getattr(self, "_shared", {})
        for j, b in enumerate(seg.buffers):
            # Buffers sharing memory with another (plan_buffers) may alias: no restrict.
            qual = "" if b.id in shared else f"{self.restrict} "
            lines.append(f"  {C_TYPES[b.dtype]} *{qual}b{b.id} = "
                         f"({C_TYPES[b.dtype]} *)b[{j}];")
        lines += texts
        lines.append("}")
        return "\n".join(lines)

    def _render_units(self, prog: Program, segments, rendered, n_units: int):
        """Spread the steps over ``n_units`` translation units, balanced by size. Each run
        of consecutive steps in one unit (split where ``KILN_SMALL`` starts or stops)
        becomes a function ``segN_pK``; ``segN`` (first unit) calls them in order."""
        units: list[list[str]] = [[] for _ in range(n_units)]
        size = [0] * n_units
        for seg, steps in zip(segments, rendered):
            runs: list[tuple[int, bool, list[str]]] = []
            for step, text in steps:
                k = min(range(n_units), key=size.__getitem__)
                small = _is_small(step)
                size[k] += _compile_weight(text, small)
                if runs and runs[-1][:2] == (k, small):
                    runs[-1][2].append(text)
                else:
                    runs.append((k, small, [text]))
            calls = []
            for j, (k, small, texts) in enumerate(runs):
                part = f"{seg.name}_p{j}"
                units[k].append(self._segment_function(seg, texts, part, small))
                calls.append(part)
            units[0].append("\n".join(f"void {c}(void **b);" for c in calls) + "\n" +
                            f"void {seg.name}(void **b) {{\n" +
                            "".join(f"  {c}(b);\n" for c in calls) + "}")
        return self._assemble(prog, units), segments

    # ---- kernels ------------------------------------------------------------------------
    def render_kernel(self, prog: Program, k: Kernel) -> str:
        body = _Body(self, prog)
        stores = []
        out_shape = k.shape
        flat = _flat_of_syms(k.syms, out_shape)
        if k.offset is not None:
            flat = f"{flat} + {k.offset.c()}"
        for buf, e in k.outs:
            v = body.value(e)
            stores.append(f"b{buf.id}[{flat}] = ({C_TYPES[buf.dtype]})({v});")
        work = math.prod(k.shape) * max(1, _cost_of(k.outs))
        loops = [(s, n) for s, n in zip(k.syms, k.shape)]
        out_bytes = sum(buf.size * np.dtype(buf.dtype).itemsize for buf, _ in k.outs)
        if (self.stream_min_bytes is not None and out_bytes >= self.stream_min_bytes
                and k.offset is None
                and loops and loops[-1][1] >= self.stream_tile
                and all(buf.size == math.prod(out_shape) for buf, _ in k.outs)):
            text = self._streamed_nest(k, loops, body, work)
        else:
            text = self._nest(prog, loops, body, stores, work, indent=2)
        src = _plain_copy_source(prog, k)
        if src is not None:
            # A copy of an input (before a scatter into the copy): skipped when the
            # output was given the input's own memory (a donated argument).
            return f"  if ((void *)b{k.outs[0][0].id} != (void *)b{src})\n{text}"
        return text

    def _streamed_nest(self, k: Kernel, loops, body: _Body, work) -> str:
        """The kernel's loop nest with the innermost loop cut into tiles: each tile is
        computed into a stack array (vectorized as usual), then streamed out."""
        tile = self.stream_tile
        (s, n), outer = loops[-1], loops[:-1]
        flat = _flat_of_syms(k.syms, k.shape)
        # One parallel region: each thread fences its own streaming stores at its end.
        out = ["  {"] + ["    " + x for x in body.prelude_lines()]
        par = work >= self.parallel_threshold
        out.append("    " + self.parallel_region + ("" if par else " if(0)"))
        out.append("    {")
        depth = 6
        for d, (o, m) in enumerate(outer):
            if d == 0 and m > 1:
                out.append(" " * depth + self.for_in_region)
            out.append(" " * depth + f"for (int64_t {o.name} = 0; {o.name} < {m}; "
                       f"{o.name}++) {{")
            depth += 2
        if not outer or outer[0][1] == 1:
            out.append(" " * depth + self.for_in_region)
        ind = " " * depth
        out.append(ind + f"for (int64_t c0 = 0; c0 < {n}; c0 += {tile}) {{")
        out.append(ind + f"  const int64_t c1 = c0 + {tile} < {n} ? c0 + {tile} : {n};")
        for j, (buf, _) in enumerate(k.outs):
            out.append(ind + f"  {C_TYPES[buf.dtype]} tile{j}[{tile}];")
        out.append(ind + f"  for (int64_t {s.name} = c0; {s.name} < c1; {s.name}++) {{")
        out += [ind + "    " + x for x in body.lines]
        for j, (buf, e) in enumerate(k.outs):
            out.append(ind + f"    tile{j}[{s.name} - c0] = ({C_TYPES[buf.dtype]})"
                       f"({body.value(e)});")
        out.append(ind + "  }")
        out.append(ind + f"  {{ const int64_t {s.name} = c0;")
        for j, (buf, _) in enumerate(k.outs):
            size = np.dtype(buf.dtype).itemsize
            out.append(ind + f"    kiln_stream(&b{buf.id}[{flat}], tile{j}, "
                       f"(c1 - c0) * {size});")
        out.append(ind + "  }")
        out.append(ind + "}")
        for _ in outer:
            depth -= 2
            out.append(" " * depth + "}")
        out.append("      kiln_stream_fence();")
        out.append("    }")
        out.append("  }")
        return "\n".join(out)

    def _nest(self, prog, loops, body: _Body, inner_stmts, work, indent=2, pre_inner=(),
              backwards=None):
        """A loop nest with ``body``'s statements and ``inner_stmts`` innermost; the
        outermost loop parallel when ``work`` is large (pass 0 for a sequential nest);
        the loop of symbol ``backwards`` runs from the end."""
        pad = " " * indent
        out = [pad + "{"]
        out += [pad + "  " + s for s in body.prelude_lines()]
        depth = indent + 2
        par = work >= self.parallel_threshold and loops and loops[0][1] > 1
        for d, (s, n) in enumerate(loops):
            if d == 0 and par:
                out.append(" " * depth + self.parallel_for)
            if s is backwards:
                out.append(" " * depth + f"for (int64_t {s.name} = {n - 1}; {s.name} >= 0; "
                           f"{s.name}--) {{")
            else:
                out.append(" " * depth + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                           f"{s.name}++) {{")
            depth += 2
        if not loops:
            # A nested scope, as a loop body would be: the prelude may already have
            # declared a temporary the body declares again.
            out.append(" " * depth + "{")
            depth += 2
        out += [" " * depth + s for s in body.lines]
        out += [" " * depth + s for s in inner_stmts]
        for _ in loops:
            depth -= 2
            out.append(" " * depth + "}")
        if not loops:
            depth -= 2
            out.append(" " * depth + "}")
        out.append(pad + "}")
        return "\n".join(out)

    def render_row_group(self, prog: Program, steps: list) -> str:
        """Steps sharing one loop over rows (``row_groups``): for each row, each step's
        work in turn, so later steps read the row from cache. Each step names the row
        its own way (its leading loop symbols, from the flat row number ``g``).

        When the group opens with a float reduction followed by a float sum or an
        elementwise step over the same row length (a max then a sum of exps:
        ``logsumexp``; a max then the exps: softmax; a mean then a sum of squares: layer
        norm), the loop is skewed (:meth:`_skewed_rows`): the first reduction of row
        ``g + 1`` runs in the same inner loop as the second step of row ``g``, so the
        next row's loads from memory overlap the current row's arithmetic."""
        n_rows = row_count(steps[0])
        work, parts, prelude = 0, [], []
        for st in steps:
            m = lead_dims(st, n_rows)
            part = self._row_step_bodies(prog, st, m)
            work += math.prod(loop_shape(st)) * max(1, _step_cost(st))
            parts.append(part)
            prelude += [x for x in part.prelude if x not in prelude]
        skew = _skewable(parts) and n_rows >= 2
        if skew:
            # The first step once more, for the row after the one being summed: its own
            # bodies (rendered again), every name it declares suffixed ``_n``.
            ahead = self._row_step_bodies(prog, steps[0], parts[0].m)
            prelude += [x for x in ahead.prelude if x not in prelude]
        lines = ["  {"] + ["    " + x for x in prelude]
        parallel = work >= self.parallel_threshold
        if skew:
            lines += self._skewed_rows(parts, ahead, n_rows, parallel)
        else:
            if parallel:
                lines.append("    " + self.parallel_for)
            lines.append(f"    for (int64_t g = 0; g < {n_rows}; g++) {{")
            for part in parts:
                lines += self._row_step(part, " " * 6)
            lines.append("    }")
        lines.append("  }")
        return "\n".join(lines)

    def _row_step_bodies(self, prog: Program, st, m: int) -> _RowStep:
        body = _Body(self, prog)
        # What depends on the row only is computed once per row, before the step's
        # inner loops (else gcc may leave those loops scalar).
        row = body.hoisting(st.syms[m:])
        if isinstance(st, Reduce):
            body.summed = _summed(st)
            vals = [body.value(st.body)]
        else:
            vals = [body.value(e) for _, e in st.outs]
        prelude = [x for b in (row, body) for x in b.prelude_lines()]
        return _RowStep(st, m, loop_shape(st), body, row, vals, prelude)

    def _lead_lines(self, part: _RowStep, row_var: str, suffix: str = "") -> list[str]:
        """Definitions of a step's leading loop symbols from the flat row number."""
        lead = part.shape[:part.m]
        out = []
        for d, (s, n, stride) in enumerate(zip(part.st.syms, lead, row_major_strides(lead))):
            v = row_var if stride == 1 else f"{row_var} / {stride}"
            if d > 0:
                v = f"({v}) % {n}"
            out.append(f"const int64_t {s.name}{suffix} = {v};")
        return out

    def _row_step(self, part: _RowStep, ind: str) -> list[str]:
        """One step's work for row ``g``, as a block."""
        st, m, shape, body, row, vals = (part.st, part.m, part.shape, part.body, part.row,
                                         part.vals)
        lines = [ind + "{"] + [ind + "  " + x for x in self._lead_lines(part, "g")]
        lines += [ind + "  " + x for x in row.lines]
        if isinstance(st, Reduce):
            oflat = _flat_of_syms(st.syms[:m], shape[:m])
            # The row is in cache after the group's first step: no prefetching
            # along it; an expensive step prefetches the next row instead.
            lines += self._reduce_row(st, body, vals[0], ind + "  ",
                                      self.reduce_init(st.op, st.out.dtype), oflat,
                                      parallel=False,
                                      next_row=st.syms[m - 1] if m else None)
        else:
            d2 = len(ind) + 2
            inner = list(zip(st.syms[m:], shape[m:]))
            for j, (s, n) in enumerate(inner):
                if j == len(inner) - 1:
                    # Elements are independent. Said outright: after the stores of
                    # the steps before it, gcc may not vectorize the loop alone.
                    lines.append(" " * d2 + self.simd)
                lines.append(" " * d2 + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                             f"{s.name}++) {{")
                d2 += 2
            lines += [" " * d2 + x for x in body.lines]
            flat = _flat_of_syms(st.syms, shape)
            lines += [" " * d2 + f"b{buf.id}[{flat}] = ({C_TYPES[buf.dtype]})({v});"
                      for (buf, _), v in zip(st.outs, vals)]
            for _ in inner:
                d2 -= 2
                lines.append(" " * d2 + "}")
        lines.append(ind + "}")
        return lines

    def _skewed_rows(self, parts: list, ahead: _RowStep, n_rows: int,
                     parallel: bool) -> list[str]:
        """The row loop of a group opening with a reduction then a step over rows of the
        same length, software-pipelined: rows go in blocks (taken dynamically by the
        threads); each block reduces its first row with the first step alone, then for each row ``g``
        runs one inner loop computing the second step of row ``g`` and the first step
        of row ``g + 1`` (``ahead``: the first step rendered again, its names suffixed
        ``_n``), then the other steps of row ``g``. At the last row of a block the loop
        folds that row again rather than branching, and drops the result."""
        first, second = parts[0], parts[1]
        r0 = first.st
        s1 = second.st.syms[second.m].name
        declared = {s.name for s in r0.syms}
        for x in ahead.row.lines + ahead.body.lines:
            hit = _DECLARED.match(x)
            if hit:
                declared.add(hit.group(1))
        pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, declared))) + r")\b")

        def renamed(xs):
            return [pattern.sub(r"\1_n", x) for x in xs]

        ind = " " * 6
        lines = []
        # Blocks of rows handed out dynamically: under a loaded machine a thread that
        # loses its core does not hold the others up (each block costs one extra pass of
        # the first step over its first row: ~1/150 of the work).
        block = max(16, -(-n_rows // 32))
        n_blocks = -(-n_rows // block)
        if parallel:
            lines.append("    #pragma omp parallel for schedule(dynamic, 1)")
        lines += [f"    for (int64_t blk = 0; blk < {n_blocks}; blk++) {{",
                  f"      const int64_t g_lo = blk * {block}, g_hi = g_lo + {block} < {n_rows} "
                  f"? g_lo + {block} : {n_rows};"]
        lines += ["      if (g_lo < g_hi) {",
                  "      { const int64_t g = g_lo;"]
        lines += self._row_step(first, ind + "  ")
        lines += ["      }",
                  "      for (int64_t g = g_lo; g < g_hi; g++) {",
                  "        const int64_t gn = g + 1 < g_hi ? g + 1 : g;",
                  "        {"]
        ind2 = " " * 10
        lines += [ind2 + x for x in self._lead_lines(second, "g")]
        lines += [ind2 + x for x in second.row.lines]
        lines += [ind2 + x for x in self._lead_lines(ahead, "gn", "_n")]
        lines += [ind2 + x for x in renamed(ahead.row.lines)]
        oflat0 = pattern.sub(r"\1_n", _flat_of_syms(r0.syms[:first.m], first.shape[:first.m]))
        inner_n = f"const int64_t {r0.syms[first.m].name}_n = {s1};"
        lines += self._fused_rows(
            second, r0, [inner_n] + renamed(ahead.body.lines),
            pattern.sub(r"\1_n", ahead.vals[0]), oflat0, ind2, s1)
        lines.append("        }")
        for part in parts[2:]:
            lines += self._row_step(part, " " * 8)
        lines += ["      }", "      }", "    }"]
        return lines

    def _fused_rows(self, second: _RowStep, r0: Reduce, lines0, val0, oflat0, ind,
                    s1) -> list[str]:
        """One loop over a row doing the second step for this row (a reduction or an
        elementwise kernel) and folding ``r0`` (the first step, a reduction) for the next
        row, each reduction folded the same way as :meth:`_reduce_row` would alone
        (chunked float sums, NaN-flagged float max/min), so no bits change. ``oflat0``
        indexes ``r0``'s output at the next row."""
        st1 = second.st
        n = second.shape[-1]
        t0 = C_TYPES[r0.out.dtype]
        reduce1 = isinstance(st1, Reduce)
        chunk1 = reduce1 and n > 2 * self.chunk            # a float sum (_skewable)
        chunk0 = r0.op == "sum" and n > 2 * self.chunk
        chunked = chunk0 or chunk1
        out = []
        if reduce1:
            out.append(ind + f"{C_TYPES[st1.out.dtype]} acc = "
                             f"{self.reduce_init(st1.op, st1.out.dtype)};")
            clause1 = "reduction(+:part)" if chunk1 else "reduction(+:acc)"
            body1 = list(second.body.lines) + [("part" if chunk1 else "acc") +
                                               f" += {second.vals[0]};"]
        else:
            clause1 = ""
            flat = _flat_of_syms(st1.syms, second.shape)
            body1 = list(second.body.lines) + [
                f"b{buf.id}[{flat}] = ({C_TYPES[buf.dtype]})({v});"
                for (buf, _), v in zip(st1.outs, second.vals)]
        out.append(ind + f"{t0} acc_n = {self.reduce_init(r0.op, r0.out.dtype)};")
        if r0.op == "sum":
            fold0 = [("part_n" if chunk0 else "acc_n") + f" += {val0};"]
            clause0 = "reduction(+:part_n)" if chunk0 else "reduction(+:acc_n)"
        else:
            # NaN check in one fused multiply-add: x * 0 is 0 unless x is a NaN or an
            # infinity, so a NaN total means "look again" (below), for that row only.
            # The compare-and-OR it replaces took one more vector instruction in this,
            # the group's hottest loop (3-7% of logsumexp, measured).
            cmp = ">" if r0.op == "max" else "<"
            fma = "fmaf" if r0.out.dtype == F32 else "fma"
            out.append(ind + f"{t0} nanx_n = 0;")
            fold0 = [f"acc_n = {val0} {cmp} acc_n ? {val0} : acc_n;",
                     f"nanx_n = {fma}({val0}, 0, nanx_n);"]
            clause0 = f"reduction({r0.op}:acc_n) reduction(+:nanx_n)"
        body = body1 + list(lines0) + fold0
        pragma = " ".join(x for x in ("#pragma omp simd", clause1, clause0) if x)

        def loop(body, ind):
            if not chunked:
                return ([ind + pragma,
                         ind + f"for (int64_t {s1} = 0; {s1} < {n}; {s1}++) {{"]
                        + [ind + "  " + x for x in body] + [ind + "}"])
            lines = [ind + f"for (int64_t c0 = 0; c0 < {n}; c0 += {self.chunk}) {{",
                     ind + f"  const int64_t c1 = c0 + {self.chunk} < {n} ? "
                           f"c0 + {self.chunk} : {n};"]
            if chunk1:
                lines.append(ind + f"  {C_TYPES[st1.out.dtype]} part = 0;")
            if chunk0:
                lines.append(ind + f"  {t0} part_n = 0;")
            lines += [ind + "  " + pragma,
                      ind + f"  for (int64_t {s1} = c0; {s1} < c1; {s1}++) {{"]
            lines += [ind + "    " + x for x in body]
            lines.append(ind + "  }")
            if chunk1:
                lines.append(ind + "  acc += part;")
            if chunk0:
                lines.append(ind + "  acc_n += part_n;")
            return lines + [ind + "}"]

        bounded = _bounded_exps(second, r0)
        if bounded:
            # Every such exp argument is at most its row's bound (and no NaN) when the
            # guard holds: that row runs the loop with fexp32_fin/xexp32_fin (same bits,
            # fewer instructions); an infinity or NaN in the row takes the general loop.
            guard = " && ".join(sorted(set(bounded.values())))
            fast = list(body)
            for arg in bounded:
                for f in ("fexp32", "xexp32"):
                    fast = [x.replace(f"{f}({arg})", f"{f}_fin({arg})") for x in fast]
            out += [ind + f"if ({guard}) {{"] + loop(fast, ind + "  ")
            out += [ind + "} else {"] + loop(body, ind + "  ") + [ind + "}"]
        else:
            out += loop(body, ind)
        if reduce1:
            oflat1 = _flat_of_syms(st1.syms[:second.m], second.shape[:second.m])
            out.append(ind + f"b{st1.out.id}[{oflat1}] = acc;")
        if r0.op != "sum":
            # An infinity or a NaN in the next row: a NaN makes the max NaN (as XLA).
            out += [ind + "if (nanx_n != nanx_n) {",
                    ind + "  int nanf_n = 0;",
                    ind + f"  for (int64_t {s1} = 0; {s1} < {n}; {s1}++) {{"]
            out += [ind + "    " + x for x in lines0]
            out += [ind + f"    nanf_n |= ({val0} != {val0});",
                    ind + "  }",
                    ind + f"  if (nanf_n) acc_n = {c_literal(np.nan, r0.out.dtype)};",
                    ind + "}"]
        # The last row of a range folded its own row again (no branch in the loop);
        # not stored: a step of this row may have overwritten its input in place.
        out.append(ind + f"if (gn != g) b{r0.out.id}[{oflat0}] = acc_n;")
        return out

    def render_reduce(self, prog: Program, r: Reduce) -> str:
        if r.op in ("argmax", "argmin"):
            return self._render_arg_reduce(prog, r)
        nd = len(r.in_shape)
        axes = set(r.axes)
        out_t = C_TYPES[r.out.dtype]
        kept = [d for d in range(nd) if d not in axes]
        out_shape = [r.in_shape[d] for d in kept]
        ostr = row_major_strides(out_shape)
        oflat = " + ".join(f"{st}*{r.syms[d].name}" for d, st in zip(kept, ostr)) or "0"
        # trailing block of reduced dims
        t0 = nd
        while t0 > 0 and (t0 - 1) in axes:
            t0 -= 1
        prefix = list(range(t0))
        trailing = list(range(t0, nd))
        init = self.reduce_init(r.op, r.out.dtype)
        pad = "  "
        body = _Body(self, prog)
        body.summed = _summed(r)
        val = body.value(r.body)
        lines = [pad + "{"]
        lines += [pad + "  " + s for s in body.prelude_lines()]
        outer_reduced = any(d in axes for d in prefix)
        total = math.prod(r.in_shape)
        work = total * max(1, r.body.cost)
        if (len(prefix) == 2 and not trailing and prefix[0] in axes and prefix[1] not in axes
                and work >= self.parallel_threshold and r.in_shape[1] >= 64):
            # a reduction over rows into columns: parallel over column tiles
            lines += self._column_reduce(r, body, val, pad + "  ")
            lines.append(pad + "}")
            return "\n".join(lines)
        if outer_reduced:
            n_out = math.prod(out_shape)
            lines.append(pad + f"  for (int64_t o = 0; o < {n_out}; o++) b{r.out.id}[o] = "
                         f"{init};")
        depth = len(pad) + 2
        par = (work >= self.parallel_threshold and prefix and prefix[0] not in axes
               and r.in_shape[prefix[0]] > 1)
        for j, d in enumerate(prefix):
            s, n = r.syms[d], r.in_shape[d]
            if j == 0 and par:
                lines.append(" " * depth + self.parallel_for)
            lines.append(" " * depth + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                         f"{s.name}++) {{")
            depth += 2
        ind = " " * depth
        if not trailing:
            lines += [ind + s for s in body.lines]
            lines.append(ind + f"b{r.out.id}[{oflat}] = ({out_t})"
                         f"({self.combine(r.op, r.out.dtype, f'b{r.out.id}[{oflat}]', val)});")
        else:
            start = f"b{r.out.id}[{oflat}]" if outer_reduced else init
            lines += self._reduce_row(r, body, val, ind, start, oflat,
                                      parallel=not prefix and work >= self.parallel_threshold)
        for _ in prefix:
            depth -= 2
            lines.append(" " * depth + "}")
        lines.append(pad + "}")
        return "\n".join(lines)

    def _column_reduce(self, r: Reduce, body: _Body, val: str, ind: str) -> list[str]:
        """``out[j] = fold over i of body(i, j)`` (a bias gradient: the sum over the batch
        of a [batch, features] array): tiles of columns over the threads, each folded in a
        local array (its own cache lines: threads writing neighbouring columns of ``out``
        row after row fought over the line they share, 4x slower than one thread), rows
        in order, so each column folds exactly as a serial loop would."""
        (n_rows, n_cols), (si, sj) = r.in_shape, r.syms
        t = C_TYPES[r.out.dtype]
        eighth = -(-n_cols // 8)
        tile = min(256, max(16, -(-eighth // 16) * 16))    # ~n/8 in whole vectors
        n_tiles = -(-n_cols // tile)
        init = self.reduce_init(r.op, r.out.dtype)
        lines = [self.parallel_for,
                 f"for (int64_t jt = 0; jt < {n_tiles}; jt++) {{",
                 f"  const int64_t j0 = jt * {tile}, "
                 f"j1 = j0 + {tile} < {n_cols} ? j0 + {tile} : {n_cols};",
                 f"  {t} acc[{tile}];",
                 f"  for (int64_t j = 0; j < {tile}; j++) acc[j] = {init};",
                 f"  for (int64_t {si.name} = 0; {si.name} < {n_rows}; {si.name}++) {{",
                 "    " + self.simd,
                 f"    for (int64_t {sj.name} = j0; {sj.name} < j1; {sj.name}++) {{"]
        lines += ["      " + x for x in body.lines]
        lines += [f"      acc[{sj.name} - j0] = ({t})"
                  f"({self.combine(r.op, r.out.dtype, f'acc[{sj.name} - j0]', val)});",
                  "    }", "  }",
                  f"  for (int64_t j = j0; j < j1; j++) b{r.out.id}[j] = acc[j - j0];",
                  "}"]
        return [ind + x for x in lines]

    def _reduce_row(self, r: Reduce, body: _Body, val: str, ind: str, start: str,
                    oflat: str, parallel: bool, next_row: Sym | None = None) -> list[str]:
        """The statements folding one output element of ``r`` over its trailing reduced
        dims (the loops of the kept dims around them are open) and storing it. In a row
        group (``next_row``: the innermost row loop's symbol), the row was read by the
        group's first step and is in cache: an expensive chunked loop prefetches the
        next row instead of further along this one."""
        nd = len(r.in_shape)
        t0 = nd
        while t0 > 0 and (t0 - 1) in r.axes:
            t0 -= 1
        trailing = list(range(t0, nd))
        out_t = C_TYPES[r.out.dtype]
        depth = len(ind)
        lines = []
        lines.append(ind + f"{out_t} acc = {start};")
        tn = math.prod(r.in_shape[d] for d in trailing)
        simd_op = {"sum": "+", "prod": "*"}.get(r.op) if r.out.dtype.kind == "f" else \
            {"sum": "+", "prod": "*", "and": "&", "or": "|", "xor": "^",
             "max": "max" if r.out.dtype.kind != "b" else "|",
             "min": "min" if r.out.dtype.kind != "b" else "&"}.get(r.op)
        chunked = (len(trailing) == 1 and tn > 2 * self.chunk and r.op == "sum"
                   and r.out.dtype.kind == "f")
        if chunked:
            s = r.syms[trailing[0]].name
            if parallel:
                lines.append(ind + self.parallel_reduce.format(op="+", acc="acc"))
            lines.append(ind + f"for (int64_t c0 = 0; c0 < {tn}; c0 += {self.chunk}) {{")
            lines.append(ind + f"  const int64_t c1 = c0 + {self.chunk} < {tn} ? "
                         f"c0 + {self.chunk} : {tn};")
            lines.append(ind + f"  {out_t} part = 0;")
            if self.prefetch and r.body.cost >= self.prefetch_min_cost:
                lines += [ind + "  " + x
                          for x in self._prefetch_lines(body, r.syms[trailing[0]], next_row)]
            lines.append(ind + "  " + self.simd_reduce.format(op="+", acc="part"))
            lines.append(ind + f"  for (int64_t {s} = c0; {s} < c1; {s}++) {{")
            lines += [ind + "    " + x for x in body.lines]
            lines.append(ind + f"    part += {val};")
            lines.append(ind + "  }")
            lines.append(ind + "  acc += part;")
            lines.append(ind + "}")
        elif r.op in ("max", "min") and r.out.dtype.kind == "f":
            # Vectorizable NaN-propagating max/min: an OpenMP max reduction over the
            # ordered values plus a NaN flag (x86 max instructions drop NaNs); the flag
            # takes the comparison mask as is (-1), one instruction fewer than 0/1.
            cmp = ">" if r.op == "max" else "<"
            lines.append(ind + "int nanf = 0;")
            d2 = depth
            for j, d in enumerate(trailing):
                s, n = r.syms[d], r.in_shape[d]
                if j == len(trailing) - 1:
                    lines.append(" " * d2 + f"#pragma omp simd reduction({r.op}:acc) "
                                 "reduction(|:nanf)")
                lines.append(" " * d2 + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                             f"{s.name}++) {{")
                d2 += 2
            lines += [" " * d2 + x for x in body.lines]
            lines.append(" " * d2 + f"acc = {val} {cmp} acc ? {val} : acc;")
            lines.append(" " * d2 + f"nanf |= -({val} != {val});")
            for _ in trailing:
                d2 -= 2
                lines.append(" " * d2 + "}")
            lines.append(ind + f"if (nanf) acc = {c_literal(np.nan, r.out.dtype)};")
        else:
            d2 = depth
            for j, d in enumerate(trailing):
                s, n = r.syms[d], r.in_shape[d]
                if j == len(trailing) - 1 and simd_op:
                    lines.append(" " * d2 + self.simd_reduce.format(op=simd_op, acc="acc"))
                lines.append(" " * d2 + f"for (int64_t {s.name} = 0; {s.name} < {n}; "
                             f"{s.name}++) {{")
                d2 += 2
            lines += [" " * d2 + x for x in body.lines]
            lines.append(" " * d2 + f"acc = ({out_t})"
                         f"({self.combine(r.op, r.out.dtype, 'acc', val)});")
            for _ in trailing:
                d2 -= 2
                lines.append(" " * d2 + "}")
        lines.append(ind + f"b{r.out.id}[{oflat}] = acc;")
        return lines

    def _prefetch_lines(self, body: _Body, sym, next_row=None) -> list[str]:
        """Prefetch, for the chunk ``[c0, c1)`` of loop ``sym``, the cache lines
        ``prefetch_ahead`` elements further on of every load contiguous in it (with
        ``next_row``: the same lines of the next row, into the cache kept close)."""
        out, seen = [], set()
        s = sym.name
        for buf, idx in body.loads:
            if not idx.is_affine or idx.coef(sym) != 1 or (buf.id, idx.c()) in seen:
                continue
            if any(d.name in body.prog.sym_defs for d in idx.deps):
                continue
            ahead = self.prefetch_ahead if next_row is None else idx.coef(next_row)
            if ahead <= 0:
                continue
            seen.add((buf.id, idx.c()))
            step = max(1, 64 // np.dtype(buf.dtype).itemsize)
            # Past the end of the row the stream goes on into the next one; clamped to
            # the buffer (a prefetch never faults, but the address must be valid C).
            last = max(buf.size - 1, 0)
            addr = f"&b{buf.id}[kiln_clampi({idx.c()}, 0, {last})]"
            hint = self.prefetch if next_row is None else self.prefetch_row
            out.append(f"for (int64_t {s} = c0 + {ahead}; {s} < c1 + {ahead}; "
                       f"{s} += {step}) {hint.format(addr=addr)};")
        return out

    def _render_arg_reduce(self, prog: Program, r: Reduce) -> str:
        (ax,) = r.axes
        nd = len(r.in_shape)
        kept = [d for d in range(nd) if d != ax]
        ostr = row_major_strides([r.in_shape[d] for d in kept])
        oflat = " + ".join(f"{st}*{r.syms[d].name}" for d, st in zip(kept, ostr)) or "0"
        vt = C_TYPES[r.body.dtype]
        it = C_TYPES[r.out.dtype]
        fl = r.body.dtype.kind == "f"
        if r.op == "argmax":
            init = "-INFINITY" if fl else _int_extreme(r.body.dtype, low=True)
            better = "v > best" + (" || (v != v && best == best)" if fl else "")
        else:
            init = "INFINITY" if fl else _int_extreme(r.body.dtype, low=False)
            better = "v < best" + (" || (v != v && best == best)" if fl else "")
        body = _Body(self, prog)
        val = body.value(r.body)
        s = r.syms[ax]
        inner = [f"{vt} best = ({vt}){init}; int64_t bi = 0;",
                 f"for (int64_t {s.name} = 0; {s.name} < {r.in_shape[ax]}; {s.name}++) {{"]
        inner += ["  " + x for x in body.lines]
        inner += [f"  const {vt} v = {val};",
                  f"  if ({better}) {{ best = v; bi = {s.name}; }}", "}",
                  f"b{r.out.id}[{oflat}] = ({it})bi;"]
        loops = [(r.syms[d], r.in_shape[d]) for d in kept]
        empty = _Body(self, prog)
        empty._prelude = body._prelude
        return self._nest(prog, loops, empty, inner, math.prod(r.in_shape), indent=2)

    def render_scan(self, prog: Program, c: Scan) -> str:
        """Row-major loops; each element is ``op(previous element of out, body)``, the
        previous one along ``axis`` (the next one when ``reverse``, looping backwards)."""
        body = _Body(self, prog)
        val = body.value(c.body)
        dt = c.out.dtype
        t = C_TYPES[dt]
        strides = row_major_strides(c.shape)
        flat = _flat_of_syms(c.syms, c.shape)
        a, n, st = c.syms[c.axis].name, c.shape[c.axis], strides[c.axis]
        first = f"{a} == {n - 1}" if c.reverse else f"{a} == 0"
        prev = f"b{c.out.id}[{flat} {'+' if c.reverse else '-'} {st}]"
        stmt = (f"b{c.out.id}[{flat}] = ({t})({first} ? {val} : "
                f"({t})({self.combine(c.op, dt, prev, val)}));")
        # The outermost loop may run in parallel unless it is the scanned axis.
        work = math.prod(c.shape) if c.axis > 0 else 0
        return self._nest(prog, list(zip(c.syms, c.shape)), body, [stmt], work,
                          backwards=c.syms[c.axis] if c.reverse else None)

    def render_scatter(self, prog: Program, c: Scatter) -> str:
        """Sequential loops over the updates (later updates see earlier ones, as
        ``ufunc.at``): never parallel, since two updates may hit one element."""
        body = _Body(self, prog)
        val = body.value(c.body)
        body._need_syms(c.target)
        for cl in c.cond.clauses:
            if len(cl) > 1:
                body._need_syms(cl[1])
        dt = c.out.dtype
        t = C_TYPES[dt]
        dst = f"b{c.out.id}[{c.target.c()}]"
        if c.op == "set":
            new = val
        elif c.op == "sub":
            new = f"{dst} - {val}"
        else:
            new = self.combine(c.op, dt, dst, val)
        stmt = f"{dst} = ({t})({new});"
        if c.cond.clauses:
            stmt = f"if ({c.cond.c()}) {stmt}"
        return self._nest(prog, list(zip(c.syms, c.shape)), body, [stmt], 0)

    def render_gemm(self, g: Gemm) -> str:
        f = "kiln_gemm_f32" if g.out.dtype == F32 else "kiln_gemm_f64"
        lda = g.m if g.trans_a else g.k
        ldb = g.k if g.trans_b else g.n
        zero = "0.0f" if g.out.dtype == F32 else "0.0"
        call = (f"{f}({int(g.trans_a)}, {int(g.trans_b)}, {g.m}, {g.n}, {g.k}, "
                f"b{g.a.id} + bt*{g.m * g.k}, {lda}, b{g.b.id} + bt*{g.k * g.n}, {ldb}, "
                f"b{g.out.id} + bt*{g.m * g.n}, {g.n}, {zero});")
        return f"  for (int64_t bt = 0; bt < {g.batch}; bt++) {call}"

    # ---- scalar semantics ---------------------------------------------------------------
    def reduce_init(self, op, dt) -> str:
        if op == "sum" or op == "or" or op == "xor":
            return c_literal(0, dt)
        if op == "prod":
            return c_literal(1, dt)
        if op == "and":
            return c_literal(1, dt) if dt.kind == "b" else c_literal(-1 if dt.kind == "i" else
                                                                     np.iinfo(dt).max, dt)
        low = op == "max"
        if dt.kind == "f":
            return c_literal(-np.inf if low else np.inf, dt)
        if dt.kind == "b":
            return "0" if low else "1"
        return _int_extreme(dt, low)

    def combine(self, op, dt, acc, v) -> str:
        if op == "sum":
            return f"{acc} + {v}" if dt.kind != "b" else f"{acc} | {v}"
        if op == "prod":
            return f"{acc} * {v}" if dt.kind != "b" else f"{acc} & {v}"
        if op in ("and", "or", "xor"):
            return f"{acc} {dict(zip(('and', 'or', 'xor'), '&|^'))[op]} {v}"
        if dt.kind == "f":
            f = {"max": "kiln_max", "min": "kiln_min"}[op] + ("f" if dt == F32 else "d")
            return f"{f}({acc}, {v})"
        if dt.kind == "b":
            return f"{acc} | {v}" if op == "max" else f"{acc} & {v}"
        cmp = ">" if op == "max" else "<"
        return f"({v} {cmp} {acc} ? {v} : {acc})"

    # XLA's own float32 exp/log/log1p/expm1/tanh/erf (and float64's), reproduced bit for
    # bit in kiln.random._native.XLA_MATH_C: vectorizable, and JAX's exact results. They
    # win over the generic math library for these names.
    xla_math = {("exp", "f"): "xexp32", ("log", "f"): "xlog32", ("log1p", "f"): "xlog1p32",
                ("exp", "d"): "xexp64", ("log1p", "d"): "xlog1p64",
                ("tanh", "f"): "xtanh32", ("tanh", "d"): "xtanh64", ("erf", "f"): "xerf32",
                ("expm1", "f"): "xexpm132", ("expm1", "d"): "xexpm164", ("log", "d"): "xlog64",
                ("erf", "d"): "xerf64"}

    def math_fn(self, name, dt) -> str:
        xla = self.xla_math.get((name, "f" if dt == F32 else "d")) if dt in (F32, F64) \
            else None
        if xla is not None:
            return xla
        hit = self.math_functions.get(name)
        if hit:
            return hit[0] if dt == F32 else hit[1]
        libm = {"exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "tanh": "tanh",
                "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos",
                "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
                "acosh": "acosh", "atanh": "atanh", "atan2": "atan2", "sqrt": "sqrt",
                "cbrt": "cbrt", "pow": "pow", "erf": "erf", "erfc": "erfc", "exp2": "exp2",
                "lgamma": "lgamma",
                "floor": "floor", "ceil": "ceil", "nextafter": "nextafter", "fabs": "fabs",
                "round_away": "round", "rint": "rint", "fmod": "fmod"}
        if name == "logistic":
            return "kiln_logistic_xla32" if dt == F32 else "kiln_logistic_xla64"
        if name == "rsqrt":
            return "kiln_rsqrtf" if dt == F32 else "kiln_rsqrtd"
        base = libm[name]
        return base + "f" if dt == F32 else base

    def op_text(self, e: SExpr, args: list[str], arg_dtypes: list) -> str:
        name = e.params[0]
        params = dict(e.params[1:])
        dt = e.dtype
        t = C_TYPES.get(dt)
        a = args[0] if args else None
        b = args[1] if len(args) > 1 else None
        fl = dt.kind == "f"
        mine = lower_random.render_op(name, params, args, dt)
        if mine is not None:
            return mine
        if name == "bitcast_convert_type":
            src = C_TYPES[arg_dtypes[0]]
            return (f"__extension__ ({{ {t} _r; {src} _v = {a}; "
                    f"memcpy(&_r, &_v, sizeof _r); _r; }})")
        if name == "add":
            return f"({a} + {b})" if dt.kind != "b" else f"({a} | {b})"
        if name == "sub":
            return f"({a} - {b})"
        if name == "mul":
            return f"({a} * {b})" if dt.kind != "b" else f"({a} & {b})"
        if name == "div":
            return f"({a} / {b})" if fl else f"kiln_div_{_short(dt)}({a}, {b})"
        if name == "rem":
            return f"{self.math_fn('fmod', dt)}({a}, {b})" if fl else \
                f"kiln_rem_{_short(dt)}({a}, {b})"
        if name == "neg":
            return f"(-{a})" if dt.kind != "u" else f"({t})(0 - {a})"
        if name in ("max", "min"):
            if fl:
                return f"kiln_{name}{'f' if dt == F32 else 'd'}({a}, {b})"
            if dt.kind == "b":
                return f"({a} | {b})" if name == "max" else f"({a} & {b})"
            cmp = ">" if name == "max" else "<"
            return f"({a} {cmp} {b} ? {a} : {b})"
        if name == "abs":
            if fl:
                return f"{self.math_fn('fabs', dt)}({a})"
            return f"({a} < 0 ? ({t})(0 - ({t}){a}) : {a})" if dt.kind == "i" else a
        if name == "sign":
            if fl:
                return f"kiln_sign{'f' if dt == F32 else 'd'}({a})"
            if dt.kind == "u":
                return f"({t})({a} > 0)"
            return f"({t})(({a} > 0) - ({a} < 0))"
        if name in ("floor", "ceil"):
            return f"{self.math_fn(name, dt)}({a})"
        if name == "round":
            m = params.get("rounding_method", 0)
            return f"{self.math_fn('round_away' if m == 0 else 'rint', dt)}({a})"
        if name in ("exp", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
                    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt",
                    "rsqrt", "cbrt", "erf", "erfc", "exp2", "lgamma"):
            return f"{self.math_fn(name, dt)}({a})"
        if name in ("atan2", "nextafter"):
            return f"{self.math_fn(name, dt)}({a}, {b})"
        if name == "pow":
            if arg_dtypes[1] != dt:
                b = f"({t})({b})"
            return f"{self.math_fn('pow', dt)}({a}, {b})"
        if name == "integer_pow":
            return self._integer_pow(a, int(params["y"]), dt)
        if name == "square":
            return f"({a} * {a})"
        if name in ("eq", "ne", "lt", "le", "gt", "ge"):
            op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[name]
            return f"({a} {op} {b})"
        if name in ("and", "or", "xor"):
            op = {"and": "&", "or": "|", "xor": "^"}[name]
            return f"({t})({a} {op} {b})"
        if name == "not":
            return f"(!{a})" if dt.kind == "b" else f"({t})(~{a})"
        if name in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
            f = {"shift_left": "shl", "shift_right_logical": "shrl",
                 "shift_right_arithmetic": "shra"}[name]
            return f"kiln_{f}_{_short(dt)}({a}, {b})"
        if name == "select_n":
            which = args[0]
            cases = args[1:]
            if len(cases) == 1:
                return cases[0]
            if arg_dtypes[0].kind == "b":
                return f"({which} ? {cases[1]} : {cases[0]})"
            expr = cases[-1]
            for j in range(len(cases) - 2, -1, -1):
                expr = f"({which} <= {j} ? {cases[j]} : {expr})"
            return expr
        if name == "convert_element_type":
            return self._convert(a, arg_dtypes[0], dt)
        if name == "clamp":
            lo, x, hi = args
            if fl:
                sfx = "f" if dt == F32 else "d"
                return f"kiln_min{sfx}(kiln_max{sfx}({x}, {lo}), {hi})"
            inner = f"({x} > {lo} ? {x} : {lo})"
            return f"({inner} < {hi} ? {inner} : {hi})"
        if name == "is_finite":
            return f"(isfinite({a}) ? 1 : 0)"
        if name == "population_count":
            u = f"uint{dt.itemsize * 8}_t"
            return f"({t})__builtin_popcountll((uint64_t)({u}){a})"
        if name == "clz":
            bits = dt.itemsize * 8
            u = f"uint{bits}_t"
            return (f"({t})(({u}){a} == 0 ? {bits} : "
                    f"__builtin_clzll((uint64_t)({u}){a}) - {64 - bits})")
        raise NotImplementedError(f"no C rendering for {name}")

    def _integer_pow(self, a, y, dt) -> str:
        if y == 0:
            return c_literal(1, dt)
        n = abs(y)
        # binary powering, as XLA: x**5 = (x*x)*(x*x)*x
        acc = None
        base = a
        terms = []
        while n:
            if n & 1:
                terms.append(base)
            n >>= 1
            if n:
                base = f"({base} * {base})"
        acc = terms[0]
        for t in terms[1:]:
            acc = f"({acc} * {t})"
        if y < 0:
            return f"({c_literal(1, dt)} / {acc})"
        return acc

    def _convert(self, a, src, dst) -> str:
        t = C_TYPES[dst]
        if src == dst:
            return a
        if dst.kind == "b":
            return f"({a} != 0)"
        if src.kind == "f" and dst.kind in "iu":
            info = np.iinfo(dst)
            hi = c_literal(float(info.max), src)
            lo = c_literal(float(info.min), src)
            return (f"({a} != {a} ? ({t})0 : ({a} >= {hi} ? {c_literal(info.max, dst)} : "
                    f"({a} <= {lo} ? {c_literal(info.min, dst)} : ({t}){a})))")
        return f"({t})({a})"


def _compile_weight(text: str, small: bool = False) -> int:
    """A step's share of its unit's compile time, to balance units: its length, plus a
    lump per OpenMP region (an outlined function) and per vectorized math call (the
    inlined polynomial is vectorized again; not in a ``KILN_SMALL`` function). By length
    alone the MLP gradient's units compiled in 0.20 and 0.15 s; by this, 0.15 and 0.15
    (gcc 12, -O3)."""
    lumps = text.count("omp parallel") + (0 if small else len(_MATH_CALL.findall(text)))
    return len(text) + 2500 * lumps


# A kernel or reduction over at most this many elements is compiled without gcc's loop
# vectorizer, peeling and unrolling (KILN_SMALL): they cost ~10-30 ms of build per
# function, and such a loop runs in microseconds either way.
SMALL_ELEMENTS = 4096


def _is_small(step) -> bool:
    """Whether a step (or row group) has only loops over at most SMALL_ELEMENTS elements."""
    if isinstance(step, list):
        return all(_is_small(s) for s in step)
    if isinstance(step, Kernel):
        shape = step.shape
    elif isinstance(step, Reduce):
        shape = step.in_shape
    else:
        return False
    return math.prod(shape) <= SMALL_ELEMENTS


_MATH_CALL = re.compile(r"\bx[a-z0-9]+(?:32|64)\(|\bkiln_[a-z]+_xla(?:32|64)\(")


@dataclass
class _RowStep:
    """One step of a row group with its rendered bodies."""
    st: object
    m: int                  # leading dims enumerating the rows
    shape: tuple
    body: _Body
    row: _Body              # what depends on the row only
    vals: list
    prelude: list


# A C declaration as _Body renders them: ``const <type> <name> = ...``.
_DECLARED = re.compile(r"const [A-Za-z_0-9 ]*?\b([A-Za-z_][A-Za-z_0-9]*) = ")


def _step_cost(st) -> int:
    return st.body.cost if isinstance(st, Reduce) else _cost_of(st.outs)


def _skewable(parts: list) -> bool:
    """Whether a row group opens with a reduction (float max, min or sum) then a float
    sum or an elementwise kernel over rows of the same length (one trailing loop dim
    each): the case :meth:`CRenderer._skewed_rows` pipelines."""
    if len(parts) < 2:
        return False
    a, b = parts[0], parts[1]
    if not (isinstance(a.st, Reduce) and a.st.op in ("max", "min", "sum")
            and a.st.out.dtype in (F32, F64)):
        return False
    if isinstance(b.st, Reduce):
        if not (b.st.op == "sum" and b.st.out.dtype in (F32, F64)):
            return False
    elif not isinstance(b.st, Kernel) or b.st.offset is not None:
        return False
    if len(a.shape) - a.m != 1 or len(b.shape) - b.m != 1 or a.shape[-1] != b.shape[-1]:
        return False
    # Work enough per row that hiding the next row's loads is worth a second inner body.
    return a.shape[-1] >= 256


def _bounded_exps(second: _RowStep, r0: Reduce) -> dict:
    """The float32 exps in the second step of a row group (a float sum, elementwise
    kernel) whose argument is ``e - c``, with ``e`` the value the group's first step
    (``r0``, a float32 max over the same row) reduced and ``c`` constant along the row:
    ``{argument name: guard}``, the guard a C condition true when every such argument in
    row ``g`` is at most ``fast_math.FIN_MAX`` and none is NaN (``e <= max(e)`` and
    rounding is monotone, so ``fl(e - c) <= fl(max - c)``; a NaN max means a NaN in the
    row). That is ``exp(x - max(x))`` in logsumexp and softmax, whose exps then need no
    overflow or NaN select (``fexp32_fin``, ``xexp32_fin``)."""
    from kiln.compiler.render.fast_math import FIN_MAX
    st = second.st
    if isinstance(st, Reduce):
        if not _summed(st):
            return {}
        roots = [st.body]
    else:
        roots = [e for _, e in st.outs]
    if not (r0.op == "max" and r0.out.dtype == F32):
        return {}
    same_loops = (tuple(r0.in_shape) == tuple(second.shape)
                  and [s.name for s in r0.syms] == [s.name for s in st.syms])
    maxed = _row_major_buffer(r0.body, r0.syms, r0.in_shape)
    body = second.body
    inner = {s.name for s in st.syms[second.m:]}
    in_loop = {m.group(1) for m in map(_DECLARED.match, body.lines) if m}
    out = {}
    for e in walk(body.prog, roots):
        if not (e.kind == "op" and e.params[0] == "exp" and e.dtype == F32):
            continue
        a = e.args[0]
        if not (a.kind == "op" and a.params[0] == "sub"):
            continue
        # e is what r0 maxed, element for element: the same node over the same loops,
        # or a load of the same buffer at the row-major position of each step's own
        # loop indices (a vmapped group may see the rows as [120, n] and [3, 40, n]).
        if not ((same_loops and a.args[0].uid == r0.body.uid)
                or (maxed is not None
                    and _row_major_buffer(a.args[0], st.syms, second.shape) == maxed)):
            continue
        c = a.args[1]
        arg, cname = body.names.get(a.uid), body.names.get(c.uid)
        if arg is None or cname is None or cname in in_loop or body.loop_deps(c) & inner:
            continue
        # r0's output holds one value per row, row-major over its leading dims: row g.
        out[arg] = f"((float)(b{r0.out.id}[g] - {cname}) <= {FIN_MAX})"
    return out


def _row_major_buffer(e: SExpr, syms, shape):
    """The id of the buffer ``e`` loads from at the row-major position of the loop
    indices ``syms`` over ``shape`` (plain ``x[i, j]`` reads), or None."""
    if e.kind != "load":
        return None
    idx: Idx = e.params[2].v
    if not idx.is_affine or idx.const != 0:
        return None
    want = {s.name: st for s, n, st in zip(syms, shape, row_major_strides(shape)) if n > 1}
    got = {s.name: c for s, c in idx.terms}
    return e.params[0] if got == want else None


def _summed(r: Reduce) -> bool:
    """Whether ``r`` is a float sum, whose body may use ``fast_math``'s exp."""
    return r.op == "sum" and r.out.dtype.kind == "f"


def _int_extreme(dt, low) -> str:
    info = np.iinfo(dt)
    return c_literal(info.min if low else info.max, dt)


def _flat_of_syms(syms, shape) -> str:
    strides = row_major_strides(shape)
    parts = [s.name if st == 1 else f"{st}*{s.name}" for s, st in zip(syms, strides)]
    return " + ".join(parts) or "0"


def _cost_of(outs) -> int:
    return max((e.cost for _, e in outs), default=1)


def _plain_copy_source(prog: Program, k: Kernel):
    """The input buffer id a Kernel copies element for element into an output of the
    same dtype, or None."""
    from kiln.compiler.lower.plan_buffers import _same_element
    if len(k.outs) != 1 or k.offset is not None:
        return None
    out, e = k.outs[0]
    if out.kind != "out" or e.kind != "load":
        return None
    src = prog.buffers[e.params[0]]
    if src.kind != "in" or src.dtype != out.dtype or src.size != out.size:
        return None
    return src.id if _same_element(k, e) else None


class _Body:
    """Statements computing scalar expressions, one temporary per node."""

    def __init__(self, r: CRenderer, prog: Program):
        self.r = r
        self.prog = prog
        self.lines: list[str] = []
        self.names: dict = {}
        self._prelude: list[str] = []
        self._syms_done: set = set()
        self._n = 0
        self.loads: list = []       # (buffer, Idx) of every load rendered
        self._pre: _Body | None = None     # renders loop-invariant symbol definitions
        self._is_prelude = False
        # With `outer` set, nodes that depend on none of the loop symbols named in
        # `inner` are rendered by `outer`, whose lines run before those loops.
        self.outer: _Body | None = None
        self.inner: frozenset = frozenset()
        self._deps: dict = {}
        # In the body of a float sum reduction: exp as ``fexp32`` (``fast_math``), since
        # the sum's bits are not XLA's whatever exp it uses.
        self.summed = False

    def hoisting(self, inner_syms) -> _Body:
        """Make this body render what does not vary along ``inner_syms`` (loop symbols)
        in a new outer body (returned), whose lines go before those loops."""
        self.outer = _Body(self.r, self.prog)
        self.inner = frozenset(s.name for s in inner_syms)
        return self.outer

    def loop_deps(self, e: SExpr) -> frozenset:
        """Names of the loop symbols (those without a definition) ``e`` depends on,
        through dynamic-index definitions too."""
        hit = self._deps.get(e.uid)
        if hit is None:
            out = set()
            for a in e.args:
                out |= self.loop_deps(a)
            for idx in idx_of(e):
                out |= self._idx_loop_deps(idx)
            hit = self._deps[e.uid] = frozenset(out)
        return hit

    def _idx_loop_deps(self, idx) -> set:
        out = set()
        for sym in idx.deps:
            d = self.prog.sym_defs.get(sym.name)
            out |= {sym.name} if d is None else self.loop_deps(d[1])
        return out

    def prelude_lines(self):
        return self._prelude

    def _need_syms(self, idx: Idx):
        for s in idx.deps:
            if s.name in self._syms_done:
                continue
            d = self.prog.sym_defs.get(s.name)
            if d is None:
                continue
            if self.outer is not None and not (self.loop_deps(d[1]) & self.inner):
                self.outer._need_syms(Idx.sym(s))
                self._syms_done.add(s.name)
                continue
            self._syms_done.add(s.name)
            sym, defn, lo, hi = d
            line = f"const int64_t {sym.name} = kiln_clampi((int64_t)({{}}), {lo}, {hi});"
            if self._is_prelude or loop_dependent(self.prog, defn):
                # In the prelude body itself, or a per-element index (gather): computed
                # here, in order, sharing this body's temporaries.
                self.lines.append(line.format(self.value(defn)))
                continue
            # Loop-invariant (dynamic_slice starts): computed once before the loops, by
            # one prelude body shared by all such symbols (two symbols with the same
            # definition must not declare its temporaries twice).
            if self._pre is None:
                self._pre = _Body(self.r, self.prog)
                self._pre._syms_done = self._syms_done
                self._pre._is_prelude = True
            n0 = len(self._pre.lines)
            v = self._pre.value(defn)
            self._prelude += self._pre.lines[n0:]
            self._prelude.append(line.format(v))

    def value(self, e: SExpr) -> str:
        hit = self.names.get(e.uid)
        if hit is None and self._pre is not None:
            hit = self._pre.names.get(e.uid)    # computed before the loops: reuse it
        if hit is not None:
            return hit
        if e.kind == "const":
            text = c_literal(e.params[1].v, e.dtype)
            self.names[e.uid] = text
            return text
        if self.outer is not None and not (self.loop_deps(e) & self.inner):
            name = self.names[e.uid] = self.outer.value(e)
            return name
        if e.kind == "load":
            buf = self.prog.buffers[e.params[0]]
            idx: Idx = e.params[2].v
            self._need_syms(idx)
            it = idx.c()
            if idx.lo < 0 or idx.hi > buf.size - 1:
                it = f"kiln_clampi({it}, 0, {max(buf.size - 1, 0)})"
            else:
                self.loads.append((buf, idx))
            text = f"b{buf.id}[{it}]"
        elif e.kind == "index":
            idx = e.params[1].v
            self._need_syms(idx)
            text = f"({C_TYPES[e.dtype]})({idx.c()})"
        elif e.kind == "where":
            cond = e.params[1].v
            for cl in cond.clauses:
                if len(cl) > 1:
                    self._need_syms(cl[1])
            a, b = (self.value(x) for x in e.args)
            text = f"(({cond.c()}) ? {a} : {b})"
        else:
            args = [self.value(x) for x in e.args]
            if self.summed and e.dtype == F32 and e.params[0] == "exp":
                text = f"fexp32({args[0]})"
            else:
                text = self.r.op_text(e, args, [x.dtype for x in e.args])
        self._n += 1
        name = f"t{e.uid}"
        self.lines.append(f"const {C_TYPES[e.dtype]} {name} = ({C_TYPES[e.dtype]})({text});")
        self.names[e.uid] = name
        return name


__all__ = ["CRenderer", "Segment", "c_literal", "Sym"]
