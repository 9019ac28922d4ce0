"""Complex elementary functions give JAX's bits (XLA's CPU formulas in native code,
``kiln/compiler/csrc/xla_complex.h``, run by ``kiln/lax/_xla_eager.py``):
division and ``reciprocal`` (and ``integer_pow``), multiplication, ``abs``, ``sign``,
``exp``, ``log``, ``sqrt``, ``tanh``, ``sin``, ``cos``, ``sinh``, ``cosh``, ``tan``,
``expm1``, ``log1p``, ``logistic``, ``arcsin``, ``arccos``, ``arctan``, ``arcsinh``, ``arccosh``,
``arctanh``; complex64 and complex128, over a grid of special values (zeros of both signs, ±1, ±inf, NaN, ±1e30, 710, ±89, a
subnormal) and an exponent sweep, eagerly, under ``jit`` and under ``vmap``; their
gradients still agree with JAX's. JAX's answers are stored (``tests/_oracle.py``), so
this runs without JAX."""
from __future__ import annotations

import contextlib
import itertools
import operator

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.lax as lax
import kiln.numpy as jnp
from kiln.lax import _xla_eager

# The bits need the native kernels (a C compiler); without them kiln keeps NumPy's values.
_native = pytest.mark.skipif(
    _xla_eager._centry("exp", np.dtype(np.complex64)) is None,
    reason="no native library (C compiler): complex ops fall back to NumPy")

_SPECIAL = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 710.0, 89.0, -89.0]
_SUBNORMAL = {np.complex64: 1e-40, np.complex128: 1e-310}


def _inputs(dtype, n=150, seed=3):
    """The special-value grid (each value as real and imaginary part) and a sweep: parts
    of every magnitude the type holds (subnormal to overflowing), of moderate size, and
    the two mixed."""
    vals = _SPECIAL + [_SUBNORMAL[dtype], 0.5, 1e-4, 3.14159265, 20.0]
    grid = [complex(a, b) for a, b in itertools.product(vals, vals)]
    r = np.random.default_rng(seed)
    lim = 100 if dtype == np.complex64 else 720

    def parts(wide):
        mag = np.exp(r.uniform(-lim, lim, n)) if wide else np.exp(r.uniform(-12, 6, n))
        return r.choice([-1.0, 1.0], n) * mag

    out = np.empty(len(grid) + 4 * n, dtype)
    with np.errstate(over="ignore"):
        out.real = np.concatenate([np.real(grid)] + [parts(a) for a in (1, 0, 0, 1)])
        out.imag = np.concatenate([np.imag(grid)] + [parts(b) for b in (1, 0, 1, 0)])
    return out


@contextlib.contextmanager
def _x64(dtype):
    """x64 on for kiln while a complex128 case runs."""
    on = dtype == np.complex128
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", on)
    try:
        yield
    finally:
        kiln.config.update("jax_enable_x64", old)


def _jax(dtype, fn, *args):
    """``fn(jax)(*args)`` computed by JAX (x64 on for complex128), as NumPy arrays."""
    import jax
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", dtype == np.complex128)
    try:
        out = fn(jax)(*args)
        return jax.tree_util.tree_map(np.asarray, out)
    finally:
        jax.config.update("jax_enable_x64", old)


def _assert_bits(got, want, z):
    """Equal bit for bit, signed zeros included; any NaN equals any NaN."""
    got, want = np.atleast_1d(np.asarray(got)), np.atleast_1d(np.asarray(want))
    assert got.dtype == want.dtype and got.shape == want.shape
    part = got.real.dtype if got.dtype.kind == "c" else got.dtype
    g, w = got.view(part), want.view(part)
    ok = ((g == w) & (np.signbit(g) == np.signbit(w))) | (np.isnan(g) & np.isnan(w))
    if got.dtype.kind == "c":
        ok = ok.reshape(-1, 2).all(1)
    bad = np.nonzero(~ok.reshape(-1))[0]
    assert not len(bad), (f"{len(bad)} of {ok.size} differ, e.g. " + "; ".join(
        f"f({z.reshape(-1)[i]!r}) = {got.reshape(-1)[i]!r}, JAX {want.reshape(-1)[i]!r}"
        for i in bad[:4]))


