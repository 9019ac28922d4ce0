"""Compiled transcendental functions that reproduce XLA's CPU formulas bit for bit.

The compiler emits XLA's own exp/expm1/log/log1p/tanh/logistic/erf (``kiln.random._native``'s
XLA_MATH_C) rather than the C library's, and XLA's expansions of asin/acos/atan/sinh/cosh/
asinh/acosh/atanh built from them, so a jitted kiln program gives JAX's bits.
Checked against live JAX where it is installed, and always against the C source
(the function really is XLA's) and NumPy (to a few ulps).
"""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
import kiln.scipy.special  # noqa: F401
from kiln import nn as knn

try:
    import jax
    import jax.numpy as jnp
    import jax.scipy.special  # noqa: F401
except ImportError:  # pragma: no cover
    jax = None

#: XLA's expansions of the CHLO ops asin ... atanh (numpy name: C function stem).
TRIG = {"arcsin": "xasin", "arccos": "xacos", "arctan": "xatan", "sinh": "xsinh",
        "cosh": "xcosh", "arcsinh": "xasinh", "arccosh": "xacosh", "arctanh": "xatanh"}
F32_FUNCS = {"exp": "xexp32", "log": "xlog32", "log1p": "xlog1p32", "tanh": "xtanh32",
             "sigmoid": "kiln_logistic_xla32", "erf": "xerf32", "expm1": "xexpm132",
             **{k: v + "32" for k, v in TRIG.items()}}
F64_FUNCS = {"exp": "xexp64", "log1p": "xlog1p64", "tanh": "xtanh64",
             "sigmoid": "kiln_logistic_xla64", "expm1": "xexpm164", "log": "xlog64",
             "erf": "xerf64", **{k: v + "64" for k, v in TRIG.items()}}


def _kiln_fn(name):
    if name == "erf":
        return kiln.scipy.special.erf
    return knn.sigmoid if name == "sigmoid" else getattr(knp, name)


def _jax_fn(name):
    if name == "erf":
        return jax.scipy.special.erf
    return jax.nn.sigmoid if name == "sigmoid" else getattr(jnp, name)


def _np_ref(name, x):
    if name == "erf":
        from scipy import special
        return special.erf(x)
    if name == "sigmoid":
        return 1 / (1 + np.exp(-x))
    return getattr(np, name)(x)


def _inputs(name, dtype):
    rng = np.random.default_rng(5)
    if name in ("log", "log1p"):
        x = np.concatenate([rng.uniform(0, 10, 20000), rng.lognormal(0, 8, 20000),
                            [0.0, 1.0, np.inf, np.nan, -1.0, 1e-30, -0.5]])
    elif name in ("arcsin", "arccos", "arctanh"):
        x = np.concatenate([rng.uniform(-1.05, 1.05, 20000), 1 - rng.lognormal(-12, 4, 5000),
                            rng.uniform(-1e-3, 1e-3, 2000),
                            [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, 1e-300]])
    elif name in ("arccosh", "arcsinh"):
        x = np.concatenate([rng.uniform(0.9, 3, 10000), 1 + rng.lognormal(-12, 4, 5000),
                            rng.lognormal(0, 40, 10000), -rng.lognormal(0, 8, 2000),
                            [0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e300, 3e38]])
    else:
        x = np.concatenate([rng.normal(0, 6, 40000), rng.uniform(-1e-3, 1e-3, 2000),
                            [0.0, -0.0, np.inf, -np.inf, np.nan, 8.5, 20.0, -20.0, 30.0,
                             88.7, -87.0, 700.0, -745.0]])
    return x.astype(dtype)


