"""Small array helpers for the samplers, written with ``kiln.lax`` only.

The samplers avoid ``kiln.numpy`` (and the operators of arrays, which go through
it) so that they depend on nothing but the primitives. Binary helpers broadcast
with NumPy's rules and turn Python scalars into arrays of the other operand's
dtype, like JAX's ``lax._const``.

The transcendental helpers (``log``, ``log1p``, ``exp``, ``erf_inv``) and ``fma``
are the XLA-exact primitives of ``_xla_math``: they are what make samples equal
to JAX's bit for bit.
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.array import Array, make_array
from kiln.core.trace import Tracer, get_aval, to_array
from kiln.random import _xla_math


def lax():
    from kiln import lax as _lax
    return _lax


def is_array(x) -> bool:
    return isinstance(x, (Array, Tracer))


def asarray(x):
    """An Array or tracer for ``x`` (Python scalars become weakly typed arrays)."""
    if is_array(x):
        return x
    return to_array(x)


def shape(x) -> tuple:
    return tuple(get_aval(x).shape) if is_array(x) else tuple(np.shape(x))


def dtype_of(x):
    return get_aval(asarray(x)).dtype


def const(like, value):
    """A constant of ``like``'s dtype (``like`` is an array or a dtype)."""
    dt = get_aval(like).dtype if is_array(like) else np.dtype(like)
    return make_array(np.asarray(value, dt))


def convert(x, dtype):
    return lax().convert_element_type(asarray(x), dtypes.canonicalize_dtype(dtype))


def broadcast_to(x, shp):
    """Broadcast ``x`` to ``shp`` with NumPy's rules (trailing alignment, unit axes)."""
    x = asarray(x)
    shp = tuple(shp)
    s = get_aval(x).shape
    if s == shp:
        return x
    if len(s) > len(shp) or any(a != 1 and a != b for a, b in zip(s[::-1], shp[::-1])):
        raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape {shp}")
    lead = len(shp) - len(s)
    keep = tuple(i for i, a in enumerate(s) if a == shp[lead + i])
    if len(keep) != len(s):
        x = lax().reshape(x, tuple(s[i] for i in keep))
    return lax().broadcast_in_dim(x, shp, tuple(lead + i for i in keep))


def broadcast_to_rank(x, rank):
    x = asarray(x)
    s = get_aval(x).shape
    if len(s) >= rank:
        return x
    return lax().reshape(x, (1,) * (rank - len(s)) + s)


def _pair(x, y, scalars_ok=False):
    """Operands of one dtype and shape (NumPy broadcasting); with ``scalars_ok`` a
    rank-0 operand stays rank-0 (elementwise lax primitives broadcast it)."""
    if not is_array(x) and is_array(y):
        x = const(y, x)
    elif not is_array(y) and is_array(x):
        y = const(x, y)
    x, y = asarray(x), asarray(y)
    sx, sy = get_aval(x).shape, get_aval(y).shape
    if scalars_ok and sx != sy:
        s = tuple(np.broadcast_shapes(sx, sy))
        # A one-element operand against the full shape acts as a scalar.
        if sx != () and sy == s and int(np.prod(sx)) == 1:
            x, sx = reshape(x, ()), ()
        elif sy != () and sx == s and int(np.prod(sy)) == 1:
            y, sy = reshape(y, ()), ()
    if sx != sy and not (scalars_ok and (sx == () or sy == ())):
        s = tuple(np.broadcast_shapes(sx, sy))
        x, y = broadcast_to(x, s), broadcast_to(y, s)
    return x, y


def _binop(name, scalars_ok=True):
    def op(x, y):
        return getattr(lax(), name)(*_pair(x, y, scalars_ok))
    op.__name__ = name
    return op


add = _binop("add")
sub = _binop("sub")
mul = _binop("mul")
div = _binop("div")
maximum = _binop("max", scalars_ok=False)
minimum = _binop("min", scalars_ok=False)
lt = _binop("lt")
le = _binop("le")
gt = _binop("gt")
ge = _binop("ge")
eq = _binop("eq")
ne = _binop("ne")
bitwise_and = _binop("bitwise_and")
bitwise_or = _binop("bitwise_or")
bitwise_xor = _binop("bitwise_xor")
shift_left = _binop("shift_left")
shift_right_logical = _binop("shift_right_logical")


def pow_(x, y):
    """``x ** y`` as XLA computes it on the CPU (the C library's pow)."""
    return _xla_math.xla_pow_p.bind(*_pair(x, y, False))


