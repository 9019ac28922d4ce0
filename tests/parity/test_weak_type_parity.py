"""Weak types of results on weakly typed (Python scalar) inputs, against JAX: comparisons
(eager fast path included), ``jnp`` functions whose constants are strong in JAX, and
``scipy.special`` functions whose constants follow the input (a weak result keeps a jitted
sampler's carry types stable from step to step, as in JAX)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
jnp = jax.numpy

FUNCS = ["log2", "log10", "isinf", "isposinf", "isneginf", "isnan", "isfinite", "nan_to_num",
         "spacing", "log", "exp", "sqrt", "abs", "sign", "floor", "square"]
SPECIAL = ["logit", "loggamma", "gammaln", "expit", "erf", "ndtr", "exp1", "gamma",
           "gammasgn", "digamma", "log_ndtr", "entr"]


@pytest.mark.parametrize("name", FUNCS)
def test_numpy_functions(name):
    for x in (0.5, 2, np.float32(0.5)):
        got = getattr(knp, name)(x)
        want = getattr(jnp, name)(x)
        assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type), x


@pytest.mark.parametrize("name", SPECIAL)
def test_special_functions(name):
    got = getattr(kiln.scipy.special, name)(0.5)
    want = getattr(jax.scipy.special, name)(0.5)
    assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type)


def test_comparisons_are_weak_when_both_operands_are():
    def cases(xp, asarray, f32):
        w, s, wi = asarray(1.0) * 1.0, f32(1.0), asarray(3) * 1
        return [(w, w), (w, s), (s, w), (s, s), (w, 2.0), (s, 2.0), (wi, 2), (w, 2)]
    k = cases(knp, knp.asarray, knp.float32)
    j = cases(jnp, jnp.asarray, jnp.float32)
    for (ka, kb), (ja, jb) in zip(k, j):
        for op in ("__lt__", "__eq__", "__ge__", "__ne__"):
            got, want = getattr(ka, op)(kb), getattr(ja, op)(jb)
            assert got.weak_type == want.weak_type, (op, ka, kb)
    assert (2.0 > k[0][0]).weak_type == (2.0 > j[0][0]).weak_type
    assert kiln.jit(lambda a: a < 2.0)(1.0).weak_type == jax.jit(lambda a: a < 2.0)(1.0).weak_type
