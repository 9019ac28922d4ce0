"""Loop plans (``render/plan_loops.py``, ``plan_reduce.py``, ``plan_steps.py``): the loop
structure of each step is decided before printing, and the printers follow the plan;
names of a second copy of a loop body are decided per expression (``Body`` suffix,
``Idx.c(names)``), not by rewriting C text."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler.lower.index import Idx, Sym
from kiln.compiler.lower.lower import lower
from kiln.compiler.lower.plan_buffers import plan
from kiln.compiler.lower.program import Kernel, Reduce
from kiln.compiler.passes.passes import optimize
from kiln.compiler.render import plan_steps as plan_steps_mod
from kiln.compiler.render.body import Body
from kiln.compiler.render.plan_loops import KernelPlan, LoopTarget, NestPlan
from kiln.compiler.render.plan_reduce import RowGroupPlan
from kiln.compiler.render.plan_steps import plan_steps
from kiln.compiler.render.render_c import CRenderer


def _prog(f, *args):
    prog = lower(optimize(kiln.make_jaxpr(f)(*args)))
    plan(prog)
    return prog


def _plans(f, *args, renderer=None):
    prog = _prog(f, *args)
    t = LoopTarget.of(renderer or CRenderer())
    return prog, plan_steps(prog, [s for s in prog.steps if hasattr(s, "name")], t)


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_idx_renders_with_other_names():
    i, j = Sym("i0", 0, 99), Sym("i1", 0, 6)
    affine = Idx.sym(i) * 7 + Idx.sym(j)
    opaque = (Idx.sym(i) + Idx.sym(j) * -3).floordiv(5) + Idx.sym(j).mod(4) * 2
    assert affine.c({"i0": "i0_n"}) == "(7*i0_n + i1)"
    assert opaque.c() == opaque.opaque
    assert opaque.c({"i2": "x"}) == opaque.c()
    renamed = opaque.c({"i0": "a", "i1": "b"})
    assert renamed == opaque.c().replace("i0", "a").replace("i1", "b")
    assert opaque.key()[:2] == ("o", opaque.c())    # identity unchanged


def test_body_suffix_names_its_own_declarations_only():
    prog = _prog(lambda x: jnp.sum(jnp.exp(x - 1.0) * 2.0, axis=1), _x(16, 300))
    (r,) = [s for s in prog.steps if isinstance(s, Reduce)]
    plain = Body(CRenderer(), prog)
    v = plain.value(r.body)
    names = {s.name: s.name + "_n" for s in r.syms}
    copy = Body(CRenderer(), prog, "_n", names)
    w = copy.value(r.body)
    assert w == v + "_n"
    assert all(name.endswith("_n") for name in copy.declared)
    assert len(copy.lines) == len(plain.lines)
    for a, b in zip(plain.lines, copy.lines):
        assert b.startswith(a.split(" = ")[0] + "_n = ")
        assert "i1_n" in b or "i1" not in a


def test_row_group_plan_skews_logsumexp():
    prog, plans = _plans(lambda x: kiln.nn.logsumexp(x, axis=1), _x(301, 3000))
    (group, p), = [gp for gp in plans if isinstance(gp[1], RowGroupPlan)]
    assert p.n_rows == 301 and len(p.steps) == len(group) >= 2
    assert p.skew is not None and p.skew.block == 16 and p.skew.n_blocks == 19
    assert p.skew.length == 3000 and p.skew.chunk_second and not p.skew.chunk_first
    assert p.parallel and p.skew.parallel
    assert p.steps[0].fold.kind == "nan_minmax"
    _, short = _plans(lambda x: kiln.nn.logsumexp(x, axis=1), _x(64, 100))
    assert all(not isinstance(q, RowGroupPlan) or q.skew is None for _, q in short)


def test_reduce_plans():
    _, plans = _plans(lambda x, y: (jnp.sum(x, axis=0), jnp.sum(jnp.exp(y)), jnp.max(x, 1)),
                      _x(4096, 256), _x(1 << 20))
    by_kind = {}
    for (step,), p in plans:
        if isinstance(step, Reduce):
            by_kind[p.column is not None, p.fold.kind if p.fold else None] = p
    col = by_kind[True, None].column
    assert (col.tile, col.n_tiles) == (32, 8)
    chunked = by_kind[False, "chunked"].fold
    assert chunked.parallel and chunked.prefetch and chunked.next_row is None
    assert chunked.chunk == CRenderer.chunk
    assert by_kind[False, "nan_minmax"].parallel


def test_kernel_plans_and_target(monkeypatch):
    _, plans = _plans(lambda x, y: (jnp.exp(x) * 2.0, y + 1.0), _x(4096, 1024), _x(10))
    kplans = [p for (s,), p in plans if isinstance(s, Kernel)]
    big = [p for p in kplans if p.stream is not None]
    # A contiguous elementwise kernel is one flat loop: the threads share its tiles.
    assert len(big) == 1 and big[0].stream.parallel and not big[0].stream.split_outer
    assert big[0].nest.loops[0][1] == 4096 * 1024
    assert any(p.stream is None and not p.nest.parallel for p in kplans)
    monkeypatch.setattr(CRenderer, "stream_min_bytes", None)
    monkeypatch.setattr(CRenderer, "parallel_threshold", 1 << 62)
    t = LoopTarget.of(CRenderer())
    assert t.stream_min_bytes is None and t.parallel_threshold == 1 << 62
    _, plans = _plans(lambda x: jnp.exp(x) * 2.0, _x(4096, 1024))
    assert all(p.stream is None and not p.nest.parallel for _, p in plans)


@pytest.mark.parametrize("parallel", [False, True])
def test_printer_follows_the_plan(monkeypatch, parallel):
    """The printer prints the plan it is given: a plan saying parallel gets the pragma
    whatever the work, one saying sequential does not."""
    real = plan_steps_mod.plan_kernel

    def forced(prog, k, t):
        p = real(prog, k, t)
        return KernelPlan(NestPlan(p.nest.loops, parallel, p.nest.backwards), None,
                          p.copy_of)

    monkeypatch.setattr(plan_steps_mod, "plan_kernel", forced)
    for shape in ((8, 8), (2048, 1024)):
        prog = _prog(lambda x: jnp.sin(x) + 1.0, _x(*shape))
        text, _ = CRenderer().render(prog)
        assert ("#pragma omp parallel for" in text) == parallel, shape


def test_cheap_chunked_sums_prefetch_into_l2(monkeypatch):
    # CRenderer.cheap_prefetch: a chunked sum of a cheap body (x * x) prefetches
    # prefetch_ahead elements ahead with its own hint; an expensive body keeps the far
    # hint (CRenderer.prefetch); None turns the cheap case off. Same bits either way.
    from kiln.compiler.render import render_c
    x = _x(1 << 20)
    hint = "__builtin_prefetch({addr}, 0, 1)"
    monkeypatch.setattr(CRenderer, "cheap_prefetch", hint)
    _, plans = _plans(lambda x: (jnp.sum(x * x), jnp.sum(jnp.exp(x))), x)
    folds = sorted((p.fold for (s,), p in plans if isinstance(s, Reduce)),
                   key=lambda f: f.cheap)
    assert [(f.kind, f.prefetch, f.cheap) for f in folds] == [("chunked", True, False),
                                                              ("chunked", True, True)]
    f = kiln.jit(lambda x: jnp.sum(x * x))
    text = f.lower(x).compile().as_text()
    # the prefetch loop stops at the buffer's end (no clamp per address), and runs only
    # where the sum's team is one thread (two threads streaming at once were slower with
    # it); the expensive body's far prefetch has no such condition
    assert "const int kiln_pf = kiln_team_solo();" in text
    assert "if (kiln_pf) for (int64_t i0 = c0 + 2048, i0_pe = i0 + (1048576 - (i0)) < c1 + 2048 ? " \
        "i0 + (1048576 - (i0)) : c1 + 2048; i0 < i0_pe; i0 += 16) " \
        "__builtin_prefetch(&b0[i0], 0, 1);" in text
    want = np.asarray(f(x))
    monkeypatch.setattr(CRenderer, "cheap_prefetch", None)
    _, plans = _plans(lambda x: jnp.sum(x * x), x)
    (fold,) = [p.fold for (s,), p in plans if isinstance(s, Reduce)]
    assert not fold.prefetch and not fold.cheap
    g = kiln.jit(lambda x: jnp.sum(x * x))
    assert "__builtin_prefetch" not in g.lower(x).compile().as_text()
    assert np.asarray(g(x)).tobytes() == want.tobytes()
    # "auto": the L2 hint on Intel processors with AVX-512 only.
    for intel in (True, False):
        monkeypatch.setattr(render_c, "intel_avx512", lambda intel=intel: intel)
        r = CRenderer()
        assert (r.resolved_hint("auto") is not None) == intel
        assert LoopTarget.of(r).prefetch_cheap is False
        monkeypatch.setattr(CRenderer, "cheap_prefetch", "auto")
        assert LoopTarget.of(CRenderer()).prefetch_cheap == intel
        monkeypatch.setattr(CRenderer, "cheap_prefetch", None)
