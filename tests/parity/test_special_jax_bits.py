"""erfc, lgamma, digamma (and eager erf_inv) give JAX's bits, eager and jit.

JAX lowers ``lax.erfc``/``lgamma``/``digamma`` to CHLO ops, which XLA expands: erfc into
Cephes' rational approximations, lgamma/digamma into Lanczos' approximation (a float32
and a float64 form; float16/bfloat16 run the float32 one and round). kiln runs the same
formulas (``xerfc*``, ``xlgamma*``, ``xdigamma*`` in ``kiln/compiler/csrc/xla_math.h``) in
its eager kernels and its compiled C. Checked bit for bit against live JAX over every
exponent of float32/float64 (subnormals, both signs, specials), the formula switches
(erfc: |x| = 1, 2, 8, the underflow point; lgamma/digamma: the poles, half-integers),
every float16 and bfloat16 value, and under grad/vmap and the scipy-level wrappers.
"""
import numpy as np
import pytest
from test_eager_jax_bits import assert_same_bits, sweep, x64

import kiln
import kiln.numpy
import kiln.scipy.special as kspecial
import kiln.scipy.stats as kstats
from kiln import lax as klax

jax = pytest.importorskip("jax")
jspecial = pytest.importorskip("jax.scipy.special")
jstats = pytest.importorskip("jax.scipy.stats")

if kiln.random._native.lib() is None:  # pragma: no cover
    pytest.skip("no native library (C compiler): eager math falls back to SciPy",
                allow_module_level=True)


def _edges(dtype):
    """Around the formula switches |x| = 1, 2, 8 and where exp(-x^2) underflows."""
    base = np.array([1.0, 2.0, 8.0, 9.194, 9.2, 9.4, 26.5, 26.64, 27.3], dtype)
    u = np.uint32 if dtype == np.float32 else np.uint64
    steps = np.arange(-40, 41).astype(u)            # 40 ulps either side (wrapping)
    x = (base.view(u)[:, None] + steps[None, :]).view(dtype).ravel()
    return np.concatenate([x, -x])


def _inputs(dtype, wide):
    rng = np.random.default_rng(4)
    dense = rng.uniform(-12, 12, 20000 if not wide else 8000).astype(dtype)
    return np.concatenate([sweep(dtype, per_exponent=4 if wide else 12), _edges(dtype), dense])


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_erfc_eager_and_jit(wide):
    dtype = np.float64 if wide else np.float32
    with x64(wide):
        x = _inputs(dtype, wide)
        want = np.asarray(jax.jit(jax.lax.erfc)(x))
        assert_same_bits(klax.erfc(x), want, x, "lax.erfc eager")
        assert_same_bits(kspecial.erfc(x), want, x, "scipy.special.erfc eager")
        f = kiln.jit(klax.erfc)
        assert ("xerfc64" if wide else "xerfc32") in f.lower(x).compile().as_text()
        assert_same_bits(f(x), want, x, "erfc jit")
        # 0-d and short arrays (XLA's scalar code) give the same bits.
        for v in x[::997]:
            assert_same_bits(klax.erfc(v), np.asarray(jax.lax.erfc(v)), v, "erfc 0-d")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_erfc_transformations_and_wrappers(wide):
    dtype = np.float64 if wide else np.float32
    x = np.random.default_rng(5).uniform(-10, 10, 3000).astype(dtype)
    with x64(wide):
        cases = [
            (kiln.vmap(kiln.grad(klax.erfc)), jax.vmap(jax.grad(jax.lax.erfc)), "grad"),
            (kspecial.ndtr, jspecial.ndtr, "ndtr"),
            (kstats.norm.cdf, jstats.norm.cdf, "norm.cdf"),
            (kspecial.log_ndtr, jspecial.log_ndtr, "log_ndtr"),
        ]
        for kf, jf, what in cases:
            want = np.asarray(jax.jit(jf)(x))
            assert_same_bits(kf(x), want, x, f"{what} eager")
            assert_same_bits(kiln.jit(kf)(x), want, x, f"{what} jit")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["erfc", "erf", "erf_inv", "exp", "log", "log1p", "cbrt",
                                  "lgamma", "digamma", "bessel_i0e", "bessel_i1e"])
