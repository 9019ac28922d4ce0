"""XLA's value-changing simplifications other than divisions
(kiln/compiler/passes/xla_simplify.py): constant reassociation of products and sums,
``A - K => A + (-K)``, ``exp(A) * exp(B)``, logarithms and powers. The pass's rewrites of
the jaxpr, then the bits of compiled programs against JAX's jit (divisions:
``test_xla_divide.py``)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax as klax
from kiln.compiler.passes.common import literal_value
from kiln.compiler.passes.passes import optimize
from kiln.compiler.passes.xla_simplify import xla_divisions, xla_simplify
from kiln.core.jaxpr import Literal

_RNG = np.random.default_rng(11)
X = _RNG.uniform(-3, 3, 2048).astype(np.float32)
Y = _RNG.uniform(-3, 3, 2048).astype(np.float32)
P = _RNG.uniform(0.1, 3, 2048).astype(np.float32)
CARR = _RNG.uniform(1, 2, 2048).astype(np.float32)          # a constant of many values
CROW = np.full((1, 2048), 0.3, np.float32)                  # a constant of one value
XBIG = np.concatenate([X[:64], [1e30, -1e30, 1e-30, 3e38, np.inf, -np.inf, np.nan, 0.0,
                                -0.0, 1e20]]).astype(np.float32)
with np.errstate(over="ignore"):
    XBIG16 = XBIG.astype(np.float16)


def _eqns(f, *args):
    return optimize(kiln.make_jaxpr(f)(*args), contract=False).jaxpr.eqns


def _prims(f, *args):
    return sorted(e.primitive.name for e in _eqns(f, *args))


def _lits(f, *args):
    """The literal operands of the optimised program, as float64 values."""
    return sorted(float(literal_value(v)) for e in _eqns(f, *args) for v in e.invars
                  if isinstance(v, Literal))


def test_divisions_alias_is_the_pass():
    assert xla_divisions is xla_simplify


@pytest.mark.parametrize("f,want", [
    (lambda x: (x * 3.0) * 5.0, ["mul"]),
    (lambda x: 3.0 * (x * 5.0), ["mul"]),
    (lambda x: ((x * 0.1) * 0.2) * 0.3, ["mul"]),
    (lambda x: (x / 3.0) * 5.0, ["mul"]),
    (lambda x: (x + 3.0) + 5.0, ["add"]),
    (lambda x: (x - 3.0) - 5.0, ["add"]),
    (lambda x: (0.1 - x) + 0.2, ["sub"]),
    (lambda x: knp.log(knp.exp(x)), []),
    (lambda x: knp.log(knp.sqrt(x)), ["log", "mul"]),
    (lambda x: knp.log(klax.rsqrt(x)), ["log", "mul"]),
    (lambda x: klax.pow(x, np.float32(3)), ["mul", "mul"]),
    (lambda x: klax.pow(x, np.float32(2)), ["mul"]),
    (lambda x: klax.pow(x, np.float32(-1)), ["div"]),
    (lambda x: klax.pow(x, np.float32(4)), ["pow"]),             # not rewritten
    (lambda x: (x * 5.0) * x, ["mul", "mul"]),                  # not a constant
    (lambda x: (x * x) * 5.0, ["mul", "mul"]),
    (lambda x: x * 2.0 + x * 3.0, ["add", "mul", "mul"]),
    (lambda x: knp.sqrt(x * x), ["abs"]),
    (lambda x: knp.sqrt(x ** 2), ["abs"]),
    (lambda x: knp.sqrt(x * 2.0), ["mul", "sqrt"]),
])
def test_pass_rewrites_like_xla(f, want):
    assert _prims(f, X) == sorted(want)


@pytest.mark.parametrize("f,want", [
    (lambda x, y: knp.exp(x) * knp.exp(y), ["add", "exp"]),
    (lambda x, y: knp.log(klax.pow(x, y)), ["abs", "log", "mul"]),
    (lambda x, y: klax.pow(knp.exp(x), y), ["exp", "mul"]),
    (lambda x, y: (x + 0.1) + y, ["add", "add"]),
    (lambda x, y: (x * 0.1) * (y * 0.2), ["mul", "mul", "mul"]),
])
def test_pass_rewrites_binary_like_xla(f, want):
    assert _prims(f, X, Y) == sorted(want)


def test_folded_constants_are_rounded_in_the_dtype():
    f32, f16 = np.float32, np.float16
    assert _lits(lambda x: (x * 0.1) * 0.3, X) == [float(f32(0.1) * f32(0.3))]
    assert _lits(lambda x: (x + 0.1) + 0.2, X) == [float(f32(0.1) + f32(0.2))]
    assert _lits(lambda x: (x - 3.0) - 5.0, X) == [-8.0]
    assert _lits(lambda x: (x / 3.0) * 5.0, X) == [float((f32(1) / f32(3)) * f32(5))]
    h = X.astype(f16)
    assert _lits(lambda x: (x * f16(0.1)) * f16(0.3), h) == [float(f16(0.1) * f16(0.3))]


def test_broadcast_operands_and_array_constants():
    s = np.float32(2)
    assert _prims(lambda x, s: (x * 0.3) * s, X, s) == ["mul", "mul"]
    got = _lits(lambda x, s: (x * 0.3) * s, X, s)
    assert got == [float(np.float32(0.3))]
    e = _eqns(lambda x, s: (x * 0.3) * s, X, s)
    assert e[0].invars[1] is e[1].invars[0] or e[1].invars[1] is e[0].outvars[0]
    assert _prims(lambda x, s: (x * s) * 0.3, X, s) == ["mul", "mul"]
    carr, c1 = knp.asarray(CARR), knp.asarray(Y)
    closed = optimize(kiln.make_jaxpr(lambda x: (x * carr) * c1)(X))
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["mul"]
    np.testing.assert_array_equal(np.asarray(closed.consts[-1]), CARR * Y)


def test_only_splat_constants_are_reassociated():
    carr, crow = knp.asarray(CARR), knp.asarray(CROW)
    assert _prims(lambda x: (x * carr) * 5.0, X) == ["mul", "mul"]
    assert _prims(lambda x: (x.reshape(1, -1) * 0.1) * crow, X) == ["mul", "reshape"]


def test_integer_complex_and_bfloat16_are_left_alone():
    i = np.arange(8, dtype=np.int32)
    assert _prims(lambda x: (x * 3) * 5, i) == ["mul", "mul"]
    z = (X[:8] + 1j * Y[:8]).astype(np.complex64)
    assert _prims(lambda x: (x * 3.0) * 5.0, z) == ["mul", "mul"]
    bf = X[:8].astype(knp.bfloat16)
    two = knp.asarray(3.0, knp.bfloat16)
    assert _prims(lambda x: (x * two) * two, bf) == ["mul", "mul"]


def test_grad_and_vmap_through_reassociation():
    g = kiln.jit(kiln.grad(lambda x: ((x * 3.0) * 5.0 + 1.0).sum()))(X[:16])
    np.testing.assert_array_equal(g, np.full(16, 15, np.float32))
    v = kiln.jit(kiln.vmap(lambda x: (x - 3.0) - 5.0))(X[:16].reshape(4, 4))
    np.testing.assert_array_equal(v, X[:16].reshape(4, 4) + np.float32(-8))


def test_log_exp_alias_as_an_output_and_an_operand():
    f = kiln.jit(lambda x: (knp.log(knp.exp(x)), knp.log(knp.exp(x)) * 2.0))
    a, b = f(X[:8] * 0.1)
    np.testing.assert_array_equal(a, X[:8] * np.float32(0.1))
    np.testing.assert_array_equal(b, (X[:8] * np.float32(0.1)) * np.float32(2))


jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def _cases(np_, lax, carr):
    f16 = np.float16
    H, HP = X.astype(f16), P.astype(f16)
    c1 = None if carr is None else np_.asarray(Y)
    s, col = np.float32(5.1), P[:64].reshape(64, 1)
    return [
        ("sqrt(x*x)", lambda x: np_.sqrt(x * x), (XBIG,)),
        ("sqrt(x**2)", lambda x: np_.sqrt(x ** 2), (XBIG,)),
        ("sqrt(square(x))", lambda x: np_.sqrt(np_.square(x)), (XBIG,)),
        ("f16 sqrt(x*x)", lambda x: np_.sqrt(x * x), (XBIG16,)),
        ("pow(exp(s),x)", lambda x, s: lax.pow(np_.exp(s), x), (X, s)),
        ("x/exp(s)", lambda x, s: x / np_.exp(s), (X, s)),
        ("(x*c1)*c2", lambda x: (x * carr) * c1, (X,)),
        ("(x+c1)+c2", lambda x: (x + carr) + c1, (X,)),
        ("(x-c1)-c2", lambda x: (x - carr) - c1, (X,)),
        ("(c1+x)-c2", lambda x: (carr + x) - c1, (X,)),
        ("(x+c1)+5", lambda x: (x + carr) + 5.0, (X,)),
        ("(x*.3)*s", lambda x, s: (x * 0.3) * s, (X, s)),
        ("s*(.3*x)", lambda x, s: s * (0.3 * x), (X, s)),
        ("(x*s)*.3", lambda x, s: (x * s) * 0.3, (X, s)),
        ("((x*.3)*s)*t", lambda x, s: ((x * 0.3) * s) * s, (X, s)),
        ("(x*.3)*col", lambda x, c: (x.reshape(64, -1) * 0.3) * c, (X, col)),
        ("(x*.3)*row", lambda x, c: (x.reshape(-1, 64) * 0.3) * c.T, (X, col)),
        ("(x*.3)*bcast", lambda x, s: (x * 0.3) * np_.broadcast_to(s, x.shape), (X, s)),
        ("(x*carr)*s", lambda x, s: (x * carr) * s, (X, s)),
        ("(x*3)*5", lambda x: (x * 3.0) * 5.0, (X,)),
        ("(3*x)*5", lambda x: (3.0 * x) * 5.0, (X,)),
        ("3*(x*5)", lambda x: 3.0 * (x * 5.0), (X,)),
        ("(x*.1)*.3", lambda x: (x * 0.1) * 0.3, (X,)),
        ("((x*.1)*.2)*.3", lambda x: ((x * 0.1) * 0.2) * 0.3, (X,)),
        ("(x/3)*5", lambda x: (x / 3.0) * 5.0, (X,)),
        ("(x*carr)*5", lambda x: (x * carr) * 5.0, (X,)),
        ("(x*.1)*row", lambda x: (x.reshape(1, -1) * 0.1) * np_.asarray(CROW), (X,)),
        ("(x+.1)+.2", lambda x: (x + 0.1) + 0.2, (X,)),
        ("(.1+x)+.2", lambda x: (0.1 + x) + 0.2, (X,)),
        (".1+(x+.2)", lambda x: 0.1 + (x + 0.2), (X,)),
        ("(x-3)-5", lambda x: (x - 3.0) - 5.0, (X,)),
        ("(x-.1)-.2", lambda x: (x - 0.1) - 0.2, (X,)),
        ("(x+.1)-.2", lambda x: (x + 0.1) - 0.2, (X,)),
        ("(.1-x)+.2", lambda x: (0.1 - x) + 0.2, (X,)),
        ("(x+.1)+y", lambda x, y: (x + 0.1) + y, (X, Y)),
        ("(x*.1)*y", lambda x, y: (x * 0.1) * y, (X, Y)),
        ("(x*5)*x", lambda x: (x * 5.0) * x, (X,)),
        ("x*2+x*3", lambda x: x * 2.0 + x * 3.0, (X,)),
        ("exp(x)*exp(y)", lambda x, y: np_.exp(x) * np_.exp(y), (X, Y)),
        ("log(exp(x))", lambda x: np_.log(np_.exp(x * 20.0)), (X,)),
        ("log(pow(p,y))", lambda p, y: np_.log(lax.pow(p, y)), (P, Y)),
        ("log(pow(x,y))", lambda x, y: np_.log(lax.pow(x, y)), (X, Y)),
        ("log(sqrt(p))", lambda p: np_.log(np_.sqrt(p)), (P,)),
        ("log(rsqrt(p))", lambda p: np_.log(lax.rsqrt(p)), (P,)),
        ("pow(exp(x),y)", lambda x, y: lax.pow(np_.exp(x), y), (X, Y)),
        ("pow(x,2)", lambda x: lax.pow(x, np.float32(2)), (X,)),
        ("pow(x,3)", lambda x: lax.pow(x, np.float32(3)), (X,)),
        ("pow(x,-1)", lambda x: lax.pow(x, np.float32(-1)), (X,)),
        ("pow(x,4)", lambda x: lax.pow(x, np.float32(4)), (X,)),
        ("pow(x,-2)", lambda x: lax.pow(x, np.float32(-2)), (X,)),
        ("x**5", lambda x: x ** 5, (X,)),
        ("x**-3", lambda x: x ** -3, (X,)),
        ("f16 (x*.1)*.3", lambda x: (x * f16(0.1)) * f16(0.3), (H,)),
        ("f16 (x+.1)+.3", lambda x: (x + f16(0.1)) + f16(0.3), (H,)),
        ("f16 pow(x,3)", lambda x: lax.pow(x, f16(3)), (H,)),
        ("f16 log(sqrt(p))", lambda p: np_.log(np_.sqrt(p)), (HP,)),
    ]


_IDS = [c[0] for c in _cases(knp, klax, None)]


@pytest.mark.parametrize("i", range(len(_IDS)), ids=_IDS)
def test_compiled_bits_match_jax(i):
    _, f, args = _cases(jnp, jax.lax, jnp.asarray(CARR))[i]
    _, kf, _ = _cases(knp, klax, knp.asarray(CARR))[i]
    want = np.asarray(jax.jit(f)(*args))
    got = np.asarray(kiln.jit(kf)(*args))
    np.testing.assert_array_equal(got, want)


@pytest.fixture
def x64():
    old_k, old_j = kiln.config.jax_enable_x64, jax.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_x64", True)
    yield
    kiln.config.update("jax_enable_x64", old_k)
    jax.config.update("jax_enable_x64", old_j)


_F64 = ["(x*.1)*.3", "(x+.1)+.2", "(x-.1)-.2", "(.1-x)+.2", "(x/3)*5", "exp(x)*exp(y)",
        "log(pow(x,y))", "log(sqrt(p))", "log(rsqrt(p))", "pow(x,3)", "pow(exp(x),y)"]


@pytest.mark.parametrize("name", _F64)
def test_compiled_float64_bits_match_jax(name, x64):
    i = _IDS.index(name)
    _, f, args = _cases(jnp, jax.lax, None)[i]
    _, kf, _ = _cases(knp, klax, None)[i]
    args = tuple(a.astype(np.float64) for a in args)
    if "pow(x," in name and "y" not in name:
        e = float(name.split(",")[1].rstrip(")"))
        f = (lambda e: lambda x: jax.lax.pow(x, np.float64(e)))(e)
        kf = (lambda e: lambda x: klax.pow(x, np.float64(e)))(e)
    want = np.asarray(jax.jit(f)(*args))
    got = np.asarray(kiln.jit(kf)(*args))
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_array_equal(got, want)
