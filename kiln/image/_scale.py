"""Resampling kernels, per-dimension weight matrices and the public ``jax.image`` entry
points (JAX 0.10.2 semantics: ``jax/_src/image/scale.py``)."""
from __future__ import annotations

import enum

import numpy as np

from kiln import dtypes
from kiln import numpy as jnp
from kiln.api import jit
from kiln.lax import Precision
from kiln.numpy import _util

# Weight sums at or below this magnitude count as "no support": the column becomes zero.
_MIN_TOTAL = 1000.0 * float(np.finfo(np.float32).eps)


class ResizeMethod(enum.Enum):
    """Image resize method: NEAREST, LINEAR, LANCZOS3, LANCZOS5, CUBIC (Keys, a=-0.5),
    CUBIC_PYTORCH (a=-0.75 and edge padding when not antialiased) or AREA (box overlap)."""

    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4
    CUBIC_PYTORCH = 5
    AREA = 6

    @staticmethod
    def from_string(s: str):
        """The method a string names (``"bilinear"``, ``"tricubic"``, ``"lanczos3"``, ...)."""
        method = _NAMES.get(s) if isinstance(s, str) else None
        if method is None:
            raise ValueError(f'Unknown resize method "{s}"')
        return method


_NAMES = {
    "nearest": ResizeMethod.NEAREST,
    "linear": ResizeMethod.LINEAR, "bilinear": ResizeMethod.LINEAR,
    "trilinear": ResizeMethod.LINEAR, "triangle": ResizeMethod.LINEAR,
    "lanczos3": ResizeMethod.LANCZOS3,
    "lanczos5": ResizeMethod.LANCZOS5,
    "cubic": ResizeMethod.CUBIC, "bicubic": ResizeMethod.CUBIC,
    "tricubic": ResizeMethod.CUBIC,
    "cubic-pytorch": ResizeMethod.CUBIC_PYTORCH,
    "bicubic-pytorch": ResizeMethod.CUBIC_PYTORCH,
    "area": ResizeMethod.AREA,
}


# ----------------------------------------------------------------------------------------
# kernels: functions of the (non-negative) distance between sample and input pixel centers

def _triangle(x):
    return jnp.maximum(0, 1 - jnp.abs(x))


def _cubic(a):
    """Keys' cubic convolution kernel with parameter ``a`` (-0.5: Keys/TensorFlow/Pillow;
    -0.75: OpenCV/PyTorch), as polynomials in Horner form on [0, 1) and [1, 2), zero
    beyond. For these ``a`` every coefficient is exact in binary floating point."""
    def kernel(x):
        near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
        return jnp.where(x >= 2.0, 0.0, jnp.where(x >= 1.0, far, near))
    return kernel


def _lanczos(radius):
    """sinc(x) * sinc(x / radius) on [0, radius], 1 near 0, 0 beyond the radius."""
    def kernel(x):
        num = radius * jnp.sin(np.pi * x) * jnp.sin(np.pi * x / radius)
        den = jnp.where(x != 0, np.pi ** 2 * x ** 2, 1)
        val = jnp.where(x > 1e-3, jnp.divide(num, den), 1)
        return jnp.where(x > radius, 0.0, val)
    return kernel


_AREA = "area"

# method -> (kernel radius, kernel)
_KERNELS = {
    ResizeMethod.LINEAR: (1, _triangle),
    ResizeMethod.LANCZOS3: (3, _lanczos(3.0)),
    ResizeMethod.LANCZOS5: (5, _lanczos(5.0)),
    ResizeMethod.CUBIC: (2, _cubic(-0.5)),
    ResizeMethod.CUBIC_PYTORCH: (2, _cubic(-0.75)),
    ResizeMethod.AREA: (1, _AREA),
}


# ----------------------------------------------------------------------------------------
# weight matrices

def _normalized(w):
    """Columns of ``w`` divided by their sums; columns summing to ~0 become zero."""
    total = jnp.sum(w, axis=0, keepdims=True)
    safe = jnp.where(total != 0, total, 1)
    return jnp.where(jnp.abs(total) > _MIN_TOTAL, jnp.divide(w, safe), 0)


def _weight_matrix(in_size, out_size, scale, translation, kernel, antialias, edge_padding,
                   radius):
    """The [in_size, out_size] matrix whose column j holds the weights of the input pixels
    that make output pixel j along one dimension."""
    dtype = dtypes.result_type(scale, translation)
    inv_scale = 1.0 / scale
    # Downsampling with antialiasing widens the kernel by 1/scale (a low-pass filter);
    # upsampling only interpolates.
    kscale = jnp.maximum(inv_scale, 1.0) if antialias else 1.0
    # Input coordinate of each output pixel's center (pixel i's center is at i + 0.5).
    centers = ((jnp.arange(out_size, dtype=dtype) + 0.5) * inv_scale
               - translation * inv_scale - 0.5)

    # Edge padding (only without antialiasing) also weighs ``radius`` replicated pixels
    # beyond each edge.
    pad = radius if edge_padding else 0
    positions = jnp.arange(-pad, in_size + pad, dtype=dtype)

    if kernel is _AREA:
        # Overlap of output pixel j's footprint [lo_j, lo_j + 1/scale) with input pixel i's
        # [i, i + 1).
        out_lo = jnp.arange(out_size, dtype=dtype) * inv_scale - translation * inv_scale
        out_hi = out_lo + inv_scale
        in_lo = jnp.arange(in_size, dtype=dtype)
        in_hi = in_lo + 1.0
        w = jnp.maximum(0.0, jnp.minimum(out_hi[None, :], in_hi[:, None])
                        - jnp.maximum(out_lo[None, :], in_lo[:, None]))
    else:
        dist = jnp.abs(centers[None, :] - positions[:, None]) / kscale
        w = kernel(dist)

    if edge_padding:
        # Weights of positions beyond the edges go to the edge pixel they replicate.
        src = jnp.clip(positions.astype(jnp.int32), 0, in_size - 1)
        cols = jnp.broadcast_to(jnp.arange(out_size)[None, :], w.shape)
        folded = jnp.zeros((in_size, out_size), dtype=dtype)
        folded = folded.at[src[:, None], cols].add(w)
        return _normalized(folded)
    w = _normalized(w)
    # Output pixels whose center falls outside the input get no weight at all.
    inside = jnp.logical_and(centers >= -0.5, centers <= in_size - 0.5)
    return jnp.where(inside[None, :], w, 0)


