"""``jax.numpy``'s runtime error checks (``kiln/numpy/_error.py``, JAX's
``jax._src.numpy.error``): NaN results, division by zero and out-of-bounds indices set
``error_check``'s error state when their ``jax_error_checking_behavior_*`` flag is
``"raise"``."""
import operator

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import _error_check as error_check
from kiln.numpy import _error as jnp_error

JaxValueError = error_check.JaxValueError


@pytest.fixture(autouse=True)
def _clean_state():
    try:
        error_check.raise_if_error()
    except JaxValueError:
        pass
    yield
    try:
        error_check.raise_if_error()
    except JaxValueError:
        pass


def _raised() -> str | None:
    try:
        error_check.raise_if_error()
    except JaxValueError as e:
        return str(e)
    return None


inf = float("inf")

# (function, arguments giving a NaN, arguments that do not)
NAN_CASES = [
    (jnp.acos, (2.0,), (0.5,)),
    (jnp.arccosh, (0.5,), (2.0,)),
    (jnp.arcsin, (-2.0,), (0.5,)),
    (jnp.atanh, (-2.0,), (0.5,)),
    (jnp.add, (inf, -inf), (0.0, 0.0)),
    (jnp.subtract, (inf, inf), (0.0, 0.0)),
    (jnp.cos, (inf,), (1.0,)),
    (jnp.sin, (inf,), (1.0,)),
    (jnp.tan, (inf,), (1.0,)),
    (jnp.divide, (0.0, 0.0), (1.0, 1.0)),
    (jnp.divmod, (1.0, 0.0), (1.0, 1.0)),
    (jnp.floor_divide, (1.0, 0.0), (1.0, 1.0)),
    (jnp.float_power, (-1.0, 0.5), (1.0, 1.0)),
    (jnp.fmod, (1.0, 0.0), (1.0, 1.0)),
    (jnp.log, (-1.0,), (1.0,)),
    (jnp.log10, (-1.0,), (1.0,)),
    (jnp.log1p, (-1.5,), (1.0,)),
    (jnp.log2, (-1.0,), (1.0,)),
    (jnp.mod, (1.0, 0.0), (1.0, 1.0)),
    (jnp.pow, (-1.0, 0.5), (1.0, 1.0)),
    (jnp.sqrt, (-4.0,), (4.0,)),
    (operator.add, (inf, -inf), (0.0, 0.0)),
    (operator.mod, (1.0, 0.0), (1.0, 1.0)),
    (operator.pow, (-1.0, 0.5), (1.0, 1.0)),
    (operator.truediv, (0.0, 0.0), (1.0, 1.0)),
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("f,bad,good", NAN_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_nan_checks(jit, f, bad, good):
    g = kiln.jit(f) if jit else f
    bad = [jnp.float32(v) for v in bad]
    good = [jnp.float32(v) for v in good]
    g(*bad)
    assert _raised() is None                       # off by default
    with jnp_error.error_checking_behavior(nan="raise"):
        g(*good)
        assert _raised() is None
        g(*bad)
        assert _raised() == "NaN encountered"


@pytest.mark.parametrize("f", [jnp.exp, jnp.arctan, jnp.multiply])
def test_functions_without_nan_checks(f):
    args = [jnp.float32(np.nan)] * (2 if f is jnp.multiply else 1)
    with jnp_error.error_checking_behavior(nan="raise"):
        f(*args)
    assert _raised() is None


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("f,dtypes", [
    (jnp.divmod, (jnp.int32, jnp.uint8, jnp.float32, jnp.bfloat16)),
    (jnp.floor_divide, (jnp.int32, jnp.uint16, jnp.float16)),
    (jnp.remainder, (jnp.int8, jnp.float32)),
    (jnp.true_divide, (jnp.float32, jnp.int32)),
    (operator.mod, (jnp.int32, jnp.float32)),
    (operator.floordiv, (jnp.int32,)),
    (operator.truediv, (jnp.float32,)),
])
def test_divide_by_zero_checks(jit, f, dtypes):
    g = kiln.jit(f) if jit else f
    for dt in dtypes:
        with jnp_error.error_checking_behavior(divide="raise"):
            g(dt(1), dt(1))
            assert _raised() is None
            g(jnp.full(3, 1, dt), jnp.array([1, 0, 2], dt))
            assert _raised() == "Division by zero encountered", dt


def test_fmod_has_no_divide_check():
    with jnp_error.error_checking_behavior(divide="raise"):
        jnp.fmod(jnp.int32(1), jnp.int32(0))
    assert _raised() is None


OOB = "Out of bounds encountered before calling `lax.gather`"


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("index,expected", [
    (np.array([9, -10]), None),
    (np.array([10]), OOB),
    (np.array([-11]), OOB),
    ((np.array([1]), 2), None),
    ((np.array([1]), 3), OOB),
    ((np.array([[0, 9]]), np.array([[2], [-3]])), None),
    ((np.array([[0, 9]]), np.array([[2], [-4]])), OOB),
])
def test_out_of_bounds_checks(jit, index, expected):
    x = jnp.arange(30.0).reshape(10, 3)

    def take(x, index):
        return x[index]

    f = kiln.jit(take) if jit else take
    index = kiln.tree_util.tree_map(jnp.asarray, index)
    with jnp_error.error_checking_behavior(oob="raise"):
        out = f(x, index)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x)[tuple(
        np.clip(np.where(np.asarray(i) < 0, np.asarray(i) + n, i), 0, n - 1)
        for i, n in zip(index if isinstance(index, tuple) else (index,), (10, 3)))])
    assert _raised() == expected


