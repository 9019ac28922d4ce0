"""Divisions as XLA computes them (kiln/compiler/passes/xla_divide.py): the pass's rewrites
of the jaxpr, and the bits of compiled and eager divisions against JAX."""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax as klax
from kiln.compiler.passes.passes import optimize

_RNG = np.random.default_rng(7)
A = _RNG.uniform(-3, 3, 4096).astype(np.float32)
B = _RNG.uniform(0.5, 3, 4096).astype(np.float32)
C = _RNG.uniform(0.5, 3, 4096).astype(np.float32)
D = _RNG.uniform(0.5, 3, 4096).astype(np.float32)
M = _RNG.uniform(-3, 3, (64, 96)).astype(np.float32)
S = _RNG.uniform(1, 3, (64, 1)).astype(np.float32)


def _prims(f, *args):
    closed = kiln.make_jaxpr(f)(*args)
    return [e.primitive.name for e in optimize(closed).jaxpr.eqns]


@pytest.mark.parametrize("f,args,want", [
    (lambda a, b: a / knp.exp(b), (A, B), ["neg", "exp", "mul"]),
    (lambda a, b: knp.exp(a) / knp.exp(b), (A, B), ["sub", "exp"]),
    (lambda a, b, c: a / klax.pow(b, c), (A, B, C), ["neg", "pow", "mul"]),
    (lambda a, b: a / knp.sqrt(b), (A, B), ["rsqrt", "mul"]),
    (lambda a, b: a / klax.rsqrt(b), (A, B), ["sqrt", "mul"]),
    (lambda a: a / 3.0, (A,), ["mul"]),
    (lambda a, b: a / b, (A, np.float32(3)), ["div", "mul"]),
    (lambda m, s: m / s, (M, S), ["div", "broadcast_in_dim", "mul"]),
    (lambda a, b, c: (a / b) / c, (A, B, C), ["mul", "div"]),
    (lambda a, b, c: a / (b / c), (A, B, C), ["mul", "div"]),
    (lambda a, b, c, d: (a / b) / (c / d), (A, B, C, D), ["mul", "mul", "div"]),
    (lambda a, b: a / b, (A, B), ["div"]),                 # a true division stays
    (lambda b: 3.0 / b, (B,), ["div"]),                    # constant dividend: stays
    # A root with another use keeps its division (XLA: Sqrt(B).WithOneUse()); a second
    # sqrt call of the same value is another operation in JAX's program, and a log of
    # the root becomes 0.5*log(B) first.
    (lambda a, b: a / knp.sqrt(b) + knp.sqrt(b), (A, B), ["rsqrt", "fma", "sqrt"]),
    (lambda a, b: (lambda z: a / z + z)(knp.sqrt(b)), (A, B), ["sqrt", "div", "add"]),
    (lambda a, b: (lambda z: (a / z, z))(knp.sqrt(b)), (A, B), ["sqrt", "div"]),
    (lambda a, b: (lambda z: a / z + b / z)(knp.sqrt(b)), (A, B),
     ["sqrt", "div", "div", "add"]),
    (lambda a, b: (lambda z: a / z + z)(klax.rsqrt(b)), (A, B), ["rsqrt", "div", "add"]),
    (lambda b: (lambda z: knp.log(z) / z)(knp.sqrt(b)), (B,), ["log", "mul", "rsqrt", "mul"]),
])
def test_pass_rewrites_like_xla(f, args, want):
    assert sorted(_prims(f, *args)) == sorted(want)


