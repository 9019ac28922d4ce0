"""``copy_p``: the identity on values that yields a new array (JAX's ``copy`` primitive,
which ``jnp.array(x, copy=True)`` binds on a traced ``x``). It is linear: its JVP copies
the tangent and its transpose copies the cotangent, so neither primal nor tangent output
is the input object."""
from __future__ import annotations

from kiln.core.avals import ShapedArray
from kiln.interpreters import ad, batching
from kiln.lax._factory import standard_primitive

copy_p = standard_primitive(
    "copy", lambda x: ShapedArray(x.shape, x.dtype, x.weak_type), lambda x: x.copy(),
    weak_type_rule=lambda w: w)
batching.vectorized_batcher(copy_p)
ad.deflinear(copy_p, lambda ct: [copy_p.bind(ct)])


def array_copy(x):
    """A copy of the array ``x`` (``copy_p``), a new object also under ``jvp``/``grad``."""
    return copy_p.bind(x)


__all__ = ["copy_p"]
