"""FMA contraction against JAX 0.10.2's jit, bit for bit (kiln/compiler/passes/xla_fma.py;
docs/compatibility.md, "FMA contraction"). Each case is a program whose JAX result
differs from the separately rounded one in many elements, so kiln matches only by
contracting exactly where XLA's CPU code does (or by leaving alone what XLA leaves)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

_RNG = np.random.default_rng(2025)
N = 512


def _args(dt):
    return tuple(_RNG.standard_normal((16, N // 16)).astype(dt) for _ in range(4))


def _cases(np_):
    return {
        # contracted
        "a*b+c": lambda a, b, c, d: a * b + c,
        "c+a*b": lambda a, b, c, d: c + a * b,
        "a*b-c": lambda a, b, c, d: a * b - c,
        "c-a*b": lambda a, b, c, d: c - a * b,
        "-(a*b)+c": lambda a, b, c, d: -(a * b) + c,
        "a*b+c*d": lambda a, b, c, d: a * b + c * d,
        "a*b-c*d": lambda a, b, c, d: a * b - c * d,
        "(a*b+c)*d+a": lambda a, b, c, d: (a * b + c) * d + a,
        "m=a*b; (m+c)+m*d": lambda a, b, c, d: (a * b + c) + (a * b) * d,
        "a*0.3+1": lambda a, b, c, d: a * 0.3 + 1.0,
        "(a*0.3)*0.7+b": lambda a, b, c, d: (a * 0.3) * 0.7 + b,
        "a/3+b": lambda a, b, c, d: a / 3.0 + b,
        "a*b[0,0]+c": lambda a, b, c, d: a * b[0, 0] + c,
        "a**2+c": lambda a, b, c, d: a ** 2 + c,
        "square(a)+c": lambda a, b, c, d: np_.square(a) + c,
        "a**3+c": lambda a, b, c, d: a ** 3 + c,
        "a**4+c": lambda a, b, c, d: a ** 4 + c,
        "a**5+c": lambda a, b, c, d: a ** 5 + c,
        "sum(a,1,keep)*b+c": lambda a, b, c, d: a.sum(1, keepdims=True) * b + c,
        "sum(a*b+c,1)": lambda a, b, c, d: (a * b + c).sum(1),
        "a*b+c in a loop": lambda a, b, c, d: kiln_or_jax_fori(np_, a, b, c),
        # two products, the left one computed with an fma: the right one is contracted
        "(a*b+c)*d+a*c": lambda a, b, c, d: (a * b + c) * d + a * c,
        "exp(a*b+c)*d+a*c": lambda a, b, c, d: np_.exp(a * b + c) * d + a * c,
        "s*(1-a*.3)+a*t": lambda a, b, c, d: b[0, 0] * (1 - a * 0.3) + a * c[0, 0],
        "(a*b+c)*d+(c*d+b)*c": lambda a, b, c, d: (a * b + c) * d + (c * d + b) * c,
        "(a*b+c)*d-a*c": lambda a, b, c, d: (a * b + c) * d - a * c,
        # left alone
        "(a*b+c)*(a*b+d)": lambda a, b, c, d: (a * b + c) * (a * b + d),
        "(a*b+c, a*b)": lambda a, b, c, d: (a * b + c, a * b),
        "(v*v)[None]+c": lambda a, b, c, d: (a[0] * b[0])[None, :] + c,
        "(w*w)[:,None]+c": lambda a, b, c, d: (a[:, 0] * b[:, 0])[:, None] + c,
        "(s*t)+c": lambda a, b, c, d: a[0, 0] * b[0, 0] + c,
        "where(a>0,a*b,0)+c": lambda a, b, c, d: np_.where(a > 0, a * b, 0.0) + c,
        "f32 (a*b)->f64 + c": lambda a, b, c, d: (a * b).astype(np.float64) + c,
    }


def kiln_or_jax_fori(np_, a, b, c):
    lax = jax.lax if np_ is jnp else kiln.lax
    return lax.fori_loop(0, 3, lambda i, x: x * b + c, a)


_NAMES = list(_cases(jnp))


def _all(np_, names):
    """One program running every case on its own four arguments (one compile, not one
    per case; distinct arguments, so no product is shared between cases)."""
    cases = _cases(np_)

    def f(*args):
        outs = []
        for i, name in enumerate(names):
            r = cases[name](*args[4 * i: 4 * i + 4])
            outs.extend(r if isinstance(r, tuple) else (r,))
        return tuple(outs)
    return f


@pytest.fixture(scope="module")
def x64():
    old_k, old_j = kiln.config.jax_enable_x64, jax.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_x64", True)
    yield
    kiln.config.update("jax_enable_x64", old_k)
    jax.config.update("jax_enable_x64", old_j)


_F32 = ["a*b+c", "c-a*b", "a*b-c*d", "(a*b+c)*d+a", "a/3+b", "a**3+c", "a*b[0,0]+c",
        "(a*b+c)*(a*b+d)", "(a*b+c, a*b)", "(v*v)[None]+c"]


@pytest.fixture(scope="module")
def jax64(x64):
    """JAX's float64 results of every case (one program), with the arguments."""
    args = [x for _ in _NAMES for x in _args(np.float64)]
    return args, [np.asarray(w) for w in jax.jit(_all(jnp, _NAMES))(*args)]


