"""``lax.dtype`` against ``jax.lax.dtype``: Python scalars and types, NumPy values, types,
dtypes and strings, kiln arrays and tracers (under ``jit``, ``grad``, ``vmap``), with and
without x64, including the truncation warning and the errors."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax

jax = pytest.importorskip("jax")

INPUTS = [
    1.0, 1, True, 1j, float, int, bool, complex, np.float64, np.float32, np.int16,
    np.uint64, np.bool_, ml_dtypes.bfloat16, np.dtype("float64"), np.dtype("int8"),
    "float64", "float16", "uint32", "bfloat16", np.float64(2.0), np.int64(3),
    np.ones(2), np.ones(2, np.int64), np.ones(2, np.float16),
]


def _both(x):
    """(kiln's answer, JAX's answer, kiln's warnings, JAX's warnings)."""
    with warnings.catch_warnings(record=True) as kw:
        warnings.simplefilter("always")
        k = lax.dtype(x)
    with warnings.catch_warnings(record=True) as jw:
        warnings.simplefilter("always")
        j = jax.lax.dtype(x)
    return k, j, [str(w.message) for w in kw], [str(w.message) for w in jw]


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("x", INPUTS, ids=repr)
def test_matches_jax(x, x64):
    with kiln.enable_x64(x64), jax.enable_x64(x64):
        k, j, kw, jw = _both(x)
    assert k == j
    assert type(k) is type(j)
    assert len(kw) == len(jw)
    if jw:
        assert kw[0] == jw[0]


def test_arrays_keep_their_dtype():
    with kiln.enable_x64():
        a = knp.ones(2, np.float64)
    assert lax.dtype(a) == np.float64          # not canonicalized, as for jax.Array
    assert lax.dtype(knp.ones(2, ml_dtypes.bfloat16)) == ml_dtypes.bfloat16
    assert lax.dtype(knp.float16) == np.float16   # kiln scalar types have a .dtype
    assert lax.dtype(kiln.random.key(0)) == kiln.random.key(0).dtype


def test_tracers_under_transformations():
    seen = []

    def f(x):
        seen.append(lax.dtype(x))
        return (x * 2).sum()

    x = np.ones(3, np.float16)
    kiln.jit(f)(x)
    kiln.grad(f)(x.astype(np.float32))
    kiln.vmap(f)(x.reshape(3, 1))
    assert seen == [np.float16, np.float32, np.float16]


def test_errors_match_jax():
    for bad in [None, "object", [1.0, 2.0], (1, 2), np.array(["a"], dtype=object), object()]:
        with pytest.raises(Exception) as k:
            lax.dtype(bad)
        with pytest.raises(Exception) as j:
            jax.lax.dtype(bad)
        assert k.type is j.type, bad
        assert str(k.value) == str(j.value)
