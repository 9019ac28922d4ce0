"""``lax.conv_general_dilated_local`` (unshared convolution) against JAX: values over
layouts, paddings, strides, dilations and precisions; gradients for both operands
(JAX and finite differences); ``vmap`` over either operand; ``jit``, natively compiled."""
from __future__ import annotations

import numpy as np
import pytest
from _sampling import NUM_CASES, sample_cases

import kiln
from kiln import lax
from kiln.backends import cpu, reference
from kiln.test_util import check_grads

jax = pytest.importorskip("jax")
jlax = jax.lax

R = np.random.default_rng(0)


def _rhs_shape(lhs_shape, filter_shape, kw, out_features):
    """The kernel shape: out features, input channels x window, one per output position."""
    dn = kw.get("dimension_numbers")
    lhs_spec, rhs_spec, out_spec = lax.conv_dimension_numbers(
        lhs_shape, (1, 1) + tuple(filter_shape), dn)
    pkw = {k: v for k, v in kw.items() if k != "precision"}
    patches = kiln.eval_shape(
        lambda x: lax.conv_general_dilated_patches(x, filter_shape, **pkw),
        np.zeros(lhs_shape, np.float32))
    shape = [0] * len(lhs_shape)
    shape[rhs_spec[0]] = out_features
    shape[rhs_spec[1]] = patches.shape[out_spec[1]]
    for k in range(len(lhs_shape) - 2):
        shape[rhs_spec[2 + k]] = patches.shape[out_spec[2 + k]]
    return tuple(shape)


