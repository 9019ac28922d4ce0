"""``kiln.nn.initializers``: parameter initializers, as ``jax.nn.initializers``.

An initializer is ``init(key, shape, dtype=None, out_sharding=None) -> Array``. Each draws
from ``kiln.random`` exactly as JAX draws from ``jax.random`` (same sampler, same bounds, same
scaling order), so for the same key the values are bit-identical to JAX's.
"""
from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

import kiln.numpy as jnp
from kiln import dtypes, random
from kiln.numpy._util import canonicalize_shape

__all__ = [
    "Initializer", "constant", "delta_orthogonal", "glorot_normal", "glorot_uniform",
    "he_normal", "he_uniform", "kaiming_normal", "kaiming_uniform", "lecun_normal",
    "lecun_uniform", "normal", "ones", "orthogonal", "truncated_normal", "uniform",
    "variance_scaling", "xavier_normal", "xavier_uniform", "zeros",
]


@typing.runtime_checkable
class Initializer(Protocol):
    """The protocol every initializer follows."""

    def __call__(self, key, shape, dtype: Any = None, out_sharding: Any = None):
        raise NotImplementedError


def _float_dtype(dtype):
    return dtypes.default_float_dtype() if dtype is None else dtype


def zeros(key, shape, dtype=None, out_sharding=None):
    """An initializer returning zeros (the key is unused)."""
    return jnp.zeros(shape, _float_dtype(dtype))


def ones(key, shape, dtype=None, out_sharding=None):
    """An initializer returning ones (the key is unused)."""
    return jnp.ones(shape, _float_dtype(dtype))


def constant(value, dtype=None) -> Initializer:
    """An initializer filling with ``value``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        return jnp.full(shape, value, dtype=_float_dtype(dtype))
    return init


def uniform(scale=1e-2, dtype=None) -> Initializer:
    """Uniform on ``[0, scale)``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _float_dtype(dtype)
        return random.uniform(key, shape, dtype) * jnp.array(scale, dtype)
    return init


def normal(stddev=1e-2, dtype=None) -> Initializer:
    """Normal with mean 0 and standard deviation ``stddev``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _float_dtype(dtype)
        return random.normal(key, shape, dtype) * jnp.array(stddev, dtype)
    return init


def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0) -> Initializer:
    """A normal truncated to ``[lower, upper]`` (in standard deviations), times ``stddev``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _float_dtype(dtype)
        return random.truncated_normal(key, lower, upper, shape, dtype) \
            * jnp.array(stddev, dtype)
    return init


def _compute_fans(shape: Sequence[int], in_axis=-2, out_axis=-1, batch_axis=()):
    """``(fan_in, fan_out)`` of a weight shape; the remaining axes are the receptive field."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
        raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional "
                         "weights tensor with default in_axis. Must be at least 2D or specify "
                         "in_axis explicitly.")

    def size(axes):
        if isinstance(axes, int):
            return shape[axes]
        return math.prod([shape[i] for i in axes])

    in_size, out_size, batch_size = size(in_axis), size(out_axis), size(batch_axis)
    receptive_field_size = math.prod(shape) / in_size / out_size / batch_size
    return in_size * receptive_field_size, out_size * receptive_field_size


def _real_dtype(dtype):
    return np.array(0, dtype).real.dtype


def _complex_uniform(key, shape, dtype):
    """Uniform on the unit disk (of area pi, so variance 1 per the JAX convention)."""
    key_r, key_theta = random.split(key)
    real_dtype = _real_dtype(dtype)
    dtype = dtypes.to_complex_dtype(real_dtype)
    r = jnp.sqrt(2 * random.uniform(key_r, shape, real_dtype)).astype(dtype)
    theta = 2 * np.pi * random.uniform(key_theta, shape, real_dtype).astype(dtype)
    return r * jnp.exp(1j * theta)


def _complex_truncated_normal(key, upper, shape, dtype):
    """A complex normal with modulus truncated to ``upper``."""
    key_r, key_theta = random.split(key)
    real_dtype = _real_dtype(dtype)
    dtype = dtypes.to_complex_dtype(real_dtype)
    t = ((1 - jnp.exp(jnp.array(-(upper ** 2), dtype)))
         * random.uniform(key_r, shape, real_dtype).astype(dtype))
    r = jnp.sqrt(-jnp.log(1 - t))
    theta = 2 * np.pi * random.uniform(key_theta, shape, real_dtype).astype(dtype)
    return r * jnp.exp(1j * theta)


def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(),
                     dtype=None) -> Initializer:
    """Samples with variance ``scale / n``, ``n`` from the fans per ``mode``
    (``fan_in``/``fan_out``/``fan_avg``/``fan_geo_avg``), from ``distribution``
    (``truncated_normal``/``normal``/``uniform``)."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        shape = canonicalize_shape(shape)
        dtype = _float_dtype(dtype)
        fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
        if mode == "fan_in":
            denominator = fan_in
        elif mode == "fan_out":
            denominator = fan_out
        elif mode == "fan_avg":
            denominator = (fan_in + fan_out) / 2
        elif mode == "fan_geo_avg":
            denominator = (fan_in * fan_out) ** 0.5
        else:
            raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
        variance = jnp.array(scale / denominator, dtype=dtype)
        floating = dtypes.issubdtype(dtype, np.floating)
        if distribution == "truncated_normal":
            if floating:
                # The standard deviation of a standard normal truncated to (-2, 2).
                stddev = jnp.sqrt(variance) / jnp.array(.87962566103423978, dtype)
                return random.truncated_normal(key, -2, 2, shape, dtype) * stddev
            stddev = jnp.sqrt(variance) / jnp.array(.95311164380491208, dtype)
            return _complex_truncated_normal(key, 2, shape, dtype) * stddev
        if distribution == "normal":
            return random.normal(key, shape, dtype) * jnp.sqrt(variance)
        if distribution == "uniform":
            if floating:
                return random.uniform(key, shape, dtype, -1) * jnp.sqrt(3 * variance)
            return _complex_uniform(key, shape, dtype) * jnp.sqrt(variance)
        raise ValueError("invalid distribution for variance scaling initializer: "
                         f"{distribution}")
    return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """Glorot/Xavier uniform: ``variance_scaling(1, "fan_avg", "uniform")``."""
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


