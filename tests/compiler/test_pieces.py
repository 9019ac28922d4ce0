"""Concatenation-like values written piece by piece (``lower.py``: ``_set_pieces``,
``Lowering._write_pieces``): a concatenate, a pad along one dim, or a sum of such values
(the gradient of ``jnp.split``) that is stored gets one kernel per piece, each writing its
region of the buffer; the bits are the reference backend's (run on the passes' output)."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Gemm, Kernel

R = np.random.default_rng(3)


def _run(f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    flat = [np.asarray(a) for a in args]
    exe = cpu.executable_for(closed)
    got = exe(flat)
    ref = cpu._reference_form(closed)       # the passes' output (XLA's fma contraction)
    want = reference.run_jaxpr(ref.jaxpr, ref.consts, flat)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    return [s for s in exe.prog.steps if isinstance(s, Kernel)], got


def test_gradient_of_split_writes_three_pieces():
    """``split`` of a product's output into heads: its gradient is three pieces, each a
    transposed per-head product output; the products store straight into their regions
    of the buffer the weight gradient's GEMM reads (``gemm_store.py``: the three piece
    kernels that copied them there are gone)."""
    x = R.standard_normal((4, 32, 48)).astype(np.float32)
    w = R.standard_normal((48, 96)).astype(np.float32)

    def loss(w, x):
        q, k, v = jnp.split(x @ w, 3, axis=-1)
        q, k, v = (a.reshape(4, 32, 2, 16).transpose(0, 2, 1, 3) for a in (q, k, v))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        return jnp.sum(jnp.einsum("bhqk,bhkd->bhqd", jnp.tanh(s), v) ** 2)

    closed = kiln.make_jaxpr(kiln.grad(loss))(w, x)
    kernels, _ = _run(kiln.grad(loss), w, x)
    assert not [k for k in kernels if k.strides is not None]
    prog = cpu.executable_for(closed).prog
    into = [g for g in prog.steps if isinstance(g, Gemm) and g.out_view is not None]
    # The three gradient pieces: [b, h, t, d] products written as [b, t, h*d] into the
    # 96-wide buffer at 0 / 32 / 64.
    pieces = sorted((g.out_view for g in into), key=lambda v: v[2])
    assert pieces == [(96, ((4, 3072), (2, 16)), off) for off in (0, 32, 64)]


def test_concatenate_stored_for_a_product():
    a = R.standard_normal((64, 40)).astype(np.float32)
    b = R.standard_normal((64, 24)).astype(np.float32)
    w = R.standard_normal((64, 32)).astype(np.float32)

    def f(a, b, w):
        return jnp.concatenate([jnp.tanh(a), b * 2.0], axis=1).T @ w

    kernels, _ = _run(f, a, b, w)
    assert sum(k.strides is not None for k in kernels) == 2


def test_signed_zeros_and_a_traced_pad_value():
    """A padded region holds the pad value (here a traced scalar) and -0.0 + 0.0 stays
    +0.0 as in the reference; pieces along the first dim may be short."""
    x = np.array([[-0.0, 1.0, -2.0, 0.0]] * 3, np.float32).repeat(8, axis=1)
    y = -x

    def f(x, y, c):
        p = jax_pad(x, c) + jax_pad_rev(y)
        return p * 1.0, (p.reshape(-1) + 1.0).reshape(p.shape)

    def jax_pad(x, c):
        return kiln.lax.pad(x, c, ((2, 0, 0), (0, 0, 0)))

    def jax_pad_rev(y):
        return kiln.lax.pad(y, np.float32(0.0), ((0, 2, 0), (0, 0, 0)))

    _, got = _run(f, x, y, np.float32(-0.0))
    assert np.signbit(np.asarray(got[0])).sum() == np.signbit(
        np.pad(x, ((2, 0), (0, 0)), constant_values=-0.0)
         + np.pad(y, ((0, 2), (0, 0)))).sum()


def test_short_pieces_along_the_last_dim_stay_one_kernel():
    cols = [R.standard_normal((256, 1)).astype(np.float32) for _ in range(4)]
    w = R.standard_normal((4, 64)).astype(np.float32)

    def f(a, b, c, d, w):
        return jnp.concatenate([jnp.sin(a), b, c, d], axis=1) @ w

    kernels, _ = _run(f, *cols, w)
    assert all(k.strides is None for k in kernels)
