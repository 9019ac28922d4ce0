"""``kiln.scipy.fft`` (dct/idct/dctn/idctn) against SciPy and JAX: values, dtypes,
``jit``, ``grad`` (reverse and forward against finite differences), ``vmap``, errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.fft as sfft

import kiln
import kiln.numpy as knp
import kiln.scipy.fft as kfft
from kiln.config import config_context

_rng = np.random.default_rng(11)
X1 = _rng.standard_normal(7).astype(np.float32)
X8 = _rng.standard_normal(8).astype(np.float32)
X2 = _rng.standard_normal((4, 6)).astype(np.float32)
X3 = _rng.standard_normal((3, 4, 5)).astype(np.float32)
Z = (_rng.standard_normal((3, 5)) + 1j * _rng.standard_normal((3, 5))).astype(np.complex64)

ONE_D = [
    ("odd", X1, {}), ("even", X8, {}), ("ortho", X1, {"norm": "ortho"}),
    ("backward", X8, {"norm": "backward"}), ("pad", X1, {"n": 10}),
    ("truncate", X8, {"n": 5, "norm": "ortho"}), ("axis0", X2, {"axis": 0}),
    ("axis0_n", X2, {"axis": 0, "n": 3, "norm": "ortho"}), ("len1", X1[:1], {}),
    ("len2", X1[:2], {"norm": "ortho"}), ("complex", Z, {"norm": "ortho"}),
]
N_D = [
    ("all", X3, {}), ("axes02", X3, {"axes": (0, 2), "norm": "ortho"}),
    ("axes1", X3, {"axes": [1]}), ("axes_neg", X3, {"axes": (-1, 0, 1), "norm": "ortho"}),
    ("s", X3, {"s": (3, 6)}), ("s_axes", X3, {"s": (2, 7), "axes": (2, 0)}),
    ("s_int", X2, {"s": 4}), ("2d", X2, {"norm": "ortho"}),
]


def _scipy(name, x, kw):
    x64 = x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)
    kw = dict(kw)
    if name in ("dctn", "idctn") and "s" in kw and "axes" not in kw:
        s = np.atleast_1d(kw["s"])
        kw["axes"] = tuple(range(x.ndim - len(s), x.ndim))
    return getattr(sfft, name)(x64, **kw)


@pytest.mark.parametrize("name", ["dct", "idct"])
@pytest.mark.parametrize("label,x,kw", ONE_D, ids=[c[0] for c in ONE_D])
def test_1d_against_scipy(name, label, x, kw):
    out = getattr(kfft, name)(x, **kw)
    assert out.dtype == (np.complex64 if np.iscomplexobj(x) else np.float32)
    np.testing.assert_allclose(np.asarray(out), _scipy(name, x, kw), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["dctn", "idctn"])
@pytest.mark.parametrize("label,x,kw", N_D, ids=[c[0] for c in N_D])
def test_nd_against_scipy(name, label, x, kw):
    out = getattr(kfft, name)(x, **kw)
    np.testing.assert_allclose(np.asarray(out), _scipy(name, x, kw), rtol=2e-5, atol=3e-5)


@pytest.mark.parametrize("norm", [None, "ortho"])
def test_round_trip(norm):
    for x, ax in ((X1, -1), (X2, 0), (X8, 0)):
        y = kfft.idct(kfft.dct(x, axis=ax, norm=norm), axis=ax, norm=norm)
        np.testing.assert_allclose(np.asarray(y), x, atol=1e-5)
    y = kfft.idctn(kfft.dctn(X3, norm=norm), norm=norm)
    np.testing.assert_allclose(np.asarray(y), X3, atol=1e-5)


def test_dtypes():
    i = np.arange(6, dtype=np.int32)
    assert kfft.dct(i).dtype == np.float32
    assert kfft.idct(i).dtype == np.float32
    assert kfft.dctn(i.reshape(2, 3)).dtype == np.float32
    assert kfft.dct(np.ones(4, np.float16)).dtype == np.float32
    assert not kfft.dct(knp.ones(3)).weak_type
    with config_context(jax_enable_x64=True):
        assert kfft.dct(np.ones(4)).dtype == np.float64
        x = np.asarray(_rng.standard_normal(9))
        np.testing.assert_allclose(np.asarray(kfft.idct(x, norm="ortho")),
                                   sfft.idct(x, norm="ortho"), rtol=1e-12, atol=1e-12)


def test_errors():
    with pytest.raises(NotImplementedError, match="type 2"):
        kfft.dct(X1, type=3)
    with pytest.raises(NotImplementedError):
        kfft.idctn(X2, type=1)
    with pytest.raises(ValueError, match="norm='forward'"):
        kfft.idct(X1, norm="forward")
    with pytest.raises(ValueError):
        kfft.dctn(X2, axes=(0, 0))
    with pytest.raises(ValueError, match="at most"):
        kfft.dctn(X1, s=(2, 2))
    with pytest.raises(ValueError):
        kfft.dct(X1, axis=2)
    with pytest.raises(TypeError):
        kfft.dct([1.0, 2.0])


def _fd_check(f, x, eps=1e-6):
    """Reverse and forward derivatives of a scalar function against central differences."""
    x = np.asarray(x, np.float64)
    with config_context(jax_enable_x64=True):
        g = np.asarray(kiln.grad(f)(x))
        v = _rng.standard_normal(x.shape)
        _, jv = kiln.jvp(f, (x,), (v,))
    num = np.zeros_like(x)
    flat = x.ravel()
    for i in range(flat.size):
        e = np.zeros_like(flat)
        e[i] = eps
        with config_context(jax_enable_x64=True):
            num.ravel()[i] = (float(f((flat + e).reshape(x.shape)))
                              - float(f((flat - e).reshape(x.shape)))) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(jv), float(np.sum(num * v)), rtol=1e-6, atol=1e-7)


W = _rng.standard_normal((4, 6))


@pytest.mark.parametrize("name,kw", [
    ("dct", {"norm": "ortho", "axis": 0}), ("idct", {"n": 8}), ("dctn", {}),
    ("idctn", {"axes": (1, 0), "norm": "ortho", "s": (5, 3)}), ("dct", {"n": 3})])
def test_grad_finite_differences(name, kw):
    fn = getattr(kfft, name)

    def f(x):
        y = fn(x, **kw)
        return knp.sum(knp.sin(y) * knp.asarray(np.resize(W.ravel(), y.shape)))
    _fd_check(f, X2.astype(np.float64))


def test_jit_and_vmap():
    f = kiln.jit(lambda x: kfft.dct(x, type=2, norm="ortho", axis=0))
    np.testing.assert_allclose(np.asarray(f(X2)), sfft.dct(X2.astype(np.float64), norm="ortho",
                                                           axis=0), rtol=2e-5, atol=2e-5)
    g = kiln.vmap(lambda x: kfft.idct(x, norm="ortho"))
    np.testing.assert_allclose(np.asarray(g(X2)), sfft.idct(X2.astype(np.float64), norm="ortho",
                                                            axis=-1), rtol=2e-5, atol=2e-5)
    h = kiln.vmap(lambda x: kfft.dctn(x, axes=(0, 1)), in_axes=2)
    np.testing.assert_allclose(np.asarray(h(X3)),
                               np.moveaxis(sfft.dctn(X3.astype(np.float64), axes=(0, 1)), 2, 0),
                               rtol=2e-5, atol=5e-5)
    gj = kiln.jit(kiln.vmap(kiln.grad(lambda x: knp.sum(kfft.idct(x, n=9) ** 2))))
    gr = kiln.vmap(kiln.grad(lambda x: knp.sum(kfft.idct(x, n=9) ** 2)))
    np.testing.assert_allclose(np.asarray(gj(X2)), np.asarray(gr(X2)), rtol=1e-5, atol=1e-5)


def test_against_jax():
    """Every case's value, dtype and weak type, and the gradient of every n-d case,
    against JAX (one ``jax.jit`` for all of them, to keep JAX's compile time small)."""
    jax = pytest.importorskip("jax")
    import jax.scipy.fft as jfft
    pick = ("ortho", "pad", "axis0_n", "complex")
    one = [(name, x, kw) for name in ("dct", "idct") for lb, x, kw in ONE_D if lb in pick]
    nd = [("dctn", X3, {"s": (2, 7), "axes": (2, 0)}),
          ("idctn", X3, {"axes": (-1, 0, 1), "norm": "ortho"})]

    def run(m, fft, grad):
        outs = [getattr(fft, name)(x, **kw) for name, x, kw in one]
        for name, x, kw in nd:
            f = getattr(fft, name)
            outs.append(grad(lambda v, f=f, kw=kw: m.sum(m.cos(f(v, **kw))))(x))
        return outs
    want = jax.jit(lambda: run(jax.numpy, jfft, jax.grad))()
    got = run(knp, kfft, kiln.grad)
    for (name, _x, kw), g, w in zip(one + nd, got, want):
        assert (g.dtype, g.shape, g.weak_type) == (w.dtype, w.shape, w.weak_type), (name, kw)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4,
                                   err_msg=f"{name} {kw}")