# name -> (kiln function, JAX function by name on the jax module)
_UNARY = {
    "reciprocal": (jnp.reciprocal, lambda jax: jax.numpy.reciprocal),
    "abs": (lax.abs, lambda jax: jax.lax.abs),
    "sign": (lax.sign, lambda jax: jax.lax.sign),
    "exp": (lax.exp, lambda jax: jax.lax.exp),
    "log": (lax.log, lambda jax: jax.lax.log),
    "sqrt": (lax.sqrt, lambda jax: jax.lax.sqrt),
    "tanh": (lax.tanh, lambda jax: jax.lax.tanh),
    "sin": (lax.sin, lambda jax: jax.lax.sin),
    "cos": (lax.cos, lambda jax: jax.lax.cos),
    "sinh": (lax.sinh, lambda jax: jax.lax.sinh),
    "cosh": (lax.cosh, lambda jax: jax.lax.cosh),
    "tan": (lax.tan, lambda jax: jax.lax.tan),
    "expm1": (lax.expm1, lambda jax: jax.lax.expm1),
    "log1p": (lax.log1p, lambda jax: jax.lax.log1p),
    "logistic": (lax.logistic, lambda jax: jax.lax.logistic),
    "arcsin": (lax.asin, lambda jax: jax.lax.asin),
    "arccos": (lax.acos, lambda jax: jax.lax.acos),
    "arctan": (lax.atan, lambda jax: jax.lax.atan),
    "arcsinh": (lax.asinh, lambda jax: jax.lax.asinh),
    "arccosh": (lax.acosh, lambda jax: jax.lax.acosh),
    "arctanh": (lax.atanh, lambda jax: jax.lax.atanh),
    "square_pow": (lambda z: lax.integer_pow(z, 2), lambda jax: lambda z: jax.lax.integer_pow(z, 2)),
    "cube": (lambda z: lax.integer_pow(z, 3), lambda jax: lambda z: jax.lax.integer_pow(z, 3)),
    "pow_m3": (lambda z: lax.integer_pow(z, -3), lambda jax: lambda z: jax.lax.integer_pow(z, -3)),
}
_DTYPES = [np.complex64, np.complex128]