def test_pass_leaves_integer_bfloat16_and_runtime_complex_divisions():
    i = np.arange(1, 9, dtype=np.int32)
    assert _prims(lambda x: x // 3, i).count("div") >= 1
    z = (A[:8] + 1j * B[:8]).astype(np.complex64)
    # complex: only a constant divisor becomes a product (tests/compiler/
    # test_xla_complex_constants.py), a runtime one stays a division
    assert _prims(lambda x: x / 3.0, z) == ["mul"]
    assert _prims(lambda x: x / x[0], z)[-1] == "div"
    bf = A[:8].astype(knp.bfloat16)
    assert _prims(lambda x: x / knp.asarray(3.0, knp.bfloat16), bf) == ["div"]


def test_eager_divides_by_the_reciprocal_of_a_broadcast_divisor():
    f32 = np.float32
    want = A * (f32(1) / f32(3))
    np.testing.assert_array_equal(np.asarray(knp.asarray(A) / 3.0), want)
    np.testing.assert_array_equal(np.asarray(knp.divide(A, f32(3))), want)
    np.testing.assert_array_equal(np.asarray(klax.div(knp.asarray(A), f32(3))), want)
    np.testing.assert_array_equal(np.asarray(knp.asarray(M) / S), M * (f32(1) / S))
    # Same shapes: a true division; a scalar divided by a scalar too.
    np.testing.assert_array_equal(np.asarray(knp.asarray(A) / B), A / B)
    assert float(knp.float32(2.5) / 3.0) == float(f32(2.5) / f32(3))


def test_compiled_equals_eager_for_broadcast_divisors():
    for f, args in [(lambda a: a / 3.0, (A,)), (lambda m, s: m / s, (M, S)),
                    (lambda m: m / m.max(1, keepdims=True), (M,))]:
        eager = np.asarray(f(*[knp.asarray(x) for x in args]))
        np.testing.assert_array_equal(np.asarray(kiln.jit(f)(*args)), eager)


def test_grad_and_vmap_through_rewritten_divisions():
    g = kiln.grad(lambda a, b: (a / knp.sqrt(b)).sum(), argnums=(0, 1))
    ga, gb = kiln.jit(g)(A[:16], B[:16])
    np.testing.assert_allclose(ga, 1 / np.sqrt(B[:16]), rtol=1e-6)
    np.testing.assert_allclose(gb, -0.5 * A[:16] * B[:16] ** -1.5, rtol=1e-5)
    v = kiln.jit(kiln.vmap(lambda m: m / knp.abs(m).sum()))(M)
    np.testing.assert_allclose(v, M / np.abs(M).sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def _cases(np_, lax):
    return [
        ("a/exp(b)", lambda a, b: a / np_.exp(b), (A, B)),
        ("a/pow(b,c)", lambda a, b, c: a / lax.pow(b, c), (A, B, C)),
        ("a/sqrt(b)", lambda a, b: a / np_.sqrt(b), (A, B)),
        ("a/rsqrt(b)", lambda a, b: a / lax.rsqrt(b), (A, B)),
        ("(a/b)/c", lambda a, b, c: (a / b) / c, (A, B, C)),
        ("a/(b/c)", lambda a, b, c: a / (b / c), (A, B, C)),
        ("(a/b)/(c/d)", lambda a, b, c, d: (a / b) / (c / d), (A, B, C, D)),
        ("exp(a)/exp(b)", lambda a, b: np_.exp(a) / np_.exp(b), (A, B)),
        ("a/3", lambda a: a / 3.0, (A,)),
        ("row", lambda m, s: m / s, (M, S)),
        ("col", lambda m, s: m / s.T[:, :1].T, (M, M[:1])),
        ("layer norm", lambda m, s: (m - s) / np_.sqrt(s + 1e-5), (M, S)),
        ("a/(b/3)", lambda a, b: a / (b / 3.0), (A, B)),
        ("f16 a/sqrt(b)", lambda a, b: a / np_.sqrt(b),
         (A.astype(np.float16), B.astype(np.float16))),
        ("f16 a/3", lambda a: a / np.float16(3.3), (A.astype(np.float16),)),
    ]


@pytest.mark.parametrize("i", range(len(_cases(knp, klax))),
                         ids=[c[0] for c in _cases(knp, klax)])
def test_compiled_bits_match_jax(i):
    _, f, args = _cases(jnp, jax.lax)[i]
    _, kf, _ = _cases(knp, klax)[i]
    want = np.asarray(jax.jit(f)(*args))
    got = np.asarray(kiln.jit(kf)(*args))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_eager_broadcast_division_bits_match_jax(wide):
    dt = np.float64 if wide else np.float32
    old_k, old_j = kiln.config.jax_enable_x64, jax.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", wide)
    jax.config.update("jax_enable_x64", wide)
    try:
        m, s = M.astype(dt), S.astype(dt)
        for x, y in [(m, s), (m, dt(3.3)), (m[0], dt(7)), (s, m[:1])]:
            want = np.asarray(jnp.asarray(x) / y)
            np.testing.assert_array_equal(np.asarray(knp.asarray(x) / y), want)
    finally:
        kiln.config.update("jax_enable_x64", old_k)
        jax.config.update("jax_enable_x64", old_j)
