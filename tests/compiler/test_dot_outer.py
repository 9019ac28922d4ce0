"""Dots whose contracting dims all have size 1 (outer products: per-example gradients
under ``vmap``), ``lower.py``'s ``_dot_as_reduce``: an elementwise kernel of the products,
no reduction, so a product of -0.0 stays -0.0 as in JAX (XLA simplifies such a dot to a
multiply); contracting dims of size 1 next to longer ones are read at index 0."""
import jax
import numpy as np

import kiln
import kiln.numpy as knp
from kiln.backends import cpu
from kiln.compiler.lower.program import Kernel, Reduce

R = np.random.default_rng(5)


def _steps(f, *args):
    exe = cpu.executable_for(kiln.make_jaxpr(f)(*args))
    return exe.prog.steps


def _signed_zeros(n):
    v = R.standard_normal(n).astype(np.float32)
    v[::3] = -0.0
    v[1::5] = 0.0
    return v


def test_outer_product_is_a_kernel_with_jax_zero_signs():
    a, b = _signed_zeros(37), _signed_zeros(53)
    b[2::7] = -1.5

    def f(a, b):
        return a.reshape(-1, 1) @ b.reshape(1, -1)

    got = np.asarray(kiln.jit(f)(a, b))
    want = np.asarray(jax.jit(f)(a, b))
    assert got.tobytes() == want.tobytes()
    assert np.signbit(got).any() and (got == 0).any()
    steps = _steps(f, a, b)
    assert not any(isinstance(s, Reduce) for s in steps)
    assert any(isinstance(s, Kernel) and s.shape == (37, 53) for s in steps)


def test_vmapped_outer_product_batch_dims():
    a = np.stack([_signed_zeros(19) for _ in range(6)])
    b = -np.stack([_signed_zeros(24) for _ in range(6)])

    def f(a, b):
        return a.reshape(-1, 1) @ b.reshape(1, -1)

    got = np.asarray(kiln.jit(kiln.vmap(f))(a, b))
    want = np.asarray(jax.jit(jax.vmap(f))(a, b))
    assert got.shape == (6, 19, 24)
    assert got.tobytes() == want.tobytes()
    assert not any(isinstance(s, Reduce) for s in _steps(kiln.vmap(f), a, b))


def test_size_one_contracting_dim_beside_a_longer_one():
    """Two contracting dims, one of size 1: a reduction over the other only."""
    x = R.standard_normal((5, 1, 7)).astype(np.float32)
    y = R.standard_normal((1, 7, 3)).astype(np.float32)

    def f(x, y):
        return knp.einsum("aik,ikb->ab", x, y)

    def fj(x, y):
        return jax.numpy.einsum("aik,ikb->ab", x, y)

    got = np.asarray(kiln.jit(f)(x, y))
    np.testing.assert_allclose(got, np.asarray(jax.jit(fj)(x, y)), rtol=1e-6, atol=1e-6)
    reds = [s for s in _steps(f, x, y) if isinstance(s, Reduce)]
    assert all(1 not in s.in_shape for s in reds)


def test_integer_outer_product_wraps_as_jax():
    a = R.integers(-128, 128, 11).astype(np.int8)
    b = R.integers(-128, 128, 13).astype(np.int8)

    def f(a, b):
        return a.reshape(-1, 1) @ b.reshape(1, -1)

    got = np.asarray(kiln.jit(f)(a, b))
    want = np.asarray(jax.jit(f)(a, b))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