# JAX's bits of dct(eye(8), norm="ortho") (float32 as int32), computed once with JAX 0.10.2.
_DCT_EYE8_ORTHO = [
    [1052050675, 1056642238, 1055687518, 1054137137, 1052050675, 1049508313, 1044639509,
     1036502460],
    [1052050675, 1054137137, 1044639510, -1110981184, -1095432973, -1090841410, -1091796130,
     -1097975333],
    [1052050675, 1049508313, -1102844138, -1090841410, -1095432973, 1036502471, 1055687518,
     1054137137],
    [1052050675, 1036502466, -1091796130, -1097975334, 1052050675, 1054137138, -1102844139,
     -1090841409],
    [1052050675, -1110981182, -1091796130, 1049508314, 1052050675, -1093346510, -1102844139,
     1056642239],
    [1052050675, -1097975335, -1102844138, 1056642238, -1095432973, -1110981177, 1055687518,
     -1093346511],
    [1052050675, -1093346511, 1044639510, 1036502464, -1095432973, 1056642238, -1091796130,
     1049508315],
    [1052050675, -1090841410, 1055687518, -1093346511, 1052050675, -1097975335, 1044639509,
     -1110981188],
]


def test_dct_rotation_and_scale_round_as_jax():
    """The DCT-II rotates by a complex ``exp(-i pi k / 2N)`` (the FFT's dtype), takes
    ``2 Re`` of the complex product and divides by ``sqrt(4N)``/``sqrt(2N)``, as JAX:
    on the unit vectors (exact FFTs) every bit is JAX's, eager and under ``jit``
    (rotating by float64 cosines and sines instead differed in 16 of the 64 entries,
    and NumPyro's ``test_bijective_transforms[DiscreteCosineTransform(smooth=1)]``
    saw its Jacobian's log-determinant at -1.07e-06, past its 1e-06)."""
    from kiln.compiler.build import build
    if build.find_compiler() is None:
        pytest.skip("no C compiler: complex exp falls back to NumPy's bits")
    want = np.array(_DCT_EYE8_ORTHO, np.int32)
    eye = np.eye(8, dtype=np.float32)
    got = np.asarray(kfft.dct(eye, norm="ortho"))
    np.testing.assert_array_equal(got.view(np.int32), want)
    got = np.asarray(kiln.jit(lambda e: kfft.dct(e, norm="ortho"))(eye))
    np.testing.assert_array_equal(got.view(np.int32), want)
