"""Samplers built directly on random bits: JAX's signatures, defaults, dtypes, and
JAX's exact sequence of key splits and bit-to-float conversions.

Every sampler checks its key (legacy ``uint32[2]`` keys are wrapped), canonicalizes
shape and dtype like JAX, then runs the same arithmetic as JAX's implementation;
multiply-adds that XLA fuses are ``fma`` here and the transcendental functions are
XLA's (``_util``), so the samples equal JAX's bit for bit on CPU.

The gamma family (gamma, loggamma, beta, dirichlet, t, chisquare, f,
generalized_normal, ball) and the rejection samplers (poisson, binomial,
multinomial) live in ``_gamma``.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from kiln import dtypes
from kiln.core.trace import get_aval
from kiln.lax._fma import rounded
from kiln.random import _ops
from kiln.random import _util as u
from kiln.random._keys import (
    _split,
    canonicalize_shape,
    check_prng_key,
    random_bits,
)
from kiln.random._threefry import UINT_DTYPES

# ----------------------------------------------------------------------------------------------
# Checks shared by the samplers.


def _arg_shape(x) -> tuple:
    return u.shape(x)


def check_shape(name: str, shape, *param_shapes) -> None:
    if param_shapes:
        try:
            shape_ = tuple(np.broadcast_shapes(tuple(shape), *param_shapes))
        except ValueError:
            shape_ = None
        if tuple(shape) != shape_:
            msg = ("{} parameter shapes must be broadcast-compatible with shape argument, and "
                   "the result of broadcasting the shapes must equal the shape argument, but "
                   "got result {} for shape argument {}.")
            raise ValueError(msg.format(name, shape_, tuple(shape)))


def check_broadcast_shapes(name: str, shape, *args) -> tuple:
    arg_shapes = [_arg_shape(a) for a in args]
    if shape is None:
        return tuple(np.broadcast_shapes(*arg_shapes)) if arg_shapes else ()
    shape = canonicalize_shape(shape)
    check_shape(name, shape, *arg_shapes)
    return shape


def check_all_safe_to_cast(name: str, dtype, *args) -> None:
    for arg in args:
        a = u.asarray(arg)
        if not dtypes.safe_to_cast(a, dtype):
            raise dtypes.TypePromotionError(
                f"In arguments to {name}, cannot safely cast argument of type "
                f"{get_aval(a).dtype} to {dtype}")


def float_dtype(name: str, dtype, kind=np.floating, what="a float"):
    dtype = dtypes.check_and_canonicalize_user_dtype(float if dtype is None else dtype)
    if not dtypes.issubdtype(dtype, kind):
        raise ValueError(f"dtype argument to `{name}` must be {what} dtype, got {dtype}")
    return dtype


# ----------------------------------------------------------------------------------------------
# bits, uniform, randint


def bits(key, shape=(), dtype=None, *, out_sharding=None):
    """Uniform random bits as unsigned integers of ``dtype`` (default uint32; uint64 with x64)."""
    key, _ = check_prng_key("bits", key)
    if dtype is None:
        dtype = dtypes.default_uint_dtype()
    else:
        dtype = dtypes.check_and_canonicalize_user_dtype(dtype)
    if not dtypes.issubdtype(dtype, np.unsignedinteger):
        raise ValueError("dtype argument to `bits` must be an unsigned int dtype, "
                         f"got {dtype}")
    shape = canonicalize_shape(shape)
    return random_bits(key, np.dtype(dtype).itemsize * 8, shape)


def uniform(key, shape=(), dtype=None, minval=0., maxval=1., *, out_sharding=None):
    """Uniform floats in ``[minval, maxval)``."""
    key, _ = check_prng_key("uniform", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(float if dtype is None else dtype)
    shape = canonicalize_shape(shape)
    if not dtypes.issubdtype(dtype, np.floating):
        raise ValueError(f"dtype argument to `uniform` must be a float dtype, got {dtype}")
    return _uniform(key, minval, maxval, shape, dtype)


def _uniform(key, minval, maxval, shape, dtype):
    check_shape("uniform", shape)
    minval = u.broadcast_to_rank(u.convert(minval, dtype), len(shape))
    maxval = u.broadcast_to_rank(u.convert(maxval, dtype), len(shape))
    finfo = dtypes.finfo(dtype)
    nbits, nmant = finfo.bits, finfo.nmant
    if nbits not in (8, 16, 32, 64):
        raise TypeError(f"uniform only accepts 8-, 16-, 32-, or 64-bit dtypes, got {dtype}.")
    rng_bits = 8 if nmant < 8 else nbits
    b = random_bits(key, rng_bits, shape)
    uint_dtype = UINT_DTYPES[nbits]
    if rng_bits != nbits:
        b = u.convert(b, uint_dtype)
    float_bits = u.shift_right_logical(b, u.const(uint_dtype, rng_bits - nmant))
    one_bits = np.array(1.0, dtype).view(uint_dtype)
    float_bits = u.bitwise_or(float_bits, u.const(uint_dtype, one_bits))
    floats = u.sub(u.lax().bitcast_convert_type(float_bits, dtype), u.const(dtype, 1.0))
    scaled = u.fma(floats, u.sub(maxval, minval), minval)
    return u.maximum(minval, u.reshape(scaled, shape))


def _convert_and_clip_integer(val, dtype):
    vdt = u.dtype_of(val)
    lo = max(int(dtypes.iinfo(dtype).min), int(dtypes.iinfo(vdt).min))
    hi = min(int(dtypes.iinfo(dtype).max), int(dtypes.iinfo(vdt).max))
    clipped = u.lax().clamp(u.const(vdt, lo), u.asarray(val), u.const(vdt, hi))
    return u.convert(clipped, dtype)


def randint(key, shape, minval, maxval, dtype=None, *, out_sharding=None):
    """Uniform integers in ``[minval, maxval)`` (JAX's modulus-based algorithm)."""
    key, _ = check_prng_key("randint", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(int if dtype is None else dtype)
    shape = canonicalize_shape(shape)
    if not dtypes.issubdtype(dtype, np.integer):
        raise TypeError(f"randint only accepts integer dtypes, got {dtype}")
    info = dtypes.iinfo(dtype)
    dtype_for_sampling = dtype
    if info.bits < 32:
        # Sample in 32 bits to avoid biased results.
        dtype_for_sampling = np.dtype("int32")
        i32 = np.dtype("int32")
        minval = u.lax().clamp(u.const(i32, int(info.min)), u.convert(minval, i32),
                               u.const(i32, int(info.max)))
        maxval = u.lax().clamp(u.const(i32, int(info.min)), u.convert(maxval, i32),
                               u.const(i32, int(info.max) + 1))
    out = _randint(key, minval, maxval, shape, np.dtype(dtype_for_sampling))
    return u.convert(out, dtype) if u.dtype_of(out) != dtype else out


def _randint(key, minval, maxval, shape, dtype):
    check_shape("randint", shape, _arg_shape(minval), _arg_shape(maxval))
    minval = u.asarray(minval)
    maxval = u.asarray(maxval)
    if not dtypes.issubdtype(u.dtype_of(minval), np.integer):
        minval = u.convert(minval, int)
    if not dtypes.issubdtype(u.dtype_of(maxval), np.integer):
        maxval = u.convert(maxval, int)
    top = u.const(dtype, dtypes.iinfo(dtype).max)
    maxval_out_of_range = u.gt(maxval, _convert_and_clip_integer(top, u.dtype_of(maxval)))
    minval = _convert_and_clip_integer(minval, dtype)
    maxval = _convert_and_clip_integer(maxval, dtype)
    minval = u.broadcast_to_rank(minval, len(shape))
    maxval = u.broadcast_to_rank(maxval, len(shape))
    nbits = dtypes.iinfo(dtype).bits
    if nbits not in (8, 16, 32, 64):
        raise TypeError(f"randint only accepts 8-, 16-, 32-, or 64-bit dtypes, got {dtype}")
    k1, k2 = _split(key)
    higher_bits = random_bits(k1, nbits, shape)
    lower_bits = random_bits(k2, nbits, shape)
    unsigned = UINT_DTYPES[nbits]
    span = u.convert(u.sub(maxval, minval), unsigned)
    # span = 1 when maxval <= minval, so minval is always returned.
    span = u.select(u.le(maxval, minval), u.const(unsigned, 1), span)
    # When maxval is out of range, the span has to be one larger (wrapping to 0 at the top).
    oor = u.broadcast_to_rank(maxval_out_of_range, len(shape))
    grow = u.bitwise_and(oor, u.gt(maxval, minval))
    span = u.select(grow, u.add(span, u.const(unsigned, 1)), span)
    multiplier = u.rem(u.const(unsigned, 2 ** (nbits // 2)), span)
    multiplier = u.rem(u.mul(multiplier, multiplier), span)
    random_offset = u.add(u.mul(u.rem(higher_bits, span), multiplier),
                          u.rem(lower_bits, span))
    random_offset = u.rem(random_offset, span)
    return u.add(minval, u.convert(random_offset, dtype))


# ----------------------------------------------------------------------------------------------
# permutation, shuffle, choice


def _canonicalize_axis(axis, ndim):
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim if ndim else 0


def _arange(n):
    return u.lax().iota(dtypes.default_int_dtype(), n)


def _shuffle(key, x, axis):
    # Sort by fresh random 32-bit keys, num_rounds times (tjablin@'s static criterion).
    exponent = 3
    uint32max = np.iinfo(np.uint32).max
    size = math.prod(u.shape(x))
    num_rounds = int(np.ceil(exponent * np.log(max(1, size)) / np.log(uint32max)))
    for _ in range(num_rounds):
        key, subkey = _split(key)
        sort_keys = random_bits(subkey, 32, u.shape(x))
        _, x = _ops.sort_key_val(sort_keys, x, axis)
    return x


def permutation(key, x, axis=0, independent=False, *, out_sharding=None):
    """A random permutation of ``x`` along ``axis``, or of ``arange(x)`` for an int ``x``."""
    key, _ = check_prng_key("permutation", key)
    _check_arraylike("permutation", x)
    nd = len(u.shape(x))
    axis = _canonicalize_axis(axis, nd or 1)
    if not nd:
        if not dtypes.issubdtype(u.dtype_of(x), np.integer):
            raise TypeError("x must be an integer or at least 1-dimensional")
        r = u.concrete_int(x, "argument x of jax.random.permutation()")
        return _shuffle(key, _arange(r), axis)
    x = u.asarray(x)
    if independent or nd == 1:
        return _shuffle(key, x, axis)
    ind = _shuffle(key, _arange(u.shape(x)[axis]), 0)
    return _ops.take(x, ind, axis)


def shuffle(key, x, axis=0):
    """Shuffle ``x`` along ``axis`` (deprecated in JAX in favour of ``permutation``)."""
    import warnings
    warnings.warn("jax.random.shuffle is deprecated and will be removed in a future release. "
                  "Use jax.random.permutation with independent=True.", FutureWarning,
                  stacklevel=2)
    key, _ = check_prng_key("shuffle", key)
    x = u.asarray(x)
    return _shuffle(key, x, _canonicalize_axis(axis, len(u.shape(x))))


def _check_arraylike(name, *args):
    for i, a in enumerate(args):
        if not (u.is_array(a) or isinstance(a, (np.ndarray, np.generic, int, float, complex,
                                                bool))):
            raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(a)} at "
                            f"position {i}.")


def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None):
    """Samples from ``a`` (or ``arange(a)``), with or without replacement, optionally
    weighted by ``p``."""
    key, _ = check_prng_key("choice", key)
    if not isinstance(shape, Sequence):
        raise TypeError("shape argument of jax.random.choice must be a sequence, "
                        f"got {shape}")
    _check_arraylike("choice", a)
    arr = u.asarray(a)
    ashape = u.shape(arr)
    if not ashape:
        n_inputs = u.concrete_int(a, "The error occurred in jax.random.choice()")
    else:
        axis = _canonicalize_axis(axis, len(ashape))
        n_inputs = ashape[axis]
    shape = tuple(shape)
    n_draws = math.prod(shape)
    if n_draws == 0:
        return u.full(shape, 0, u.dtype_of(arr))
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population "
                         f"(size {n_inputs}) when 'replace=False'")
    int_dt = dtypes.default_int_dtype()
    if p is None:
        if replace:
            ind = randint(key, shape, 0, n_inputs)
            result = ind if not ashape else _ops.take(arr, ind, axis)
        else:
            perm = permutation(key, n_inputs if not ashape else arr, axis)
            starts = [0] * len(u.shape(perm))
            limits = list(u.shape(perm))
            limits[axis if ashape else 0] = n_draws
            result = u.lax().slice(perm, tuple(starts), tuple(limits))
    else:
        _check_arraylike("choice", p)
        (p_arr,) = u.promote_inexact(p)
        if u.shape(p_arr) != (n_inputs,):
            raise ValueError("p must be None or a 1D vector with the same size as "
                             f"a.shape[axis]. p has shape {u.shape(p_arr)} and a.shape[axis] "
                             f"is {n_inputs}.")
        pdt = u.dtype_of(p_arr)
        if replace:
            p_cuml = u.lax().cumsum(p_arr, 0)
            last = u.reshape(u.lax().slice(p_cuml, (n_inputs - 1,), (n_inputs,)), ())
            r = u.mul(last, u.sub(u.const(pdt, 1), uniform(key, shape, dtype=pdt)))
            ind = u.convert(_ops.searchsorted(p_cuml, r), int_dt)
        else:
            g = u.add(gumbel(key, (n_inputs,), dtype=pdt, mode=mode), u.log(p_arr))
            ind = u.convert(_ops.top_k(g, n_draws)[1], int_dt)
        result = ind if not ashape else _ops.take(arr, ind, axis)
    out_shape = shape if not ashape else ashape[:axis] + shape + ashape[axis + 1:]
    return u.reshape(result, out_shape)


# ----------------------------------------------------------------------------------------------
# normal and friends


def normal(key, shape=(), dtype=None, *, out_sharding=None):
    """Standard normal samples (complex dtypes: real and imaginary parts of variance 1/2)."""
    key, _ = check_prng_key("normal", key)
    shape = canonicalize_shape(shape)
    dtype = dtypes.check_and_canonicalize_user_dtype(float if dtype is None else dtype)
    if not dtypes.issubdtype(dtype, np.inexact):
        raise ValueError(f"dtype argument to `normal` must be a float or complex dtype, "
                         f"got {dtype}")
    return _normal(key, shape, dtype)


def _normal(key, shape, dtype):
    if dtypes.issubdtype(dtype, np.complexfloating):
        real_dtype = np.array(0, dtype).real.dtype
        key_re, key_im = _split(key)
        re = _normal_real(key_re, shape, real_dtype)
        im = _normal_real(key_im, shape, real_dtype)
        z = u.lax().complex(re, im)
        # JAX divides by the constant sqrt(2); XLA's simplifier makes that a product with
        # its reciprocal 1 / sqrt(2), rounded in the part's type (a complex division, XLA's
        # Smith's algorithm, differs in the last bit of about 3 in 4 complex64 values).
        inv_sqrt2 = real_dtype.type(1) / real_dtype.type(np.sqrt(2))
        return u.lax().mul(z, u.broadcast_to(u.const(dtype, inv_sqrt2), shape))
    return _normal_real(key, shape, dtype)


def _normal_erf_inv(key, shape, dtype):
    """erf_inv of the uniform in (-1, 1) behind ``normal``: normal is sqrt(2) times it."""
    check_shape("normal", shape)
    lo = np.nextafter(np.array(-1., dtype), np.array(0., dtype), dtype=dtype)
    hi = np.array(1., dtype)
    v = _uniform(key, u.const(dtype, lo), u.const(dtype, hi), shape, dtype)
    return u.erf_inv(v)


def _normal_real(key, shape, dtype):
    return u.mul(u.const(dtype, np.sqrt(2)), _normal_erf_inv(key, shape, dtype))


def div_xla(x, y):
    """``x / y`` as XLA computes it: a scalar divisor broadcast against a non-scalar
    ``x`` becomes a multiplication by its reciprocal."""
    y = u.asarray(y) if u.is_array(y) else u.const(x, y)
    if not u.shape(y) and u.shape(x):
        return u.mul(x, u.div(u.const(y, 1), y))
    return u.div(x, y)


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky", *,
                        out_sharding=None):
    """Samples of N(mean, cov); the factor of ``cov`` by 'cholesky', 'eigh' or 'svd'."""
    key, _ = check_prng_key("multivariate_normal", key)
    mean, cov = u.promote_inexact(mean, cov)
    if method not in {"svd", "eigh", "cholesky"}:
        raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
    if dtype is None:
        dtype = u.dtype_of(mean)
    else:
        dtype = dtypes.check_and_canonicalize_user_dtype(dtype)
    if not dtypes.issubdtype(dtype, np.floating):
        raise ValueError(f"dtype argument to `multivariate_normal` must be a float dtype, "
                         f"got {dtype}")
    if shape is not None:
        shape = canonicalize_shape(shape)
    mshape, cshape = u.shape(mean), u.shape(cov)
    if not len(mshape) >= 1:
        raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == "
                         f"{len(mshape)}")
    if not len(cshape) >= 2:
        raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == "
                         f"{len(cshape)}")
    n = mshape[-1]
    if cshape[-2:] != (n, n):
        raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, "
                         f"but got cov.shape == {cshape}.")
    if shape is None:
        shape = tuple(np.broadcast_shapes(mshape[:-1], cshape[:-2]))
    else:
        check_shape("normal", shape, mshape[:-1], cshape[:-2])
    if method == "svd":
        uu, s, _ = _ops.svd(cov)
        factor = u.mul(uu, u.expand_dims(u.sqrt(s), (len(u.shape(s)) - 1,)))
    elif method == "eigh":
        w, v = _ops.eigh(cov)
        factor = u.mul(v, u.expand_dims(u.sqrt(w), (len(u.shape(w)) - 1,)))
    else:
        factor = _ops.cholesky(cov)
    z = normal(key, shape + mshape[-1:], dtype)
    # einsum('...ij,...j->...i', factor, z), batch axes broadcast.
    bshape = tuple(np.broadcast_shapes(u.shape(factor)[:-2], shape))
    f = u.broadcast_to(factor, bshape + (n, n))
    zz = u.broadcast_to(z, bshape + (n,))
    nb = len(bshape)
    lax = u.lax()
    prod = lax.dot_general(f, zz, (((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb)))))
    if u.dtype_of(prod) != dtype:
        prod = u.convert(prod, dtype)
    m = u.convert(mean, dtype) if u.dtype_of(mean) != dtype else mean
    return u.add(m, prod)


