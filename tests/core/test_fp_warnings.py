"""NumPy's floating-point RuntimeWarnings never escape kiln (JAX computes inf/nan silently),
whatever the warnings filters say (``simplefilter("error")`` or ``"always"`` installed after
kiln's import, as ``pytest -W error`` does), on every path: eager primitives and fast paths,
``scan``/``while_loop``/``fori_loop``/``cond`` eagerly and on the reference backend, host
islands of compiled programs and ``jax_debug_nans``. User code (callbacks, the user's own
NumPy) keeps NumPy's warnings."""
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.errors import JaxRuntimeError

config_context = sys.modules["kiln.config"].config_context

BIG = np.float32(3e38)


def _eager_cases():
    big = jnp.full(3, BIG)
    ones, zeros = jnp.ones(3), jnp.zeros(3)
    inf = jnp.array([np.inf, 1.0], np.float32)
    return {
        "Array/Array": lambda: ones / zeros,
        "Array/scalar": lambda: ones / 0.0,
        "scalar-Array": lambda: 3e38 * big + big,
        "Array*Array": lambda: big * big,
        "inf-inf": lambda: inf - inf,
        "0-d arrays": lambda: jnp.float32(1.0) / jnp.float32(0.0),
        "sum": lambda: jnp.sum(big),
        "sum axis": lambda: jnp.sum(jnp.full((2, 3), BIG), axis=1),
        "mean": lambda: jnp.mean(big),
        "var": lambda: jnp.var(big),
        "cumsum": lambda: jnp.cumsum(big),
        "prod": lambda: jnp.prod(big),
        "dot": lambda: jnp.dot(big, big),
        "matmul": lambda: jnp.full((2, 2), BIG) @ jnp.full((2, 2), BIG),
        "log(0)": lambda: jnp.log(zeros),
        "sqrt(-1)": lambda: jnp.sqrt(-ones),
        "exp": lambda: jnp.exp(jnp.full(3, 1000.0)),
        "power": lambda: jnp.power(big, 3.0),
        "norm": lambda: jnp.linalg.norm(big),
        "softmax": lambda: kiln.nn.softmax(inf),
        "random": lambda: kiln.random.normal(kiln.random.key(0), (3,)) / 0.0,
        "grad": lambda: kiln.grad(jnp.sqrt)(0.0),
        "vmap": lambda: kiln.vmap(lambda x: x / 0.0)(ones),
        "int array": lambda: jnp.arange(3) // 0,
    }


def _loop_cases():
    c0 = jnp.float32(1e30)
    return {
        "scan": lambda: lax.scan(lambda c, x: (c * c0, x / 0.0), c0, jnp.arange(3.0)),
        "while_loop": lambda: lax.while_loop(lambda c: c[0] < 3,
                                             lambda c: (c[0] + 1, c[1] * c0), (0, c0)),
        "fori_loop": lambda: lax.fori_loop(0, 3, lambda i, c: c * c0 - c * c0, c0),
        "cond": lambda: lax.cond(True, lambda x: x * x, lambda x: x, jnp.full(3, BIG)),
        "switch": lambda: lax.switch(1, [lambda x: x, lambda x: jnp.log(x - x)], jnp.ones(2)),
        "map": lambda: lax.map(lambda x: x * BIG * BIG, jnp.ones(3)),
        "nested": lambda: lax.scan(
            lambda c, x: (lax.fori_loop(0, 2, lambda i, d: d * c0, c), x), c0, jnp.ones(2)),
    }


def _run_all(cases, action):
    """Run every case under ``simplefilter(action)`` installed after kiln's filter; return
    the failures."""
    bad = []
    for name, fn in cases.items():
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter(action)
            try:
                fn()
            except RuntimeWarning as e:
                bad.append(f"{name}: raised {e}")
            else:
                bad += [f"{name}: warned {r.message}" for r in rec
                        if issubclass(r.category, RuntimeWarning)]
    return bad


@pytest.mark.parametrize("action", ["error", "always"])
def test_eager_ops(action):
    assert _run_all(_eager_cases(), action) == []


@pytest.mark.parametrize("action", ["error", "always"])
def test_eager_loops_and_branches(action):
    assert _run_all(_loop_cases(), action) == []


@pytest.mark.parametrize("action", ["error", "always"])
def test_jit_on_reference_backend(action):
    cases = {k: kiln.jit(f) for k, f in {**_loop_cases(), "div": lambda: jnp.ones(2) / 0.0,
                                          "sum": lambda: jnp.sum(jnp.full(3, BIG))}.items()}
    with config_context(kiln_backend="reference"):
        assert _run_all(cases, action) == []


