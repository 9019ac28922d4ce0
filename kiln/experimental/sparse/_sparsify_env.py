"""The values ``sparsify`` computes with: a ``SparsifyEnv`` (a list of buffers) and
``SparsifyValue`` handles into it.

A ``SparsifyValue`` stands for one array: a dense one is the index of its buffer
(``data_ref``); a BCOO one the indices of its ``data`` and ``indices`` buffers; a BCSR one
also of its ``indptr``. Two values may share a buffer (``x`` and ``-x`` share their
indices), which lets the rules of ``add``/``mul`` see that two sparse operands have the
same pattern and combine their data directly.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from kiln.experimental.sparse._bcoo_core import BCOO

__all__ = ["SparsifyEnv", "SparsifyValue", "arrays_to_spvalues", "is_sparse_obj",
           "is_spvalue", "spvalues_to_arrays", "spvalues_to_avals"]


class SparsifyEnv:
    """The buffers (arrays or tracers) that ``SparsifyValue`` handles point into.

    Args:
      bufs: initial buffers (handles index them in this order).
    """

    def __init__(self, bufs=()):
        self._buffers: list = list(bufs)

    def _push(self, arr) -> int:
        import kiln.numpy as jnp
        self._buffers.append(jnp.asarray(arr))
        return len(self._buffers) - 1

    def _get(self, ref, what: str):
        if ref is None:
            raise RuntimeError(f"Internal: requested {what} from an spvalue whose "
                               f"{what}_ref is None")
        return self._buffers[ref]

    def data(self, spvalue: SparsifyValue):
        """The data buffer of ``spvalue`` (the array itself for a dense value)."""
        return self._get(spvalue.data_ref, "data")

    def indices(self, spvalue: SparsifyValue):
        """The indices buffer of a sparse ``spvalue``."""
        return self._get(spvalue.indices_ref, "indices")

    def indptr(self, spvalue: SparsifyValue):
        """The indptr buffer of a BCSR ``spvalue``."""
        return self._get(spvalue.indptr_ref, "indptr")

    def dense(self, data) -> SparsifyValue:
        """A new dense value holding ``data``."""
        return SparsifyValue(tuple(np.shape(data)), self._push(data))

    def sparse(self, shape, data=None, indices=None, indptr=None, *, data_ref=None,
               indices_ref=None, indptr_ref=None, indices_sorted=False,
               unique_indices=False) -> SparsifyValue:
        """A new sparse value of ``shape``: each buffer given either as an array (pushed) or
        as the index of a buffer already in the environment (``*_ref``); ``indptr`` (or
        ``indptr_ref``) makes it BCSR."""
        def ref(buf, r, what, required=True):
            if buf is not None:
                if r is not None:
                    raise ValueError(f"give either {what} or {what}_ref, not both")
                return self._push(buf)
            if r is None:
                if required:
                    raise ValueError(f"a sparse value needs {what} or {what}_ref")
                return None
            if not 0 <= r < len(self._buffers):
                raise ValueError(f"{what}_ref={r} is not a buffer of this environment")
            return r
        data_ref = ref(data, data_ref, "data")
        indices_ref = ref(indices, indices_ref, "indices")
        indptr_ref = ref(indptr, indptr_ref, "indptr", required=False)
        return SparsifyValue(tuple(shape), data_ref, indices_ref, indptr_ref,
                             indices_sorted=indices_sorted, unique_indices=unique_indices)


class SparsifyValue(NamedTuple):
    """A handle to an array in a ``SparsifyEnv`` (see the module docstring)."""

    shape: tuple
    data_ref: int | None
    indices_ref: int | None = None
    indptr_ref: int | None = None
    indices_sorted: bool | None = False
    unique_indices: bool | None = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_sparse(self) -> bool:
        return self.indices_ref is not None

    def is_dense(self) -> bool:
        return self.indices_ref is None

    def is_bcoo(self) -> bool:
        return self.is_sparse() and self.indptr_ref is None

    def is_bcsr(self) -> bool:
        return self.is_sparse() and self.indptr_ref is not None


def is_sparse_obj(x) -> bool:
    """Whether ``x`` is an array ``sparsify`` keeps sparse (BCOO or BCSR)."""
    from kiln.experimental.sparse.bcsr import BCSR
    return isinstance(x, (BCOO, BCSR))


def is_spvalue(x) -> bool:
    return isinstance(x, SparsifyValue)


def arrays_to_spvalues(spenv: SparsifyEnv, args: Any) -> Any:
    """``args`` (a pytree of dense, BCOO and BCSR arrays) with each array replaced by a
    ``SparsifyValue`` of new buffers pushed onto ``spenv``."""
    from kiln.experimental.sparse.bcsr import BCSR
    from kiln.tree_util import tree_map

    def to_spvalue(x):
        if isinstance(x, BCOO):
            return spenv.sparse(x.shape, x.data, x.indices, indices_sorted=x.indices_sorted,
                                unique_indices=x.unique_indices)
        if isinstance(x, BCSR):
            return spenv.sparse(x.shape, x.data, x.indices, x.indptr,
                                indices_sorted=x.indices_sorted,
                                unique_indices=x.unique_indices)
        return spenv.dense(x)
    return tree_map(to_spvalue, args, is_leaf=is_sparse_obj)


def spvalues_to_arrays(spenv: SparsifyEnv, spvalues: Any) -> Any:
    """``spvalues`` (a pytree of ``SparsifyValue``) with each handle replaced by its array
    (dense, BCOO or BCSR)."""
    from kiln.experimental.sparse.bcsr import BCSR
    from kiln.tree_util import tree_map

    def to_array(v):
        if v.is_bcoo():
            return BCOO((spenv.data(v), spenv.indices(v)), shape=v.shape,
                        indices_sorted=v.indices_sorted, unique_indices=v.unique_indices)
        if v.is_bcsr():
            return BCSR((spenv.data(v), spenv.indices(v), spenv.indptr(v)), shape=v.shape,
                        indices_sorted=v.indices_sorted, unique_indices=v.unique_indices)
        return spenv.data(v)
    return tree_map(to_array, spvalues, is_leaf=is_spvalue)


def spvalues_to_avals(spenv: SparsifyEnv, spvalues: Any) -> Any:
    """The abstract value (shape, the data's dtype and weak type) of each handle."""
    from kiln.core.avals import ShapedArray
    from kiln.core.trace import get_aval
    from kiln.tree_util import tree_map

    def to_aval(v):
        data = get_aval(spenv.data(v))
        return ShapedArray(tuple(v.shape), data.dtype, data.weak_type)
    return tree_map(to_aval, spvalues, is_leaf=is_spvalue)
