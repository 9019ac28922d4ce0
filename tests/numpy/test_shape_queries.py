"""``jnp.shape``/``ndim``/``size`` of non-arrays (JAX answers with NumPy's value and a
DeprecationWarning), ``jnp.expand_dims`` with any sequence of axes, and
``ShapedArray.at_least_vspace``, checked against JAX."""
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as kjnp

jax = pytest.importorskip("jax")
import jax.numpy as jjnp  # noqa: E402

CASES = [
    "jnp.shape(None)", "jnp.ndim(None)", "jnp.size(None)", "jnp.shape([[1, 2]])",
    "jnp.size([1, 2])", "jnp.ndim((1, 2))", "jnp.shape('ab')", "jnp.shape(np.float32(1))",
    "jnp.ndim(np.ones(3))", "jnp.shape(np.ones((2, 1)))", "type(jnp.shape(np.ones((2, 1))))",
    "jnp.size(jnp.ones((2, 3)), 1)", "jnp.size(jnp.ones((2, 3)), -1)",
    "jnp.size(jnp.ones((2, 3)), (0, 1))", "jnp.size(jnp.ones((2, 3)), (0, 0))",
    "jnp.size(None, 0)", "jnp.size(3.0, axis=0)", "jnp.shape(jnp.ones((2, 3)))",
    "jnp.expand_dims(jnp.ones(3), range(2)).shape",
    "jnp.expand_dims(jnp.ones(3), np.array([0, 1])).shape",
    "jnp.expand_dims(jnp.ones(3), (0, 0)).shape", "jnp.expand_dims(jnp.ones(3), (0, -1)).shape",
    "jnp.expand_dims(jnp.ones(3), 3).shape", "jnp.expand_dims(jnp.ones(3), (2, -3)).shape",
]


def _eval(jnp, expr):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            r = repr(eval(expr, {"jnp": jnp, "np": np}))
        except Exception as e:  # noqa: BLE001 - the class is compared with JAX's
            r = type(e).__name__ if not isinstance(e, ValueError) else "ValueError"
    return r, sorted(type(x.message).__name__ for x in w)


@pytest.mark.parametrize("expr", CASES)
def test_shape_queries_match_jax(expr):
    assert _eval(kjnp, expr) == _eval(jjnp, expr)


def test_deprecation_warning_points_at_caller():
    with pytest.warns(DeprecationWarning, match="shape requires ndarray or scalar") as rec:
        assert kjnp.shape(None) == ()
    assert rec[0].filename == __file__


@pytest.mark.parametrize("dtype,weak", [("float32", False), ("float32", True), ("int32", False),
                                        ("int32", True), ("bool", False), ("bfloat16", False)])
def test_at_least_vspace(dtype, weak):
    k = kiln.core.ShapedArray((2, 3), np.dtype(kjnp.dtype(dtype)), weak_type=weak)
    j = jax.core.ShapedArray((2, 3), jjnp.dtype(dtype), weak_type=weak)
    assert repr(k.at_least_vspace()) == repr(j.at_least_vspace())
    assert k.at_least_vspace() == k.to_tangent_aval()


def test_at_least_vspace_of_keys():
    k = kiln.typeof(kiln.random.key(0))
    j = jax.typeof(jax.random.key(0))
    assert repr(k.at_least_vspace()) == repr(j.at_least_vspace()) == "ShapedArray(float0[])"