@pytest.mark.parametrize("action", ["error", "always"])
def test_jit_compiled_with_host_islands(action):
    # bfloat16 arithmetic is a host island (NumPy via ml_dtypes) between native segments.
    def f(x):
        y = x.astype(jnp.bfloat16)
        z = (y / jnp.zeros_like(y)) * (y * jnp.bfloat16(3e38) * jnp.bfloat16(3e38))
        return z.astype(jnp.float32) + lax.scan(lambda c, _: (c * BIG, None), x, None, 3)[0]
    x = jnp.ones(4)
    assert _run_all({"islands": lambda: kiln.jit(f)(x)}, action) == []
    assert np.isinf(np.asarray(kiln.jit(f)(x))).all()


@pytest.mark.parametrize("action", ["error", "always"])
def test_debug_nans_mode(action):
    # Overflow to inf is no NaN: no error and no warning; a NaN is JAX's FloatingPointError.
    with config_context(jax_debug_nans=True):
        c0 = jnp.float32(1e30)
        infs_only = {
            "scan": lambda: lax.scan(lambda c, x: (c * c0, x / 0.0), c0, jnp.arange(1.0, 3.0)),
            "while_loop": lambda: lax.while_loop(lambda c: c[0] < 3,
                                                 lambda c: (c[0] + 1, c[1] * c0), (0, c0)),
            "fori_loop": lambda: lax.fori_loop(0, 3, lambda i, c: c * c0, c0),
            "cond": lambda: lax.cond(True, lambda x: x * x, lambda x: x, jnp.full(3, BIG)),
        }
        assert _run_all({**infs_only, "mul": lambda: jnp.full(3, BIG) * 2.0,
                         "jit": lambda: kiln.jit(lambda x: x * BIG)(jnp.full(2, BIG))},
                        action) == []
        with warnings.catch_warnings():
            warnings.simplefilter(action)
            with pytest.raises(FloatingPointError):
                jnp.log(-jnp.ones(2))
            with pytest.raises(FloatingPointError):
                kiln.jit(lambda x: jnp.sqrt(x - 2.0))(jnp.ones(2))


def test_without_any_filter():
    # warnings.resetwarnings() drops kiln's filter too: the error state still applies.
    with warnings.catch_warnings(record=True) as rec:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        _ = (jnp.ones(2) / 0.0, jnp.sum(jnp.full(3, BIG)), jnp.dot(jnp.full(2, BIG),
             jnp.full(2, BIG)), jnp.mean(jnp.full(3, BIG)), 1.0 - jnp.array([np.inf]))
    assert [str(r.message) for r in rec] == []


def test_users_numpy_still_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _ = jnp.ones(2) / 0.0
        with pytest.raises(RuntimeWarning):
            np.float32(1.0) / np.zeros(1, np.float32)      # the user's own NumPy
        with np.errstate(divide="raise"):                   # and the user's error state
            _ = jnp.ones(2) / 0.0                            # (JAX ignores np.errstate)
            with pytest.raises(FloatingPointError):
                np.ones(1) / 0.0


def _user_divides(x):
    return (np.asarray(x) / np.zeros_like(np.asarray(x))).astype(np.float32)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_callbacks_run_user_code_with_users_warnings(backend):
    # As in JAX, NumPy warnings of the user's own callback code are the user's (raised as
    # errors here; a failing pure_callback surfaces as JaxRuntimeError, as in JAX).
    spec = kiln.ShapeDtypeStruct((2,), np.float32)

    def f(x):
        return kiln.pure_callback(_user_divides, spec, x) + x / 0.0
    with config_context(kiln_backend=backend), warnings.catch_warnings():
        warnings.simplefilter("error")
        for g in (f, kiln.jit(f), lambda x: lax.scan(lambda c, _: (f(c), None), x, None, 2)[0]):
            with pytest.raises((RuntimeWarning, JaxRuntimeError), match="divide by zero"):
                g(jnp.ones(2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert np.isinf(np.asarray(kiln.jit(f)(jnp.ones(2)))).all()


def test_bfloat16_eager():
    x = jnp.ones(2, ml_dtypes.bfloat16)
    assert _run_all({"bf16": lambda: x / jnp.zeros_like(x)}, "error") == []


def test_eager_integer_remainder_and_fmod_by_zero_do_not_warn():
    # The integer fast paths call NumPy's remainder/fmod directly: x % 0 is 0 as in JAX,
    # and NumPy's "divide by zero" RuntimeWarning must not reach the user.
    import warnings

    import kiln.numpy as jnp
    a = jnp.array([5, -7, 3], jnp.int32)
    b = jnp.array([0, 2, 0], jnp.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (a % b).tolist() == [0, 1, 0]
        assert jnp.fmod(a, b).tolist() == [0, -1, 0]
        assert jnp.remainder(a, b).tolist() == [0, 1, 0]
        assert (a % 0).tolist() == [0, 0, 0]
        assert (7 % b).tolist() == [0, 1, 0]
