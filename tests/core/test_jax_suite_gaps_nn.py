"""JAX-suite gaps (issue 26) in ``nn``/``numpy``: derivatives at Python-scalar primals
through custom JVP rules (``softplus``, ``mish``, ``logaddexp``) and attention masks under
``jax_numpy_rank_promotion='raise'``; compared with JAX where it is installed."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.test_util import check_grads


def test_logaddexp_jvp_at_python_scalars():
    p, t = kiln.jvp(jnp.logaddexp, (0., 0.), (1., 1.))
    assert p.dtype == np.float32 and p.weak_type
    np.testing.assert_allclose([float(p), float(t)], [np.log(2.0), 1.0], rtol=1e-6)
    p2, t2 = kiln.jvp(jnp.logaddexp2, (0., 0.), (1., 1.))
    np.testing.assert_allclose([float(p2), float(t2)], [1.0, 1.0], rtol=1e-6)


@pytest.mark.parametrize("x", [1e-8, 0.0])
def test_softplus_and_mish_grads_at_python_scalars(x):
    check_grads(kiln.nn.softplus, (x,), order=2, modes=["fwd", "rev"])
    check_grads(kiln.nn.mish, (x,), order=1)


@pytest.mark.parametrize("kw", [dict(is_causal=True), dict(local_window_size=(1, 1)),
                                dict(is_causal=True, mask=True)])
def test_attention_masks_under_rank_promotion_raise(kw):
    rng = np.random.RandomState(0)
    q, k, v = (rng.randn(2, 6, 4, 8).astype(np.float32) for _ in range(3))
    if kw.pop("mask", False):
        kw["mask"] = rng.rand(1, 1, 6, 6) > 0.3
    expected = kiln.nn.dot_product_attention(q, k, v, **kw)
    with kiln.numpy_rank_promotion("raise"):
        got = kiln.nn.dot_product_attention(q, k, v, **kw)
        got_jit = kiln.jit(lambda a, b, c: kiln.nn.dot_product_attention(a, b, c, **kw))(q, k, v)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(got_jit, expected, rtol=1e-5, atol=1e-6)
    jax = pytest.importorskip("jax")
    ref = jax.nn.dot_product_attention(q, k, v, **kw)
    np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-5, atol=1e-6)


def test_checkify_oob_indexing_under_rank_promotion_raise():
    from kiln.experimental import checkify
    x = jnp.arange(12.0, dtype=np.float32).reshape(3, 4)
    idx = jnp.asarray(np.array([[0, 1], [2, 5]]))

    def f(x, i):
        return x[i[:, 0], i[:, 1]]
    with kiln.numpy_rank_promotion("raise"):
        checkify.checkify(f, errors=checkify.index_checks)(x, idx)   # no rank-promotion error
        err, _ = checkify.checkify(lambda x, i: x.at[i[:, 0], i[:, 1]].set(1.0),
                                   errors=checkify.index_checks)(x, idx)
        assert err.get() is not None and "out-of-bounds" in err.get()
        err, _ = checkify.checkify(f, errors=checkify.index_checks)(x, jnp.asarray(np.array([[0, 1]])))
        assert err.get() is None


def test_kiln_code_under_rank_promotion_raise():
    """packbits/unpackbits, histogramdd and det's gradient no longer rely on rank promotion
    (JAX's test case sets jax_numpy_rank_promotion='raise' for every test)."""
    rng = np.random.RandomState(0)
    bits = (rng.rand(4, 2, 3, 16) > 0.5).astype(np.uint8)
    sample = rng.rand(10, 3).astype(np.float32)
    x = jnp.ones((16, 1, 1))
    a = rng.randn(3, 4, 4).astype(np.float32)
    with kiln.numpy_rank_promotion("raise"):
        packed = jnp.packbits(bits, axis=-1)
        unpacked = jnp.unpackbits(packed, axis=-1)
        hist, _ = jnp.histogramdd(sample, bins=4)
        g1 = kiln.grad(lambda x: jnp.linalg.det(x).sum())(x)
        g2 = kiln.grad(lambda a: jnp.linalg.slogdet(a)[1].sum())(a)
        check_grads(lambda x: jnp.linalg.det(x).sum(), (x,), 2, atol=1e-1, rtol=1e-1)
    np.testing.assert_array_equal(packed, np.packbits(bits, axis=-1))
    np.testing.assert_array_equal(unpacked, bits)
    np.testing.assert_array_equal(hist, np.histogramdd(sample, bins=4)[0])
    np.testing.assert_allclose(g1, np.ones((16, 1, 1)))
    np.testing.assert_allclose(g2, np.linalg.inv(a).transpose(0, 2, 1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad", [lambda x: x, "a"])
def test_stop_gradient_rejects_non_jax_types(bad):
    with pytest.raises(TypeError, match="not a valid JAX type"):
        kiln.lax.stop_gradient(bad)
    assert float(kiln.grad(lambda x: x * kiln.lax.stop_gradient(x))(2.0)) == 2.0


def test_fft_empty_and_repeated_axes_message():
    out = jnp.fft.fft(jnp.zeros((0,), jnp.complex64))
    assert out.shape == (0,) and out.dtype == np.complex64
    assert kiln.jit(jnp.fft.ifft)(jnp.zeros((3, 0), jnp.complex64)).shape == (3, 0)
    with pytest.raises(ValueError, match=r"Got axes \[1, 1\]\."):
        jnp.fft.ifftn(np.ones((2, 3)), axes=[1, 1])


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int4", "float16"])
def test_stop_gradient_accepts_ml_dtypes(dtype):
    # ml_dtypes' types have NumPy kind "V" like raw void: they must pass through.
    x = jnp.arange(3).astype(getattr(jnp, dtype))
    out = kiln.lax.stop_gradient(x)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(x, np.float32))
    with pytest.raises(TypeError, match="not a valid JAX type"):
        kiln.lax.stop_gradient(np.zeros(2, dtype="V4"))