def _apply(x, out_shape, spatial_dims, scale, translation, kernel, antialias, precision,
           edge_padding=False, radius=None):
    assert len(x.shape) == len(out_shape)
    assert len(spatial_dims) == len(scale)
    assert len(spatial_dims) == len(translation)
    if not spatial_dims:
        return x
    n = x.ndim
    out_labels = list(range(n))
    operands = []
    for k, d in enumerate(spatial_dims):
        d = _util.canonicalize_axis(d, n)
        w = _weight_matrix(x.shape[d], out_shape[d], scale[k], translation[k], kernel,
                           antialias, edge_padding, radius).astype(x.dtype)
        operands += [w, [d, n + k]]
        out_labels[d] = n + k
    return jnp.einsum(x, list(range(n)), *operands, out_labels, precision=precision)


def _method_of(method):
    if isinstance(method, str):
        method = ResizeMethod.from_string(method)
    return method


def _kernel_for(method, antialias):
    assert isinstance(method, ResizeMethod)
    if method == ResizeMethod.CUBIC_PYTORCH and antialias:
        method = ResizeMethod.CUBIC
    radius, kernel = _KERNELS[method]
    edge_padding = method == ResizeMethod.CUBIC_PYTORCH and not antialias
    return radius, kernel, edge_padding


def _check_rank(shape, image):
    if len(shape) != jnp.ndim(image):
        raise ValueError("shape must have length equal to the number of dimensions of x; "
                         f" {shape} vs {jnp.shape(image)}")


# ----------------------------------------------------------------------------------------
# public API

def scale_and_translate(image, shape, spatial_dims, scale, translation, method,
                        antialias: bool = True, precision=Precision.HIGHEST):
    """Resample ``image`` to ``shape`` under the map ``x -> x * scale + translation`` of
    the ``spatial_dims`` (half-pixel centers; output pixels whose inverse image lies
    outside the input are zero). ``method``: a ``ResizeMethod`` or its name, not nearest.
    ``antialias`` widens the kernel when downsampling."""
    shape = _util.canonicalize_shape(shape)
    _check_rank(shape, image)
    method = _method_of(method)
    if method == ResizeMethod.NEAREST:
        raise ValueError("Nearest neighbor resampling is not currently supported for "
                         "scale_and_translate.")
    radius, kernel, edge_padding = _kernel_for(method, antialias)
    image, = _util.promote_dtypes_inexact(image)
    scale, translation = _util.promote_dtypes_inexact(scale, translation)
    return _apply(image, shape, spatial_dims, scale, translation, kernel, antialias,
                  precision, edge_padding=edge_padding, radius=radius)


def _resize_nearest(x, out_shape):
    for d, (m, n) in enumerate(zip(x.shape, out_shape)):
        if m == n:
            continue
        # Output pixel j takes input pixel floor((j + 0.5) * m / n), computed in float32.
        pos = (np.arange(n, dtype=np.float32) + np.float32(0.5)) * np.float32(m)
        src = np.floor(pos / np.float32(n)).astype(np.int32)
        x = x[(slice(None),) * d + (src,)]
    return x


def _resize(image, shape, method, antialias, precision):
    _check_rank(shape, image)
    method = _method_of(method)
    if method == ResizeMethod.NEAREST:
        return _resize_nearest(image, shape)
    assert isinstance(method, ResizeMethod)
    image, = _util.promote_dtypes_inexact(image)
    # Unchanged dimensions are skipped: every kernel interpolates (identity in, identity out).
    dims = tuple(d for d in range(len(shape)) if image.shape[d] != shape[d])
    radius, kernel, edge_padding = _kernel_for(method, antialias)
    scale = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in dims]
    return _apply(image, shape, dims, scale, [0.0] * len(dims), kernel, antialias,
                  precision, edge_padding=edge_padding, radius=radius)


_resize_jit = jit(_resize, static_argnums=(1, 2, 3, 4))


def resize(image, shape, method, antialias: bool = True, precision=Precision.HIGHEST):
    """Resize ``image`` to ``shape`` (every dimension; keep batch and channel sizes
    unchanged). ``method``: a ``ResizeMethod`` or its name ("nearest", "linear"/"bilinear"/
    "trilinear"/"triangle", "cubic"/"bicubic"/"tricubic", "cubic-pytorch", "lanczos3",
    "lanczos5", "area"). Nearest keeps the dtype; the others return a floating type.
    ``antialias`` widens the kernel when downsampling."""
    return _resize_jit(image, _util.canonicalize_shape(shape), method, antialias, precision)
