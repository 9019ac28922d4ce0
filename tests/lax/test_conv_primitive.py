"""The ``conv_general_dilated`` primitive against ``jax.lax``: printed jaxprs, values
(f32/f64/f16/bf16/integers/bool/complex, ``preferred_element_type``), abstract
evaluation and its errors, ``jvp``, ``grad`` of both operands (and second order),
``vmap`` over either or both operands on several axes, ``jit``, plus finite-difference
and adjoint (dot-product) checks of the transpose rules, over a table of layouts,
strides, paddings, dilations and feature/batch groups in 1-D, 2-D and 3-D."""
from __future__ import annotations

import collections
import zlib

import numpy as np
import pytest
from _sampling import NUM_CASES, sample_cases

import kiln
from kiln import lax
from kiln.config import config_context
from kiln.lax.conv_rules import conv_general_dilated_p

jax = pytest.importorskip("jax")
jlax = jax.lax
jnp = jax.numpy
ml_dtypes = pytest.importorskip("ml_dtypes")

pytestmark = pytest.mark.parity


def _close(actual, expected, tol=1e-5):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual.astype(np.complex128 if actual.dtype.kind == "c"
                                                 else np.float64),
                                   np.asarray(expected).astype(actual.dtype).astype(
                                       np.complex128 if actual.dtype.kind == "c"
                                       else np.float64), rtol=tol, atol=tol)


def _rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


NHWC = ("NHWC", "HWIO", "NHWC")