def truncated_normal(key, lower, upper, shape=None, dtype=None, *, out_sharding=None):
    """Standard normal samples truncated to the open interval ``(lower, upper)``."""
    if shape is not None:
        shape = canonicalize_shape(shape)
    key, _ = check_prng_key("truncated_normal", key)
    dtype = float_dtype("truncated_normal", dtype)
    if shape is None:
        shape = tuple(np.broadcast_shapes(_arg_shape(lower), _arg_shape(upper)))
    else:
        check_shape("truncated_normal", shape, _arg_shape(lower), _arg_shape(upper))
    sqrt2 = u.const(dtype, np.sqrt(2))
    lower = u.convert(lower, dtype)
    upper = u.convert(upper, dtype)
    lax = u.lax()
    # x / sqrt2 by a constant: XLA multiplies by the (float) reciprocal.
    inv_sqrt2 = u.div(u.const(dtype, 1), sqrt2)
    a = u.erf(u.mul(lower, inv_sqrt2))
    b = u.erf(u.mul(upper, inv_sqrt2))
    v = _uniform(key, a, b, shape, dtype)
    out = u.mul(sqrt2, u.erf_inv(v))
    lo = u.nextafter(lax.stop_gradient(lower), u.const(dtype, np.inf))
    hi = u.nextafter(lax.stop_gradient(upper), u.const(dtype, -np.inf))
    # jnp.clip(out, lo, hi) = minimum(maximum(out, lo), hi)
    return u.minimum(u.maximum(out, lo), hi)


