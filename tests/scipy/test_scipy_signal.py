"""``kiln.scipy.signal`` against ``jax.scipy.signal`` (JAX 0.10.2): values, shapes and dtypes
of every public function over modes/methods/windows/axes (float32, complex64, ints, and
float64 under x64), JAX's errors and warnings, and ``jit``/``grad``/``vmap``."""
from __future__ import annotations

import inspect
import subprocess
import sys
import warnings
import zlib

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as knp
import kiln.scipy.signal as ks

jax = pytest.importorskip("jax")
import jax.numpy as jjnp  # noqa: E402
from jax.scipy import signal as js  # noqa: E402

scipy_signal = pytest.importorskip("scipy.signal")

R = np.random.default_rng(0)
f32 = np.float32


def rand(*shape, dtype=f32, rng=None):
    rng = R if rng is None else rng
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _rng(*tag):
    """A generator seeded by ``tag`` (test-time inputs, hence the oracle's keys, do not
    depend on which tests ran before)."""
    return np.random.default_rng(zlib.crc32(repr(tag).encode()))


def _params(cases, fast, ids=None):
    """``pytest.param`` per case; those whose index is not in ``fast`` are marked slow."""
    ids = ids or [str(i) for i in range(len(cases))]
    return [pytest.param(*(c if isinstance(c, tuple) else (c,)), id=i,
                         marks=() if n in fast else pytest.mark.slow)
            for n, (c, i) in enumerate(zip(cases, ids))]


def _cmp(out, ref, rtol=1e-5, atol=None):
    out_l, ref_l = jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)
    assert len(out_l) == len(ref_l)
    for o, r in zip(out_l, ref_l):
        o_np, r_np = np.asarray(o), np.asarray(r)
        assert o_np.shape == r_np.shape, (o_np.shape, r_np.shape)
        assert o_np.dtype == r_np.dtype, (o_np.dtype, r_np.dtype)
        scale = max(1.0, float(np.abs(r_np).max())) if r_np.size else 1.0
        np.testing.assert_allclose(o_np, r_np, rtol=rtol,
                                   atol=rtol * scale if atol is None else atol)


def _both(fn, key, inputs):
    """``fn(module)`` for kiln (eager) and JAX (one ``jax.jit`` compile: JAX's op-by-op
    dispatch of these functions is much slower; from the oracle under ``key``), with
    warnings silenced."""
    def ref():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return jax.jit(lambda: fn(js))()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(ks)
    return out, jax_result(key, ref, inputs)


# ------------------------------------------------------------------------------------------
# surface


def test_public_names_and_signatures():
    names = [n for n in dir(js) if not n.startswith("_")]
    assert sorted(names) == sorted(ks.__all__)
    for n in names:
        ps_j = inspect.signature(getattr(js, n)).parameters
        ps_k = inspect.signature(getattr(ks, n)).parameters
        assert list(ps_k) == list(ps_j), n
        for p in ps_j:
            assert ps_k[p].default == ps_j[p].default, (n, p)
            assert ps_k[p].kind == ps_j[p].kind, (n, p)
        assert getattr(ks, n).__doc__