def test_half_floats_every_value(name, dtype):
    """XLA computes these in float32 and rounds once: every value of the type."""
    import ml_dtypes
    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    x = np.arange(1 << 16, dtype=np.uint16).view(dt)
    want = np.asarray(getattr(jax.lax, name)(x))
    got = np.asarray(getattr(klax, name)(x))
    same = (got.view(np.uint16) == want.view(np.uint16)) | (
        np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32)))
    assert same.all(), (name, dtype, x[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_erf_inv_eager(wide):
    """Eager erf_inv runs XLA's formula (the compiled code's xerfinv), not SciPy's."""
    dtype = np.float64 if wide else np.float32
    rng = np.random.default_rng(6)
    with x64(wide):
        x = np.concatenate([sweep(dtype, per_exponent=4), rng.uniform(-1, 1, 5000),
                            1 - rng.lognormal(-12, 3, 500)]).astype(dtype)
        want = np.asarray(jax.jit(jax.lax.erf_inv)(x))
        assert_same_bits(klax.erf_inv(x), want, x, "erf_inv eager")
        assert_same_bits(kspecial.erfinv(x), want, x, "scipy.special.erfinv eager")


def _gamma_inputs(dtype, wide):
    rng = np.random.default_rng(7)
    steps = np.arange(-60, 60, 0.5)          # poles (integers <= 0) and half-integers
    near = np.concatenate([steps + 1e-5, steps - 1e-5, steps * (1 + 1e-6)])
    return np.concatenate([sweep(dtype, per_exponent=4 if wide else 12), steps, near,
                           rng.uniform(-40, 40, 8000 if wide else 20000)]).astype(dtype)


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
@pytest.mark.parametrize("name", ["lgamma", "digamma"])
def test_lgamma_digamma_eager_and_jit(name, wide):
    dtype = np.float64 if wide else np.float32
    kf, jf = getattr(klax, name), getattr(jax.lax, name)
    with x64(wide):
        x = _gamma_inputs(dtype, wide)
        want = np.asarray(jax.jit(jf)(x))
        assert_same_bits(kf(x), want, x, f"{name} eager")
        f = kiln.jit(kf)
        assert f"x{name}{64 if wide else 32}" in f.lower(x).compile().as_text()
        assert_same_bits(f(x), want, x, f"{name} jit")
        for v in x[::1499]:
            assert_same_bits(kf(v), np.asarray(jf(v)), v, f"{name} 0-d")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_gamma_family_wrappers(wide):
    """grad(lgamma) is digamma; gammaln, gamma, beta, betaln are built on lgamma."""
    dtype = np.float64 if wide else np.float32
    x = np.random.default_rng(8).uniform(-10, 10, 3000).astype(dtype)
    xp = np.abs(x) + dtype(0.1)
    with x64(wide):
        cases = [
            (kiln.vmap(kiln.grad(klax.lgamma)), jax.vmap(jax.grad(jax.lax.lgamma)), x, "grad"),
            (kspecial.gammaln, jspecial.gammaln, x, "gammaln"),
            (kspecial.digamma, jspecial.digamma, x, "digamma"),
            (kspecial.gamma, jspecial.gamma, x, "gamma"),
            (lambda v: kspecial.betaln(v, v[::-1]), lambda v: jspecial.betaln(v, v[::-1]), xp,
             "betaln"),
        ]
        for kf, jf, v, what in cases:
            want = np.asarray(jax.jit(jf)(v))
            assert_same_bits(kf(v), want, v, f"{what} eager")
            assert_same_bits(kiln.jit(kf)(v), want, v, f"{what} jit")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_rem_flushes_subnormals_eagerly(wide):
    """Float rem is the C library's fmod under XLA's flushing: subnormal operands read as
    zero and subnormal results become zero (NumPy's fmod keeps them)."""
    dtype = np.float64 if wide else np.float32
    with x64(wide):
        x = sweep(dtype, per_exponent=3)
        y = np.random.default_rng(2).permutation(x)
        for a, b in ((x, y), (x, dtype(1e-30)), (dtype(3.5), y)):
            want = np.asarray(jax.jit(jax.lax.rem)(a, b))
            assert_same_bits(klax.rem(a, b), want, None, "rem eager")
        a, b = x[:40].reshape(40, 1), y[:7].reshape(1, 7)
        assert_same_bits(kiln.numpy.fmod(a, b), np.asarray(jax.numpy.fmod(a, b)), None,
                         "fmod broadcast")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rem_half_floats(dtype):
    import ml_dtypes
    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    x = rng.integers(0, 1 << 16, 50000).astype(np.uint16).view(dt)
    y = rng.permutation(x)
    want, got = np.asarray(jax.lax.rem(x, y)), np.asarray(klax.rem(x, y))
    same = (got.view(np.uint16) == want.view(np.uint16)) | (
        np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32)))
    assert same.all(), (x[~same][:5], y[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_zeta_polygamma_arrays(wide):
    """zeta(x, q) and polygamma(n, x) with array operands: XLA's expansions, eager and jit
    (poles, domain edges, integer and non-integer orders)."""
    dtype = np.float64 if wide else np.float32
    rng = np.random.default_rng(9)
    with x64(wide):
        s = rng.uniform(0.5, 12, 6000).astype(dtype)
        q = rng.uniform(-5, 20, 6000).astype(dtype)
        s[:1500], q[1500:2500] = np.round(s[:1500]), np.round(q[1500:2500])
        n = np.floor(rng.uniform(-1, 7, 6000)).astype(dtype)
        n[:300] = 0.5
        for kf, jf, a, b, what in ((klax.zeta, jax.lax.zeta, s, q, "zeta"),
                                   (klax.polygamma, jax.lax.polygamma, n, q, "polygamma")):
            want = np.asarray(jax.jit(jf)(a, b))
            assert_same_bits(kf(a, b), want, b, f"{what} eager")
            f = kiln.jit(kf)
            assert f"x{what}{64 if wide else 32}" in f.lower(a, b).compile().as_text()
            assert_same_bits(f(a, b), want, b, f"{what} jit")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_polygamma_one_order(wide):
    """polygamma(n, x) with a scalar order, as JAX's eager calls pass it (and so
    jax.scipy.special.polygamma(int, x), the eager derivative of digamma, and a jitted
    function taking n as an argument): XLA's rewrites around the broadcast order.
    (A literal order under jit is constant-folded by XLA: not reproduced, see
    docs/compatibility.md.)"""
    dtype = np.float64 if wide else np.float32
    x = np.random.default_rng(10).uniform(-10, 20, 6000).astype(dtype)
    with x64(wide):
        for n in (0, 1, 3, 5):
            want = np.asarray(jspecial.polygamma(n, x))
            assert_same_bits(kspecial.polygamma(n, x), want, x, f"polygamma({n}) eager")
            g = jax.jit(lambda m, v: jax.lax.polygamma(m, v))
            f = kiln.jit(lambda m, v: klax.polygamma(m, v))
            assert_same_bits(f(dtype(n), x), np.asarray(g(dtype(n), x)), x,
                             f"polygamma({n}) jit, scalar order")
        want = np.asarray(jax.vmap(jax.grad(jax.lax.digamma))(x))
        assert_same_bits(kiln.vmap(kiln.grad(klax.digamma))(x), want, x, "grad digamma")
        for v in x[:40]:        # 0-d order and argument: the array formula
            assert_same_bits(klax.polygamma(dtype(3), v),
                             np.asarray(jax.lax.polygamma(dtype(3), v)), v, "0-d")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_igamma_igammac(wide):
    """JAX's igamma/igammac (series and continued fraction with XLA's contractions),
    eager and jit, with the scipy/stats wrappers and the derivative in x (jit: XLA
    contracts it, eager: JAX's eager ops do not)."""
    dtype = np.float64 if wide else np.float32
    rng = np.random.default_rng(11)
    a = np.exp(rng.uniform(np.log(1e-4), np.log(300), 4000)).astype(dtype)
    x = np.exp(rng.uniform(np.log(1e-5), np.log(500), 4000)).astype(dtype)
    sp = np.array([0, -0.0, 1, -1, np.inf, -np.inf, np.nan, 1e-30, 0.5, 2, 40], dtype)
    ga, gx = np.meshgrid(sp, sp)
    a = np.concatenate([a, ga.ravel(), x[:300]])
    x = np.concatenate([x, gx.ravel(), x[:300] * (1 + np.finfo(dtype).eps)])
    with x64(wide):
        for kf, jf, what in ((klax.igamma, jax.lax.igamma, "igamma"),
                             (klax.igammac, jax.lax.igammac, "igammac"),
                             (lambda p, v: kstats.gamma.cdf(v, p),
                              lambda p, v: jstats.gamma.cdf(v, p), "gamma.cdf")):
            want = np.asarray(jax.jit(jf)(a, x))
            assert_same_bits(kf(a, x), want, x, f"{what} eager")
            assert_same_bits(kiln.jit(kf)(a, x), want, x, f"{what} jit")
        f = kiln.jit(klax.igammac)
        assert f"xigammac{64 if wide else 32}" in f.lower(a, x).compile().as_text()
        n = 1000
        kg, jg = kiln.vmap(kiln.grad(klax.igamma, 1)), jax.vmap(jax.grad(jax.lax.igamma, 1))
        assert_same_bits(kg(a[:n], x[:n]), np.asarray(jg(a[:n], x[:n])), x[:n], "grad_x eager")
        assert_same_bits(kiln.jit(kg)(a[:n], x[:n]), np.asarray(jax.jit(jg)(a[:n], x[:n])),
                         x[:n], "grad_x jit")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_igamma_derivatives_in_a(wide):
    """igamma_grad_a (the derivative of igamma/igammac in a) and random_gamma_grad: JAX's
    DERIVATIVE/SAMPLE_DERIVATIVE loops, eager and jit."""
    dtype = np.float64 if wide else np.float32
    rng = np.random.default_rng(12)
    a = np.exp(rng.uniform(np.log(1e-4), np.log(300), 3000)).astype(dtype)
    x = np.exp(rng.uniform(np.log(1e-5), np.log(500), 3000)).astype(dtype)
    sp = np.array([0, 1, -1, np.inf, np.nan, 1e-30, 0.5, 2, 40], dtype)
    ga, gx = np.meshgrid(sp, sp)
    a, x = np.concatenate([a, ga.ravel()]), np.concatenate([x, gx.ravel()])
    with x64(wide):
        for kf, jf, what in (
                (klax.igamma_grad_a, jax.lax.igamma_grad_a, "igamma_grad_a"),
                (klax.random_gamma_grad, jax.lax.random_gamma_grad, "random_gamma_grad"),
                (kiln.vmap(kiln.grad(klax.igammac, 0)), jax.vmap(jax.grad(jax.lax.igammac, 0)),
                 "grad_a igammac")):
            want = np.asarray(jax.jit(jf)(a, x))
            assert_same_bits(kf(a, x), want, x, f"{what} eager")
            assert_same_bits(kiln.jit(kf)(a, x), want, x, f"{what} jit")


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_bessel_i0e_i1e(wide):
    """bessel_i0e (JAX's Chebyshev code) and bessel_i1e (XLA's expansion), eager and jit,
    and scipy's i0/i1 built on them; above |x| = 8 XLA divides by sqrt as a multiplication
    by its rsqrt (the processor's estimate refined, as lax.rsqrt)."""
    dtype = np.float64 if wide else np.float32
    x = np.concatenate([np.random.default_rng(13).uniform(-30, 30, 5000),
                        [0, -0.0, np.inf, -np.inf, np.nan, 8, -8, 1e-40, 700, 1e30]])
    x = x.astype(dtype)
    with x64(wide):
        for kf, jf, what in ((klax.bessel_i0e, jax.lax.bessel_i0e, "i0e"),
                             (klax.bessel_i1e, jax.lax.bessel_i1e, "i1e"),
                             (kspecial.i0, jspecial.i0, "i0"), (kspecial.i1, jspecial.i1, "i1")):
            want = np.asarray(jax.jit(jf)(x))
            assert_same_bits(kf(x), want, x, f"{what} eager")
            assert_same_bits(kiln.jit(kf)(x), want, x, f"{what} jit")
        f = kiln.jit(klax.bessel_i1e)
        assert f"xi1e{64 if wide else 32}" in f.lower(x).compile().as_text()


@pytest.mark.parametrize("wide", [False, True], ids=["f32", "f64"])
def test_betainc_arrays(wide):
    """regularized_incomplete_beta: JAX's Lentz loop runs every element until all have
    converged, so an element's bits depend on the array; kiln's kernel runs them in
    lockstep the same way. float32 arrays of 40 elements and more, and arrays whose loop
    runs to its limit, give JAX's bits (docs/compatibility.md: the rest)."""
    dtype = np.float64 if wide else np.float32
    rng = np.random.default_rng(14)
    a, b = (rng.uniform(0.01, 30, 3000).astype(dtype) for _ in range(2))
    x = rng.uniform(0, 1, 3000).astype(dtype)
    sp = np.array([0, 1, -1, np.inf, np.nan, 0.5, 2], dtype)
    ga, gb, gx = np.meshgrid(sp, sp, np.array([0, 1, 0.3, -0.1, 1.5, np.nan], dtype))
    a, b, x = (np.concatenate([v, g.ravel()]) for v, g in ((a, ga), (b, gb), (x, gx)))
    with x64(wide):
        want = np.asarray(jax.jit(jax.lax.betainc)(a, b, x))
        assert_same_bits(klax.betainc(a, b, x), want, x, "betainc eager")
        assert_same_bits(kiln.jit(kspecial.betainc)(a, b, x), want, x, "betainc jit")
        if not wide:
            for n in (40, 100, 257):
                want = np.asarray(jax.jit(jax.lax.betainc)(a[:n], b[:n], x[:n]))
                assert_same_bits(klax.betainc(a[:n], b[:n], x[:n]), want, x[:n], f"n={n}")
