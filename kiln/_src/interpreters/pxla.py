"""``jax._src.interpreters.pxla``: result handlers by abstract-value type.

``global_result_handlers[ShapedArray](aval, sharding, committed)`` gives a function
turning a computation's physical result buffer into an array of ``aval`` (Flax's fp8
dtype rules build their ``EArray`` handler on it). kiln keeps every array whole in host
memory, so the sharding and commitment only describe where it lives.
"""
from __future__ import annotations

import numpy as np

from kiln.array import make_array
from kiln.core.avals import ShapedArray

__all__ = ["global_result_handlers"]


def _array_result_handler(aval, sharding, committed):
    def handler(buf):
        v = getattr(buf, "_value", None)
        v = np.asarray(buf) if v is None else v
        if v.shape != tuple(aval.shape) or v.dtype != aval.dtype:
            raise ValueError(f"result buffer of shape {v.shape} and dtype {v.dtype} does not "
                             f"match {aval.str_short()}")
        return make_array(v, aval.weak_type)
    return handler


global_result_handlers: dict = {ShapedArray: _array_result_handler}