def _same(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


@pytest.fixture
def x64_mode(request):
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", request.param)
    try:
        yield request.param
    finally:
        kiln.config.update("jax_enable_x64", old)


CASES = ([pytest.param(False, n, id=f"f32-{n}") for n in F32_FUNCS] +
         [pytest.param(True, n, id=f"f64-{n}") for n in F64_FUNCS])


@pytest.mark.parametrize("x64_mode,name", CASES, indirect=["x64_mode"])
def test_compiled_uses_xla_formula(x64_mode, name):
    dtype = np.float64 if x64_mode else np.float32
    x = _inputs(name, dtype)
    f = kiln.jit(_kiln_fn(name))
    text = f.lower(x).compile().as_text()
    c_name = (F64_FUNCS if x64_mode else F32_FUNCS)[name]
    assert c_name in text, f"{name} did not lower to {c_name}"
    got = np.asarray(f(x))
    with np.errstate(all="ignore"):
        ref = _np_ref(name, x.astype(np.float64))
    # Compare where the true value is a normal number of ``dtype`` (XLA flushes
    # subnormal results to zero).
    finite = np.isfinite(ref.astype(dtype)) & (np.abs(ref) > np.finfo(dtype).tiny)
    rel = np.abs(got[finite] - ref[finite]) / np.abs(ref[finite])
    tol = 8 * np.finfo(dtype).eps
    if name in ("sinh", "cosh"):    # exp(x - log 2): x - log 2 is rounded (XLA's formula)
        tol = tol * np.maximum(1, np.abs(x[finite]))
    elif name in TRIG:      # XLA's expansions are a few dozen ulps off in places
        tol = 32 * tol
    assert (rel < tol).all(), (name, rel.max())
    assert _same(got[~finite & np.isnan(ref)], np.float64(np.nan)).all()


@pytest.mark.parity
@pytest.mark.skipif(jax is None, reason="jax is not installed")
@pytest.mark.parametrize("x64_mode,name", CASES, indirect=["x64_mode"])
def test_compiled_matches_jax_bits(x64_mode, name):
    dtype = np.float64 if x64_mode else np.float32
    x = _inputs(name, dtype)
    if name == "arctan":
        # XLA computes the last n % 4 elements (and arrays over 256 KiB, split across
        # threads) with its own atan approximation; compiled kiln calls the C library's
        # atan, the vector body's (docs/compatibility.md).
        x = x[:20000]
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", x64_mode)
    try:
        want = np.asarray(jax.jit(_jax_fn(name))(x))
    finally:
        jax.config.update("jax_enable_x64", old)
    got = np.asarray(kiln.jit(_kiln_fn(name))(x))
    same = _same(got, want)
    assert same.all(), (name, x[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parity
@pytest.mark.skipif(jax is None, reason="jax is not installed")
@pytest.mark.parametrize("x64_mode", [False, True], ids=["f32", "f64"], indirect=True)
def test_compiled_atan_by_length(x64_mode):
    """JAX's atan depends on the array's length: atan2(x, 1) for one element, XLA's own
    approximation for 2-49 elements, the C library's atan in the vector loop (lengths that
    are multiples of 4 here: XLA's loop remainder is not reproduced when compiled)."""
    dtype = np.float64 if x64_mode else np.float32
    fi = np.finfo(dtype)
    rng = np.random.default_rng(7)
    vals = np.concatenate([[0.0, -0.0, np.inf, -np.inf, np.nan, fi.smallest_subnormal,
                            -fi.smallest_subnormal, fi.tiny, fi.max, 1e-3, 1e-9, 1.0, -1.0],
                           rng.uniform(-3, 3, 43), 1 + rng.uniform(0, 1e-3, 16)]).astype(dtype)
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", x64_mode)
    try:
        f, g = kiln.jit(knp.arctan), jax.jit(jnp.arctan)
        cases = [vals[i:i + 1] for i in range(0, vals.size, 5)] + [vals[3:4].reshape(())]
        cases += [vals[:7], vals[7:49], vals[:64], np.resize(vals, (3, 4))]
        for x in cases:
            got, want = np.asarray(f(x)), np.asarray(g(x))
            same = _same(got, want) | (got.tobytes() == want.tobytes())
            assert np.all(same), (x.shape, x[~same][:3], got[~same][:3], want[~same][:3])
            assert got.tobytes() == want.tobytes() or np.isnan(want).any(), x.shape
    finally:
        jax.config.update("jax_enable_x64", old)


@pytest.mark.parity
@pytest.mark.skipif(jax is None, reason="jax is not installed")
@pytest.mark.parametrize("name", ["arcsinh", "arccosh"])
def test_compiled_asinh_acosh_short_arrays(name):
    """float32 asinh/acosh of short arrays is XLA's scalar code, which contracts another
    product inside log (xasinhs32, xacoshs32); these inputs tell the two apart."""
    x = np.array([0.54855776, -4.9722238, 2.938416, 1.5861391, 88.11073, 1.3, 7.0],
                 np.float32)
    f, g = kiln.jit(getattr(knp, name)), jax.jit(getattr(jnp, name))
    for a in (x, x[:1], x[1:2].reshape(()), x[3:4].reshape(()), np.resize(x, 15)):
        got, want = np.asarray(f(a)), np.asarray(g(a))
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) &
                                                                np.isnan(want))
        assert np.all(same), (a, got, want)
