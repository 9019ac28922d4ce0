"""Python array API standard behaviour of ``kiln.numpy`` and ``kiln.Array``: the pieces
that the standard's test suite (data-apis/array-api-tests, see docs/array_api.md) checks
and kiln once lacked, each compared with ``jax.numpy`` where JAX is installed.

These run without the external suite.
"""
from __future__ import annotations

import numpy as np
import pytest
from _sampling import sample_cover

import kiln
import kiln.numpy as jnp
from kiln.config import config_context


@pytest.fixture
def jjnp():
    return pytest.importorskip("jax.numpy")


# -- namespace metadata -------------------------------------------------------------------

def test_array_api_version(jjnp):
    assert jnp.__array_api_version__ == "2024.12"
    assert jnp.__array_api_version__ == jjnp.__array_api_version__


def test_namespace_info_matches_jax(jjnp):
    info, jinfo = jnp.__array_namespace_info__(), jjnp.__array_namespace_info__()
    assert info.capabilities() == jinfo.capabilities()
    assert info.default_device() is None and jinfo.default_device() is None
    assert info.devices()[0] is None and len(info.devices()) >= 2
    for x64 in (False, True):
        with config_context(jax_enable_x64=x64):
            import jax
            with jax.enable_x64(x64):
                assert info.default_dtypes() == jinfo.default_dtypes()
                for kind in (None, "bool", "signed integer", "unsigned integer", "integral",
                             "real floating", "complex floating", "numeric",
                             ("bool", "real floating")):
                    assert info.dtypes(kind=kind) == jinfo.dtypes(kind=kind), kind
    with pytest.raises(KeyError):
        info.dtypes(kind="nonsense")


def test_namespace_info_devices_usable():
    info = jnp.__array_namespace_info__()
    for d in info.devices():
        x = jnp.zeros(3, device=d)
        assert x.to_device(d).shape == (3,)
    assert jnp.ones(2).device in info.devices()


# -- array object -------------------------------------------------------------------------

def test_array_namespace():
    x = jnp.ones(3)
    assert x.__array_namespace__() is jnp
    assert x.__array_namespace__(api_version="2024.12") is jnp
    with pytest.raises(ValueError, match="2023.12"):
        x.__array_namespace__(api_version="2023.12")
    seen = []
    kiln.jit(lambda t: seen.append(t.__array_namespace__()) or t)(x)  # tracers too
    kiln.grad(lambda t: seen.append(t.__array_namespace__()) or t)(1.0)
    assert seen == [jnp, jnp]


def test_to_device():
    x = jnp.arange(4.0)
    y = x.to_device(x.device)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    assert y.dtype == x.dtype and y.device == x.device
    assert x.to_device(None, stream=None).device == x.device


def test_dlpack_device(jjnp):
    x = jnp.ones(3)
    dev_type, dev_id = x.__dlpack_device__()
    assert (int(dev_type), dev_id) == (1, 0)
    jt, ji = jjnp.ones(3).__dlpack_device__()
    assert (int(jt), ji) == (int(dev_type), dev_id)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "float32", "complex64"])
@pytest.mark.parametrize("kw", [{}, {"copy": True}, {"copy": None},
                                {"max_version": (0, 0)}, {"max_version": (1, 0)},
                                {"max_version": (1, 0), "copy": False},
                                {"dl_device": (1, 0)}])
def test_dunder_dlpack_roundtrip(dtype, kw):
    v = (np.arange(6) % 2 if dtype == "bool" else np.arange(6)).astype(dtype).reshape(2, 3)
    x = jnp.asarray(v)
    capsule = x.__dlpack__(**kw)
    assert type(capsule).__name__ == "PyCapsule"
    np.testing.assert_array_equal(np.from_dlpack(x), v)
    y = jnp.from_dlpack(x)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(y), v)
    # the kiln array is unchanged (and still immutable) after an export
    np.testing.assert_array_equal(np.asarray(x), v)


def test_from_dlpack_jax_interop(jjnp):
    x = jnp.arange(5, dtype=jnp.int32)
    j = jjnp.from_dlpack(x)
    np.testing.assert_array_equal(np.asarray(j), np.arange(5))
    back = jnp.from_dlpack(jjnp.arange(3.0))
    np.testing.assert_array_equal(np.asarray(back), np.arange(3.0))


# -- statistical functions ----------------------------------------------------------------

# Every dtype and both x64 settings keep a case (tests/_sampling.py; the product in the full
# tier): each case compiles four programs.
@pytest.mark.parametrize("dtype,x64", sample_cover(
    [pytest.param(d, x, id=f"{d}-{x}") for x in (False, True)
     for d in ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "float16",
               "float32"]], lambda p: p.values, salt="array_api.cumulative_sum"))
def test_cumulative_sum_promotes_small_integers(jjnp, x64, dtype):
    """``cumulative_sum`` accumulates small ints in the default int/uint (like ``sum``,
    unlike ``cumsum`` and ``cumulative_prod``)."""
    import jax
    x = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    with config_context(jax_enable_x64=x64), jax.enable_x64(x64):
        for kw in ({"axis": 0}, {"axis": 1, "include_initial": True},
                   {"axis": -1, "dtype": "int8"}, {"axis": 0, "dtype": "bool"}):
            want = jjnp.cumulative_sum(x, **kw)
            got = jnp.cumulative_sum(x, **kw)
            assert got.dtype == want.dtype, kw
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
            jitted = kiln.jit(lambda t, kw=kw: jnp.cumulative_sum(t, **kw))(x)
            assert jitted.dtype == want.dtype
        assert jnp.cumulative_sum(np.zeros(0, dtype)).dtype == \
            jjnp.cumulative_sum(np.zeros(0, dtype)).dtype
        # cumsum / cumulative_prod keep the input dtype, as in JAX
        assert jnp.cumsum(x, axis=0).dtype == jjnp.cumsum(x, axis=0).dtype
        assert jnp.cumulative_prod(x, axis=0).dtype == jjnp.cumulative_prod(x, axis=0).dtype


