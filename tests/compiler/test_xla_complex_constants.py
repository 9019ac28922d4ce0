"""Complex arithmetic with literal constants under ``jit`` takes XLA's forms
(``kiln/compiler/passes/xla_simplify.py``: ``_complex_divide``, ``_complex_scale``):
``x / k`` is ``x * fl(1/k)``, and a product by a scalar literal ``k`` with ``re(k) > 0 >
im(k)`` uses the same-shape kernel form. Checked against JAX bit for bit when it is
installed; the rewrites themselves without it."""
import numpy as np
import pytest

import kiln
from kiln.compiler.passes.passes import optimize

R = np.random.default_rng(0)
X64 = (R.standard_normal(256) + 1j * R.standard_normal(256)).astype(np.complex64)


def _prims(f, x):
    return [(e.primitive.name, [getattr(v, "val", None) for v in e.invars])
            for e in optimize(kiln.make_jaxpr(f)(x)).jaxpr.eqns]


def test_division_by_a_literal_is_a_product_by_its_reciprocal():
    eqns = _prims(lambda x: x / (-2.5e-3 + 3.1j), X64)
    assert [n for n, _ in eqns] == ["mul"]
    k = np.complex64(1) / np.complex64(-2.5e-3 + 3.1j)
    assert np.complex64(eqns[0][1][1]) == k


def test_scale_by_a_positive_real_negative_imaginary_literal_is_broadcast():
    assert [n for n, _ in _prims(lambda x: x * (0.3 - 1.7j), X64)] == \
        ["broadcast_in_dim", "mul"]
    assert [n for n, _ in _prims(lambda x: (0.3 - 1.7j) * x, X64)] == \
        ["broadcast_in_dim", "mul"]
    for k in (0.3 + 1.7j, -0.3 - 1.7j, -0.3 + 1.7j):
        assert [n for n, _ in _prims(lambda x, k=k: x * k, X64)] == ["mul"]
    # a runtime scalar divisor stays a division (JAX's eager x / y is one too)
    assert [n for n, _ in _prims(lambda x: x / x[3], X64)][-1] == "div"


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_bits_match_jax(dtype):
    jax = pytest.importorskip("jax")
    x = X64.astype(dtype)
    cases = [lambda x: x / (1.3 + 0.7j), lambda x: x / (-2.5e-3 + 3.1j),
             lambda x: x * (0.3 - 1.7j), lambda x: (0.3 - 1.7j) * x,
             lambda x: x * (0.3 + 1.7j), lambda x: x / np.full(x.shape, 1.3 + 0.7j, x.dtype)]
    with jax.enable_x64(dtype == np.complex128), kiln.enable_x64(dtype == np.complex128):
        for f in cases:
            want = np.asarray(jax.jit(f)(x))
            got = np.asarray(kiln.jit(f)(x))
            np.testing.assert_array_equal(got, want)
