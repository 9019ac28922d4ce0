"""Tangents that are zero stay symbolic zeros through ``cond`` and ``scan`` (as in JAX):
a cond output is differentiated only if some branch makes its tangent nonzero, a scan
carry only if the fixed point over the body says so, and a scan's ``ys`` keep zero
tangents symbolic. A ``custom_jvp`` whose rule must never run (Equinox's
``nondifferentiable``) then works on an unperturbed carry, under ``grad``, ``jit`` and
``vmap``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


@kiln.custom_jvp
def nondiff(x):
    return x


@nondiff.defjvp
def _nondiff_jvp(primals, tangents):
    raise RuntimeError("nondiff was differentiated")


def _loss(x, y):
    def body(carry, _):
        step, x, y = carry

        def f(c):
            s, x, y = c
            return s + 1, x * 1.5 + nondiff(y), y + 1.0
        carry = lax.cond(step < 10, f, lambda c: c, (step, x, y))
        return carry, carry[2] * 2.0

    (_, x, y), ys = lax.scan(body, (0, x, y), None, length=3)
    return x + y + ys.sum()


def _expected(x, y):
    # x_{k+1} = 1.5 x_k + y_k, y_{k+1} = y_k + 1: d/dx = 1.5 ** 3.
    return 1.5 ** 3


@pytest.mark.parametrize("how", ["grad", "jit_grad", "grad_jit", "vmap_grad"])
def test_unperturbed_carry_is_not_differentiated(how):
    g = kiln.grad(_loss)
    if how == "jit_grad":
        g = kiln.jit(g)
    elif how == "grad_jit":
        g = kiln.grad(kiln.jit(_loss))
    x, y = jnp.float32(0.5), jnp.float32(2.0)
    if how == "vmap_grad":
        out = kiln.vmap(g, in_axes=(0, None))(jnp.array([0.5, 1.0]), y)
        np.testing.assert_allclose(out, [_expected(0.5, 2.0)] * 2, rtol=1e-6)
    else:
        np.testing.assert_allclose(g(x, y), _expected(0.5, 2.0), rtol=1e-6)


def test_perturbed_carry_still_reaches_the_rule():
    with pytest.raises(RuntimeError, match="nondiff was differentiated"):
        kiln.grad(_loss, argnums=1)(jnp.float32(0.5), jnp.float32(2.0))


def test_cond_output_tangents_stay_symbolic():
    seen = []

    @kiln.custom_jvp
    def probe(x):
        return x

    @probe.defjvp
    def _probe_jvp(primals, tangents):
        seen.append(type(tangents[0]).__name__)
        return primals[0], tangents[0]
    probe.defjvp(_probe_jvp, symbolic_zeros=True)

    def f(x, y):
        a, b = lax.cond(x > 0, lambda x, y: (x * 2.0, y + 1.0), lambda x, y: (x, y), x, y)
        return probe(a) + probe(b)

    kiln.jvp(lambda x: f(x, jnp.float32(3.0)), (jnp.float32(1.0),), (jnp.float32(1.0),))
    # b's tangent is zero in both branches: it stays symbolic, so probe(b) is not
    # differentiated at all (and probe(a) sees a real tangent).
    assert len(seen) == 1 and seen[0] != "SymbolicZero"


def test_scan_ys_zero_tangents_stay_symbolic():
    def f(x, c):
        def body(carry, _):
            return carry * x, c * 2.0
        return lax.scan(body, x, None, length=2)

    (carry, ys), (tc, tys) = kiln.jvp(f, (jnp.float32(2.0), jnp.float32(1.0)),
                                      (jnp.float32(1.0), jnp.float32(0.0)))
    np.testing.assert_allclose(tys, [0.0, 0.0])
    np.testing.assert_allclose(tc, 3 * 2.0 ** 2)
    jax = pytest.importorskip("jax")
    jtc = jax.jvp(lambda x, c: jax.lax.scan(lambda a, _: (a * x, c * 2.0), x, None, length=2),
                  (2.0, 1.0), (1.0, 0.0))[1][0]
    np.testing.assert_allclose(tc, jtc)
