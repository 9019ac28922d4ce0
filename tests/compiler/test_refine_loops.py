"""Loops split where reshape arithmetic divides a loop index (``lower/refine_loops.py``):
the kernel's reads become affine (no ``/`` or ``%`` left in its loop body), the loops
cover the same elements in the same order, and the results are the reference backend's
bits (run on the passes' output)."""
import re

import numpy as np
from _bits import compiled_matches_reference  # tests/compiler/_bits.py

import kiln
import kiln.numpy as jnp
from kiln.compiler.lower.index import Idx, Sym
from kiln.compiler.lower.program import Kernel
from kiln.compiler.lower.refine_loops import _subst
from kiln.compiler.lower.walk import idx_of, walk

R = np.random.default_rng(5)


def _run(f, *args):
    exe, got = compiled_matches_reference(f, *args)
    return exe, [s for s in exe.prog.steps if isinstance(s, Kernel)], got


def _kernel_text(exe, k):
    """The C lines of kernel ``k`` (from its comment to the next step's)."""
    src = exe.source
    start = src.index(f"/* {k.name} */")
    end = src.find("/* ", start + 3)
    return src[start:end if end >= 0 else None]


def test_heads_back_to_rows_reads_contiguously():
    """Attention's ``[b, h, t, d] -> [b, t, h*d]``: the last loop splits into (head,
    position in head); no division or remainder is left."""
    x = R.standard_normal((2, 4, 8, 16)).astype(np.float32)

    def f(x):
        return jnp.tanh(x).transpose(0, 2, 1, 3).reshape(2, 8, 64) * 2.0

    exe, kernels, _ = _run(f, x)
    (k,) = [k for k in kernels if any(b.kind == "out" for b, _ in k.outs)]
    assert tuple(k.shape)[-2:] == (4, 16)
    text = _kernel_text(exe, k)
    assert not re.search(r"[/%] *\d", text.split("*/", 1)[1]), text


def test_flat_kernel_splits_repeatedly():
    """A kernel over one flat loop (a stored reshape of a transpose) splits into one loop
    per source dim it needs, at most ``MAX_SPLITS`` times."""
    x = R.standard_normal((6, 10, 12)).astype(np.float32)

    def f(x):
        return (x + 1.0).transpose(2, 0, 1).reshape(-1)

    exe, kernels, got = _run(f, x)
    np.testing.assert_array_equal(np.asarray(got[0]),
                                  (x + np.float32(1.0)).transpose(2, 0, 1).reshape(-1))
    outs = [k for k in kernels if any(b.kind == "out" for b, _ in k.outs)]
    assert outs and all(len(k.shape) >= 2 for k in outs)


def test_iota_and_padding_conditions_are_rewritten():
    """Index values (``iota``) and padding conditions read through the split loop too."""
    x = R.standard_normal((3, 4, 8)).astype(np.float32)

    def f(x):
        i = jnp.arange(96, dtype=jnp.float32).reshape(3, 8, 4).transpose(0, 2, 1)
        y = (x * i).transpose(0, 2, 1).reshape(3, 32)
        return jnp.pad(y, ((1, 0), (0, 0)), constant_values=-0.0) * 1.5

    _run(f, x)


def test_split_gradient_pieces_split_their_loops():
    """The gradient of ``jnp.split`` of a product into heads, stored for the weight
    gradient's GEMM piece by piece: each piece's loop over ``h*d`` splits (strides
    follow) and the ``0 + x`` of the zero padding stays (``-0.0`` cotangents become
    ``+0.0``, as in the reference)."""
    x = R.standard_normal((2, 8, 24)).astype(np.float32)
    w = R.standard_normal((24, 48)).astype(np.float32)
    w[:, :16] = 0.0         # q = 0: -0.0 cotangents reach the pieces

    def loss(w, x):
        q, k, v = jnp.split(x @ w, 3, axis=-1)
        q, k, v = (a.reshape(2, 8, 2, 8).transpose(0, 2, 1, 3) for a in (q, k, v))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        return jnp.sum(jnp.einsum("bhqk,bhkd->bhqd", -jnp.tanh(s), v) ** 2)

    _, kernels, _ = _run(kiln.grad(loss), w, x)
    pieces = [k for k in kernels if k.strides is not None]
    assert len(pieces) == 3
    assert all(k.shape == (2, 8, 2, 8) and k.strides == (384, 48, 8, 1) for k in pieces)