# (id, lhs shape, rhs shape, kwargs of conv_general_dilated)
FAST_CASES = [
    ("1d_valid", (2, 3, 9), (4, 3, 3), dict(window_strides=(1,), padding="VALID")),
    ("1d_nwc_same_stride", (2, 8, 3), (3, 3, 4),
     dict(window_strides=(2,), padding="SAME", dimension_numbers=("NWC", "WIO", "NWC"))),
    ("2d_nchw_same", (2, 3, 6, 5), (4, 3, 3, 3), dict(window_strides=(1, 1), padding="SAME")),
    ("2d_nhwc_stride", (2, 7, 6, 3), (3, 2, 3, 4),
     dict(window_strides=(2, 3), padding="SAME", dimension_numbers=NHWC)),
    ("2d_negative_pad", (1, 2, 7, 6), (3, 2, 2, 3),
     dict(window_strides=(1, 2), padding=((-1, 2), (1, -2)))),
    ("2d_lhs_dil", (1, 2, 4, 5), (3, 2, 3, 2),
     dict(window_strides=(2, 1), padding=((2, 1), (1, 0)), lhs_dilation=(2, 3))),
    ("2d_rhs_dil_stride", (2, 2, 9, 8), (3, 2, 3, 2),
     dict(window_strides=(2, 2), padding="SAME", rhs_dilation=(2, 3))),
    ("2d_groups_nhwc", (2, 5, 6, 6), (3, 3, 2, 9),
     dict(window_strides=(1, 2), padding="SAME", feature_group_count=3,
          dimension_numbers=NHWC)),
    ("2d_depthwise", (2, 4, 6, 5), (3, 2, 1, 8),
     dict(window_strides=(2, 1), padding=((1, 1), (0, 1)), feature_group_count=4,
          dimension_numbers=("NCHW", "HWIO", "NHWC"))),
    ("2d_batch_groups", (6, 3, 5, 5), (4, 3, 2, 2),
     dict(window_strides=(1, 2), padding=((0, 1), (1, 0)), batch_group_count=2)),
    ("3d_ndhwc", (1, 4, 5, 4, 2), (2, 2, 3, 2, 3),
     dict(window_strides=(1, 2, 1), padding=((1, 0), (0, 1), (1, 1)), rhs_dilation=(2, 1, 1),
          dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
]

SLOW_CASES = [
    ("1d_same_lower", (1, 2, 8), (3, 2, 4), dict(window_strides=(3,), padding="SAME_LOWER")),
    ("1d_all_dilations", (2, 2, 6), (2, 2, 3),
     dict(window_strides=(3,), padding=((2, -1),), lhs_dilation=(2,), rhs_dilation=(2,))),
    ("1d_batch_groups_dil", (4, 2, 7), (8, 2, 2),
     dict(window_strides=(2,), padding="VALID", rhs_dilation=(3,), batch_group_count=4,
          dimension_numbers=("NCH", "OIH", "NCH"))),
    ("1d_groups_lhs_dil", (2, 6, 5), (4, 3, 2),
     dict(window_strides=(1,), padding=((1, 2),), lhs_dilation=(3,), feature_group_count=2)),
    ("2d_nchw_valid", (2, 3, 6, 5), (4, 3, 3, 2), dict(window_strides=(1, 1), padding="VALID")),
    ("2d_nchw_same_stride", (2, 3, 7, 6), (4, 3, 3, 3),
     dict(window_strides=(2, 2), padding="SAME")),
    ("2d_mixed_layout", (5, 2, 3, 6), (2, 4, 3, 3),
     dict(window_strides=(1, 1), padding="VALID", dimension_numbers=("HNCW", "WOIH", "CWNH"))),
    ("2d_mixed_layout_groups", (6, 2, 4, 5), (2, 2, 3, 6),
     dict(window_strides=(2, 1), padding="SAME", feature_group_count=2,
          dimension_numbers=("HNCW", "WIHO", "WCNH"))),
    ("2d_mixed_layout_bgroups", (6, 2, 4, 5), (2, 4, 3, 6),
     dict(window_strides=(1, 2), padding=((1, 0), (0, 2)), batch_group_count=2,
          dimension_numbers=("HNCW", "WIHO", "NWHC"))),
    ("2d_explicit", (1, 2, 5, 5), (3, 2, 3, 3),
     dict(window_strides=(1, 1), padding=((1, 2), (0, 1)))),
    ("2d_big_pad", (1, 2, 3, 3), (2, 2, 2, 2),
     dict(window_strides=(2, 1), padding=((4, 3), (3, 5)))),
    ("2d_crop_to_kernel", (1, 2, 6, 6), (2, 2, 3, 3),
     dict(window_strides=(1, 1), padding=((-2, -1), (-3, 0)))),
    ("2d_stride_gt_kernel", (2, 2, 9, 10), (3, 2, 2, 3),
     dict(window_strides=(4, 5), padding="VALID")),
    ("2d_lhs_dil_stride_neg", (1, 3, 4, 4), (2, 3, 3, 2),
     dict(window_strides=(2, 3), padding=((-1, 2), (2, -1)), lhs_dilation=(3, 2),
          rhs_dilation=(1, 2))),
    ("2d_depthwise_mult", (2, 3, 5, 5), (6, 1, 3, 3),
     dict(window_strides=(1, 1), padding="SAME", feature_group_count=3, rhs_dilation=(2, 1))),
    ("2d_groups_lhs_dil", (1, 4, 3, 4), (6, 2, 2, 2),
     dict(window_strides=(1, 1), padding=((1, 1), (0, 1)), lhs_dilation=(2, 2),
          feature_group_count=2)),
    ("2d_batch_groups_stride_dil", (4, 2, 7, 6), (6, 2, 3, 2),
     dict(window_strides=(2, 1), padding=((1, -1), (2, 0)), lhs_dilation=(1, 2),
          rhs_dilation=(2, 1), batch_group_count=2)),
    ("2d_batch_groups_nhwc", (6, 5, 4, 2), (2, 2, 2, 6),
     dict(window_strides=(1, 1), padding="SAME", batch_group_count=3,
          dimension_numbers=NHWC)),
    ("2d_1x1", (3, 4, 4, 5), (1, 1, 5, 2),
     dict(window_strides=(2, 2), padding="VALID", dimension_numbers=NHWC)),
    ("2d_empty_output", (1, 1, 2, 2), (1, 1, 3, 3),
     dict(window_strides=(1, 1), padding="VALID")),
    ("3d_ncdhw_same", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2),
     dict(window_strides=(1, 2, 1), padding="SAME")),
    ("3d_groups_dil", (2, 4, 3, 4, 5), (4, 2, 2, 2, 2),
     dict(window_strides=(1, 1, 2), padding=((0, 1), (1, 0), (-1, 1)), lhs_dilation=(1, 2, 1),
          rhs_dilation=(1, 1, 2), feature_group_count=2)),
    ("3d_batch_groups", (4, 2, 3, 3, 4), (4, 2, 2, 1, 2),
     dict(window_strides=(2, 1, 1), padding="VALID", batch_group_count=2)),
]

ALL_CASES = [pytest.param(c, id=c[0]) for c in FAST_CASES] + \
    [pytest.param(c, id=c[0], marks=pytest.mark.slow) for c in SLOW_CASES]


def _fns(kw):
    def kf(x, w):
        return lax.conv_general_dilated(x, w, **kw)

    def jf(x, w):
        return jlax.conv_general_dilated(x, w, **kw)
    return kf, jf


def _jax_reference(jf, x, w, tx, tw, ct, xb, wb):
    """Everything JAX computes for one case, in one jitted call."""
    def run(x, w, tx, tw, ct, xb, wb):
        def loss(a, b):
            return (jf(a, b) * ct).sum()
        g = jax.grad(loss, argnums=(0, 1))(x, w)
        # second order: d/dx <grad_w loss, tw> and d/dw <grad_x loss, tx>
        h = (jax.grad(lambda a: (jax.grad(loss, 1)(a, w) * tw).sum())(x),
             jax.grad(lambda b: (jax.grad(loss, 0)(x, b) * tx).sum())(w))
        return (jf(x, w), g, jax.jvp(jf, (x, w), (tx, tw))[1], h,
                jax.vmap(jf, (0, None))(xb, w), jax.vmap(jf, (None, 0))(x, wb),
                jax.vmap(jf)(xb, wb))
    return jax.jit(run)(x, w, tx, tw, ct, xb, wb)


def _sampled(salt):
    """ALL_CASES sampled by KILN_NUM_GENERATED_CASES (tests/_sampling.py): two layouts per
    rank in the default tier (rotating between the tests), all in the full tier."""
    return sample_cases(ALL_CASES, lambda p: p.values[0][0].split("_")[0], salt=salt,
                        n=None if NUM_CASES is None else 2 * NUM_CASES)


@pytest.mark.parametrize("case", _sampled("conv.against_jax"))
def test_against_jax(case):
    _, ls, rs, kw = case
    rng = np.random.default_rng(zlib.crc32(case[0].encode()))
    x, w = _rand(rng, ls), _rand(rng, rs)
    tx, tw = _rand(rng, ls), _rand(rng, rs)
    kf, jf = _fns(kw)
    out_shape = jax.eval_shape(jf, x, w).shape
    ct = _rand(rng, out_shape)
    xb, wb = _rand(rng, (3,) + ls), _rand(rng, (3,) + rs)
    ref = _jax_reference(jf, x, w, tx, tw, ct, xb, wb)
    value, (gx, gw), jt, (hx, hw), vl, vr, vb = ref

    assert kiln.eval_shape(kf, x, w).shape == out_shape
    _close(kf(x, w), value)
    _close(kiln.jit(kf)(x, w), value)

    def loss(a, b):
        return (kf(a, b) * ct).sum()
    kg = kiln.grad(loss, argnums=(0, 1))(x, w)
    _close(kg[0], gx, 1e-4)
    _close(kg[1], gw, 1e-4)
    kg = kiln.jit(kiln.grad(loss, argnums=(0, 1)))(x, w)
    _close(kg[0], gx, 1e-4)
    _close(kg[1], gw, 1e-4)
    _close(kiln.jvp(kf, (x, w), (tx, tw))[1], jt, 1e-4)
    _close(kiln.grad(lambda a: (kiln.grad(loss, 1)(a, w) * tw).sum())(x), hx, 1e-4)
    _close(kiln.grad(lambda b: (kiln.grad(loss, 0)(x, b) * tx).sum())(w), hw, 1e-4)

    # vmap over lhs, rhs or both, the mapped axis anywhere.
    for a in (0, 1, len(ls)):
        _close(kiln.vmap(kf, (a, None))(np.moveaxis(xb, 0, a), w), vl)
    for a in (0, 2, len(rs)):
        _close(kiln.vmap(kf, (None, a))(x, np.moveaxis(wb, 0, a)), vr)
    for a, b in ((0, 0), (1, len(rs)), (len(ls), 1)):
        _close(kiln.vmap(kf, (a, b))(np.moveaxis(xb, 0, a), np.moveaxis(wb, 0, b)), vb)
    _close(kiln.jit(kiln.vmap(kf))(xb, wb), vb)
    _close(kiln.vmap(kf, (0, None), out_axes=1)(xb, w), np.moveaxis(np.asarray(vl), 0, 1))


@pytest.mark.parametrize("case", _sampled("conv.adjoint_fd"))
def test_adjoint_and_finite_differences(case):
    """Transposes are adjoints of the JVP, and the JVP matches central differences
    (exact for a bilinear map, up to rounding), in float64."""
    _, ls, rs, kw = case
    rng = np.random.default_rng(7)
    kf, _ = _fns(kw)
    with config_context(jax_enable_x64=True):
        x, w = _rand(rng, ls, np.float64), _rand(rng, rs, np.float64)
        tx, tw = _rand(rng, ls, np.float64), _rand(rng, rs, np.float64)
        out, jt = kiln.jvp(kf, (x, w), (tx, tw))
        ct = _rand(rng, out.shape, np.float64)
        _, vjp = kiln.vjp(kf, x, w)
        cx, cw = vjp(ct)
        lhs = float(np.sum(np.asarray(jt) * ct))
        rhs = float(np.sum(np.asarray(cx) * tx) + np.sum(np.asarray(cw) * tw))
        np.testing.assert_allclose(lhs, rhs, rtol=1e-10, atol=1e-10)
        eps = 1e-3
        fd = (np.asarray(kf(x + eps * tx, w + eps * tw)) -
              np.asarray(kf(x - eps * tx, w - eps * tw))) / (2 * eps)
        np.testing.assert_allclose(np.asarray(jt), fd, rtol=1e-8, atol=1e-8)
        # the cotangent of each operand alone, against a direct reference
        ref = _np_conv(x, w, **kw)
        np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------------------------
# an independent reference (a loop over output positions, float64)


def _np_conv(x, w, *, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
             dimension_numbers=None, feature_group_count=1, batch_group_count=1):
    dn = lax.conv_dimension_numbers(x.shape, w.shape, dimension_numbers)
    nsp = x.ndim - 2
    ld = lhs_dilation or (1,) * nsp
    rd = rhs_dilation or (1,) * nsp
    xc = np.transpose(x, dn.lhs_spec).astype(np.float64)
    wc = np.transpose(w, dn.rhs_spec).astype(np.float64)
    if isinstance(padding, str):
        ks = [(k - 1) * r + 1 for k, r in zip(wc.shape[2:], rd)]
        padding = lax.padtype_to_pads(xc.shape[2:], ks, window_strides, padding)
    # dilate
    dil = np.zeros(xc.shape[:2] + tuple((s - 1) * d + 1 for s, d in zip(xc.shape[2:], ld)))
    dil[(slice(None),) * 2 + tuple(slice(None, None, d) for d in ld)] = xc
    # pad (negative crops)
    for i, (lo, hi) in enumerate(padding):
        ax = 2 + i
        if lo < 0:
            dil = np.take(dil, range(-lo, dil.shape[ax]), axis=ax)
        if hi < 0:
            dil = np.take(dil, range(0, dil.shape[ax] + hi), axis=ax)
        widths = [(0, 0)] * dil.ndim
        widths[ax] = (max(lo, 0), max(hi, 0))
        dil = np.pad(dil, widths)
    n, c = dil.shape[:2]
    o, i_ = wc.shape[:2]
    ks = wc.shape[2:]
    eff = [(k - 1) * r + 1 for k, r in zip(ks, rd)]
    out_sp = [max(0, (p - e) // s + 1) for p, e, s in zip(dil.shape[2:], eff, window_strides)]
    g = feature_group_count
    b = batch_group_count
    out = np.zeros((n // b, o) + tuple(out_sp))
    og = o // max(g, b)
    for pos in np.ndindex(*out_sp):
        sl = tuple(slice(p * s, p * s + e, r)
                   for p, s, e, r in zip(pos, window_strides, eff, rd))
        patch = dil[(slice(None), slice(None)) + sl]            # (N, C, K...)
        for oi in range(o):
            grp = oi // og
            if b > 1:
                pt = patch[grp * (n // b):(grp + 1) * (n // b)]
            else:
                pt = patch[:, grp * i_:(grp + 1) * i_] if g > 1 else patch
            out[(slice(None), oi) + pos] = np.tensordot(
                pt, wc[oi], axes=(list(range(1, pt.ndim)), list(range(wc.ndim - 1))))
    return np.transpose(out, np.argsort(dn.out_spec))


# ----------------------------------------------------------------------------------------------
# printed jaxprs


def test_jaxpr_text_plain_nhwc():
    x, w = np.ones((1, 5, 5, 3), np.float32), np.ones((3, 3, 3, 4), np.float32)

    def f(L):
        return lambda a, b: L.conv_general_dilated(a, b, (1, 1), "SAME",
                                                   dimension_numbers=NHWC)
    assert str(kiln.make_jaxpr(f(lax))(x, w)) == str(jax.make_jaxpr(f(jlax))(x, w))


def test_jaxpr_text_grouped():
    x, w = np.ones((2, 4, 5, 5), np.float32), np.ones((6, 2, 3, 3), np.float32)

    def f(L):
        return lambda a, b: L.conv_general_dilated(
            a, b, (2, 1), [(1, 0), (0, -1)], rhs_dilation=(1, 2), feature_group_count=2,
            precision="highest", preferred_element_type=np.float32)
    assert str(kiln.make_jaxpr(f(lax))(x, w)) == str(jax.make_jaxpr(f(jlax))(x, w))


def test_jaxpr_text_batch_groups_and_lhs_dilation():
    x, w = np.ones((4, 3, 5, 6), np.float32), np.ones((2, 4, 6, 3), np.float32)

    def f(L):
        return lambda a, b: L.conv_general_dilated(
            a, b, (1, 2), [(2, 1), (0, 0)], lhs_dilation=(2, 1), batch_group_count=2,
            dimension_numbers=("NCHW", "HWOI", "NHWC"), precision=L.Precision.HIGH)
    assert str(kiln.make_jaxpr(f(lax))(x, w)) == str(jax.make_jaxpr(f(jlax))(x, w))


def _conv_eqns(jaxpr):
    return [e for e in jaxpr.eqns if e.primitive.name == "conv_general_dilated"]


def _type(aval):
    return tuple(aval.shape), np.dtype(aval.dtype).name


def _params_text(eqn):
    return tuple(sorted((k, str(v)) for k, v in eqn.params.items()))


@pytest.mark.parametrize("kw", [
    dict(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC),
    dict(window_strides=(2, 1), padding=((1, -1), (2, 0)), rhs_dilation=(1, 2),
         lhs_dilation=(2, 1), feature_group_count=2, dimension_numbers=NHWC),
    dict(window_strides=(1, 2), padding="VALID", batch_group_count=2,
         dimension_numbers=NHWC),
], ids=["plain", "groups_dilations", "batch_groups"])
def test_grad_jaxpr_matches_jax(kw):
    x = np.ones((2, 7, 6, 4), np.float32)
    w = np.ones((3, 2, 4 // kw.get("feature_group_count", 1), 6), np.float32)
    kf, jf = _fns(kw)

    def loss(f):
        return lambda a, b: f(a, b).sum()
    kj = kiln.make_jaxpr(kiln.grad(loss(kf), argnums=(0, 1)))(x, w).jaxpr
    jj = jax.make_jaxpr(jax.grad(loss(jf), argnums=(0, 1)))(x, w).jaxpr
    # JAX keeps the (dead) primal conv and its reduce_sum; kiln drops them.
    jnames = collections.Counter(e.primitive.name for e in jj.eqns)
    jnames.subtract({"conv_general_dilated": 1, "reduce_sum": 1})
    knames = collections.Counter(e.primitive.name for e in kj.eqns)
    assert +jnames == +knames
    jconv = sorted(_params_text(e) for e in _conv_eqns(jj))
    kconv = sorted(_params_text(e) for e in _conv_eqns(kj))
    for p in kconv:
        assert p in jconv
    assert len(kconv) == 2 and len(jconv) == 3
    # the same equations (in- and output types too) in the cotangent convolutions
    jtxt = {(_type(e.outvars[0].aval), _params_text(e)) for e in _conv_eqns(jj)}
    ktxt = {(_type(e.outvars[0].aval), _params_text(e)) for e in _conv_eqns(kj)}
    assert ktxt <= jtxt


def test_batched_jaxpr_is_one_conv():
    rng = np.random.default_rng(0)
    x = _rand(rng, (3, 2, 4, 6, 6))
    for kw in (dict(), dict(feature_group_count=2), dict(batch_group_count=2)):
        ww = _rand(rng, (3, 3, 3, 4 // kw.get("feature_group_count", 1), 4))

        def f(a, b, kw=kw):
            return lax.conv_general_dilated(a, b, (1, 1), "SAME",
                                            dimension_numbers=("NCHW", "HWIO", "NHWC"), **kw)
        for axes in ((0, None), (None, 0), (0, 0)):
            args = (x if axes[0] == 0 else x[0], ww if axes[1] == 0 else ww[0])
            jaxpr = kiln.make_jaxpr(kiln.vmap(f, axes))(*args).jaxpr
            names = collections.Counter(e.primitive.name for e in jaxpr.eqns)
            assert names["conv_general_dilated"] == 1, names
            assert set(names) <= {"conv_general_dilated", "transpose", "reshape"}, names


# ----------------------------------------------------------------------------------------------
# dtypes


DTYPE_CASES = [
    (np.float32, None, 1e-5),
    (np.float16, None, 2e-2),
    (ml_dtypes.bfloat16, None, 1e-1),
    (np.float16, np.float32, 1e-3),
    (ml_dtypes.bfloat16, np.float32, 1e-3),
    (np.int8, None, 0),
    (np.int8, np.int32, 0),
    (np.int8, np.float32, 1e-5),
    (np.int16, np.int32, 0),
    (np.int32, None, 0),
    (np.uint8, None, 0),
    (np.uint8, np.int32, 0),
    (np.bool_, None, 0),
    (np.complex64, None, 1e-5),
]


# One case per input dtype in the default tier (tests/_sampling.py), all in the full tier.
@pytest.mark.parametrize("dtype,pref,tol", sample_cases(
    [pytest.param(d, p, tol, id=f"{np.dtype(d).name}-{np.dtype(p).name if p else 'none'}")
     for d, p, tol in DTYPE_CASES], lambda c: np.dtype(c.values[0]).name, salt="conv.dtypes"))
def test_dtypes(dtype, pref, tol):
    rng = np.random.default_rng(3)
    if np.dtype(dtype).kind in "iub":
        lo = 0 if np.dtype(dtype).kind in "ub" else -100
        hi = 2 if np.dtype(dtype) == np.bool_ else 100
        x = rng.integers(lo, hi, (2, 4, 6, 5)).astype(dtype)
        w = rng.integers(lo, hi, (3, 2, 4, 2)).astype(dtype)
    else:
        x = rng.standard_normal((2, 4, 6, 5)).astype(dtype)
        w = rng.standard_normal((3, 2, 4, 2)).astype(dtype)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(x.shape).astype(dtype)
            w = w + 1j * rng.standard_normal(w.shape).astype(dtype)
    kw = dict(window_strides=(1, 2), padding="SAME", feature_group_count=2,
              dimension_numbers=("NCHW", "HWOI", "NCHW"), preferred_element_type=pref)
    kf, jf = _fns(kw)
    expected = jf(x, w)
    _close(kf(x, w), expected, tol)
    _close(kiln.jit(kf)(x, w), expected, tol)
    _close(kiln.vmap(kf, (0, None))(np.stack([x, x]), w), jax.vmap(jf, (0, None))(
        np.stack([x, x]), w), tol)


@pytest.mark.parametrize("dtype,pref", [(np.float16, None), (ml_dtypes.bfloat16, None),
                                        (np.float16, np.float32),
                                        (ml_dtypes.bfloat16, np.float32),
                                        (np.complex64, None)])
def test_low_precision_and_complex_grads(dtype, pref):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 5, 4)).astype(dtype)
    w = rng.standard_normal((2, 3, 2, 6)).astype(dtype)
    kw = dict(window_strides=(2, 1), padding="SAME", feature_group_count=2,
              dimension_numbers=NHWC, preferred_element_type=pref)
    kf, jf = _fns(kw)
    tol = 1e-4 if pref is not None else (3e-2 if dtype == np.float16 else 2e-1)
    if np.dtype(dtype).kind == "c":
        tol = 1e-4

    def loss(f):
        return lambda a, b: f(a, b).real.astype(np.float32).sum() * 0.5
    kg = kiln.grad(loss(kf), argnums=(0, 1))(x, w)
    jg = jax.grad(loss(jf), argnums=(0, 1))(x, w)
    _close(kg[0], jg[0], tol)
    _close(kg[1], jg[1], tol)
    # the cotangent convolutions of a preferred-type conv keep JAX's dtypes
    kj = kiln.make_jaxpr(kiln.grad(loss(kf), argnums=(0, 1)))(x, w).jaxpr
    jj = jax.make_jaxpr(jax.grad(loss(jf), argnums=(0, 1)))(x, w).jaxpr
    ktypes = sorted(_type(e.outvars[0].aval) for e in _conv_eqns(kj))
    jtypes = sorted(_type(e.outvars[0].aval) for e in _conv_eqns(jj))
    assert all(t in jtypes for t in ktypes)


def test_float64():
    rng = np.random.default_rng(5)
    with config_context(jax_enable_x64=True), jax.enable_x64(True):
        x, w = _rand(rng, (2, 3, 7, 6), np.float64), _rand(rng, (6, 1, 3, 2), np.float64)
        kw = dict(window_strides=(2, 1), padding=((1, 2), (-1, 1)), rhs_dilation=(2, 1),
                  feature_group_count=3)
        kf, jf = _fns(kw)
        _close(kf(x, w), jf(x, w), 1e-12)
        ct = _rand(rng, jf(x, w).shape, np.float64)
        kg = kiln.grad(lambda a, b: (kf(a, b) * ct).sum(), argnums=(0, 1))(x, w)
        jg = jax.grad(lambda a, b: (jf(a, b) * ct).sum(), argnums=(0, 1))(x, w)
        _close(kg[0], jg[0], 1e-12)
        _close(kg[1], jg[1], 1e-12)


def test_weak_types():
    def f(L, np_):
        def g(a):
            x = np_.broadcast_to(1.0, (1, 2, 5, 5))
            w = np_.broadcast_to(2.0, (3, 2, 3, 3))
            return (L.conv(x, w, (1, 1), "VALID"), L.conv(x, a, (1, 1), "VALID"),
                    L.conv(x, w, (1, 1), "VALID", preferred_element_type=np.float32))
        return g
    w = np.ones((3, 2, 3, 3), np.float32)
    kj = kiln.make_jaxpr(f(lax, kiln.numpy))(w)
    jj = jax.make_jaxpr(f(jlax, jnp))(w)
    assert [a.weak_type for a in kj.out_avals] == [a.weak_type for a in jj.out_avals] == \
        [True, False, True]
    kv = f(lax, kiln.numpy)(w)
    assert [v.weak_type for v in kv] == [True, False, True]


# ----------------------------------------------------------------------------------------------
# abstract evaluation errors


def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None, None


ERROR_CASES = {
    "dtype_mismatch": lambda L, x, w: L.conv(x, w.astype(np.int32), (1, 1), "VALID"),
    "feature_groups": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), "SAME",
                                                             feature_group_count=3),
    "in_features": lambda L, x, w: L.conv_general_dilated(x, w[:, :1], (1, 1), "SAME"),
    "groups_out_features": lambda L, x, w: L.conv_general_dilated(
        np.ones((1, 4, 5, 5), np.float32), w, (1, 1), "SAME", feature_group_count=2),
    "batch_groups_batch": lambda L, x, w: L.conv_general_dilated(
        x, np.ones((4, 2, 3, 3), np.float32), (1, 1), "SAME", batch_group_count=2),
    "batch_groups_out": lambda L, x, w: L.conv_general_dilated(
        np.ones((2, 2, 5, 5), np.float32), w, (1, 1), "SAME", batch_group_count=2),
    "both_groups": lambda L, x, w: L.conv_general_dilated(
        np.ones((2, 4, 5, 5), np.float32), np.ones((4, 2, 3, 3), np.float32), (1, 1),
        "SAME", batch_group_count=2, feature_group_count=2),
    "zero_groups": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), "VALID",
                                                          feature_group_count=0),
    "zero_batch_groups": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), "VALID",
                                                                batch_group_count=0),
    "strides_len": lambda L, x, w: L.conv_general_dilated(x, w, (1,), [(0, 0), (0, 0)]),
    "pads_len": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), [(0, 0)]),
    "pads_float": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), [(0.5, 0), (0, 0)]),
    "negative_pad": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), [(-3, -3), (0, 0)]),
    "pref_float_to_int": lambda L, x, w: L.conv(x, w, (1, 1), "VALID",
                                                preferred_element_type=np.int32),
    "pref_narrower": lambda L, x, w: L.conv(x, w, (1, 1), "VALID",
                                            preferred_element_type=np.float16),
    "pref_signedness": lambda L, x, w: L.conv(x.astype(np.int8), w.astype(np.int8), (1, 1),
                                              "VALID", preferred_element_type=np.uint32),
    "rank": lambda L, x, w: L.conv_general_dilated(x, w[0], (1, 1), "VALID"),
    "string_pad_lhs_dil": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), "SAME",
                                                                 lhs_dilation=(2, 1)),
    "dn_strings": lambda L, x, w: L.conv_general_dilated(x, w, (1, 1), "SAME",
                                                         dimension_numbers=("NCHW", "OIHW")),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_errors_match_jax(name):
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    fn = ERROR_CASES[name]
    kt, km = _err(lambda: fn(lax, x, w))
    jt, jm = _err(lambda: fn(jlax, x, w))
    assert jt is not None
    assert kt is jt, (km, jm)
    assert km == jm.replace("np.int64(5)", "5")
    # the same check under jit (abstract evaluation)
    kt2, _ = _err(lambda: kiln.jit(lambda a, b: fn(lax, a, b))(x, w))
    assert kt2 is jt


