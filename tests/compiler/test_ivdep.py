"""Elementwise kernels whose elements are independent carry ``#pragma GCC ivdep`` on their
innermost loop (``render/kernels.py`` ``independent_elements``, ``CRenderer.ivdep``): gcc
then vectorizes an in-place update of many arrays (mnist_vae's merged momentum step)
that it would otherwise leave scalar for want of alias checks. Kernels reading a buffer
they write at another element, and scatters, never carry it."""
import contextlib

import numpy as np
import pytest

import kiln
from kiln import lax
from kiln.backends import cpu
from kiln.compiler.lower.program import Kernel
from kiln.compiler.render.kernels import independent_elements
from kiln.compiler.render.render_c import CRenderer
from kiln.config import config

pytestmark = pytest.mark.skipif(config.kiln_backend == "reference",
                                reason="compiled-backend rendering")

R = np.random.default_rng(5)
F = np.float32
IVDEP = "#pragma GCC ivdep"


def _exe_and_check(f, *args):
    """The compiled program of ``f``, checked to compute the bits of the same program
    built without the pragma (vectorizing never changes an element's arithmetic)."""
    closed = kiln.make_jaxpr(f)(*args)
    flat = [np.asarray(a) for a in kiln.tree_util.tree_leaves(args)]
    exe = cpu.compile_closed(closed, "jit")
    with _no_ivdep():
        plain = cpu.compile_closed(closed, "jit")
    assert IVDEP not in plain.source
    for g, w in zip(exe(flat), plain(flat)):
        np.testing.assert_array_equal(np.atleast_1d(np.asarray(g)).view(np.uint8),
                                      np.atleast_1d(np.asarray(w)).view(np.uint8))
    return exe


@contextlib.contextmanager
def _no_ivdep():
    old = CRenderer.ivdep
    CRenderer.ivdep = None
    try:
        yield
    finally:
        CRenderer.ivdep = old


def _momentum(ws, g):
    def body(i, s):
        return tuple(w - 0.01 * (0.9 * w + g) for w in s)
    return lax.fori_loop(0, 3, body, ws)


def test_in_place_update_of_four_arrays_carries_ivdep():
    ws = tuple(R.standard_normal((64, 96)).astype(F) for _ in range(4))
    g = R.standard_normal((64, 96)).astype(F)
    src = _exe_and_check(_momentum, ws, g).source
    # the loop body's merged update: four carried arrays written in place
    body = src[src.index("for (int64_t L1"):]
    assert f"{IVDEP}\n      for (int64_t i0 = 0; i0 < 6144; i0++) {{" in body


def test_no_ivdep_on_a_scalar_kernel():
    x = R.standard_normal(1000).astype(F)
    assert IVDEP in _exe_and_check(lambda x: x * 2.0 + 1.0, x).source
    assert IVDEP not in _exe_and_check(lambda x: x * 4.0 + 1.0, np.float32(2.0)).source


def test_scatter_has_no_ivdep():
    x = R.standard_normal(500).astype(F)
    idx = np.array([3, 3, 7, 499, 0] * 40, np.int32)
    u = R.standard_normal(200).astype(F)
    src = _exe_and_check(lambda x, u: x.at[idx].add(u), x, u).source
    scatter = src[src.index("  /* s"):]
    scatter = scatter[:scatter.index("kiln_ftz_leave")]
    assert "b3[s1] + t2" in scatter and IVDEP not in scatter
    assert IVDEP in src         # the copy of x before it


def test_reading_a_written_buffer_at_another_element_is_dependent():
    exe = _exe_and_check(lambda a: a[::-1] * 2.0, R.standard_normal(256).astype(F))
    (k,) = [s for s in exe.prog.steps if isinstance(s, Kernel)]
    assert independent_elements(exe.prog, k)
    (buf, e) = k.outs[0]
    load = [n for n in _nodes(e) if n.kind == "load"][0]
    src = exe.prog.buffers[load.params[0]]
    # The same kernel writing into the buffer it reads mirrored: element i reads
    # element 255 - i, which an earlier iteration (or another vector lane) wrote.
    bad = Kernel(k.shape, k.syms, [(src, e)], k.name)
    assert not independent_elements(exe.prog, bad)
    # ... and writing it where it reads it (an in-place update) is independent.
    same = _exe_and_check(lambda a: a * 2.0, R.standard_normal(256).astype(F))
    (k2,) = [s for s in same.prog.steps if isinstance(s, Kernel)]
    (_, e2) = k2.outs[0]
    src2 = same.prog.buffers[[n for n in _nodes(e2) if n.kind == "load"][0].params[0]]
    assert independent_elements(same.prog, Kernel(k2.shape, k2.syms, [(src2, e2)], "k"))


def _nodes(e):
    out, stack, seen = [], [e], set()
    while stack:
        n = stack.pop()
        if n.uid not in seen:
            seen.add(n.uid)
            out.append(n)
            stack.extend(n.args)
    return out