def test_import_paths_are_lazy():
    code = ("import sys, kiln, kiln.scipy\n"
            "assert 'kiln.scipy.signal' not in sys.modules\n"
            "assert 'signal' in dir(kiln.scipy)\n"
            "f = kiln.scipy.signal.welch\n"
            "import kiln.scipy.signal as s\n"
            "from kiln.scipy import signal as s2\n"
            "assert s is s2 is kiln.scipy.signal and s.welch is f\n"
            "assert 'jax' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------
# convolution and correlation

SHAPES = [((7,), (3,)), ((3,), (7,)), ((5,), (5,)), ((1,), (4,)), ((6,), (1,)),
          ((6, 5), (3, 2)), ((3, 2), (6, 5)), ((4, 4), (4, 4)), ((4, 5, 6), (2, 3, 2))]


@pytest.mark.parametrize("s1,s2", _params(SHAPES, {0, 1, 5, 7},
                                           [f"{a}x{b}" for a, b in SHAPES]))
def test_convolve_correlate(s1, s2):
    rng = _rng("convolve", s1, s2)
    x, y = rand(*s1, rng=rng), rand(*s2, rng=rng)

    def calls(m):
        out = []
        for mode in ("full", "same", "valid"):
            for method in ("auto", "direct", "fft"):
                out += [m.convolve(x, y, mode, method), m.correlate(x, y, mode, method)]
            out.append(m.fftconvolve(x, y, mode))
            if len(s1) == 2:
                out += [m.convolve2d(x, y, mode), m.correlate2d(x, y, mode)]
        return out

    _cmp(*_both(calls, "convolve_correlate", (x, y)), 2e-5)


@pytest.mark.parametrize("s1,s2", _params([((9,), (4,)), ((4,), (9,)), ((5, 4), (2, 3)),
                                            ((2, 3), (5, 4)), ((3, 3), (3, 3))], {0, 3}))
def test_complex(s1, s2):
    rng = _rng("complex", s1, s2)
    x, y = rand(*s1, dtype=np.complex64, rng=rng), rand(*s2, dtype=np.complex64, rng=rng)

    def calls(m):
        out = []
        for mode in ("full", "same", "valid"):
            for method in ("direct", "fft"):
                out += [m.convolve(x, y, mode, method), m.correlate(x, y, mode, method)]
            if len(s1) == 2:
                out += [m.correlate2d(x, y, mode), m.correlate2d(x.real, y, mode)]
        return out

    _cmp(*_both(calls, "complex", (x, y)), 2e-5)


def test_convolve_dtypes_and_scalars():
    xi, yi = np.arange(6, dtype=np.int32), np.array([1, -2, 1], np.int32)
    out, ref = _both(lambda m: [
        m.convolve(xi, yi), m.correlate(xi, yi, "same"), m.fftconvolve(xi, yi),
        m.convolve(xi, yi, method="fft"), m.convolve2d(xi.reshape(2, 3) > 2, yi[None] > 0),
        m.convolve(knp_or_j(m).array(2.0), knp_or_j(m).array(3.0)), m.fftconvolve(2.0, 3.0)],
        "dtypes_scalars", (xi, yi))
    _cmp(out, ref)
    assert all(o.dtype == np.float32 for o in out)


def test_fftconvolve_axes():
    rng = _rng("fftconvolve_axes")
    x, y = rand(3, 10, 4, rng=rng), rand(3, 5, 4, rng=rng)
    xc = rand(2, 6, dtype=np.complex64, rng=rng)
    _cmp(*_both(lambda m: [f for mode in ("full", "same", "valid") for f in (
        m.fftconvolve(x, y, mode, axes=1), m.fftconvolve(x, y, mode, axes=[-2]),
        m.fftconvolve(x, y[:, :, :2], mode, axes=(1, -1)),
        m.fftconvolve(x, y[:, :1], mode, axes=(1,)))]
        + [m.fftconvolve(xc, xc[:, :3], axes=1)], "fftconvolve_axes", (x, y, xc)), 2e-5)
    with pytest.raises(ValueError, match="mapped axes must have same shape"):
        ks.fftconvolve(x, y[:2], axes=1)


@pytest.mark.parametrize("call, exc", [
    (lambda m: m.convolve(np.ones(3), np.ones((2, 2))), ValueError),
    (lambda m: m.convolve(np.ones(3), np.ones(2), "bad"), ValueError),
    (lambda m: m.convolve(np.ones(3), np.ones(2), method="bad"), ValueError),
    (lambda m: m.convolve(np.ones(3), np.ones(0)), ValueError),
    (lambda m: m.convolve(np.ones((3, 2)), np.ones((2, 3))), ValueError),
    (lambda m: m.fftconvolve(np.ones((3, 2)), np.ones((2, 3)), "valid"), ValueError),
    (lambda m: m.fftconvolve(np.ones(3), np.ones(2), "bad"), ValueError),
    (lambda m: m.fftconvolve(np.ones(3), np.ones((2, 2))), ValueError),
    (lambda m: m.fftconvolve([1.0, 2.0], np.ones(2)), TypeError),
    (lambda m: m.convolve2d(np.ones((3, 3)), np.ones((2, 2)), boundary="wrap"),
     NotImplementedError),
    (lambda m: m.correlate2d(np.ones((3, 3)), np.ones((2, 2)), fillvalue=1.0),
     NotImplementedError),
    (lambda m: m.correlate2d(np.ones(3), np.ones(2)), ValueError),
    (lambda m: m.convolve2d(np.ones((3, 3, 1)), np.ones((2, 2, 1))), ValueError),
])
def test_convolution_errors(call, exc):
    with pytest.raises(exc) as e_ref:
        call(js)
    with pytest.raises(exc) as e_out:
        call(ks)
    assert str(e_out.value) == str(e_ref.value)


# ------------------------------------------------------------------------------------------
# detrend


def test_detrend():
    rng = _rng("detrend")
    d = rand(5, 20, rng=rng) + np.arange(20, dtype=f32)
    c = rand(3, 12, dtype=np.complex64, rng=rng)
    cases = [("linear", -1, [3, 9, 12, 19]), ("linear", 0, 0), ("constant", -1, 7),
             ("linear", -1, 0), ("linear", 0, [1, 2]), ("linear", -1, np.array([4])),
             ("linear", -1, [0, 5, 6, 20]), ("constant", 0, 0)]
    # JAX for a few (its lstsq is slow to compile), SciPy (float64) for all
    out, ref = _both(lambda m: [m.detrend(d, axis, typ, bp) for typ, axis, bp in cases[:3]]
                     + [m.detrend(d.T.tolist()), m.detrend(c, bp=[5]),
                        m.detrend(c, type="constant"),
                        m.detrend(np.arange(12, dtype=np.int32).reshape(3, 4), 0)],
                     "detrend", (d, c))
    _cmp(out, ref, 1e-5, 1e-4)
    for typ, axis, bp in cases:
        o = ks.detrend(d, axis, typ, bp)
        assert o.dtype == np.float32
        np.testing.assert_allclose(np.asarray(o), scipy_signal.detrend(
            d.astype(np.float64), axis, typ, bp), atol=1e-4)
    np.testing.assert_allclose(np.asarray(ks.detrend(c, bp=[5])),
                               scipy_signal.detrend(c.astype(np.complex128), bp=[5]),
                               atol=1e-5)
    # a ramp is removed exactly
    out = ks.detrend(np.arange(10.0) * 3 - 1)
    np.testing.assert_allclose(np.asarray(out), 0, atol=1e-5)
    for call, exc in [(lambda m: m.detrend(d, type="l"), ValueError),
                      (lambda m: m.detrend(d, overwrite_data=True), NotImplementedError),
                      (lambda m: m.detrend(d, bp=21), ValueError),
                      (lambda m: m.detrend(d, bp=-3), ValueError)]:
        with pytest.raises(exc) as e_ref:
            call(js)
        with pytest.raises(exc) as e_out:
            call(ks)
        assert str(e_out.value) == str(e_ref.value)
    with pytest.raises(kiln.errors.TracerArrayConversionError):
        kiln.jit(lambda b: ks.detrend(d, bp=b))(3)


# ------------------------------------------------------------------------------------------
# spectral analysis

X = rand(2, 300)
Y = rand(2, 280)

PSD_KW = [{}, dict(nperseg=64), dict(nperseg=64, noverlap=10, nfft=100),
          dict(nperseg=33, detrend="linear"), dict(nperseg=64, window="hamming"),
          dict(nperseg=50, window=("tukey", 0.3)), dict(window=np.hanning(40)),
          dict(nperseg=64, return_onesided=False), dict(nperseg=64, scaling="spectrum", fs=10.0),
          dict(nperseg=64, average="median"), dict(nperseg=64, detrend=False),
          dict(nperseg=32, axis=0), dict(nperseg=400), dict(nperseg=65, nfft=65)]


@pytest.mark.parametrize("kw", _params(PSD_KW, {2, 3, 6, 9, 11}))
def test_welch_csd(kw):
    x, y = (X.T, Y.T) if kw.get("axis") == 0 else (X, Y)
    _cmp(*_both(lambda m: [m.welch(x, **kw), m.csd(x, y, **kw), m.csd(x, None, **kw)],
                "welch_csd", (x, y, kw)), 1e-4)


def test_csd_broadcast_and_complex():
    xc = X + 1j * X[:, ::-1]
    _cmp(*_both(lambda m: [m.csd(X, Y[:1], nperseg=32),
                           m.csd(X, Y[:1], nperseg=32, average="median"),
                           m.welch(xc, nperseg=32), m.csd(xc, Y, nperseg=32, average="median"),
                           m.welch(np.ones((0, 5), f32)), m.welch(np.arange(40), nperseg=8)],
                "csd_broadcast_complex", (X, Y)), 1e-4)


STFT_KW = [{}, dict(nperseg=64), dict(nperseg=64, noverlap=10, nfft=100),
           dict(nperseg=33, detrend="linear", boundary="odd"),
           dict(nperseg=32, boundary="even", padded=False), dict(nperseg=32, boundary="constant"),
           dict(nperseg=32, boundary=None), dict(nperseg=32, return_onesided=False),
           dict(nperseg=32, window="blackman", axis=0), dict(nperseg=1, noverlap=0),
           dict(window=np.ones(7), nperseg=7, fs=3.0, detrend="constant"),
           dict(nperseg=16, detrend=lambda d: d - d.mean(-1, keepdims=True))]


def test_stft():
    _cmp(*_both(lambda m: [m.stft(X.T if kw.get("axis") == 0 else X, **kw) for kw in STFT_KW]
                + [m.stft(X[0] + 1j * X[1], nperseg=16),
                   m.stft(X[0], nperseg=16, return_onesided=False)],
                # (STFT_KW holds a lambda: the key names the table, not its repr)
                "stft", X), 1e-4)


def test_istft():
    Z = np.asarray(jax_result("istft.Z", lambda: js.stft(X, nperseg=64)[2], X))
    Zt = np.moveaxis(Z, -1, 0)
    kws = [{}, dict(nperseg=64), dict(boundary=False), dict(nperseg=64, noverlap=48),
           dict(nperseg=64, nfft=64, window="hamming"), dict(window=np.hanning(64)),
           dict(fs=4.0)]
    _cmp(*_both(lambda m: [m.istft(Z, **kw) for kw in kws]
                + [m.istft(Zt, time_axis=0, freq_axis=-1),
                   m.istft(Z[..., :10, :], input_onesided=False),
                   m.istft(np.ones((5, 7), np.int32))], "istft", Z), 1e-4)
    # the round trip reproduces the signal
    _, _, zk = ks.stft(X[0], nperseg=32)
    _, xr = ks.istft(zk, nperseg=32)
    assert xr.shape == (304,)
    np.testing.assert_allclose(np.asarray(xr)[:300], X[0], atol=1e-5)


@pytest.mark.parametrize("call", [
    lambda m: m.welch(X, nperseg=0),
    lambda m: m.welch(X, nperseg=16, nfft=8),
    lambda m: m.welch(X, nperseg=16, noverlap=16),
    lambda m: m.welch(X, nperseg=16, scaling="x"),
    lambda m: m.welch(X, nperseg=16, average="x"),
    lambda m: m.welch(X, nperseg=16, detrend=True),
    lambda m: m.welch(X, nperseg=16, detrend="x"),
    lambda m: m.welch(X, window=np.ones((2, 4))),
    lambda m: m.welch(X, window=np.ones(400)),
    lambda m: m.welch(X, window=np.ones(8), nperseg=9),
    lambda m: m.csd(np.ones((3, 20)), np.ones((2, 20)), nperseg=8),
    lambda m: m.stft(X, nperseg=8, boundary="x"),
    lambda m: m.istft(np.ones(8)),
    lambda m: m.istft(np.ones((5, 7)), time_axis=0, freq_axis=0),
    lambda m: m.istft(np.ones((5, 7)), nfft=6),
    lambda m: m.istft(np.ones((5, 7)), noverlap=9),
    lambda m: m.istft(np.ones((5, 7)), window=np.ones((8, 1))),
    lambda m: m.istft(np.ones((5, 7)), window=np.ones(7)),
])
def test_spectral_errors(call):
    with pytest.raises(ValueError) as e_ref:
        jax.jit(lambda: call(js))()
    with pytest.raises(ValueError) as e_out:
        call(ks)
    assert str(e_out.value) == str(e_ref.value)


def test_warnings():
    for i, call in enumerate((lambda m: m.welch(X, nperseg=400), lambda m: m.stft(X[0, :40]),
                              lambda m: m.welch(X + 1j, nperseg=8))):
        def ref(call=call):
            with warnings.catch_warnings(record=True) as w_ref:
                warnings.simplefilter("always")
                jax.jit(lambda: call(js))()
            return [str(w.message) for w in w_ref]
        with pytest.warns(UserWarning) as w_out:
            call(ks)
        assert [str(w.message) for w in w_out] == jax_result(f"warnings.{i}", ref, X)


# ------------------------------------------------------------------------------------------
# x64


def test_x64():
    x64, y64 = X.astype(np.float64), Y.astype(np.float64)
    with kiln.enable_x64(True), jax.enable_x64(True):
        out, ref = _both(lambda m: [m.convolve(x64[0], y64[0, :7], "same"),
                                    m.correlate(x64[0], y64[0, :7], method="fft"),
                                    m.fftconvolve(x64, y64[:, :9], axes=-1),
                                    m.convolve2d(x64[:, :20], y64[:, :3]),
                                    m.detrend(x64, bp=[50]),
                                    m.welch(x64, nperseg=64),
                                    m.csd(x64, y64, nperseg=64, average="median"),
                                    m.stft(x64, nperseg=64),
                                    m.istft(m.stft(x64, nperseg=64)[2])],
                         "x64", (x64, y64))
        _cmp(out, ref, 1e-11)
        for o in jax.tree_util.tree_leaves(out):
            assert np.asarray(o).dtype in (np.float64, np.complex128)
        # float32 data stays float32 (the frequencies too)
        out, ref = _both(lambda m: (m.welch(X, nperseg=64), m.stft(np.arange(50), nperseg=8)),
                         "x64_f32_data", X)
        _cmp(out[0], ref[0], 1e-4)
        _cmp(out[1], ref[1], 1e-11)
        assert out[0][1].dtype == np.float32 and out[0][0].dtype == np.float32
        assert out[1][2].dtype == np.complex128


# ------------------------------------------------------------------------------------------
# transformations

x1 = rand(64)
k1 = rand(5)
TRANSFORM_FNS = {
    "convolve": lambda m, x, k: m.convolve(x, k, "same"),
    "correlate_fft": lambda m, x, k: m.correlate(x, k, "valid", method="fft"),
    "fftconvolve": lambda m, x, k: m.fftconvolve(x, k),
    "detrend": lambda m, x, k: m.detrend(x * k[0], bp=[10, 30]),
    "welch": lambda m, x, k: m.welch(x, fs=k[1] ** 2 + 1, nperseg=16)[1],
    "welch_median": lambda m, x, k: m.welch(x, nperseg=16, average="median")[1],
    "csd": lambda m, x, k: m.csd(x, x[::-1] * k[0], nperseg=16, detrend="linear")[1],
    "stft": lambda m, x, k: m.stft(x * k[2], nperseg=16)[2],
    "istft": lambda m, x, k: m.istft(m.stft(x, nperseg=16)[2], window=k[0] + knp_or_j(m).hanning(16))[1],
}


def knp_or_j(m):
    return knp if m is ks else jjnp


@pytest.mark.parametrize("name", _params(list(TRANSFORM_FNS), {0, 2, 3, 4, 6, 7, 8}))
def test_jit_grad_vmap(name):
    f = TRANSFORM_FNS[name]

    def fk(x, k):
        return f(ks, x, k)

    def fj(x, k):
        return f(js, x, k)

    def loss(mod, fn):
        return lambda x, k: mod.sum(mod.abs(fn(x, k)) ** 2)

    xb = np.stack([x1, x1[::-1], 2 * x1])
    ref, ref_vmap, ref_grad = jax_result(f"transform.{name}", lambda: (
        jax.jit(fj)(x1, k1), jax.jit(jax.vmap(fj, (0, None)))(xb, k1),
        jax.jit(jax.grad(loss(jjnp, fj), (0, 1)))(x1, k1)), (x1, k1))
    _cmp(fk(x1, k1), ref, 1e-4)
    _cmp(kiln.jit(fk)(x1, k1), ref, 1e-4)
    _cmp(kiln.vmap(fk, (0, None))(xb, k1), ref_vmap, 1e-4)

    g = kiln.grad(loss(knp, fk), (0, 1))(x1, k1)
    _cmp(g, ref_grad, 1e-3)
    _cmp(kiln.jit(kiln.grad(loss(knp, fk), (0, 1)))(x1, k1), g, 1e-4)


def test_traced_fs_and_static_errors():
    t_k = kiln.jit(lambda fs: ks.stft(x1, fs=fs, nperseg=8)[1])(8.0)
    _cmp(t_k, jax_result("traced_fs", lambda: jax.jit(lambda: js.stft(x1, fs=8.0, nperseg=8)[1])(),
                         x1))
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda n: ks.welch(x1, nperseg=n))(8)