def test_bad_params_raise():
    """Cases JAX only rejects when lowering are rejected at abstract evaluation."""
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    for kw in (dict(lhs_dilation=(1,)), dict(rhs_dilation=(1, 1, 1)), dict(rhs_dilation=(0, 1)),
               dict(window_strides=(0, 1))):
        kw = {**dict(window_strides=(1, 1), padding=((0, 0), (0, 0))), **kw}
        with pytest.raises(ValueError):
            lax.conv_general_dilated(x, w, **kw)
    with pytest.raises(ValueError, match="positive value"):
        lax.conv_general_dilated(x, np.ones((3, 2, 0, 3), np.float32), (1, 1), "VALID")


# ----------------------------------------------------------------------------------------------
# edge cases and wrappers


def test_empty_arrays():
    rng = np.random.default_rng(6)
    w = _rand(rng, (3, 2, 2, 2))
    for xs in ((0, 2, 4, 4), (2, 2, 1, 4)):
        x = _rand(rng, xs)
        kf, jf = _fns(dict(window_strides=(1, 1), padding="VALID"))
        _close(kf(x, w), jf(x, w))
        kg = kiln.grad(lambda a, b: kf(a, b).sum(), argnums=(0, 1))(x, w)
        jg = jax.grad(lambda a, b: jf(a, b).sum(), argnums=(0, 1))(x, w)
        _close(kg[0], jg[0])
        _close(kg[1], jg[1])
    # a zero-size mapped axis
    kf, jf = _fns(dict(window_strides=(1, 1), padding="SAME", feature_group_count=2))
    x0, w0 = _rand(rng, (0, 1, 4, 4, 4)), _rand(rng, (0, 2, 2, 3, 3))
    x1, w1 = _rand(rng, (1, 4, 4, 4)), _rand(rng, (2, 2, 3, 3))
    _close(kiln.vmap(kf)(x0, w0), jax.vmap(jf)(x0, w0))
    _close(kiln.vmap(kf, (0, None))(x0, w1), jax.vmap(jf, (0, None))(x0, w1))
    _close(kiln.vmap(kf, (None, 0))(x1, w0), jax.vmap(jf, (None, 0))(x1, w0))


