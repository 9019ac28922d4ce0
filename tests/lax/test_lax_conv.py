"""Parity of ``kiln.lax`` convolutions and ``reduce_window`` with ``jax.lax``: values,
shapes, dtypes, gradients, ``vmap`` and ``jit``, over a table of layouts, strides,
paddings, dilations and groupings."""
from __future__ import annotations

import numpy as np
import pytest
from _sampling import NUM_CASES, sample_cases

import kiln
from kiln import lax

jax = pytest.importorskip("jax")
jlax = jax.lax

RTOL = 1e-5
ATOL = 1e-5


def _close(actual, expected, rtol=RTOL, atol=ATOL):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def _rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# (id, lhs shape, rhs shape, kwargs of conv_general_dilated)
CONV_CASES = [
    ("1d_valid", (2, 3, 9), (4, 3, 3), dict(window_strides=(1,), padding="VALID")),
    ("1d_same_stride", (2, 3, 9), (4, 3, 4), dict(window_strides=(2,), padding="SAME")),
    ("1d_same_lower", (1, 2, 8), (3, 2, 4), dict(window_strides=(3,), padding="SAME_LOWER")),
    ("1d_nwc", (2, 7, 3), (3, 3, 5),
     dict(window_strides=(1,), padding="SAME", dimension_numbers=("NWC", "WIO", "NWC"))),
    ("2d_nchw_valid", (2, 3, 6, 5), (4, 3, 3, 2), dict(window_strides=(1, 1), padding="VALID")),
    ("2d_nchw_same_stride", (2, 3, 7, 6), (4, 3, 3, 3),
     dict(window_strides=(2, 2), padding="SAME")),
    ("2d_nhwc", (2, 6, 5, 3), (3, 3, 3, 4),
     dict(window_strides=(1, 2), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ("2d_mixed_layout", (5, 2, 3, 6), (2, 4, 3, 3),
     dict(window_strides=(1, 1), padding="VALID", dimension_numbers=("HNCW", "WOIH", "CWNH"))),
    ("2d_explicit", (1, 2, 5, 5), (3, 2, 3, 3),
     dict(window_strides=(1, 1), padding=((1, 2), (0, 1)))),
    ("2d_negative_pad", (1, 2, 7, 6), (3, 2, 2, 2),
     dict(window_strides=(1, 2), padding=((-1, 2), (1, -2)))),
    ("2d_rhs_dilation", (2, 2, 8, 7), (3, 2, 3, 2),
     dict(window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 3))),
    ("2d_lhs_dilation", (1, 2, 4, 5), (3, 2, 3, 3),
     dict(window_strides=(1, 1), padding=((2, 2), (1, 0)), lhs_dilation=(2, 3))),
    ("2d_both_dilation_stride", (2, 2, 5, 5), (2, 2, 2, 3),
     dict(window_strides=(2, 1), padding=((1, 1), (2, 0)), lhs_dilation=(2, 1),
          rhs_dilation=(1, 2))),
    ("2d_groups", (2, 6, 5, 5), (4, 3, 3, 3),
     dict(window_strides=(1, 1), padding="SAME", feature_group_count=2)),
    ("2d_depthwise_nhwc", (2, 5, 5, 3), (3, 3, 1, 6),
     dict(window_strides=(1, 1), padding="SAME", feature_group_count=3,
          dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ("2d_batch_groups", (4, 3, 5, 5), (6, 3, 2, 2),
     dict(window_strides=(1, 1), padding="VALID", batch_group_count=2)),
    ("3d_ncdhw", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2),
     dict(window_strides=(1, 2, 1), padding="SAME")),
    ("3d_ndhwc_dil", (2, 5, 4, 4, 2), (2, 2, 2, 2, 3),
     dict(window_strides=(1, 1, 2), padding=((1, 0), (0, 1), (1, 1)), rhs_dilation=(2, 1, 1),
          dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
    ("empty_output", (1, 1, 2, 2), (1, 1, 3, 3), dict(window_strides=(1, 1), padding="VALID")),
]


def _conv_fns(mod, kw):
    def f(x, w):
        return mod.conv_general_dilated(x, w, **kw)
    return f


def _jax_reference(jf, x, w, ct, xb, wb):
    """Everything JAX computes for one conv case, in a single jitted call (fast)."""
    def run(x, w, ct, xb, wb):
        loss = lambda a, b: (jf(a, b) * ct).sum()  # noqa: E731
        return (jf(x, w), jax.grad(loss, argnums=(0, 1))(x, w),
                jax.vmap(jf, (0, None))(xb, w), jax.vmap(jf)(xb, wb))
    return jax.jit(run)(x, w, ct, xb, wb)


def _sampled(cases, salt):
    """A case table sampled by KILN_NUM_GENERATED_CASES (tests/_sampling.py): two cases per
    group (the id's first word: rank or monoid) in the default tier, all in the full tier
    (tests/lax/test_conv_primitive.py and test_reduce_window_primitive.py cover the same
    primitives against JAX in more detail)."""
    return sample_cases([pytest.param(c, id=c[0]) for c in cases],
                        lambda p: p.values[0][0].split("_")[0], salt=salt,
                        n=None if NUM_CASES is None else 2 * NUM_CASES)


@pytest.mark.parametrize("case", _sampled(CONV_CASES, "lax_conv.conv"))
def test_conv_general_dilated(case):
    _, ls, rs, kw = case
    rng = np.random.default_rng(0)
    x, w = _rand(rng, ls), _rand(rng, rs)
    kf, jf = _conv_fns(lax, kw), _conv_fns(jlax, kw)
    out_shape = jax.eval_shape(jf, x, w).shape
    ct = _rand(rng, out_shape)
    xb, wb = _rand(rng, (2,) + ls), _rand(rng, (2,) + rs)
    expected, jg, jv0, jv1 = _jax_reference(jf, x, w, ct, xb, wb)
    _close(kf(x, w), expected)
    _close(kiln.jit(kf)(x, w), expected)
    kg = kiln.grad(lambda a, b: (kf(a, b) * ct).sum(), argnums=(0, 1))(x, w)
    _close(kg[0], jg[0], 1e-4, 1e-4)
    _close(kg[1], jg[1], 1e-4, 1e-4)
    # vmap over an extra leading axis of lhs only, and of both operands.
    _close(kiln.vmap(kf, (0, None))(xb, w), jv0)
    _close(kiln.vmap(kf)(xb, wb), jv1)


def test_conv_jvp_and_jit_grad():
    rng = np.random.default_rng(1)
    x, w = _rand(rng, (2, 3, 6, 6)), _rand(rng, (4, 3, 3, 3))
    tx, tw = _rand(rng, x.shape), _rand(rng, w.shape)
    kw = dict(window_strides=(2, 1), padding="SAME", rhs_dilation=(1, 2))
    kf, jf = _conv_fns(lax, kw), _conv_fns(jlax, kw)
    kp, kt = kiln.jvp(kf, (x, w), (tx, tw))
    jp, jt = jax.jvp(jf, (x, w), (tx, tw))
    _close(kp, jp)
    _close(kt, jt, 1e-4, 1e-4)
    kg = kiln.jit(kiln.grad(lambda a, b: kf(a, b).sum(), argnums=1))(x, w)
    jg = jax.grad(lambda a, b: jf(a, b).sum(), argnums=1)(x, w)
    _close(kg, jg, 1e-4, 1e-4)


def test_conv_dtypes():
    rng = np.random.default_rng(2)
    xi = rng.integers(-5, 5, (1, 2, 5, 5)).astype(np.int32)
    wi = rng.integers(-5, 5, (3, 2, 2, 2)).astype(np.int32)
    _close(lax.conv(xi, wi, (1, 1), "SAME"), jlax.conv(xi, wi, (1, 1), "SAME"))
    x8, w8 = xi.astype(np.int8), wi.astype(np.int8)
    _close(lax.conv(x8, w8, (1, 1), "VALID", preferred_element_type=np.int32),
           jlax.conv(x8, w8, (1, 1), "VALID", preferred_element_type=np.int32))
    xh, wh = _rand(rng, (1, 2, 5, 5), np.float16), _rand(rng, (3, 2, 2, 2), np.float16)
    _close(lax.conv(xh, wh, (1, 1), "VALID", preferred_element_type=np.float32),
           jlax.conv(xh, wh, (1, 1), "VALID", preferred_element_type=np.float32), 1e-3, 1e-3)
    _close(lax.conv(xh, wh, (1, 1), "VALID"), jlax.conv(xh, wh, (1, 1), "VALID"), 1e-2, 1e-2)
    with pytest.raises(TypeError):
        lax.conv(xi, wi.astype(np.float32), (1, 1), "SAME")


def test_conv_wrappers():
    rng = np.random.default_rng(3)
    x, w = _rand(rng, (2, 3, 7, 6)), _rand(rng, (4, 3, 3, 2))
    _close(lax.conv(x, w, (2, 1), "SAME"), jlax.conv(x, w, (2, 1), "SAME"))
    args = (x, w, (1, 2), ((1, 1), (0, 2)), (2, 1), (1, 2))
    _close(lax.conv_with_general_padding(*args), jlax.conv_with_general_padding(*args))
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NCHW", "OIHW", "NHWC"))
    jdn = jlax.conv_dimension_numbers(x.shape, w.shape, ("NCHW", "OIHW", "NHWC"))
    assert tuple(map(tuple, dn)) == tuple(map(tuple, jdn))
    assert isinstance(dn, lax.ConvDimensionNumbers)
    _close(lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=dn),
           jlax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=jdn))
    for mode in ("SAME", "SAME_LOWER", "VALID"):
        assert lax.padtype_to_pads((7, 5), (3, 4), (2, 3), mode) == \
            list(jlax.padtype_to_pads((7, 5), (3, 4), (2, 3), mode))
    for pads in ("SAME", ((1, 2), (0, 1))):
        assert lax.conv_general_shape_tuple((2, 7, 6, 3), (3, 2, 3, 4), (2, 1), pads,
                                            ("NHWC", "HWIO", "NHWC")) == \
            tuple(jlax.conv_general_shape_tuple((2, 7, 6, 3), (3, 2, 3, 4), (2, 1), pads,
                                                ("NHWC", "HWIO", "NHWC")))
    assert lax.conv_shape_tuple((2, 3, 7, 6), (4, 3, 3, 2), (1, 2), "VALID") == \
        tuple(jlax.conv_shape_tuple((2, 3, 7, 6), (4, 3, 3, 2), (1, 2), "VALID"))


def test_conv_errors():
    x, w = np.ones((1, 4, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float32)
    with pytest.raises(ValueError):
        lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2)
    with pytest.raises(ValueError):
        lax.conv_general_dilated(x, np.ones((2, 4, 3, 3), np.float32), (1, 1), "SAME",
                                 lhs_dilation=(2, 2))
    with pytest.raises(TypeError):
        lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW"))
    with pytest.raises(RuntimeError):
        lax.padtype_to_pads((4,), (2,), (1,), "FULL")


# (id, lhs shape, rhs shape, kwargs of conv_transpose)
TRANSPOSE_CASES = [
    ("1d_same", (2, 5, 3), (3, 3, 2), dict(strides=(2,), padding="SAME")),
    ("2d_valid", (1, 4, 5, 2), (3, 2, 2, 3), dict(strides=(2, 3), padding="VALID")),
    ("2d_same_tk", (2, 4, 4, 3), (3, 3, 2, 3),
     dict(strides=(2, 2), padding="SAME", transpose_kernel=True)),
    ("2d_explicit", (1, 4, 3, 2), (2, 3, 2, 3), dict(strides=(1, 2), padding=((1, 0), (2, 1)))),
    ("2d_consistent", (1, 4, 3, 2), (3, 3, 2, 2),
     dict(strides=(2, 2), padding=((1, 1), (0, 1)), use_consistent_padding=True,
          transpose_kernel=True)),
    ("2d_nchw_dil", (1, 2, 4, 4), (3, 2, 2, 2),
     dict(strides=(2, 1), padding="SAME", rhs_dilation=(1, 2),
          dimension_numbers=("NCHW", "OIHW", "NCHW"))),
    ("3d_valid", (1, 3, 2, 3, 2), (2, 2, 2, 2, 3), dict(strides=(1, 2, 2), padding="VALID")),
]


@pytest.mark.parametrize("case", _sampled(TRANSPOSE_CASES, "lax_conv.transpose"))
def test_conv_transpose(case):
    _, ls, rs, kw = case
    rng = np.random.default_rng(4)
    x, w = _rand(rng, ls), _rand(rng, rs)

    def kf(a, b):
        return lax.conv_transpose(a, b, **kw)

    def jf(a, b):
        return jlax.conv_transpose(a, b, **kw)

    out_shape = jax.eval_shape(jf, x, w).shape
    ct, xb = _rand(rng, out_shape), _rand(rng, (3,) + ls)
    expected, jg, jv, _ = _jax_reference(jf, x, w, ct, xb, np.stack([w] * 3))
    _close(kf(x, w), expected)
    kg = kiln.grad(lambda a, b: (kf(a, b) * ct).sum(), argnums=(0, 1))(x, w)
    _close(kg[0], jg[0], 1e-4, 1e-4)
    _close(kg[1], jg[1], 1e-4, 1e-4)
    _close(kiln.jit(kiln.vmap(kf, (0, None)))(xb, w), jv)


# (id, shape, computation name, init, kwargs of reduce_window)
WINDOW_CASES = [
    ("max_valid", (5, 6), "max", -np.inf, dict(window_dimensions=(2, 3))),
    ("max_pool_nhwc", (2, 6, 7, 3), "max", -np.inf,
     dict(window_dimensions=(1, 3, 3, 1), window_strides=(1, 2, 2, 1), padding="SAME")),
    ("max_same_lower", (7, 5), "max", -np.inf,
     dict(window_dimensions=(3, 2), window_strides=(2, 2), padding="SAME_LOWER")),
    ("add_avgpool", (2, 3, 6, 6), "add", 0.0,
     dict(window_dimensions=(1, 1, 2, 2), window_strides=(1, 1, 2, 2))),
    ("add_explicit_neg", (6, 7), "add", 0.0,
     dict(window_dimensions=(2, 3), window_strides=(1, 2), padding=((1, -1), (2, 1)))),
    ("add_dilations", (5, 6), "add", 0.0,
     dict(window_dimensions=(2, 2), window_strides=(1, 1), padding=((1, 1), (0, 2)),
          base_dilation=(2, 1), window_dilation=(1, 2))),
    ("min_stride_dil", (3, 8, 5), "min", np.inf,
     dict(window_dimensions=(1, 3, 2), window_strides=(1, 2, 1), padding="SAME",
          window_dilation=(1, 2, 1))),
    ("min_base_dil", (4, 5), "min", np.inf,
     dict(window_dimensions=(3, 2), padding=((1, 0), (1, 1)), base_dilation=(2, 2))),
    ("max_3d", (4, 5, 4), "max", -np.inf,
     dict(window_dimensions=(2, 2, 2), window_strides=(2, 1, 2), padding="SAME")),
    ("mul_1d", (6,), "mul", 1.0, dict(window_dimensions=(2,))),
    ("add_nonidentity_init", (4, 5), "add", 1.5,
     dict(window_dimensions=(2, 2), padding=((1, 0), (0, 1)))),
    ("add_nonidentity_init_base_dil", (3, 4), "add", -0.5,
     dict(window_dimensions=(2, 3), window_strides=(1, 2), padding="SAME",
          base_dilation=(2, 1))),
    ("max_nonidentity_init", (4, 5), "max", 0.25,
     dict(window_dimensions=(3, 2), window_strides=(1, 2), padding="SAME")),
]


@pytest.mark.parametrize("case", _sampled(WINDOW_CASES, "lax_conv.window"))
def test_reduce_window(case):
    _, shape, op, init, kw = case
    rng = np.random.default_rng(5)
    x = _rand(rng, shape)
    kop, jop = getattr(lax, op), getattr(jlax, op)

    def kf(a):
        return lax.reduce_window(a, np.float32(init), kop, **kw)

    def jf(a):
        return jlax.reduce_window(a, np.float32(init), jop, **kw)

    expected = jf(x)
    _close(kf(x), expected)
    _close(kiln.jit(kf)(x), expected)
    ct = _rand(rng, expected.shape)
    kgrad = kiln.grad(lambda a: (kf(a) * ct).sum())
    if init not in (0.0, 1.0, -np.inf, np.inf):
        pass  # JAX's generic (non-identity init) reduce_window has no transpose rule.
    elif op == "mul" or (op in ("max", "min") and "window_dilation" in kw):
        # JAX has no VJP for windowed products or for max/min pooling with window
        # dilation: finite differences
        # (exact for these piecewise-linear functions away from ties).
        t = _rand(rng, shape)
        eps = np.float32(1e-3)
        fd = ((np.asarray(kf(x + eps * t)) - np.asarray(kf(x - eps * t))) * ct).sum() / (2 * eps)
        np.testing.assert_allclose((np.asarray(kgrad(x)) * t).sum(), fd, rtol=1e-2, atol=1e-2)
    else:
        _close(kgrad(x), jax.grad(lambda a: (jf(a) * ct).sum())(x), 1e-4, 1e-4)
    xb = _rand(rng, (2,) + shape)
    _close(kiln.vmap(kf)(xb), jax.vmap(jf)(xb))


def test_reduce_window_int_and_shapes():
    rng = np.random.default_rng(6)
    x = rng.integers(-50, 50, (5, 6)).astype(np.int32)
    for op, init in (("max", np.iinfo(np.int32).min), ("min", np.iinfo(np.int32).max),
                     ("add", 0)):
        kw = dict(window_dimensions=(2, 3), window_strides=(2, 1), padding="SAME")
        _close(lax.reduce_window(x, np.int32(init), getattr(lax, op), **kw),
               jlax.reduce_window(x, np.int32(init), getattr(jlax, op), **kw))
    args = ((5, 6), (2, 3), (2, 1), ((1, 0), (0, 2)), (2, 1), (1, 2))
    assert lax.reduce_window_shape_tuple(*args) == \
        tuple(jlax.reduce_window_shape_tuple(*args))


def test_reduce_window_ties_and_nan():
    """Gradients on ties go to one element, as with JAX's select-and-scatter."""
    rng = np.random.default_rng(9)
    x = np.round(rng.standard_normal((5, 6))).astype(np.float32)
    x[1, 2] = np.nan
    kw = dict(window_dimensions=(2, 3), window_strides=(1, 2), padding="SAME")
    ct = _rand(rng, (5, 3))
    xs = x.copy()
    xs[1, 2] = 0.0
    for op, init in (("max", -np.inf), ("min", np.inf)):
        def kf(a, op=op, init=init):
            return lax.reduce_window(a, np.float32(init), getattr(lax, op), **kw)

        def jf(a, op=op, init=init):
            return jlax.reduce_window(a, np.float32(init), getattr(jlax, op), **kw)

        _close(kf(x), jf(x))
        _close(kiln.grad(lambda a: (kf(a) * ct).sum())(xs),
               jax.grad(lambda a: (jf(a) * ct).sum())(xs))


def test_reduce_window_traced_init():
    rng = np.random.default_rng(8)
    x = _rand(rng, (4, 6))
    kw = dict(window_dimensions=(2, 2), window_strides=(1, 2), padding=((1, 1), (0, 1)))
    for op in ("add", "max", "mul"):
        kf = kiln.jit(lambda a, i, op=op: lax.reduce_window(a, i, getattr(lax, op), **kw))
        jf = jax.jit(lambda a, i, op=op: jlax.reduce_window(a, i, getattr(jlax, op), **kw))
        for init in (0.0, 1.0, 0.75):
            _close(kf(x, np.float32(init)), jf(x, np.float32(init)))


def test_reduce_window_general_reducers():
    """Python reducers and pytrees of operands bind the generic ``reduce_window`` primitive
    (tests/lax/test_reduce_window_primitive.py has the details); bad trees raise JAX's errors."""
    x = np.arange(4, dtype=np.float32)
    _close(lax.reduce_window(x, np.float32(0), lambda a, b: a + b, (2,)),
           jlax.reduce_window(x, np.float32(0), lambda a, b: a + b, (2,)))
    with pytest.raises(ValueError, match="same tree structure"):
        lax.reduce_window((x, x), (np.float32(0),), lax.add, (2,))


def test_cnn_end_to_end():
    """A tiny CNN (conv, relu, max pool, dense) and its gradient, as in a JAX training step."""
    rng = np.random.default_rng(7)
    params = dict(w1=_rand(rng, (3, 3, 1, 4)) * 0.3, w2=_rand(rng, (3, 3, 4, 4)) * 0.3,
                  d=_rand(rng, (4, 3)) * 0.3)
    x = _rand(rng, (2, 8, 8, 1))
    dn = ("NHWC", "HWIO", "NHWC")

    def make(L, np_):
        def loss(p, x):
            h = L.conv_general_dilated(x, p["w1"], (1, 1), "SAME", dimension_numbers=dn)
            h = L.max(h, np.float32(0))
            h = L.reduce_window(h, -np.inf, L.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            h = L.conv_general_dilated(h, p["w2"], (2, 2), "SAME", dimension_numbers=dn)
            h = L.reduce_window(h, 0.0, L.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
            return (np_.reshape(h, (2, -1)) @ p["d"]).sum() ** 2
        return loss

    kl, kg = kiln.value_and_grad(make(lax, kiln.numpy))(params, x)
    jl, jg = jax.value_and_grad(make(jlax, jax.numpy))(params, x)
    _close(kl, jl, 1e-4, 1e-4)
    for k in params:
        _close(kg[k], jg[k], 1e-4, 1e-4)


def test_conv_is_one_primitive():
    x = np.ones((1, 2, 4, 4), np.float32)
    jaxpr = kiln.make_jaxpr(
        lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", feature_group_count=2))(
            x, np.ones((4, 1, 2, 2), np.float32))
    assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["conv_general_dilated"]
