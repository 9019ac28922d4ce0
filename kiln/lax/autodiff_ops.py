"""Operations that exist for differentiation: ``stop_gradient``."""
from __future__ import annotations

import numpy as np

from kiln._physical_tree import tree_map
from kiln.core.avals import ShapedArray
from kiln.core.trace import get_aval
from kiln.interpreters import ad, batching
from kiln.interpreters.ad import Zero
from kiln.lax._factory import standard_primitive

stop_gradient_p = standard_primitive(
    "stop_gradient", lambda x: ShapedArray(x.shape, x.dtype, x.weak_type), lambda x: x,
    weak_type_rule=lambda w: w)
batching.vectorized_batcher(stop_gradient_p)
ad.jvp_rules[stop_gradient_p] = lambda primals, tangents: (
    stop_gradient_p.bind(*primals), Zero.from_primal_value(primals[0]))


def _stop(leaf):
    dt = getattr(get_aval(leaf), "dtype", None)
    # ml_dtypes' types (bfloat16, float8_*, int4) also have kind "V": only NumPy's
    # own void (structured/raw bytes) is rejected.
    if isinstance(dt, np.dtype) and (dt.kind in "OSU" or dt.type is np.void):
        raise TypeError(f"Argument '{leaf}' of type '{type(leaf)}' is not a valid JAX type")
    return stop_gradient_p.bind(leaf)


def stop_gradient(x):
    """Identity on values whose derivative is zero (applied to every leaf of a pytree).

    Raises:
      TypeError: for a leaf that is not a JAX type (a function, a string, ...), as JAX.
    """
    return tree_map(_stop, x)


__all__ = ["stop_gradient", "stop_gradient_p"]
