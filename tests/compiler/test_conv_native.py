"""Convolutions compiled natively (``lower_conv.py``: patch tiles fed to BLAS) against the
reference backend, across layouts, strides, paddings, dilations and groups."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Conv, walk_steps

R = np.random.default_rng(0)


def _run(f, *args, tol=2e-4):
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    flat = [np.asarray(a) for a in args]
    got = exe(flat)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)
    return exe


def _convs(exe):
    return [s for s in walk_steps(exe.prog.steps) if isinstance(s, Conv)]


def _arr(*shape, dtype=np.float32):
    return R.standard_normal(shape).astype(dtype)


CASES = [
    # (lhs shape, rhs shape, kwargs)
    ((2, 3, 9, 8), (4, 3, 3, 2), dict(window_strides=(1, 1), padding="SAME")),
    ((2, 3, 9, 8), (4, 3, 3, 2), dict(window_strides=(2, 1), padding="VALID")),
    ((2, 3, 9, 8), (4, 3, 3, 2), dict(window_strides=(1, 2), padding=((2, 1), (-1, 2)),
                                      lhs_dilation=(2, 1), rhs_dilation=(1, 2))),
    ((2, 6, 7, 7), (6, 2, 3, 3), dict(window_strides=(1, 1), padding="SAME",
                                      feature_group_count=3)),
    ((3, 4, 6, 6), (8, 1, 3, 3), dict(window_strides=(2, 2), padding="SAME",
                                      feature_group_count=4)),
    ((2, 3, 20), (5, 3, 4), dict(window_strides=(3,), padding="SAME")),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(window_strides=(1, 2, 1), padding="SAME")),
    ((2, 3, 4, 4), (2, 3, 3, 5), dict(window_strides=(1, 1), padding=((0, 0), (1, 1)))),
]


@pytest.mark.parametrize("lhs, rhs, kw", CASES)
def test_conv_matches_reference(lhs, rhs, kw):
    exe = _run(lambda x, w: lax.conv_general_dilated(x, w, **kw), _arr(*lhs), _arr(*rhs))
    assert len(_convs(exe)) == 1


def test_empty_output_is_not_a_native_conv():
    x, w = _arr(2, 3, 4, 4), _arr(2, 3, 5, 5)
    f = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID")  # noqa: E731
    assert np.asarray(kiln.jit(f)(x, w)).shape == (2, 2, 0, 0)


@pytest.mark.parametrize("dn", [("NHWC", "HWIO", "NHWC"), ("NCHW", "OIHW", "NHWC"),
                                ("NHWC", "OIHW", "NCHW"), ("CHWN", "IOHW", "HWCN")])
def test_dimension_numbers(dn):
    shapes = {"N": 2, "C": 3, "H": 9, "W": 7}
    kshapes = {"O": 4, "I": 3, "H": 3, "W": 2}
    x = _arr(*(shapes[c] for c in dn[0]))
    w = _arr(*(kshapes[c] for c in dn[1]))
    exe = _run(lambda x, w: lax.conv_general_dilated(x, w, (2, 1), "SAME",
                                                     dimension_numbers=dn), x, w)
    assert len(_convs(exe)) == 1


@pytest.mark.parametrize("groups", [1, 2])
def test_gradients_of_both_operands(groups):
    x, w = _arr(3, 8, 8, 4), _arr(3, 3, 4 // groups, 6)
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(x, w):
        y = lax.conv_general_dilated(x, w, (2, 1), "SAME", dimension_numbers=dn,
                                     feature_group_count=groups)
        return jnp.sum(jnp.tanh(y) * y)
    exe = _run(lambda x, w: kiln.grad(loss, argnums=(0, 1))(x, w), x, w, tol=5e-4)
    # The forward and both gradients are native (the kernel gradient of a grouped
    # convolution has batch_group_count > 1).
    assert len(_convs(exe)) == 3
    assert not any(type(s).__name__ == "Island" for s in exe.prog.steps)


@pytest.mark.parametrize("lhs, rhs, bg, dn, kw", [
    ((4, 3, 7, 6), (6, 3, 3, 2), 2, None, dict(window_strides=(1, 1), padding="SAME")),
    ((6, 2, 8, 8), (9, 2, 3, 3), 3, None, dict(window_strides=(2, 1), padding="VALID",
                                               rhs_dilation=(1, 2))),
    ((7, 7, 8, 4), (3, 3, 4, 8), 4, ("HWNC", "HWIO", "NHWC"),
     dict(window_strides=(1, 1), padding=((1, 1), (0, 2)))),
])
def test_batch_group_count(lhs, rhs, bg, dn, kw):
    f = lambda x, w: lax.conv_general_dilated(  # noqa: E731
        x, w, batch_group_count=bg, dimension_numbers=dn, **kw)
    exe = _run(f, _arr(*lhs), _arr(*rhs))
    assert len(_convs(exe)) == 1
    jax = pytest.importorskip("jax")
    x, w = _arr(*lhs), _arr(*rhs)
    want = jax.lax.conv_general_dilated(x, w, batch_group_count=bg, dimension_numbers=dn,
                                        **kw)
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x, w)), np.asarray(want),
                               rtol=2e-4, atol=2e-4)


def test_fused_producer_and_epilogue():
    x, w, b = _arr(4, 10, 10, 3), _arr(3, 3, 3, 8), _arr(8)

    def f(x, w, b):
        y = lax.conv_general_dilated(jnp.maximum(x, 0.0) * 2.0, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.tanh(y + b)
    _run(f, x, w, b)


def test_float64_and_large_tiles():
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    try:
        x, w = _arr(2, 40, 40, 3, dtype=np.float64), _arr(5, 5, 3, 16, dtype=np.float64)
        exe = _run(lambda x, w: lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), x, w, tol=1e-10)
        assert len(_convs(exe)) == 1
    finally:
        kiln.config.update("jax_enable_x64", old)


def test_mixed_dtypes_stay_on_the_host():
    x = _arr(1, 2, 5, 5).astype(jnp.bfloat16)
    w = _arr(3, 2, 3, 3).astype(jnp.bfloat16)
    f = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",  # noqa: E731
                                              preferred_element_type=jnp.float32)
    closed = kiln.make_jaxpr(f)(x, w)
    exe = cpu.executable_for(closed)
    assert exe is None or not _convs(exe)


def test_jit_matches_eager():
    x, w = _arr(2, 3, 9, 8), _arr(4, 3, 3, 2)
    f = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME")  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x, w)), np.asarray(f(x, w)),
                               rtol=1e-5, atol=1e-5)


def test_kernel_gradient_convolution():
    x, w = _arr(8, 6, 6, 16), _arr(3, 3, 16, 8)
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(w):
        return jnp.sum(lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                               dimension_numbers=dn) ** 2)
    # The kernel gradient is a convolution with 16 "images" (input channels) of 9 output
    # positions (the kernel's), tiled several images at a time.
    exe = _run(lambda w: kiln.grad(loss)(w), w, tol=5e-4)
    assert any(c.n == 16 and c.out_sp == (3, 3) for c in _convs(exe))