def test_nested_vmap_and_per_example_grads():
    rng = np.random.default_rng(8)
    kw = dict(window_strides=(2, 1), padding="SAME", feature_group_count=2,
              dimension_numbers=NHWC)
    kf, jf = _fns(kw)
    xs, w = _rand(rng, (2, 3, 1, 6, 5, 4)), _rand(rng, (3, 3, 2, 4))
    ws = _rand(rng, (3, 3, 3, 2, 4))
    _close(kiln.vmap(kiln.vmap(kf, (0, None)), (0, None))(xs, w),
           jax.vmap(jax.vmap(jf, (0, None)), (0, None))(xs, w))
    _close(kiln.vmap(kiln.vmap(kf, (None, 0)), (0, None))(xs[:, 0], ws),
           jax.vmap(jax.vmap(jf, (None, 0)), (0, None))(xs[:, 0], ws), 1e-4)

    def loss(f):
        return lambda b, a: (f(a, b) ** 2).sum()
    kg = kiln.vmap(kiln.grad(loss(kf)), (None, 0))(w, xs[0])
    jg = jax.vmap(jax.grad(loss(jf)), (None, 0))(w, xs[0])
    _close(kg, jg, 1e-3)
    kj = kiln.jacfwd(lambda a: kf(a, w).sum(axis=(1, 2)))(xs[0, 0])
    jj = jax.jacfwd(lambda a: jf(a, w).sum(axis=(1, 2)))(xs[0, 0])
    _close(kj, jj, 1e-4)
    kj = kiln.jacrev(lambda b: kf(xs[0, 0], b).sum(axis=(1, 2)))(w)
    jj = jax.jacrev(lambda b: jf(xs[0, 0], b).sum(axis=(1, 2)))(w)
    _close(kj, jj, 1e-4)


