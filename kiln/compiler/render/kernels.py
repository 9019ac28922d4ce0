"""Printing elementwise kernels as C loop nests (OpenMP over the outer loop, streaming
stores for large outputs through tiles), scatters, and GEMM calls, as their plans
(``plan_loops.py``) say.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.compiler.lower.program import (
    Gemm,
    Kernel,
    Program,
    Scatter,
)
from kiln.compiler.lower.walk import same_element, walk
from kiln.compiler.render import trig_math
from kiln.compiler.render.body import Body
from kiln.compiler.render.c_expr import C_TYPES, F32, _flat_of_syms
from kiln.compiler.render.plan_loops import KernelPlan, NestPlan, StreamPlan

#: A parallel nest's outer loop shorter than this shares its iterations together with
#: the next loop's (``_steal_outer``): 8 images of 128 rows are 1024 blocks, not 8.
STEAL_MERGE_BELOW = 64
#: Work (elements, or cost units) per stolen block: one atomic exchange per block.
STEAL_BLOCK_WORK = 8192
#: ``_steal_open``'s ``work`` for iterations to be stolen one at a time (column tiles).
STEAL_ONE = STEAL_BLOCK_WORK


class KernelMixin:
    """Methods of :class:`~kiln.compiler.render.render_c.CRenderer` (see its attributes)."""

    # ---- kernels ------------------------------------------------------------------------
    def render_kernel(self, prog: Program, k: Kernel, plan: KernelPlan) -> str:
        body = Body(self, prog)
        stores = []
        if k.strides is not None:
            flat = " + ".join(s.name if st == 1 else f"{st}*{s.name}"
                              for s, st in zip(k.syms, k.strides)) or "0"
        else:
            flat = _flat_of_syms(k.syms, k.shape)
        if k.offset is not None:
            flat = f"{flat} + {k.offset.c()}"
        for buf, e in k.outs:
            v = body.value(e)
            stores.append(f"b{buf.id}[{flat}] = ({C_TYPES[buf.dtype]})({v});")
        ivdep = self.ivdep if self.ivdep and independent_elements(prog, k) else None
        if plan.stream is not None:
            text = self._streamed_nest(k, plan.nest.loops, body, plan.stream, ivdep)
        elif _blockable(plan.nest):
            text = self._blocked_nest(plan.nest, body, stores, ivdep)
        else:
            text = self._nest(plan.nest, body, stores, indent=2, ivdep=ivdep)
        if plan.copy_of is not None:
            # A copy of an input (before a scatter into the copy): skipped when the
            # output was given the input's own memory (a donated argument).
            return f"  if ((void *)b{k.outs[0][0].id} != (void *)b{plan.copy_of})\n{text}"
        return text

    def _streamed_nest(self, k: Kernel, loops, body: Body, plan: StreamPlan,
                       ivdep: str | None = None) -> str:
        """The kernel's loop nest with the innermost loop cut into tiles: each tile is
        computed into a stack array (vectorized as usual), then streamed out."""
        tile = plan.tile
        (s, n), outer = loops[-1], loops[:-1]
        flat = _flat_of_syms(k.syms, k.shape)
        # One parallel region: each thread fences its own streaming stores at its end.
        out = ["  {"] + ["    " + x for x in body.prelude_lines()]
        out.append("    " + self.parallel_region + ("" if plan.parallel else " if(0)"))
        out.append("    {")
        depth = 6
        for d, (o, m) in enumerate(outer):
            if d == 0 and plan.split_outer:
                out.append(" " * depth + self.for_in_region)
            out.append(" " * depth + f"for (int64_t {o.name} = 0; {o.name} < {m}; "
                       f"{o.name}++) {{")
            depth += 2
        if not plan.split_outer:
            out.append(" " * depth + self.for_in_region)
        ind = " " * depth
        out.append(ind + f"for (int64_t c0 = 0; c0 < {n}; c0 += {tile}) {{")
        out.append(ind + f"  const int64_t c1 = c0 + {tile} < {n} ? c0 + {tile} : {n};")
        for j, (buf, _) in enumerate(k.outs):
            out.append(ind + f"  {C_TYPES[buf.dtype]} tile{j}[{tile}];")
        if ivdep:
            out.append(ind + "  " + ivdep)
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

    def _nest(self, plan: NestPlan, body: Body, inner_stmts, indent=2,
              ivdep: str | None = None):
        """The loop nest of ``plan`` with ``body``'s statements and ``inner_stmts``
        innermost; ``ivdep`` (a pragma) before the innermost loop when given."""
        pad = " " * indent
        out = [pad + "{"]
        out += [pad + "  " + s for s in body.prelude_lines()]
        depth = indent + 2
        loops = plan.loops
        keep = trig_math.keep_loop([*body.lines, *inner_stmts])
        region = closes = 0
        if plan.parallel and loops and loops[0][0] is not plan.backwards \
                and all(isinstance(n, int) for _, n in loops):
            loops, region, closes = self._steal_outer(loops, plan.backwards, out, depth)
        for d, (s, n) in enumerate(loops):
            if d < region:
                continue
            if d == 0 and plan.parallel and not region:
                out.append(" " * depth + self.parallel_for)
            else:
                if keep and d == len(loops) - 1 and isinstance(n, int) \
                        and n <= trig_math.KEEP_LOOP_MAX:
                    out.append(" " * depth + trig_math.KEEP_LOOP)
                if ivdep and d == len(loops) - 1 and n != 1:
                    out.append(" " * depth + ivdep)
            if s is plan.backwards:
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
        for _ in loops[region:]:
            depth -= 2
            out.append(" " * depth + "}")
        out += [pad + "  }"] * closes        # the stolen loop(s), the parallel region
        if not loops:
            depth -= 2
            out.append(" " * depth + "}")
        out.append(pad + "}")
        return "\n".join(out)

    def _steal_outer(self, loops, backwards, out, depth):
        """Open a parallel region whose threads share the outer loop's iterations by work
        stealing (csrc/steal.h): each starts on its own contiguous share, in the static
        schedule's order, and takes the others' remaining iterations when done, so a
        thread that has not been scheduled yet (asleep after a GEMM split by the glue's
        own helper, or its core taken by another process) holds up none of them; the
        static halves made the first thread wait for all of the second's. An outer loop
        of fewer than ``STEAL_MERGE_BELOW`` iterations shares the iterations of the two
        outer loops (``i0 = g / n1, i1 = g % n1``) when a loop stays inside (the inner
        loops, which vectorize, are unchanged). Every element's arithmetic is the same
        whichever thread computes it. Returns the loops, how many the region opened and
        how many ``}`` close it."""
        ind = " " * depth
        (s0, n0) = loops[0]
        merge = (len(loops) >= 3 and n0 < STEAL_MERGE_BELOW and isinstance(loops[1][1], int)
                 and loops[1][0] is not backwards)
        total = n0 * loops[1][1] if merge else n0
        inner = math.prod(n for _, n in loops[2 if merge else 1:])
        opened, closes = self._steal_open(total, "kiln_g", ind, inner)
        out += opened
        if merge:
            (s1, n1) = loops[1]
            out += [ind + f"  const int64_t {s0.name} = kiln_g / {n1};",
                    ind + f"  const int64_t {s1.name} = kiln_g % {n1};"]
            return loops, 2, closes
        out.append(ind + f"  const int64_t {s0.name} = kiln_g;")
        return loops, 1, closes

    def _steal_open(self, n: int, var: str, ind: str, work: int = STEAL_BLOCK_WORK
                    ) -> tuple[list[str], int]:
        """Lines opening a parallel region whose threads take the iterations ``var`` of
        ``0..n`` by work stealing (csrc/steal.h), in blocks of consecutive iterations
        holding about ``STEAL_BLOCK_WORK`` units of work each when an iteration is
        ``work`` units (one atomic exchange per block: per 256-element row it cost a
        cheap copy 20-50%), at least 16 blocks where there are iterations enough.
        Returns the lines and how many ``}`` close them."""
        self._needs.add("steal")
        blk = max(1, min(-(-STEAL_BLOCK_WORK // max(1, work)), n // 16))
        head = [ind + "const int kiln_nt = kiln_team_max();",
                ind + "uint64_t kiln_rg[8 * kiln_nt];",
                ind + f"kiln_steal_init(kiln_rg, kiln_nt, {-(-n // blk)});",
                ind + "#pragma omp parallel num_threads(kiln_nt)" + self.ftz_clause,
                ind + "{",
                ind + "const int kiln_t = kiln_team_rank();"]
        if blk == 1:
            return head + [ind + f"for (int64_t {var}; ({var} = kiln_steal_next(kiln_rg, "
                                 "kiln_t, kiln_nt)) >= 0; ) {"], 2
        return head + [
            ind + "for (int64_t kiln_b; (kiln_b = kiln_steal_next(kiln_rg, kiln_t, "
            "kiln_nt)) >= 0; ) {",
            ind + f"const int64_t kiln_hi = kiln_b * {blk} + {blk} < {n} ? "
            f"kiln_b * {blk} + {blk} : {n};",
            ind + f"for (int64_t {var} = kiln_b * {blk}; {var} < kiln_hi; {var}++) {{"], 3

    def _blocked_nest(self, plan: NestPlan, body: Body, inner_stmts,
                      ivdep: str | None = None) -> str:
        """A parallel elementwise loop over one flat extent ``n``, as blocks of a constant
        ``B`` elements: ``for (ib < n / B) for (j < B) { i = ib*B + j; ... }``, then the
        last ``n % B`` in a loop of their own. Each element is the same arithmetic as in
        the flat loop (no reduction: nothing depends on the order), but gcc sees constant
        trip counts: the flat loop's per-thread bounds are known only at run time, so it
        compiled a vector loop, a vector epilogue and a scalar one, each versioned for
        aliasing (~37 ms of gcc per loop; blocked ~18, session 16)."""
        ((s, n),) = plan.loops
        blk = _block(n)
        i, ib, j = s.name, f"{s.name}_blk", f"{s.name}_in"
        out = ["  {"] + ["    " + x for x in body.prelude_lines()]
        inner = body.lines + inner_stmts
        out.append("    " + self.parallel_for)
        out.append(f"    for (int64_t {ib} = 0; {ib} < {n // blk}; {ib}++) {{")
        if ivdep:
            out.append("      " + ivdep)
        out.append(f"      for (int64_t {j} = 0; {j} < {blk}; {j}++) {{")
        out.append(f"        const int64_t {i} = {blk}*{ib} + {j};")
        out += ["        " + x for x in inner]
        out.append("      }")
        out.append("    }")
        if n % blk:
            out.append(f"    for (int64_t {i} = {n - n % blk}; {i} < {n}; {i}++) {{")
            out += ["      " + x for x in inner]
            out.append("    }")
        out.append("  }")
        return "\n".join(out)

    def render_scatter(self, prog: Program, c: Scatter, plan: NestPlan) -> str:
        """Sequential loops over the updates (later updates see earlier ones, as
        ``ufunc.at``): never parallel, since two updates may hit one element."""
        body = Body(self, prog)
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
        return self._nest(plan, body, [stmt])

    def render_gemm(self, g: Gemm) -> str:
        f = "kiln_gemm_f32" if g.out.dtype == F32 else "kiln_gemm_f64"
        a, lda = _gemm_operand_c(g.a, g.a_view, g.m if g.trans_a else g.k, g.m * g.k)
        b, ldb = _gemm_operand_c(g.b, g.b_view, g.k if g.trans_b else g.n, g.k * g.n)
        zero = "0.0f" if g.out.dtype == F32 else "0.0"
        out, ldc = f"b{g.out.id} + bt*{g.m * g.n}", g.n
        if g.out_view is not None:
            ld, dims, offset = g.out_view
            out, ldc = _gemm_operand_c(g.out, (ld, dims), ld, 0)
            if offset:
                # No spaces: _batch0 keeps the text before the first " + ".
                out = out.replace(f"b{g.out.id}", f"(b{g.out.id}+{offset})", 1)
        if g.batch == 1:
            # One product: the call alone, every operand at its batch-0 offset (each
            # ``bt`` term is 0). The same call as the loop's; gcc spent ~1 ms on each
            # loop of one trip.
            a, b, out = (_batch0(t) for t in (a, b, out))
        call = (f"{f}({int(g.trans_a)}, {int(g.trans_b)}, {g.m}, {g.n}, {g.k}, "
                f"{a}, {lda}, {b}, {ldb}, {out}, {ldc}, {zero});")
        loop = (call if g.batch == 1 else
                f"for (int64_t bt = 0; bt < {g.batch}; bt++) {call}")
        macs = g.m * g.n * g.k
        if (g.batch > 1 and macs < self.gemm_split_min_macs
                and g.batch * macs >= self.gemm_batch_parallel_min_macs):
            # Each product is too small for the glue to split over threads (one
            # single-threaded BLAS call): run the batch's products side by side instead
            # (attention's per-head products: 32 of 128x128x64), shared by work stealing
            # (csrc/steal.h): each thread starts on its own half of the batch and takes
            # the other's products when done, so a thread that has not been scheduled
            # yet (asleep after a split GEMM, or its core taken by another process)
            # holds up none of them; the static halves waited for its 16 products.
            # Each is the same call as in the serial loop, so the bits do not change.
            self._needs.add("steal")
            loop = "\n  ".join([
                "const int kiln_nt = kiln_team_max();",
                "uint64_t kiln_rg[8 * kiln_nt];",
                f"kiln_steal_init(kiln_rg, kiln_nt, {g.batch});",
                "#pragma omp parallel num_threads(kiln_nt)" + self.ftz_clause,
                "{",
                "const int kiln_t = kiln_team_rank();",
                f"for (int64_t bt; (bt = kiln_steal_next(kiln_rg, kiln_t, kiln_nt)) >= 0; ) {call}",
                "}"])
        # BLAS runs on its own threads, without XLA's DAZ/FTZ: the calling thread's part
        # too (not reproduced: a GEMM's subnormals are kept, docs/compatibility.md).
        return (f"  {{ const unsigned kiln_g = kiln_ftz_clear();\n  {loop}\n"
                f"  kiln_ftz_leave(kiln_g); }}")


def independent_elements(prog: Program, k: Kernel) -> bool:
    """Whether no element of ``k`` depends on another's store: every read of a buffer the
    kernel writes (an in-place update: a loop body's carried weights, a merged
    optimizer step) is of the element being written, at a position without an offset.
    Reads of other buffers never overlap the stores (distinct buffers are ``restrict``;
    a donated input written in place is read only at the element being written,
    ``plan_buffers.writes_into_input``). Then its innermost loop may carry
    ``CRenderer.ivdep``: gcc vectorizes it without versioning it for aliasing, which it
    gives up on past ``vect-max-version-for-alias-checks`` (10) pointer pairs: the
    mnist_vae momentum step (4 weights in place, 6 arrays read) stayed scalar."""
    writes = {buf.id for buf, _ in k.outs}
    for e in walk(prog, [e for _, e in k.outs]):
        if e.kind == "load" and e.params[0] in writes:
            if k.offset is not None or not same_element(k, e):
                return False
    return True


def _batch0(operand: str) -> str:
    """A GEMM operand's C (``_gemm_operand_c``) at batch 0: its buffer alone, since every
    term after it is a multiple of an index computed from ``bt``."""
    return operand.partition(" + ")[0]


def _gemm_operand_c(buf, view, ld, size):
    """C of a GEMM operand's matrix for batch ``bt`` and its leading dimension: contiguous
    matrices of ``size`` elements, or a ``Gemm.a_view``/``b_view`` in place."""
    if view is None:
        return f"b{buf.id} + bt*{size}", ld
    ld, dims = view
    terms = []
    inner = 1
    for size_d, stride in reversed(dims):
        if size_d > 1:
            idx = "bt" if inner == 1 else f"(bt / {inner})"
            if inner * size_d < math.prod(n for n, _ in dims):
                idx = f"({idx} % {size_d})"
            terms.append(f"{idx}*{stride}")
        inner *= size_d
    return " + ".join([f"b{buf.id}"] + terms[::-1]), ld


#: Elements per block of a blocked parallel loop (at most; fewer for shorter loops, so
#: that there are at least ``_MIN_BLOCKS`` blocks to share among the threads).
_BLOCK = 1024
_MIN_BLOCKS = 64


def _block(n: int) -> int:
    b = _BLOCK
    while b > 16 and n // b < _MIN_BLOCKS:
        b //= 2
    return b


def _blockable(plan: NestPlan) -> bool:
    """A parallel nest of one forward loop, long enough for blocks of 16 or more."""
    return (plan.parallel and len(plan.loops) == 1 and plan.backwards is None
            and plan.loops[0][1] >= 2 * 16)