def test_float64_matches_jax_jit(jax64):
    args, want = jax64
    got = kiln.jit(_all(knp, _NAMES))(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype == np.float64
        np.testing.assert_array_equal(g, w)


def test_float32_matches_jax_jit():
    args = [x for _ in _F32 for x in _args(np.float32)]
    want = jax.jit(_all(jnp, _F32))(*args)
    got = kiln.jit(_all(knp, _F32))(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype == np.float32
        np.testing.assert_array_equal(g, w)


def test_each_case_changes_bits(jax64):
    """Each contracted case differs from the separately rounded result in many elements,
    each case left alone in none: contracting less or more would differ from JAX."""
    args, want = jax64
    i = 0
    for k, name in enumerate(_NAMES):
        sep = _all(np, [name])(*args[4 * k: 4 * k + 4])
        for s in sep:
            if "loop" not in name and "f64" not in name:
                contracted = k < _NAMES.index("(a*b+c)*(a*b+d)")
                assert ((want[i] != s).sum() > 5) == contracted, name
            i += 1


def test_products_are_rounded_before_a_reduction(x64):
    """``sum(a*b)`` adds the rounded products (no FMA into the accumulator), in JAX and
    kiln (whose summation order is its own: its program has no ``fma``)."""
    a, b = (_RNG.standard_normal((64, 48)) for _ in range(2))    # rows over 32 long
    for f, g in ((lambda a, b: (a * b).sum(1), lambda p: p.sum(1)),
                 (lambda a, b: (a * b).mean(1), lambda p: p.mean(1))):
        np.testing.assert_array_equal(np.asarray(jax.jit(f)(a, b)),
                                      np.asarray(jax.jit(g)(a * b)))
        assert "fma" not in str(kiln.jit(f).lower(a, b).compiler_ir())


def test_float32_mixed_with_float64(x64):
    args = _args(np.float32)
    f = _cases(jnp)["f32 (a*b)->f64 + c"]
    kf = _cases(knp)["f32 (a*b)->f64 + c"]
    c64 = args[2].astype(np.float64) * (1 + 2.0 ** -30)
    want = np.asarray(jax.jit(f)(args[0], args[1], c64, args[3]))
    got = np.asarray(kiln.jit(kf)(args[0], args[1], c64, args[3]))
    np.testing.assert_array_equal(got, want)


def test_eager_does_not_contract():
    a, b, c, _ = _args(np.float32)
    want = np.asarray(jnp.add(jnp.multiply(a, b), c))
    got = np.asarray(knp.add(knp.multiply(a, b), c))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, a * b + c)
    assert (np.asarray(jax.jit(lambda a, b, c: a * b + c)(a, b, c)) != want).sum() > 20


# Reductions: one reduced axis of at most 32 elements, operands up to 4000 elements,
# fold ``acc = fma(x, y, acc)`` in order (minor rows of 5-8: the rounded products);
# longer or larger ones add rounded products (summation order aside).
_REDUCE_SHAPES = [((16, 32), 1), ((64, 31), 1), ((64, 9), 1), ((64, 2), 1), ((64, 6), 1),
                  ((32, 64), 0), ((20, 100), 0), ((7, 5, 9), 1), ((7, 5, 9), 2), ((20,), 0),
                  ((2000, 2), 1), ((3, 1000), 0), ((4, 4, 16), 2)]


def _reductions(np_):
    def f(*args):
        outs = [(a * b).sum(ax) for (a, b), (_, ax) in zip(zip(args[::2], args[1::2]),
                                                            _REDUCE_SHAPES)]
        a, b = args[0], args[1]
        outs.append((a * b).mean(1))
        outs.append((a * b).sum(1) * 2.0 + b[:, 0])        # the sum's own fma after it
        return tuple(outs)
    return f


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_short_sums_of_products_match_jax_jit(dt, x64):
    args = [x for shape, _ in _REDUCE_SHAPES for x in
            (_RNG.standard_normal(shape).astype(dt), _RNG.standard_normal(shape).astype(dt))]
    want = jax.jit(_reductions(jnp))(*args)
    got = kiln.jit(_reductions(knp))(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