@_native
@pytest.mark.parametrize("dtype", _DTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", list(_UNARY))
def test_unary_bits_match_jax(name, dtype):
    z = _inputs(dtype)
    f, jf = _UNARY[name]
    want = np.asarray(jax_result(f"{name}.{np.dtype(dtype).name}",
                                 lambda: _jax(dtype, jf, z), z))
    with _x64(dtype):
        for got in (f(z), kiln.jit(f)(z), kiln.vmap(f)(z)):
            _assert_bits(got, want, z)
        # a 0-d operand and a 2-d one take the same path
        _assert_bits(f(z[7]), want[7], z[7])
        _assert_bits(f(z[:40].reshape(5, 8)), want[:40].reshape(5, 8), z[:40])


@_native
@pytest.mark.parametrize("dtype", _DTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", ["div", "mul"])
def test_binary_bits_match_jax(name, dtype):
    a = _inputs(dtype)
    b = a[np.random.default_rng(9).permutation(a.size)]
    f = getattr(lax, name)
    jf = lambda jax: getattr(jax.lax, name)  # noqa: E731
    want = np.asarray(jax_result(f"{name}.{np.dtype(dtype).name}",
                                 lambda: _jax(dtype, jf, a, b), (a, b)))
    want_s = np.asarray(jax_result(f"{name}.scalar.{np.dtype(dtype).name}",
                                   lambda: _jax(dtype, jf, a, b[5]), (a, b[5])))
    with _x64(dtype):
        for got in (f(a, b), kiln.jit(f)(a, b), kiln.vmap(f)(a, b), getattr(jnp, {
                "div": "true_divide", "mul": "multiply"}[name])(a, b),
                    # the Array operators (their eager fast path included)
                    {"div": operator.truediv, "mul": operator.mul}[name](
                        jnp.asarray(a), jnp.asarray(b))):
            _assert_bits(got, want, a)
        # a scalar divisor is divided, not inverted and multiplied (XLA keeps complex
        # divisions by a broadcast value); a scalar factor's product contracts the other
        # way (mul)
        _assert_bits(f(a, b[5]), want_s, a)
        _assert_bits(kiln.jit(f)(a, b[5]), want_s, a)


@_native
def test_special_values_without_jax():
    """The cases the probe found, JAX's values written out (checked against JAX 0.10.2)."""
    c = np.complex64
    inf, nan = np.inf, np.nan

    def same(got, want):
        _assert_bits(np.asarray(got), np.asarray(want, np.complex64), np.asarray(got))

    same(lax.exp(c(1e-40j)), c(1 + 0j))                     # the subnormal flushes
    same(lax.sin(c(89j)), c(complex(0, inf)))               # XLA's formula overflows
    same(lax.cos(c(89j)), c(complex(inf, 0)))
    same(lax.sinh(c(complex(0, inf))), c(complex(nan, nan)))
    same(jnp.reciprocal(c(0)), c(complex(inf, nan)))
    same(lax.tan(c(1j)), c(0.7615942j))                     # NumPy: 0.7615941j
    same(lax.sqrt(c(89j)), c(6.670832 + 6.6708317j))
    same(lax.log(c(1e-40j)), c(complex(-inf, 1.5707964)))   # atan2 reads y unflushed
    same(lax.sign(c(1e-40j)), c(1e-40j))                    # |z| == 0: z passes through
    assert np.asarray(lax.abs(c(1e-40j))) == 0


_GRAD_POINTS = [0.3 + 0.4j, -1.2 + 0.7j, 2.0 - 0.5j]
_GRAD_NAMES = ["exp", "log", "sqrt", "tanh", "sin", "cos", "sinh", "cosh", "tan", "expm1",
               "reciprocal", "abs", "arcsin", "arccos", "arctan", "arcsinh", "arccosh",
               "arctanh"]


def test_gradients_match_jax():
    """``grad`` of each function (of its real part; ``abs`` itself) at ordinary points,
    against JAX's (one jitted JAX program for all of them)."""
    z = np.array(_GRAD_POINTS, np.complex64)

    def grads(jx, fns, zs):
        out = []
        for name, f in zip(_GRAD_NAMES, fns):
            g = (jx.grad(f) if name == "abs" else jx.grad(lambda w, f=f: f(w).real))
            out.append(jx.vmap(g)(zs))
        return out

    def jax_grads(jax):
        jfns = [_UNARY[n][1](jax) for n in _GRAD_NAMES]
        return jax.jit(lambda w: grads(jax, jfns, w))

    want = jax_result("grads", lambda: _jax(np.complex64, jax_grads, z), z)
    got = grads(kiln, [_UNARY[n][0] for n in _GRAD_NAMES], z)
    for name, g, w in zip(_GRAD_NAMES, got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, err_msg=name)


def test_division_gradient_matches_jax():
    a = np.array(_GRAD_POINTS, np.complex64)
    b = a[::-1] * 1.5
    want = jax_result("div.grad", lambda: _jax(np.complex64, lambda jax: jax.grad(
        lambda x, y: (x / y).real.sum(), argnums=(0, 1)), a, b), (a, b))
    got = kiln.grad(lambda x, y: (x / y).real.sum(), argnums=(0, 1))(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6)


def test_without_the_native_library_numpy_is_used(monkeypatch):
    """No native library (no C compiler): the complex impls are NumPy's, as before."""
    from kiln.lax import _xla_eager
    monkeypatch.setattr(_xla_eager, "_centry", lambda op, dt: None)
    monkeypatch.setattr(_xla_eager, "_entries", {k: v for k, v in _xla_eager._entries.items()
                                                 if not str(k[0]).startswith("c")})
    z = np.array([0.3 + 0.4j, -1.2 + 0.7j, 2.0 - 0.5j, 1e-3 + 2j], np.complex64)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.asarray(lax.exp(z)), np.exp(z))
        np.testing.assert_array_equal(np.asarray(lax.log(z)), np.log(z))
        np.testing.assert_array_equal(np.asarray(lax.abs(z)), np.abs(z))
        np.testing.assert_array_equal(np.asarray(lax.div(z, z[::-1])), z / z[::-1])
        np.testing.assert_array_equal(np.asarray(lax.mul(z, z[::-1])), z * z[::-1])
