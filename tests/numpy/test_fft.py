"""``kiln.numpy.fft`` and ``kiln.lax.fft`` against JAX (values, dtypes, gradients) and
NumPy, under ``jit`` and ``vmap``, plus argument errors."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln import lax
from kiln.config import config_context

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

_rng = np.random.default_rng(7)
X = _rng.standard_normal((4, 6)).astype(np.float32)
X3 = _rng.standard_normal((2, 3, 5)).astype(np.float32)
Z = (_rng.standard_normal((4, 6)) + 1j * _rng.standard_normal((4, 6))).astype(np.complex64)
Z3 = (_rng.standard_normal((2, 3, 5)) + 1j * _rng.standard_normal((2, 3, 5))).astype(
    np.complex64)
I = np.arange(12, dtype=np.int32).reshape(3, 4)

CASES = []


def case(name, f, *args, grad=True):
    CASES.append((name, f, args, grad))


for fn in ("fft", "ifft"):
    case(f"{fn}", lambda m, x, fn=fn: getattr(m.fft, fn)(x), Z)
    case(f"{fn}_real_input", lambda m, x, fn=fn: getattr(m.fft, fn)(x), X)
    case(f"{fn}_n_pad", lambda m, x, fn=fn: getattr(m.fft, fn)(x, n=9), Z)
    case(f"{fn}_n_crop_axis0", lambda m, x, fn=fn: getattr(m.fft, fn)(x, n=3, axis=0), Z)
    for norm in ("backward", "ortho", "forward"):
        case(f"{fn}_norm_{norm}", lambda m, x, fn=fn, norm=norm: getattr(m.fft, fn)(x, norm=norm),
             Z)
case("fft_int_input", lambda m, x: m.fft.fft(x), I, grad=False)
case("rfft", lambda m, x: m.fft.rfft(x), X)
case("rfft_odd_n", lambda m, x: m.fft.rfft(x, n=7), X)
case("rfft_axis0_ortho", lambda m, x: m.fft.rfft(x, axis=0, norm="ortho"), X)
case("irfft", lambda m, x: m.fft.irfft(x), Z)
case("irfft_odd_n", lambda m, x: m.fft.irfft(x, n=9), Z)
case("irfft_axis0_forward", lambda m, x: m.fft.irfft(x, axis=0, norm="forward"), Z)
case("hfft", lambda m, x: m.fft.hfft(x), Z)
case("hfft_n", lambda m, x: m.fft.hfft(x, n=7, norm="ortho"), Z)
case("ihfft", lambda m, x: m.fft.ihfft(x), X)
case("ihfft_n", lambda m, x: m.fft.ihfft(x, n=5, axis=0), X)
case("fft2", lambda m, x: m.fft.fft2(x), Z3)
case("fft2_s", lambda m, x: m.fft.fft2(x, s=(4, 4)), Z3)
case("ifft2_axes", lambda m, x: m.fft.ifft2(x, axes=(0, 2), norm="ortho"), Z3)
case("rfft2", lambda m, x: m.fft.rfft2(x), X3)
case("irfft2", lambda m, x: m.fft.irfft2(x), Z3)
case("irfft2_s", lambda m, x: m.fft.irfft2(x, s=(3, 7)), Z3)
case("fftn", lambda m, x: m.fft.fftn(x), Z3)
case("fftn_axes", lambda m, x: m.fft.fftn(x, axes=(2, 0)), Z3)
case("fftn_s", lambda m, x: m.fft.fftn(x, s=(2, 4)), Z3)
case("ifftn_s_axes", lambda m, x: m.fft.ifftn(x, s=(4, 2), axes=(2, 1), norm="forward"), Z3)
case("rfftn", lambda m, x: m.fft.rfftn(x), X3)
case("rfftn_axes", lambda m, x: m.fft.rfftn(x, axes=(0, 1)), X3)
case("irfftn", lambda m, x: m.fft.irfftn(x), Z3)
case("irfftn_s", lambda m, x: m.fft.irfftn(x, s=(3, 6), norm="ortho"), Z3)
case("fftshift", lambda m, x: m.fft.fftshift(x), X3)
case("fftshift_axis", lambda m, x: m.fft.fftshift(x, axes=1), X3)
case("ifftshift_axes", lambda m, x: m.fft.ifftshift(x, axes=(0, 2)), X3)
case("fftfreq", lambda m: m.fft.fftfreq(7), grad=False)
case("fftfreq_d", lambda m: m.fft.fftfreq(8, d=0.5), grad=False)
case("rfftfreq", lambda m: m.fft.rfftfreq(9, 0.1), grad=False)
case("rfftfreq_even", lambda m: m.fft.rfftfreq(8), grad=False)


def _leaves(x):
    return jax.tree_util.tree_leaves(x)


def _assert_same(k, j, name, tol=2e-5):
    for a, b in zip(_leaves(k), _leaves(j)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} vs JAX {b.dtype}"
        assert a.shape == b.shape, f"{name}: shape {a.shape} vs JAX {b.shape}"
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()),
                                   err_msg=name)


def _scalarize(m, f, name):
    def g(*xs):
        out = f(m, *xs)
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        w1 = rng.standard_normal(np.shape(out)).astype(np.float32)
        w2 = rng.standard_normal(np.shape(out)).astype(np.float32)
        total = m.sum(m.real(out) * w1)
        if m.iscomplexobj(out):
            total = total + m.sum(m.imag(out) * w2)
        return total
    return g


def _ids(cases):
    return [c[0] for c in cases]


@pytest.mark.parametrize("name,f,args,grad", CASES, ids=_ids(CASES))
def test_value_parity(name, f, args, grad):
    _assert_same(f(knp, *args), f(jnp, *args), name)


@pytest.mark.parametrize("name,f,args,grad", CASES, ids=_ids(CASES))
def test_jit(name, f, args, grad):
    eager = f(knp, *args)
    jitted = kiln.jit(lambda *xs: f(knp, *xs))(*args)
    assert jitted.dtype == eager.dtype
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-6)


_GRAD = [c for c in CASES if c[3]]


@pytest.mark.parametrize("name,f,args,grad", _GRAD, ids=_ids(_GRAD))
def test_grad_parity(name, f, args, grad):
    gk = kiln.grad(_scalarize(knp, f, name))(*args)
    gj = jax.jit(jax.grad(_scalarize(jnp, f, name)))(*args)
    _assert_same(gk, gj, name, tol=1e-4)


@pytest.mark.parametrize("name,f,args,grad", _GRAD, ids=_ids(_GRAD))
def test_vmap(name, f, args, grad):
    x = args[0]
    stacked = np.stack([x, 2 * x, -x])
    got = kiln.vmap(lambda y: f(knp, y))(stacked)
    for i, s in enumerate((1, 2, -1)):
        np.testing.assert_allclose(np.asarray(got[i]), np.asarray(f(knp, s * x)), rtol=1e-5,
                                   atol=1e-5)
    got1 = kiln.vmap(lambda y: f(knp, y), in_axes=1, out_axes=-1)(np.moveaxis(stacked, 0, 1))
    np.testing.assert_allclose(np.moveaxis(np.asarray(got1), -1, 0), np.asarray(got),
                               rtol=1e-6, atol=1e-6)


def test_against_numpy():
    np.testing.assert_allclose(np.asarray(knp.fft.fft(Z)), np.fft.fft(Z), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(knp.fft.irfftn(Z3, s=(3, 8))),
                               np.fft.irfftn(Z3, s=(3, 8), axes=(1, 2)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(knp.fft.hfft(Z, n=9)), np.fft.hfft(Z, n=9),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(knp.fft.fftshift(X3)), np.fft.fftshift(X3))


def test_roundtrips():
    np.testing.assert_allclose(np.asarray(knp.fft.ifft(knp.fft.fft(Z))), Z, atol=1e-5)
    np.testing.assert_allclose(np.asarray(knp.fft.irfft(knp.fft.rfft(X), n=6)), X, atol=1e-5)
    np.testing.assert_allclose(np.asarray(knp.fft.irfftn(knp.fft.rfftn(X3), s=X3.shape)), X3,
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(knp.fft.ifftshift(knp.fft.fftshift(X3))), X3)


def test_x64_dtypes():
    with config_context(jax_enable_x64=True):
        assert knp.fft.fft(X.astype(np.float64)).dtype == np.complex128
        assert knp.fft.irfft(Z.astype(np.complex128)).dtype == np.float64
        assert knp.fft.fftfreq(4).dtype == np.float64
        assert knp.fft.fftfreq(4, dtype=np.float32).dtype == np.float32


def test_lax_fft():
    assert lax.FftType.RFFT == 2 and list(lax.FftType) == [0, 1, 2, 3]
    y = lax.fft(X, lax.FftType.RFFT, (6,))
    assert y.dtype == np.complex64 and y.shape == (4, 4)
    np.testing.assert_allclose(np.asarray(lax.fft(y, "irfft", (6,))), X, atol=1e-5)
    np.testing.assert_allclose(np.asarray(lax.fft(Z, "IFFT", (4, 6))), np.fft.ifft2(Z),
                               atol=1e-5)
    # an empty fft_lengths only converts
    assert lax.fft(X, "fft", ()).dtype == np.complex64
    with pytest.raises(ValueError):
        lax.fft(Z, "rfft", (6,))
    with pytest.raises(ValueError):
        lax.fft(X, "bogus", (6,))
    with pytest.raises(ValueError):
        lax.fft(Z, "fft", (5,))


def test_lax_fft_linear_transpose_matches_jax():
    for kind, x, lengths in [("fft", Z, (6,)), ("ifft", Z3, (3, 5)), ("rfft", X, (6,)),
                             ("rfft", X3, (3, 5)), ("irfft", Z, (10,)), ("irfft", Z[:, :5], (9,)),
                             ("irfft", Z3, (3, 8))]:
        out_k = lax.fft(x, kind, lengths)
        ct = _rng.standard_normal(out_k.shape).astype(np.float32)
        if out_k.dtype.kind == "c":
            ct = (ct + 1j * _rng.standard_normal(out_k.shape)).astype(np.complex64)
        tk = kiln.linear_transpose(lambda y: lax.fft(y, kind, lengths), x)(ct)[0]
        tj = jax.linear_transpose(lambda y: jax.lax.fft(y, kind, lengths), x)(ct)[0]
        _assert_same(tk, tj, f"transpose {kind} {lengths}", tol=1e-4)


@pytest.mark.parametrize("call,exc", [
    (lambda m: m.fft.fft(X, axis=(0, 1)), ValueError),
    (lambda m: m.fft.fftn(X, s=(2, 3), axes=(0,)), ValueError),
    (lambda m: m.fft.fftn(X, s=(0, 3)), ValueError),
    (lambda m: m.fft.fft2(X3, axes=(0,)), ValueError),
    (lambda m: m.fft.fftn(X, axes=(0, 0)), ValueError),
    (lambda m: m.fft.fft(X, norm="bogus"), ValueError),
    (lambda m: m.fft.fftfreq([3]), ValueError),
    (lambda m: m.fft.rfftfreq(3, d=[1.0]), ValueError),
    (lambda m: m.fft.rfft(Z), ValueError),
])
def test_errors_match_jax(call, exc):
    with pytest.raises(exc):
        call(jnp)
    with pytest.raises(exc):
        call(knp)


@pytest.mark.parametrize("norm", ["ortho", "forward", "backward"])
@pytest.mark.parametrize("func_name", ["fftn", "ifftn"])
def test_fft_norm_does_not_overflow_int32_sizes(func_name, norm):
    # JAX's private _fft_norm (read as jax._src.numpy.fft by JAX's tests): sizes whose
    # product overflows int32 are multiplied in an inexact dtype.
    from kiln.numpy.fft import _fft_norm
    s = knp.array([3, 900, 900, 900], dtype=knp.int32)
    want = 1.0 if norm == "backward" else float(np.prod([3.0, 900, 900, 900]))
    if norm == "ortho":
        want = np.sqrt(want)
    if norm != "backward" and func_name[0] != "i":
        want = 1 / want
    np.testing.assert_allclose(float(_fft_norm(s, func_name, norm)), want, rtol=3e-7)
    with pytest.raises(ValueError, match="Invalid norm value"):
        _fft_norm(s, func_name, "bogus")