def test_wrappers_use_the_primitive():
    rng = np.random.default_rng(9)
    x, w = _rand(rng, (2, 5, 5, 3)), _rand(rng, (3, 3, 3, 4))
    fns = {
        "conv": lambda L, a, b: L.conv(a, b, (1, 2), "SAME"),
        "conv_with_general_padding": lambda L, a, b: L.conv_with_general_padding(
            a, b, (1, 1), ((1, 0), (2, 1)), (2, 1), (1, 2)),
        "conv_transpose": lambda L, a, b: L.conv_transpose(a, b, (2, 2), "SAME",
                                                          dimension_numbers=NHWC),
        "conv_transpose_kernel": lambda L, a, b: L.conv_transpose(
            a, b[..., :3, :3], (2, 1), "VALID", dimension_numbers=NHWC,
            transpose_kernel=True),
        "patches": lambda L, a, b: L.conv_general_dilated_patches(a, (2, 3), (1, 1), "SAME"),
    }
    xn, wn = np.transpose(x, (0, 3, 1, 2)), np.transpose(w, (3, 2, 0, 1))
    for name, fn in fns.items():
        a, b = (xn, wn) if name in ("conv", "conv_with_general_padding", "patches") else (x, w)
        kout = fn(lax, a, b)
        _close(kout, fn(jlax, a, b), 1e-5)
        names = {e.primitive.name for e in kiln.make_jaxpr(
            lambda a, b, fn=fn: fn(lax, a, b))(a, b).jaxpr.eqns}
        assert "conv_general_dilated" in names and "dot_general" not in names, (name, names)