_F32_ONE = np.float32(1)


def lognormal(key, sigma=_F32_ONE, shape=None, dtype=None, *, out_sharding=None):
    """exp(sigma * N(0, 1))."""
    key, _ = check_prng_key("lognormal", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(float if dtype is None else dtype)
    if not dtypes.issubdtype(dtype, np.inexact):
        raise ValueError(f"dtype argument to `lognormal` must be a float or complex dtype, "
                         f"got {dtype}")
    shape = check_broadcast_shapes("lognormal", shape, sigma)
    check_all_safe_to_cast("lognormal", dtype, sigma)
    sigma = u.convert(sigma, dtype)
    if dtypes.issubdtype(dtype, np.floating) and not u.shape(sigma):
        # XLA folds the constant sqrt(2) of normal() into a scalar factor.
        e = _normal_erf_inv(key, shape, dtype)
        return u.exp(u.mul(e, u.mul(u.const(dtype, np.sqrt(2)), sigma)))
    return u.exp(u.mul(normal(key, shape, dtype), sigma))


# ----------------------------------------------------------------------------------------------
# bernoulli, rademacher


def bernoulli(key, p=0.5, shape=None, mode="low", *, out_sharding=None):
    """Booleans that are True with probability ``p``."""
    if shape is not None:
        shape = canonicalize_shape(shape)
    if mode not in ["high", "low"]:
        raise ValueError(f"got {mode=}, expected 'high' or 'low'")
    key, _ = check_prng_key("bernoulli", key)
    dtype = u.dtype_of(p)
    if not dtypes.issubdtype(dtype, np.floating):
        raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dtype}.")
    p = u.convert(p, dtype)
    if shape is None:
        shape = u.shape(p)
    else:
        check_shape("bernoulli", shape, u.shape(p))
    if mode == "high":
        both = uniform(key, (2, *shape), dtype)
        u1 = u.reshape(u.lax().index_in_dim(both, 0, 0, keepdims=False), shape)
        u2 = u.reshape(u.lax().index_in_dim(both, 1, 0, keepdims=False), shape)
        u2 = u.mul(u2, u.const(dtype, 2.0 ** -dtypes.finfo(dtype).nmant))
        return u.lt(u2, u.sub(p, u1))
    return u.lt(uniform(key, shape, dtype), p)


