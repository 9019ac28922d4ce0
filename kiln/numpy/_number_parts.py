"""Integer and floating-point decompositions and bits: ``gcd``/``lcm``,
``frexp``/``modf``, ``packbits``/``unpackbits``, as ``jax.numpy``.

Semantics and dtypes are JAX's (which sometimes differ from NumPy's). Static arguments
(``axis``, ``N``, ``count``, ...) must be concrete; everything else may be traced.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes, lax
from kiln.core.trace import get_aval
from kiln.numpy import _util

__all__ = ["gcd", "lcm", "frexp", "modf", "packbits", "unpackbits"]


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype



# ----------------------------------------------------------------------------------------------
# integer and floating-point decompositions


def gcd(x1, x2):
    """Elementwise greatest common divisor of integers (of absolute values)."""
    jnp = _jnp()
    x1, x2 = _util.ensure_arraylike("gcd", x1, x2)
    x1, x2 = _util.promote_dtypes(x1, x2)
    if not dtypes.issubdtype(_dtype(x1), np.integer):
        raise ValueError("Arguments to jax.numpy.gcd must be integers.")
    x1, x2 = jnp.broadcast_arrays(x1, x2)

    def cond(c):
        return jnp.any(c[1] != 0)

    def body(c):
        a, b = c
        nz = b != 0
        a, b = jnp.where(nz, b, a), jnp.where(nz, lax.rem(a, jnp.where(nz, b, 1)), 0)
        return jnp.where(a < b, b, a), jnp.where(a < b, a, b)

    return lax.while_loop(cond, body, (jnp.abs(x1), jnp.abs(x2)))[0]


def lcm(x1, x2):
    """Elementwise least common multiple of integers (of absolute values)."""
    jnp = _jnp()
    x1, x2 = _util.ensure_arraylike("lcm", x1, x2)
    x1, x2 = _util.promote_dtypes(x1, x2)
    x1, x2 = jnp.abs(x1), jnp.abs(x2)
    if not dtypes.issubdtype(_dtype(x1), np.integer):
        raise ValueError("Arguments to jax.numpy.lcm must be integers.")
    d = gcd(x1, x2)
    return jnp.where(d == 0, 0, x1 * jnp.floor_divide(x2, jnp.where(d == 0, 1, d)))


def _pow2(k, dt):
    """Exactly ``2**k`` in float dtype ``dt`` for integer ``k`` in the normal range."""
    info = dtypes.finfo(dt)
    it = np.dtype(f"int{info.bits}")
    bias = 1 - info.minexp
    bits = lax.shift_left(lax.convert_element_type(k + bias, it),
                          _util.scalar_const(info.nmant, it))
    return lax.bitcast_convert_type(bits, dt)


def frexp(x, /):
    """Mantissa in [0.5, 1) (with ``x``'s sign) and integer exponent: ``x = m * 2**e``."""
    jnp = _jnp()
    x = _util.ensure_arraylike("frexp", x)
    (x,) = _util.promote_dtypes_inexact(x)
    dt = _dtype(x)
    if dtypes.issubdtype(dt, np.complexfloating):
        raise TypeError("frexp does not support complex-valued inputs")
    info = dtypes.finfo(dt)
    it = np.dtype(f"int{info.bits}")
    # Subnormals are scaled into the normal range first.
    small = jnp.abs(x) < info.tiny
    xs = jnp.where(small, x * float(2 ** info.nmant), x)
    bits = lax.bitcast_convert_type(lax.stop_gradient(xs), it)
    field = lax.bitwise_and(lax.shift_right_logical(bits, _util.scalar_const(info.nmant, it)),
                            _util.scalar_const((1 << info.nexp) - 1, it))
    e = field.astype(np.int32) + info.minexp - jnp.where(small, info.nmant, 0)
    special = jnp.isinf(x) | jnp.isnan(x) | (x == 0)
    e = jnp.where(special, 0, e)
    # m = x * 2**-e in two exact power-of-two steps (so it stays differentiable in x).
    h = -e // 2
    m = x * _pow2(h, dt) * _pow2(-e - h, dt)
    return jnp.where(special, x, m), e


def modf(x, /, out=None):
    """Fractional and integral parts, both with ``x``'s sign."""
    jnp = _jnp()
    x = _util.ensure_arraylike("modf", x)
    (x,) = _util.promote_dtypes_inexact(x)
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.modf is not supported.")
    whole = jnp.where(x >= 0, jnp.floor(x), jnp.ceil(x))
    return x - whole, whole


# ----------------------------------------------------------------------------------------------
# bits


def _check_bitorder(bitorder):
    if bitorder not in ("little", "big"):
        raise ValueError("'order' must be either 'little' or 'big'")


def packbits(a, axis=None, bitorder="big"):
    """Pack the truth values of ``a`` into ``uint8`` bytes along ``axis`` (flattened when
    None), padding with zero bits."""
    jnp = _jnp()
    arr = _util.ensure_arraylike("packbits", a)
    if not (dtypes.issubdtype(_dtype(arr), np.integer) or _dtype(arr) == np.bool_):
        raise TypeError("Expected an input array of integer or boolean data type")
    _check_bitorder(bitorder)
    bits = (arr != 0).astype(np.uint8)
    if axis is None:
        bits = jnp.ravel(bits)
        axis = 0
    bits = jnp.swapaxes(bits, axis, -1)
    rem = _shape(bits)[-1] % 8
    if rem:
        bits = lax.pad(bits, _util.scalar_const(0, np.uint8),
                       [(0, 0, 0)] * (bits.ndim - 1) + [(0, 8 - rem, 0)])
    bits = bits.reshape(_shape(bits)[:-1] + (_shape(bits)[-1] // 8, 8))
    shifts = np.arange(8, dtype=np.uint8)
    if bitorder == "big":
        shifts = shifts[::-1]
    shifts = shifts.reshape((1,) * (bits.ndim - 1) + (8,))     # no rank promotion
    packed = jnp.sum(jnp.left_shift(bits, jnp.asarray(shifts)), axis=-1).astype(np.uint8)
    return jnp.swapaxes(packed, axis, -1)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """Unpack ``uint8`` bytes into bits (0/1 ``uint8``) along ``axis`` (flattened when None);
    ``count`` keeps (or zero-pads to) that many bits."""
    jnp = _jnp()
    arr = _util.ensure_arraylike("unpackbits", a)
    if _dtype(arr) != np.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    _check_bitorder(bitorder)
    masks = np.left_shift(np.uint8(1), np.arange(8, dtype=np.uint8))
    if bitorder == "big":
        masks = masks[::-1]
    if axis is None:
        arr = jnp.ravel(arr)
        axis = 0
    arr = jnp.swapaxes(arr, axis, -1)
    masks = masks.reshape((1,) * arr.ndim + (8,))     # no rank promotion
    out = (jnp.bitwise_and(arr[..., None], jnp.asarray(masks)) > 0).astype(np.uint8)
    out = out.reshape(_shape(out)[:-2] + (-1,))
    if count is not None:
        count = _util.core_int(count, "The count argument of jnp.unpackbits must be static.")
        have = _shape(out)[-1]
        if count > have:
            out = jnp.pad(out, [(0, 0)] * (out.ndim - 1) + [(0, count - have)])
        else:
            out = out[..., :count]
    return jnp.swapaxes(out, axis, -1)