def test_gather_kernels_are_left_alone():
    """A read through a dynamic index (a gather's row) is not split."""
    x = R.standard_normal((8, 4, 16)).astype(np.float32)
    idx = np.array([3, 1, 0, 7, 7, 2], np.int32)

    def f(x, idx):
        return x[idx].transpose(0, 2, 1).reshape(6, 64) + 1.0

    _run(f, x, idx)


def test_subst_simplifies_divisions():
    s = Sym("i", 0, 255)
    q, r = Sym("iq", 0, 3), Sym("ir", 0, 63)
    e = Idx.sym(s).floordiv(64) * 8192 + Idx.sym(s).mod(64) + 7
    assert not e.is_affine
    out = _subst(e, s, 64, q, r)
    assert out.is_affine
    assert dict((t.name, c) for t, c in out.terms) == {"iq": 8192, "ir": 1}
    assert out.const == 7


def test_pooling_gradient_of_two_sizes_builds():
    # Two max-pools of different sizes build the same text of their window-position
    # index value ((i1 % 2) * 2 + (i2 % 2)) over symbols of other ranges. Interned as one
    # node, the larger pool's gradient carried the smaller one's symbols: splitting its
    # loops left that value naming i1/i2 and the C did not compile (the LeNet gradient
    # ran on the reference backend, 3x slower); then such kernels were not split. Index
    # keys now hold the symbols' ranges: both pools' gradient loops split.
    from kiln import lax
    from kiln.compiler.build import build
    dn = ("NHWC", "HWIO", "NHWC")

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss(w1, w2, x):
        h = pool(jnp.maximum(lax.conv_general_dilated(x, w1, (1, 1), "SAME",
                                                      dimension_numbers=dn), 0.0))
        h = pool(jnp.maximum(lax.conv_general_dilated(h, w2, (1, 1), "SAME",
                                                      dimension_numbers=dn), 0.0))
        return jnp.sum(h * h)

    args = (R.standard_normal((3, 3, 1, 4)).astype(np.float32),
            R.standard_normal((3, 3, 4, 8)).astype(np.float32),
            R.standard_normal((2, 12, 12, 1)).astype(np.float32))
    failures = build.stats()["failures"]
    exe, _ = compiled_matches_reference(kiln.grad(loss, argnums=(0, 1)), *args)
    assert build.stats()["failures"] == failures
    # every kernel compiled: no symbol the loops do not declare
    kernels = [s for s in exe.prog.steps if isinstance(s, Kernel)]
    for k in kernels:
        declared = {s.name for s in k.syms}
        for e in walk(exe.prog, [e for _, e in k.outs]):
            for i in idx_of(e):
                assert {d.name for d in i.deps} <= declared | set(exe.prog.sym_defs), k.name
    # both pools' gradients (loops over 12x12 and 6x6 windows' positions) split their
    # position loops into (window, position in window): no division or remainder left
    split = [k for k in kernels if {"i1q", "i1r", "i2q", "i2r"} <= {s.name for s in k.syms}]
    assert sorted(k.shape[1:5] for k in split) == [(3, 2, 3, 2), (6, 2, 6, 2)]
    for k in kernels:
        text = _kernel_text(exe, k)
        assert not re.search(r"[/%] *\d", text.split("*/", 1)[1]), text


def test_no_split_over_a_symbol_of_another_range():
    """An index naming a loop's name with another range would be re-simplified by that
    range: ``(4*i0 + i1) % 8`` with ``i1`` over 4 becomes ``4*i0r + i1`` once ``i0``
    splits by 2, right in a kernel whose ``i1`` is over 4, wrong (past 8) in one whose
    ``i1`` is over 8. The first splits, the second is left alone."""
    from kiln.compiler.lower.expr import ExprTable
    from kiln.compiler.lower.program import Program
    from kiln.compiler.lower.refine_loops import refine_kernel

    def kernel(loop_i1):
        prog, table = Program(), ExprTable()
        x = prog.new_buffer((32,), np.float32, "in")
        y = prog.new_buffer((4 * loop_i1,), np.float32, "out")
        i0, i1 = Sym("i0", 0, 3), Sym("i1", 0, loop_i1 - 1)
        at = (Idx.sym(i0) * 4 + Idx.sym(Sym("i1", 0, 3))).mod(8)
        assert not at.is_affine
        return prog, table, Kernel((4, loop_i1), [i0, i1], [(y, table.load(x, at))], "k1")

    prog, table, k = kernel(4)
    k2 = refine_kernel(prog, table, k)
    assert k2.shape == (2, 2, 4)
    (e,) = [e for _, e in k2.outs]
    assert e.params[2].v.c() == "(4*i0r + i1)"
    prog, table, k = kernel(8)
    assert refine_kernel(prog, table, k) is k