def test_out_of_bounds_unnormalized_and_empty():
    x = jnp.arange(5)
    with jnp_error.error_checking_behavior(oob="raise"):
        x.at[jnp.array([-1])].get(wrap_negative_indices=False)
        assert _raised() == OOB
        jnp.zeros(1)[None]                              # no index array
        x[jnp.zeros(0, jnp.int32)]                      # no index at all
        x[2]                                            # a static integer: a slice
    assert _raised() is None


def test_flags_and_context_manager():
    assert kiln.config.jax_error_checking_behavior_nan == "ignore"
    with jnp_error.error_checking_behavior(all="raise", divide="ignore"):
        assert kiln.config.jax_error_checking_behavior_nan == "raise"
        assert kiln.config.jax_error_checking_behavior_divide == "ignore"
        assert kiln.config.jax_error_checking_behavior_oob == "raise"
    assert kiln.config.jax_error_checking_behavior_oob == "ignore"
    with pytest.raises(ValueError, match="must be one of"):
        kiln.config.update("jax_error_checking_behavior_nan", "warn")


def test_flags_are_part_of_the_jit_cache_key():
    f = kiln.jit(jnp.sqrt)
    f(jnp.float32(-1.0))                                # traced without the check
    with jnp_error.error_checking_behavior(nan="raise"):
        f(jnp.float32(-1.0))                            # traced again, with it
    assert _raised() == "NaN encountered"
    f(jnp.float32(-1.0))                                # the first trace again
    assert _raised() is None


def test_set_error_if_with_category():
    pred = jnp.array([True])
    jnp_error._set_error_if_with_category(pred, "oob off", category="oob")
    assert _raised() is None
    with jnp_error.error_checking_behavior(oob="raise"):
        jnp_error._set_error_if_with_category(pred, "oob on", category="oob")
    assert _raised() == "oob on"
    jnp_error._set_error_if_with_category(pred, "no category")
    assert _raised() == "no category"
    for category, match in [("invalid", "Invalid category"),
                            ("nan", "Use `_set_error_if_nan` instead"),
                            ("divide", "Use `_set_error_if_divide_by_zero` instead")]:
        with pytest.raises(ValueError, match=match):
            jnp_error._set_error_if_with_category(pred, "x", category=category)


def test_aliases_are_functions_of_their_own():
    # JAX's names (test ids of JAX's jax_numpy_error_test are built from them)
    for name in ("acos", "asin", "atan", "acosh", "asinh", "atanh", "pow", "mod", "divide"):
        assert getattr(jnp, name).__name__ == name
    assert float(jnp.mod(7, 3)) == 1 and float(jnp.divide(1, 4)) == 0.25
    assert float(jnp.pow(2.0, 3)) == 8.0
