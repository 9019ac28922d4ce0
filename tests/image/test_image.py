"""``kiln.image`` (``jax.image``) against JAX: ``resize`` for every method, up and down,
antialias on and off, 1-3 spatial dimensions, float and integer inputs;
``scale_and_translate`` with non-trivial scales and translations; jit/grad/vmap; errors.
JAX's numeric answers come from the recorded oracle (``tests/_oracle.py``)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as kjnp
from kiln import image as kimage

try:
    import jax
    from jax import image as jimage
except ImportError:  # the recorded answers still run; the live-only tests skip
    jax = jimage = None


def _live():
    if jax is None:
        pytest.skip("needs JAX")

METHODS = ["nearest", "linear", "cubic", "cubic-pytorch", "lanczos3", "lanczos5", "area"]
TOL = dict(rtol=2e-5, atol=2e-5)


def _x(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _check(got, want, exact=False):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("method", METHODS)
def test_resize_2d_up_and_down(method, antialias):
    # Dimension 0 is upsampled, dimension 1 downsampled, the channels left alone.
    x = _x((5, 9, 2))
    got = kimage.resize(x, (8, 4, 2), method, antialias=antialias)
    want = jax_result(f"resize2d.{method}.{antialias}",
                      lambda: jimage.resize(x, (8, 4, 2), method, antialias=antialias), x)
    _check(got, want, exact=method == "nearest")


@pytest.mark.parametrize("method, in_shape, out_shape", [
    ("linear", (6,), (11,)), ("lanczos3", (12,), (5,)), ("nearest", (7,), (3,)),
    ("trilinear", (4, 5, 6), (3, 7, 2)), ("tricubic", (4, 5, 6), (6, 3, 9)),
    ("nearest", (4, 5, 6), (7, 2, 6)), ("area", (3, 8, 4), (5, 3, 4)),
])
def test_resize_1d_3d(method, in_shape, out_shape):
    x = _x(in_shape, seed=1)
    want = jax_result(f"resize.{method}.{in_shape}.{out_shape}",
                      lambda: jimage.resize(x, out_shape, method), x)
    _check(kimage.resize(x, out_shape, method), want, exact=method == "nearest")


@pytest.mark.parametrize("method", ["nearest", "bilinear", "bicubic"])
def test_resize_integer_input(method):
    # Nearest keeps int32 (a pure gather); the others compute and return float32.
    x = _x((6, 5), np.int32)
    got = kimage.resize(x, (4, 9), method)
    want = jax_result(f"resize_int.{method}", lambda: jimage.resize(x, (4, 9), method), x)
    _check(got, want, exact=method == "nearest")
    assert got.dtype == (np.int32 if method == "nearest" else np.float32)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_resize_half_precision(dtype):
    # Weights are built in float32 and cast to the image's dtype, as JAX's.
    x = _x((5, 9)).astype(kjnp.dtype(dtype))
    got = kimage.resize(x, (7, 4), "lanczos3", antialias=False)
    want = jax_result(f"resize_half.{dtype}",
                      lambda: jimage.resize(x, (7, 4), "lanczos3", antialias=False), x)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=1e-2, atol=1e-2)


def test_resize_identity_and_empty():
    x = _x((3, 4))
    _check(kimage.resize(x, (3, 4), "lanczos5"), x)
    _check(kimage.resize(x, (0, 4), "linear"),
           jax_result("resize_empty", lambda: jimage.resize(x, (0, 4), "linear"), x))


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("method", ["linear", "cubic", "cubic-pytorch", "lanczos3", "area"])
def test_scale_and_translate(method, antialias):
    x = _x((2, 7, 6))
    args = ((2, 9, 4), (1, 2), np.array([1.4, 0.55], np.float32),
            np.array([-0.75, 1.25], np.float32), method)
    got = kimage.scale_and_translate(x, *args, antialias=antialias)
    want = jax_result(f"st.{method}.{antialias}",
                      lambda: jimage.scale_and_translate(x, *args, antialias=antialias), x)
    _check(got, want)


def test_scale_and_translate_negative_axis_and_no_dims():
    x = _x((5, 6))
    args = ((5, 8), (-1,), np.array([1.3]), np.array([0.4]), "bilinear")
    _check(kimage.scale_and_translate(x, *args),
           jax_result("st_neg_axis", lambda: jimage.scale_and_translate(x, *args), x))
    empty = ((5, 6), (), np.zeros(0, np.float32), np.zeros(0, np.float32), "linear")
    _check(kimage.scale_and_translate(x, *empty),
           jax_result("st_no_dims", lambda: jimage.scale_and_translate(x, *empty), x))


def test_jit_and_grad_scale_and_translate():
    # Gradients with respect to the image and to the (traced) scale and translation.
    x = _x((6, 5), seed=3)
    s, t = np.array([1.3, 0.8], np.float32), np.array([0.2, -0.4], np.float32)

    def loss(img, s, t, ns):
        out = ns.image.scale_and_translate(img, (8, 4), (0, 1), s, t, "cubic")
        return (out * out).sum()

    got = kiln.jit(kiln.grad(lambda *a: loss(*a, kiln), argnums=(0, 1, 2)))(x, s, t)
    want = jax_result("grad_st", lambda: jax.jit(jax.grad(
        lambda *a: loss(*a, jax), argnums=(0, 1, 2)))(x, s, t), (x, s, t))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)


def test_grad_and_vmap_resize():
    x = _x((4, 5, 3), seed=4)

    def loss(img, ns):
        return (ns.image.resize(img, (3, 8), "lanczos3") ** 2).sum()

    g = kiln.grad(lambda a: loss(a, kiln))(x[0])
    want = jax_result("grad_resize", lambda: jax.grad(lambda a: loss(a, jax))(x[0]), x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-4, atol=1e-5)
    batched = kiln.vmap(lambda a: kimage.resize(a, (3, 8), "linear"), in_axes=2,
                        out_axes=2)(x)
    _check(batched, jax_result("vmap_resize", lambda: jimage.resize(x, (3, 8, 3), "linear"), x))


def test_resize_method_enum_and_aliases():
    _live()
    assert [m.name for m in kimage.ResizeMethod] == [m.name for m in jimage.ResizeMethod]
    assert [m.value for m in kimage.ResizeMethod] == [m.value for m in jimage.ResizeMethod]
    for s in ["nearest", "linear", "bilinear", "trilinear", "triangle", "cubic", "bicubic",
              "tricubic", "lanczos3", "lanczos5", "cubic-pytorch", "bicubic-pytorch", "area"]:
        assert kimage.ResizeMethod.from_string(s).name == \
            jimage.ResizeMethod.from_string(s).name
    x = _x((4, 4))
    want = jax_result("resize_enum", lambda: jimage.resize(x, (6, 2), jimage.ResizeMethod.LANCZOS5),
                      x)
    _check(kimage.resize(x, (6, 2), kimage.ResizeMethod.LANCZOS5), want)


def test_errors():
    _live()
    x = _x((4, 4))
    for ns in (kimage, jimage):
        with pytest.raises(ValueError, match="Unknown resize method"):
            ns.ResizeMethod.from_string("bilinearr")
        with pytest.raises(ValueError, match="Unknown resize method"):
            ns.resize(x, (2, 2), "gaussian")
        with pytest.raises(ValueError, match="shape must have length"):
            ns.resize(x, (2, 2, 1), "linear")
        with pytest.raises(ValueError, match="shape must have length"):
            ns.scale_and_translate(x, (2,), (0,), [0.5], [0.0], "linear")
        with pytest.raises(ValueError, match="Nearest neighbor"):
            ns.scale_and_translate(x, (2, 4), (0,), [0.5], [0.0], "nearest")


def test_kiln_image_module():
    assert kiln.image is kimage and kimage.__all__ == ["ResizeMethod", "resize",
                                                       "scale_and_translate"]
    assert kjnp.asarray(kimage.resize(_x((2, 2)), (4, 4), "linear")).shape == (4, 4)


@pytest.mark.slow
def test_as_jax_exposes_image():
    # ``import jax`` under kiln.as_jax (a fresh process: the real JAX is loaded here).
    code = ("import jax, jax.image; from jax.image import resize; import kiln; "
            "assert jax.image is kiln.image and resize is kiln.image.resize; "
            "print(jax.image.resize(jax.numpy.ones((2, 2)), (3, 4), 'bilinear').shape)")
    out = subprocess.run([sys.executable, "-m", "kiln.as_jax", "-c", code], check=True,
                         capture_output=True, text=True, env=dict(os.environ)).stdout
    assert out.strip() == "(3, 4)"