def test_primitive_params_and_types():
    x, w = np.ones((2, 5, 5, 4), np.float32), np.ones((3, 3, 2, 6), np.float32)
    jaxpr = kiln.make_jaxpr(lambda a, b: lax.conv_general_dilated(
        a, b, [np.int64(1), 2], "SAME", rhs_dilation=[1, np.int32(2)],
        dimension_numbers=NHWC, feature_group_count=2, precision="float32",
        preferred_element_type="float32"))(x, w).jaxpr
    (eqn,) = jaxpr.eqns
    assert eqn.primitive is conv_general_dilated_p
    p = eqn.params
    assert set(p) == {"window_strides", "padding", "lhs_dilation", "rhs_dilation",
                      "dimension_numbers", "feature_group_count", "batch_group_count",
                      "precision", "preferred_element_type", "out_sharding"}
    for k in ("window_strides", "lhs_dilation", "rhs_dilation"):
        assert type(p[k]) is tuple and all(type(v) is int for v in p[k]), k
    assert type(p["padding"]) is tuple
    assert all(type(pr) is tuple and all(type(v) is int for v in pr) for pr in p["padding"])
    assert type(p["dimension_numbers"]) is lax.ConvDimensionNumbers
    assert all(type(s) is tuple and all(type(v) is int for v in s)
               for s in p["dimension_numbers"])
    assert type(p["feature_group_count"]) is int and type(p["batch_group_count"]) is int
    assert p["precision"] == (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
    assert p["preferred_element_type"] == np.dtype(np.float32)
    assert isinstance(p["preferred_element_type"], np.dtype)
    assert p["out_sharding"] is None
    hash(tuple(p.items()))


def test_numpy_convolve_and_correlate_use_the_primitive():
    import numpy as _np

    import kiln
    import kiln.numpy as knp
    a = _np.arange(7.0, dtype=_np.float32)
    v = _np.array([1.0, 2.0, 0.5], _np.float32)
    for fn in (knp.convolve, knp.correlate):
        text = str(kiln.make_jaxpr(lambda a, v: fn(a, v, "same"))(a, v))
        assert "conv_general_dilated" in text and "dot_general" not in text
    for mode in ("full", "same", "valid"):
        _np.testing.assert_allclose(_np.asarray(knp.convolve(a, v, mode)),
                                    _np.convolve(a, v, mode), rtol=1e-6)
        _np.testing.assert_allclose(_np.asarray(knp.correlate(v, a, mode)),
                                    _np.correlate(v, a, mode), rtol=1e-6)
        _np.testing.assert_allclose(
            _np.asarray(kiln.jit(lambda a, v: knp.correlate(a, v, mode))(a, v)),
            _np.correlate(a, v, mode), rtol=1e-6)