def test_cumulative_sum_transforms():
    x = jnp.arange(1.0, 5.0)
    g = kiln.grad(lambda t: jnp.cumulative_sum(t, include_initial=True).sum())(x)
    np.testing.assert_allclose(np.asarray(g), [4.0, 3.0, 2.0, 1.0])
    ints = jnp.arange(6, dtype=jnp.int8).reshape(2, 3)
    out = kiln.vmap(lambda r: jnp.cumulative_sum(r))(ints)
    assert out.dtype == jnp.cumulative_sum(ints, axis=1).dtype
    np.testing.assert_array_equal(np.asarray(out), np.cumsum(np.asarray(ints), axis=1))


# -- elementwise special cases ------------------------------------------------------------

def _same_bits(got, want):
    """Equal values with equal signs of zeros (NaNs match any NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    for part in ((lambda v: v.real), (lambda v: v.imag)) if got.dtype.kind == "c" else \
            ((lambda v: v),):
        g, w = part(got), part(want)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        ok = ~np.isnan(w)
        np.testing.assert_array_equal(g[ok], w[ok])
        np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]))


@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16"])
@pytest.mark.parametrize("name", ["floor_divide", "divmod"])
def test_float_floor_divide_by_zero_is_inf(jjnp, name, dtype):
    x = np.array([1.0, -1.0, 1.0, -1.0, 0.0, np.inf, np.nan, 5.0, -7.5, 3.0, -0.0, 2.0],
                 dtype=jnp.dtype(dtype))
    y = np.array([0.0, 0.0, -0.0, -0.0, 0.0, 0.0, 0.0, np.inf, 2.0, -0.5, 3.0, -np.inf],
                 dtype=jnp.dtype(dtype))
    got, want = getattr(jnp, name)(x, y), getattr(jjnp, name)(x, y)
    jitted = kiln.jit(getattr(jnp, name))(x, y)
    for g, w, j in zip(*((got, want, jitted) if name == "divmod" else ((got,), (want,),
                                                                        (jitted,)))):
        _same_bits(np.asarray(g, np.float32), np.asarray(w, np.float32))
        _same_bits(np.asarray(j, np.float32), np.asarray(w, np.float32))
    q = np.asarray(jnp.floor_divide(x, y), np.float32)
    assert q[0] == np.inf and q[1] == -np.inf and q[2] == -np.inf and q[3] == np.inf
    assert np.asarray(x[:1] // jnp.asarray(y[:1]), np.float32)[0] == np.inf


def test_floor_divide_grad_and_vmap():
    assert float(kiln.grad(lambda a: jnp.floor_divide(a, 2.0) + a)(3.0)) == 1.0
    out = kiln.vmap(jnp.floor_divide)(jnp.array([1.0, -1.0, 7.0]), jnp.array([0.0, 0.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(out), [np.inf, -np.inf, 3.0])


@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16"])
def test_signbit_of_nan_and_zero(jjnp, dtype):
    neg_nan = -np.array(np.nan, np.float32)
    x = np.array([neg_nan, np.nan, -0.0, 0.0, -np.inf, np.inf, 1.0, -2.0],
                 np.float32).astype(jnp.dtype(dtype))
    want = np.asarray(jjnp.signbit(x))
    assert want.tolist() == [True, False, True, False, True, False, False, True]
    np.testing.assert_array_equal(np.asarray(jnp.signbit(x)), want)
    np.testing.assert_array_equal(np.asarray(kiln.jit(jnp.signbit)(x)), want)
    np.testing.assert_array_equal(np.asarray(kiln.vmap(jnp.signbit)(x)), want)
    np.testing.assert_array_equal(np.asarray(jnp.copysign(np.float32(1), x[:1])), [-1.0])


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_expm1_special_values(jjnp, dtype):
    inf, nan = np.inf, np.nan
    pts = [(inf, 0.0), (inf, -0.0), (inf, 1.0), (inf, np.pi), (nan, 0.0), (nan, -0.0),
           (nan, 1.0), (-0.0, 0.0), (-0.0, -0.0), (0.0, -0.0), (0.0, 0.0), (-inf, 0.0),
           (-inf, 1.0), (1.0, 0.0), (-1e-20, 0.0), (5.0, -0.0), (1.0, inf), (-1.0, -0.0),
           (0.0, 1e-5), (2.0, 3.0), (-inf, nan), (nan, nan), (inf, nan)]
    z = np.array([complex(a, b) for a, b in pts], dtype)
    with np.errstate(all="ignore"):
        want = np.asarray(jjnp.expm1(z))
    got = np.asarray(jnp.expm1(z))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for part in (np.real, np.imag):
        ok = ~np.isnan(part(want))
        np.testing.assert_array_equal(np.signbit(part(got)[ok]), np.signbit(part(want)[ok]))
    np.testing.assert_allclose(np.asarray(kiln.jit(jnp.expm1)(z)), want, rtol=1e-6)
    # real inputs are unchanged (JAX's expm1: NumPy's differs on AVX-512 machines)
    np.testing.assert_array_equal(np.asarray(jnp.expm1(np.float32([-0.0, 1.0]))),
                                  np.asarray(jjnp.expm1(np.float32([-0.0, 1.0]))))