def rademacher(key, shape=(), dtype=None, *, out_sharding=None):
    """Samples of -1 and 1 with equal probability."""
    key, _ = check_prng_key("rademacher", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(int if dtype is None else dtype)
    shape = canonicalize_shape(shape)
    b = u.convert(bernoulli(key, 0.5, shape), dtype)
    return u.convert(u.sub(u.mul(u.const(dtype, 2), b), u.const(dtype, 1)), dtype)


# ----------------------------------------------------------------------------------------------
# Inverse-CDF samplers of one uniform.


def cauchy(key, shape=(), dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("cauchy", key)
    dtype = float_dtype("cauchy", dtype)
    shape = canonicalize_shape(shape)
    check_shape("cauchy", shape)
    v = uniform(key, shape, dtype, minval=dtypes.finfo(dtype).eps, maxval=1.)
    pi = u.const(dtype, np.pi)
    return u.tan(u.mul(pi, u.sub(v, u.const(dtype, 0.5))))


def exponential(key, shape=(), dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("exponential", key)
    dtype = float_dtype("exponential", dtype)
    shape = canonicalize_shape(shape)
    check_shape("exponential", shape)
    v = uniform(key, shape, dtype)
    # 1 - u moves the domain of log to (0, 1].
    return u.neg(u.log1p(u.neg(v)))


def _gumbel(key, shape, dtype, mode):
    check_shape("gumbel", shape)
    info = dtypes.finfo(dtype)
    if dtype == np.float32 and mode == "highest":
        return _gumbel_highest(key, shape)
    if mode in ("high", "highest"):
        both = _uniform(key, 0., 1., (2,) + shape, dtype)
        high = u.reshape(u.lax().index_in_dim(both, 0, 0, keepdims=False), shape)
        low = u.reshape(u.lax().index_in_dim(both, 1, 0, keepdims=False), shape)
        # high + 2**-nmant * low + tiny: the multiply fuses with the first add.
        alt = u.add(u.fma(u.const(dtype, 2.0 ** -info.nmant), low, high),
                    u.const(dtype, info.tiny))
        x = u.select(u.ge(high, u.const(dtype, 0.5)), high, alt)
        return u.neg(u.log(u.neg(u.log1p(u.neg(x)))))
    v = _uniform(key, info.tiny, 1., shape, dtype)
    return u.neg(u.log(u.neg(u.log(v))))


def _safe_int_to_float(hi, lo):
    """Two uint32 words (a 64-bit fixed-point fraction) to float32 in (0, 1)."""
    lax = u.lax()
    f32 = np.dtype(np.float32)
    finfo = dtypes.finfo(f32)
    U = np.dtype(np.uint32)
    hiclz, loclz = lax.clz(hi), lax.clz(lo)
    c32 = u.const(U, 32)
    is32 = u.eq(hiclz, c32)
    mantissa = u.bitwise_or(
        u.shift_left(hi, hiclz),
        u.select(is32, u.shift_left(lo, loclz),
                 u.shift_right_logical(lo, u.sub(u.const(U, finfo.bits), hiclz))))
    mantissa = u.shift_right_logical(mantissa, u.const(U, finfo.bits - finfo.nmant - 1))
    mantissa = u.bitwise_and(mantissa, u.const(U, (1 << finfo.nmant) - 1))
    lead = u.select(is32, u.add(c32, loclz), hiclz)
    exp_ = u.shift_left(u.sub(u.const(U, -finfo.minexp), lead), u.const(U, finfo.nmant))
    exp_ = u.bitwise_and(exp_, u.const(U, (1 << (finfo.bits - 2)) - (1 << (finfo.nmant - 1))))
    return lax.bitcast_convert_type(u.bitwise_or(exp_, mantissa), f32)


def _gumbel_highest(key, shape):
    lax = u.lax()
    U = np.dtype(np.uint32)
    b = random_bits(key, 32, (2,) + shape)
    b0 = u.reshape(lax.index_in_dim(b, 0, 0, keepdims=False), shape)
    b1 = u.reshape(lax.index_in_dim(b, 1, 0, keepdims=False), shape)
    n0, n1 = lax.bitwise_not(b0), lax.bitwise_not(b1)
    # 1 - bits in 64-bit fixed point: add (carry, 1) to the complemented words.
    carry = u.convert(u.eq(n1, u.const(U, 0xFFFFFFFF)), U)
    n0 = u.add(n0, carry)
    n1 = u.add(n1, u.const(U, 1))
    flip = u.lt(b0, u.const(U, 1 << 31))
    x = _safe_int_to_float(u.select(flip, b0, n0), u.select(flip, b1, n1))
    a = u.neg(u.log(u.neg(u.log1p(u.neg(x)))))
    c = u.neg(u.log(u.neg(u.log(x))))
    return u.select(flip, a, c)


def gumbel(key, shape=(), dtype=None, mode=None, *, out_sharding=None):
    """Standard Gumbel samples; ``mode`` 'low' (default), 'high' or 'highest' resolution."""
    key, _ = check_prng_key("gumbel", key)
    dtype = float_dtype("gumbel", dtype)
    shape = canonicalize_shape(shape)
    if mode is None:
        mode = "low"
    if mode not in ("highest", "high", "low"):
        raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
    return _gumbel(key, shape, dtype, mode)


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None, *,
                out_sharding=None):
    """Samples of the categorical distributions with (unnormalized) log-probabilities
    ``logits`` along ``axis`` (Gumbel-max; Gumbel-top-k without replacement)."""
    key, _ = check_prng_key("categorical", key)
    _check_arraylike("categorical", logits)
    logits_arr = u.asarray(logits)
    lshape = u.shape(logits_arr)
    nd = len(lshape)
    axis = operator.index(axis)
    if not -nd <= axis < nd:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {nd}")
    batch_shape = tuple(np.delete(np.array(lshape, dtype=np.int64), axis).tolist())
    if shape is None:
        shape = batch_shape
    else:
        shape = canonicalize_shape(shape)
        check_shape("categorical", shape, batch_shape)
    shape_prefix = shape[:len(shape) - len(batch_shape)]
    ldt = u.dtype_of(logits_arr)
    if not dtypes.issubdtype(ldt, np.floating):
        raise ValueError(f"dtype argument to `gumbel` must be a float dtype, got {ldt}")
    if replace:
        if axis >= 0:
            axis -= nd
        logits_shape = list(shape[len(shape) - len(batch_shape):])
        logits_shape.insert(axis % nd, lshape[axis])
        full = (*shape_prefix, *logits_shape)
        g = gumbel(key, full, ldt, mode=mode)
        lg = u.reshape(logits_arr, (1,) * len(shape_prefix) + lshape)
        s = u.add(g, lg)
        ax = axis % len(full)
        return u.lax().argmax(s, ax, dtypes.default_int_dtype())
    logits_arr = u.add(logits_arr, gumbel(key, lshape, ldt, mode=mode))
    k = math.prod(shape_prefix)
    if k > lshape[axis]:
        raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number "
                         f"of categories ({lshape[axis]}).")
    _, indices = _ops.top_k(u.moveaxis(logits_arr, axis, -1), k)
    ind_nd = len(u.shape(indices))
    dimensions = (ind_nd - 1, *range(ind_nd - 1))
    return u.lax().reshape(indices, tuple(shape), dimensions)


def laplace(key, shape=(), dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("laplace", key)
    dtype = float_dtype("laplace", dtype)
    shape = canonicalize_shape(shape)
    check_shape("laplace", shape)
    v = uniform(key, shape, dtype, minval=-1. + dtypes.finfo(dtype).epsneg, maxval=1.)
    return u.mul(u.sign(v), u.log1p(u.neg(u.abs_(v))))


def logistic(key, shape=(), dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("logistic", key)
    dtype = float_dtype("logistic", dtype)
    shape = canonicalize_shape(shape)
    check_shape("logistic", shape)
    x = uniform(key, shape, dtype, minval=dtypes.finfo(dtype).tiny, maxval=1.)
    return u.sub(u.log(x), u.log1p(u.neg(x)))


def pareto(key, b, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("pareto", key)
    dtype = float_dtype("pareto", dtype)
    shape = check_broadcast_shapes("pareto", shape, b)
    check_all_safe_to_cast("pareto", dtype, b)
    b = u.convert(b, dtype)
    e = exponential(key, shape, dtype)
    return u.exp(div_xla(e, b))


def maxwell(key, shape=(), dtype=None, *, out_sharding=None):
    """One-sided Maxwell samples: the norm of three standard normals."""
    key, _ = check_prng_key("maxwell", key)
    dtype = float_dtype("maxwell", dtype)
    shape = canonicalize_shape(shape)
    z = normal(key, shape + (3,), dtype)
    return _norm_last3(z)


def _norm_last3(z):
    """``jnp.linalg.norm(z, axis=-1)`` for a length-3 last axis, summed as XLA's CPU
    reduction (fused with the sampling) sums: inputs of 4096 elements or more as
    (x0*x0 + x2*x2) + x1*x1; smaller ones with fused squares, starting from x1*x1
    (float32) or x0*x0 (float64)."""
    lax = u.lax()
    parts = [u.reshape(lax.index_in_dim(z, i, len(u.shape(z)) - 1, keepdims=False),
                       u.shape(z)[:-1]) for i in range(3)]
    x0, x1, x2 = parts
    if math.prod(u.shape(z)) >= 4096:
        # Rounded squares: the compiler's FMA contraction must leave these sums alone.
        acc = u.add(u.add(rounded(u.mul(x0, x0)), rounded(u.mul(x2, x2))),
                    rounded(u.mul(x1, x1)))
    elif u.dtype_of(z) == np.float64:
        acc = u.fma(x2, x2, u.fma(x1, x1, u.mul(x0, x0)))
    else:
        acc = u.fma(x2, x2, u.fma(x0, x0, u.mul(x1, x1)))
    return u.sqrt(acc)


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    key, _ = check_prng_key("double_sided_maxwell", key)
    dtype = float_dtype("double_sided_maxwell", dtype)
    shape = canonicalize_shape(shape)
    params_shapes = tuple(np.broadcast_shapes(_arg_shape(loc), _arg_shape(scale)))
    if not shape:
        shape = params_shapes
    shape = shape + params_shapes
    maxwell_key, rademacher_key = _split(key)
    maxwell_rvs = maxwell(maxwell_key, shape=shape, dtype=dtype)
    random_sign = rademacher(rademacher_key, shape=shape, dtype=dtype)
    loc = u.asarray(loc)
    scale = u.asarray(scale)
    rs = u.mul(random_sign, maxwell_rvs)
    loc_c = u.convert(loc, dtype) if get_aval(loc).weak_type else loc
    scale_c = u.convert(scale, dtype) if get_aval(scale).weak_type else scale
    return u.fma(rs, scale_c, loc_c)


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    key, _ = check_prng_key("weibull_min", key)
    dtype = float_dtype("weibull_min", dtype)
    shape = canonicalize_shape(shape)
    v = uniform(key, shape, dtype, 0, 1)
    conc = u.asarray(concentration)
    if get_aval(conc).weak_type:
        conc = u.convert(conc, dtype)
    inv = u.div(u.const(conc, 1.0), conc)
    base = u.neg(u.log1p(u.neg(v)))
    scale = u.asarray(scale)
    if get_aval(scale).weak_type:
        scale = u.convert(scale, dtype)
    return u.mul(u.pow_(base, inv), scale)


def rayleigh(key, scale, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("rayleigh", key)
    dtype = float_dtype("rayleigh", dtype)
    shape = check_broadcast_shapes("rayleigh", shape, scale)
    check_all_safe_to_cast("rayleigh", dtype, scale)
    v = uniform(key, shape, dtype)
    scale = u.broadcast_to(u.convert(scale, dtype), shape)
    log_u = u.log(v)
    sqrt_u = u.sqrt(u.mul(log_u, u.const(dtype, -2)))
    return u.mul(scale, sqrt_u)


def wald(key, mean, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("wald", key)
    dtype = float_dtype("wald", dtype)
    shape = check_broadcast_shapes("wald", shape, mean)
    check_all_safe_to_cast("wald", dtype, mean)
    k1, k2 = _split(key, 2)
    mean = u.broadcast_to(u.convert(mean, dtype), shape)
    v = normal(k1, shape, dtype)
    z = uniform(k2, shape, dtype)
    lax = u.lax()
    y = lax.integer_pow(v, 2)
    y_sq = lax.integer_pow(y, 2)
    mean_sq = lax.integer_pow(mean, 2)
    # 4 * mean * y + mean_sq * y_sq: XLA fuses the first product into the sum.
    sqrt_term = u.sqrt(u.fma(u.mul(u.const(dtype, 4), mean), y, u.mul(mean_sq, y_sq)))
    half = u.const(dtype, 0.5)
    # mean + mean_sq * y / 2 - mean / 2 * sqrt_term (halving is exact; the last product fuses).
    t1 = u.add(mean, rounded(u.mul(u.mul(mean_sq, y), half)))     # (not contracted)
    x = u.fma(u.neg(u.mul(mean, half)), sqrt_term, t1)
    return u.select(u.le(z, u.div(mean, u.add(mean, x))), x, u.div(mean_sq, x))


def geometric(key, p, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("geometric", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(int if dtype is None else dtype)
    if not dtypes.issubdtype(dtype, np.integer):
        raise ValueError(f"dtype argument to `geometric` must be an int dtype, got {dtype}")
    shape = check_broadcast_shapes("geometric", shape, p)
    _check_arraylike("geometric", p)
    (p,) = u.promote_inexact(p)
    pdt = u.dtype_of(p)
    v = uniform(key, shape, pdt)
    v = u.select(u.eq(v, u.const(pdt, 0)), u.const(pdt, 1), v)
    log_u = u.log(v)
    log_one_minus_p = u.log1p(u.neg(p))
    g = u.add(u.floor(div_xla(log_u, log_one_minus_p)), u.const(pdt, 1))
    return u.convert(g, dtype)


def triangular(key, left, mode, right, shape=None, dtype=None, *, out_sharding=None):
    key, _ = check_prng_key("triangular", key)
    dtype = float_dtype("triangular", dtype)
    shape = check_broadcast_shapes("triangular", shape, left, mode, right)
    check_all_safe_to_cast("triangular", dtype, left, mode, right)
    left = u.broadcast_to(u.convert(left, dtype), shape)
    right = u.broadcast_to(u.convert(right, dtype), shape)
    mode = u.broadcast_to(u.convert(mode, dtype), shape)
    fc = u.div(u.sub(mode, left), u.sub(right, left))
    v = uniform(key, shape, dtype)
    out1 = u.add(left, u.sqrt(u.mul(u.mul(v, u.sub(right, left)), u.sub(mode, left))))
    out2 = u.sub(right, u.sqrt(u.mul(u.mul(u.sub(u.const(dtype, 1), v), u.sub(right, left)),
                                     u.sub(right, mode))))
    return u.select(u.lt(v, fc), out1, out2)


def orthogonal(key, n, shape=(), dtype=None, m=None, *, out_sharding=None):
    """A uniformly random (semi-)orthogonal ``n x m`` matrix (unitary for complex dtypes)."""
    _m = n if m is None else m
    shape = canonicalize_shape(shape)
    key, _ = check_prng_key("orthogonal", key)
    dtype = dtypes.check_and_canonicalize_user_dtype(float if dtype is None else dtype)
    check_shape("orthogonal", shape)
    n = u.concrete_int(n, "The error occurred in jax.random.orthogonal()")
    _m = u.concrete_int(_m, "The error occurred in jax.random.orthogonal()")
    z = normal(key, (*shape, max(n, _m), min(n, _m)), dtype)
    q, r = _ops.qr(z)
    k = min(n, _m)
    lax = u.lax()
    d = _diagonal(r, k)
    x = u.mul(q, u.expand_dims(lax.sign(d), (len(u.shape(d)) - 1,)))
    if n < _m:
        nd = len(u.shape(x))
        x = lax.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))
    return x


def _diagonal(r, k):
    lax = u.lax()
    if k == 0:              # an empty matrix: an empty diagonal
        nd = len(u.shape(r))
        empty = lax.slice_in_dim(lax.slice_in_dim(r, 0, 0, axis=nd - 2), 0, 0, axis=nd - 1)
        return lax.reshape(empty, tuple(u.shape(r)[:-2]) + (0,))
    parts = [lax.index_in_dim(lax.index_in_dim(r, i, len(u.shape(r)) - 2, keepdims=False),
                              i, len(u.shape(r)) - 2, keepdims=True) for i in range(k)]
    return lax.concatenate(parts, len(u.shape(parts[0])) - 1)