xavier_uniform = glorot_uniform


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """Glorot/Xavier normal: ``variance_scaling(1, "fan_avg", "truncated_normal")``."""
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis=in_axis,
                            out_axis=out_axis, batch_axis=batch_axis, dtype=dtype)


xavier_normal = glorot_normal


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """LeCun uniform: ``variance_scaling(1, "fan_in", "uniform")``."""
    return variance_scaling(1.0, "fan_in", "uniform", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """LeCun normal: ``variance_scaling(1, "fan_in", "truncated_normal")``."""
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=in_axis,
                            out_axis=out_axis, batch_axis=batch_axis, dtype=dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """He/Kaiming uniform: ``variance_scaling(2, "fan_in", "uniform")``."""
    return variance_scaling(2.0, "fan_in", "uniform", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


kaiming_uniform = he_uniform


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None) -> Initializer:
    """He/Kaiming normal: ``variance_scaling(2, "fan_in", "truncated_normal")``."""
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis=in_axis,
                            out_axis=out_axis, batch_axis=batch_axis, dtype=dtype)


kaiming_normal = he_normal


def orthogonal(scale=1.0, column_axis=-1, dtype=None) -> Initializer:
    """A uniformly random orthogonal matrix (over ``column_axis`` vs the other axes flattened),
    times ``scale``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            raise NotImplementedError
        dtype = _float_dtype(dtype)
        if len(shape) < 2:
            raise ValueError("orthogonal initializer requires at least a 2D shape")
        if any(d == 0 for d in shape):
            return jnp.zeros(shape, dtype=dtype)
        n_rows, n_cols = math.prod(shape) // shape[column_axis], shape[column_axis]
        Q = random.orthogonal(key, n_rows, (), dtype, n_cols)
        Q = jnp.reshape(Q, tuple(np.delete(shape, column_axis)) + (shape[column_axis],))
        Q = jnp.moveaxis(Q, -1, column_axis)
        return jnp.array(scale, dtype) * Q
    return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=None) -> Initializer:
    """Delta-orthogonal for 3/4/5-D convolution kernels: an orthogonal matrix at the spatial
    center, zeros elsewhere."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        if out_sharding is not None:
            raise NotImplementedError
        dtype = _float_dtype(dtype)
        if len(shape) not in (3, 4, 5):
            raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
        if shape[-1] < shape[-2]:
            raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
        ortho = orthogonal(scale=scale, column_axis=column_axis, dtype=dtype)(key, shape[-2:])
        W = jnp.zeros(shape, dtype=dtype)
        center = tuple((k - 1) // 2 for k in shape[:-2])
        return W.at[center + (Ellipsis,)].set(ortho)
    return init