def tan(x):
    """tan as XLA computes it on the CPU (the C library's tan)."""
    return _xla_math.xla_tan_p.bind(x)


rem = _binop("rem")
nextafter = _binop("nextafter", scalars_ok=False)


def select(pred, on_true, on_false):
    on_true, on_false = _pair(on_true, on_false)
    s = get_aval(on_true).shape
    pred = broadcast_to(pred, s)
    return lax().select(pred, on_true, on_false)


def fma(a, b, c):
    """``a * b + c`` with a single rounding (XLA contracts these into FMAs)."""
    arrs = [x for x in (a, b, c) if is_array(x)]
    ref = arrs[0] if arrs else asarray(a)
    a, b, c = (x if is_array(x) else const(ref, x) for x in (a, b, c))
    s = tuple(np.broadcast_shapes(*(get_aval(x).shape for x in (a, b, c))))
    a, b, c = (x if get_aval(x).shape in (s, ()) else
               reshape(x, ()) if int(np.prod(get_aval(x).shape)) == 1 else
               broadcast_to(x, s) for x in (a, b, c))
    return _xla_math.xla_fma_p.bind(a, b, c)


def neg(x):
    return lax().neg(x)


def log(x):
    return _xla_math.xla_log_p.bind(x)


def log1p(x):
    return _xla_math.xla_log1p_p.bind(x)


def exp(x):
    return _xla_math.xla_exp_p.bind(x)


def erf_inv(x):
    return _xla_math.xla_erf_inv_p.bind(x)


def erf(x):
    return _xla_math.xla_erf_p.bind(x)


def sqrt(x):
    return lax().sqrt(x)


def floor(x):
    return lax().floor(x)


def abs_(x):
    return lax().abs(x)


def sign(x):
    return lax().sign(x)


def reshape(x, shp):
    x = asarray(x)
    shp = tuple(shp)
    if get_aval(x).shape == shp:
        return x
    return lax().reshape(x, shp)


def full(shp, value, dtype):
    return broadcast_to(const(dtype, value), tuple(shp))


def sum_(x, axis):
    x = asarray(x)
    nd = get_aval(x).ndim
    return lax().reduce_sum(x, (axis % nd,))


def max_(x, axis):
    x = asarray(x)
    nd = get_aval(x).ndim
    return lax().reduce_max(x, (axis % nd,))


def row_sum(x):
    """Sum over the last axis in the order of XLA's CPU reduction: in sequence for
    inputs under 4096 elements; above, as its two-lane vectorized loop does (even
    positions, odd positions, then the two partial sums)."""
    s = shape(x)
    nd = len(s)
    parts = [reshape(lax().index_in_dim(x, i, nd - 1, keepdims=False), s[:-1])
             for i in range(s[-1])]
    if not parts:
        return full(s[:-1], 0, dtype_of(x))

    def seq(ps):
        acc = ps[0]
        for p in ps[1:]:
            acc = add(acc, p)
        return acc
    if int(np.prod(s)) < 4096 or len(parts) < 3:
        return seq(parts)
    return add(seq(parts[0::2]), seq(parts[1::2]))


def moveaxis(x, src, dst):
    nd = get_aval(x).ndim
    src, dst = src % nd, dst % nd
    if src == dst:
        return x
    perm = [i for i in range(nd) if i != src]
    perm.insert(dst, src)
    return lax().transpose(x, tuple(perm))


def expand_dims(x, axes):
    return lax().expand_dims(asarray(x), tuple(axes))


def concrete_int(x, context: str) -> int:
    """A Python int for ``x``, or JAX's ConcretizationTypeError for traced values."""
    import operator
    if isinstance(x, Tracer):
        from kiln.errors import ConcretizationTypeError
        raise ConcretizationTypeError(x, context)
    return operator.index(x)


def is_float_dtype(dt) -> bool:
    return dtypes.issubdtype(dt, np.floating)


def promote_inexact(*xs):
    """Arrays for ``xs`` promoted to a common inexact dtype (``jnp``'s
    ``promote_dtypes_inexact``)."""
    arrs = [asarray(x) for x in xs]
    dt = dtypes.result_type(*arrs)
    if not dtypes.issubdtype(dt, np.inexact):
        dt = dtypes.canonicalize_dtype(dtypes.default_float_dtype())
    dt = dtypes.canonicalize_dtype(dt)
    return [convert(a, dt) if get_aval(a).dtype != dt or get_aval(a).weak_type else a
            for a in arrs]