# (id, lhs shape, filter shape, out features, kwargs)
CASES = [
    ("issue_nwc_same", (1, 4, 2), (3,), 5,
     dict(window_strides=(1,), padding="SAME", dimension_numbers=("NWC", "WIO", "NWC"))),
    ("1d_default_dn_valid", (2, 3, 9), (3,), 4, dict(window_strides=(2,), padding="VALID")),
    ("1d_same_lower", (1, 2, 8), (4,), 3, dict(window_strides=(3,), padding="SAME_LOWER")),
    ("2d_nchw_same_stride", (2, 3, 7, 6), (3, 2), 4,
     dict(window_strides=(2, 1), padding="SAME")),
    ("2d_nhwc_explicit_rhs_dil", (2, 6, 5, 3), (2, 3), 2,
     dict(window_strides=(1, 1), padding=((1, 2), (0, 1)), rhs_dilation=(2, 1),
          dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ("2d_lhs_dilation", (1, 2, 4, 3), (3, 2), 3,
     dict(window_strides=(1, 2), padding=((2, 1), (1, 0)), lhs_dilation=(2, 3))),
    ("2d_mixed_layout", (5, 2, 3, 6), (3, 2), 2,
     dict(window_strides=(1, 1), padding="VALID",
          dimension_numbers=("HNCW", "WOIH", "CWNH"))),
    ("2d_out_spec_differs", (2, 5, 4, 3), (2, 2), 3,
     dict(window_strides=(1, 1), padding="SAME",
          dimension_numbers=("NHWC", "OIWH", "NCWH"))),
    ("2d_precision_highest", (1, 2, 5, 5), (3, 3), 2,
     dict(window_strides=(1, 1), padding="SAME", precision=lax.Precision.HIGHEST)),
    ("2d_precision_pair", (1, 2, 5, 5), (3, 3), 2,
     dict(window_strides=(2, 2), padding="VALID", precision=("highest", "default"))),
]
IDS = [c[0] for c in CASES]


def _jkw(kw):
    """The same kwargs for JAX (``Precision`` values converted)."""
    out = dict(kw)
    p = kw.get("precision")
    if isinstance(p, lax.Precision):
        out["precision"] = jlax.Precision[p.name]
    return out


def _operands(lhs_shape, filter_shape, feats, kw, dtype=np.float32):
    rhs_shape = _rhs_shape(lhs_shape, filter_shape, kw, feats)
    x = R.standard_normal(lhs_shape).astype(dtype)
    w = R.standard_normal(rhs_shape).astype(dtype)
    return x, w


# Sampled by KILN_NUM_GENERATED_CASES (tests/_sampling.py): two configurations per rank in
# the default tier (each runs JAX's value, grads and jit, ~3 s), all in the full tier.
@pytest.mark.parametrize("name, lhs_shape, filt, feats, kw", sample_cases(
    [pytest.param(*c, id=c[0]) for c in CASES], lambda p: p.values[0].split("_")[0],
    salt="conv_local.value_and_grads", n=None if NUM_CASES is None else 2 * NUM_CASES))
def test_value_and_grads_match_jax(name, lhs_shape, filt, feats, kw):
    x, w = _operands(lhs_shape, filt, feats, kw)

    def f(x, w):
        return lax.conv_general_dilated_local(x, w, filter_shape=filt, **kw)

    def jf(x, w):
        return jlax.conv_general_dilated_local(x, w, filter_shape=filt, **_jkw(kw))

    got, want = np.asarray(f(x, w)), np.asarray(jf(x, w))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x, w)), want, rtol=1e-5, atol=1e-5)

    ct = R.standard_normal(want.shape).astype(np.float32)
    gx, gw = kiln.grad(lambda x, w: (f(x, w) * ct).sum(), (0, 1))(x, w)
    jgx, jgw = jax.grad(lambda x, w: (jf(x, w) * ct).sum(), (0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(gx), np.asarray(jgx), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(jgw), rtol=1e-5, atol=1e-5)


def test_issue_example():
    out = lax.conv_general_dilated_local(
        kiln.numpy.ones((1, 4, 2)), kiln.numpy.ones((4, 6, 5)), (1,), "SAME",
        filter_shape=(3,), dimension_numbers=("NWC", "WIO", "NWC"))
    assert out.shape == (1, 4, 5) and out.dtype == np.float32
    assert float(out.sum()) == 100.0
    np.testing.assert_array_equal(np.asarray(out[0, :, 0]), [4.0, 6.0, 6.0, 4.0])


@pytest.mark.parametrize("name", ["2d_nhwc_explicit_rhs_dil", "2d_lhs_dilation",
                                  "1d_same_lower"])
def test_finite_differences(name):
    _, lhs_shape, filt, feats, kw = CASES[IDS.index(name)]
    x, w = _operands(lhs_shape, filt, feats, kw, dtype=np.float64)
    with kiln.enable_x64():
        check_grads(lambda x, w: lax.conv_general_dilated_local(x, w, filter_shape=filt, **kw),
                    (x, w), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("name", ["2d_nchw_same_stride", "2d_mixed_layout"])
def test_vmap_over_each_operand(name):
    _, lhs_shape, filt, feats, kw = CASES[IDS.index(name)]
    xs, ws = zip(*[_operands(lhs_shape, filt, feats, kw) for _ in range(3)])
    xs, ws = np.stack(xs), np.stack(ws, axis=2)

    def f(x, w):
        return lax.conv_general_dilated_local(x, w, filter_shape=filt, **kw)

    want = np.stack([np.asarray(f(xs[i], ws[:, :, i])) for i in range(3)], axis=1)
    got = kiln.vmap(f, in_axes=(0, 2), out_axes=1)(xs, ws)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    got_x = kiln.jit(kiln.vmap(f, in_axes=(0, None)))(xs, ws[:, :, 0])
    want_x = np.stack([np.asarray(f(xs[i], ws[:, :, 0])) for i in range(3)])
    np.testing.assert_allclose(np.asarray(got_x), want_x, rtol=1e-5, atol=1e-5)
    # per-example gradients w.r.t. the kernel
    gw = kiln.vmap(kiln.grad(lambda x, w: f(x, w).sum(), 1), in_axes=(0, 2))(xs, ws)
    jgw = jax.vmap(jax.grad(lambda x, w: jlax.conv_general_dilated_local(
        x, w, filter_shape=filt, **_jkw(kw)).sum(), 1), in_axes=(0, 2))(xs, ws)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(jgw), rtol=1e-5, atol=1e-5)


def test_compiled_natively():
    _, lhs_shape, filt, feats, kw = CASES[IDS.index("2d_nhwc_explicit_rhs_dil")]
    x, w = _operands(lhs_shape, filt, feats, kw)

    def loss(x, w):
        return (lax.conv_general_dilated_local(x, w, filter_shape=filt, **kw) ** 2).sum()

    fn = kiln.value_and_grad(loss, (0, 1))
    closed = kiln.make_jaxpr(fn)(x, w)
    exe = cpu.executable_for(closed)
    assert exe is not None and exe.prog.native_steps > 0
    flat = [x, w]
    got = exe(flat)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    for g, r in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=2e-4, atol=2e-4)


def test_dtypes_and_errors():
    x = np.ones((1, 4, 2), np.float16)
    w = np.ones((4, 6, 5), np.float16)
    kw = dict(filter_shape=(3,), dimension_numbers=("NWC", "WIO", "NWC"))
    out = lax.conv_general_dilated_local(x, w, (1,), "SAME", **kw)
    jout = jlax.conv_general_dilated_local(x, w, (1,), "SAME", **kw)
    assert out.dtype == jout.dtype == np.float16
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jout))
    with pytest.raises(ValueError, match="Unsupported precision"):
        lax.conv_general_dilated_local(x, w, (1,), "SAME", precision="F32_F32_F32", **kw)
    with pytest.raises(ValueError, match="Unsupported precision"):
        jlax.conv_general_dilated_local(x, w, (1,), "SAME", precision="F32_F32_F32", **kw)
