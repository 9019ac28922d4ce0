"""Indexers of mutable array references: ``Slice`` and ``NDIndexer`` (JAX's
``jax._src.state.indexing`` / ``jax._src.indexing``).

A reference is indexed one dimension at a time: each dimension gets either a ``Slice``
(a start, a static size and a static stride: ``ref[1:3]``, ``ref[::2]``, or
``ref[pl.ds(i, 2)]`` with a traced start) or an integer indexer (a Python int or an
integer array; all integer indexers broadcast together). NumPy's placement rule applies:
the integer indexers' broadcast shape replaces their dimensions in place when they are
adjacent, and goes first otherwise. No ``None``/newaxis, boolean masks, negative strides
or lists (JAX raises for those too).

``NDIndexer`` is a pytree: its traced pieces (integer arrays, dynamic slice starts) are the
leaves, everything static is in the tree structure, so ``get``/``swap``/``addupdate``
carry an indexer as operands plus a ``tree`` parameter, as in JAX.

What it must not hold: how an indexer is applied to a value (``kiln.state.apply``).
"""
from __future__ import annotations

import operator

import numpy as np

from kiln.core.trace import Tracer, concretize, get_aval
from kiln.tree_util import register_pytree_node


def _is_python_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class Slice:
    """``start:start + size * stride:stride`` along one dimension; ``start`` may be traced,
    ``size`` and ``stride`` are static (``jax._src.indexing.Slice``)."""

    __slots__ = ("start", "size", "stride")

    def __init__(self, start, size, stride: int = 1):
        if stride < 0:
            raise ValueError("`stride` must be >= 0.")
        self.start = int(start) if _is_python_int(start) else start
        if not _is_python_int(size):
            raise NotImplementedError(
                "kiln: slices of a dynamic size (pl.ds with a traced size) are not "
                "supported; give the size as a Python int")
        self.size = int(size)
        self.stride = int(stride)

    @property
    def is_dynamic_start(self) -> bool:
        return not _is_python_int(self.start)

    @property
    def is_dynamic_size(self) -> bool:
        return False

    @classmethod
    def from_slice(cls, slc: slice, size: int) -> Slice:
        for part in (slc.start, slc.stop, slc.step):
            if part is not None and not _is_python_int(part):
                v = concretize(part)
                if isinstance(v, Tracer):
                    raise IndexError(
                        "Array slice indices must have static start/stop/step to be used "
                        "with a Ref; use kiln.ds(start, size) for a traced start")
        start, stop, step = slice(*[None if p is None else operator.index(concretize(p))
                                    for p in (slc.start, slc.stop, slc.step)]).indices(size)
        if step < 1:
            raise ValueError(f"slice must have a step >= 1 (found: {step})")
        n = len(range(start, stop, step))
        return cls(start, n, step)

    def __eq__(self, other):
        return (type(other) is Slice and self.size == other.size
                and self.stride == other.stride and not self.is_dynamic_start
                and not other.is_dynamic_start and self.start == other.start)

    def __hash__(self):
        return hash((Slice, self.start if not self.is_dynamic_start else None, self.size,
                     self.stride))

    def __repr__(self):
        return f"Slice(start={self.start}, size={self.size}, stride={self.stride})"


def _slice_flatten(s: Slice):
    if s.is_dynamic_start:
        return (s.start,), (None, s.size, s.stride)
    return (), (s.start, s.size, s.stride)


def _slice_unflatten(aux, children):
    start, size, stride = aux
    if start is None:
        (start,) = children
    return Slice(start, size, stride)


register_pytree_node(Slice, _slice_flatten, _slice_unflatten)


def dslice(start, size=None, stride=None):
    """A slice with a possibly traced start: ``dslice(i, n)`` is ``i:i+n`` (the size is
    static), ``dslice(n)`` is ``:n``, ``dslice(None)`` is ``:`` (``jax.ds``)."""
    if start is None:
        return slice(None, None, None)
    if stride is None:
        stride = 1
    if not isinstance(stride, int):
        raise ValueError("Non-static stride in `dslice`")
    if size is None:
        if not isinstance(start, int):
            raise ValueError("Non-static `dslice`")
        return Slice(0, start, stride)
    return Slice(start, size, stride)


ds = dslice


def _index_shape(x) -> tuple:
    return tuple(np.shape(x)) if not isinstance(x, Tracer) and not hasattr(x, "aval") \
        else tuple(get_aval(x).shape)


class NDIndexer:
    """One indexer per dimension of a reference of ``shape``: ``Slice`` objects and integer
    indexers whose broadcast shape is ``int_indexer_shape``."""

    __slots__ = ("indices", "shape", "int_indexer_shape")

    def __init__(self, indices, shape, int_indexer_shape, validate: bool = False):
        if len(indices) != len(shape):
            raise ValueError(f"`indices` must be the same length as `Ref` shape.: "
                             f"{indices}, {shape}.")
        self.indices = tuple(indices)
        self.shape = tuple(shape)
        self.int_indexer_shape = tuple(int_indexer_shape)
        if validate:
            self._validate()

    def _validate(self):
        """JAX's checks of indices known while tracing (out-of-bound starts and integers;
        integer indexer ranks)."""
        for idx, dim in zip(self.indices, self.shape):
            if type(idx) is Slice:
                start = idx.start if not idx.is_dynamic_start else _concrete_int(idx.start)
                if start:
                    if start >= dim:
                        raise ValueError(f"Out of bound slice: start={start}, dim={dim}.")
                    if idx.size and start + (idx.size - 1) * idx.stride >= dim:
                        raise ValueError(
                            f"Out of bound slice: start={start}, size={idx.size},"
                            f" stride={idx.stride}, dim={dim}.")
                continue
            shp = () if _is_python_int(idx) else _index_shape(idx)
            if not shp:
                value = int(idx) if _is_python_int(idx) else _concrete_int(idx)
                if value and value >= dim:
                    raise ValueError(f"Out of bound indexer: idx={value}, dim={dim}.")
                continue
            if len(shp) != len(self.int_indexer_shape):
                raise ValueError(f"Indexer must have rank {len(shp)}: idx={idx} vs. "
                                 f"self.int_indexer_shape={self.int_indexer_shape}")

    @classmethod
    def from_indices_shape(cls, indices, shape) -> NDIndexer:
        """The indexer of ``ref[indices]`` for a reference of ``shape``."""
        shape = tuple(shape)
        if not isinstance(indices, tuple):
            indices = (indices,)
        n_ell = sum(1 for i in indices if i is Ellipsis)
        if n_ell > 1:
            raise ValueError("Only one ellipsis is supported.")
        if n_ell:
            k = next(j for j, i in enumerate(indices) if i is Ellipsis)
            indices = (indices[:k] + (slice(None),) * (len(shape) - len(indices) + 1)
                       + indices[k + 1:])
        if len(indices) > len(shape):
            raise ValueError("`indices` must not be longer than `shape`: "
                             f"indices={indices}, shape={shape}")
        indices = tuple(indices) + (slice(None),) * (len(shape) - len(indices))
        out = []
        int_shapes = []
        for i, dim in zip(indices, shape):
            if isinstance(i, slice):
                out.append(Slice.from_slice(i, dim))
            elif type(i) is Slice:
                out.append(i)
            elif i is None:
                raise IndexError("None (newaxis) is not supported when indexing a Ref")
            elif _is_python_int(i):
                out.append(int(i))
                int_shapes.append(())
            elif isinstance(i, (bool, np.bool_)):
                raise IndexError("boolean indices are not supported when indexing a Ref")
            else:
                i = _as_index_array(i)
                out.append(i)
                int_shapes.append(_index_shape(i))
        try:
            int_shape = tuple(np.broadcast_shapes(*int_shapes)) if int_shapes else ()
        except ValueError:
            raise ValueError(f"Cannot broadcast shapes for indexing: {int_shapes}") from None
        return cls(tuple(out), shape, int_shape, validate=True)

    @classmethod
    def make_trivial_indexer(cls, shape) -> NDIndexer:
        return cls.from_indices_shape((), shape)

    # -- structure --------------------------------------------------------------------------
    def is_int_indexing(self) -> list:
        return [type(i) is not Slice for i in self.indices]

    def int_indexers_contiguous(self) -> bool:
        pos = [k for k, b in enumerate(self.is_int_indexing()) if b]
        return all(b - a == 1 for a, b in zip(pos, pos[1:]))

    def int_block_position(self) -> int:
        """Where the broadcast integer dimensions go in the result: in place of the first
        integer indexer when they are adjacent, in front otherwise."""
        flags = self.is_int_indexing()
        if not any(flags) or not self.int_indexers_contiguous():
            return 0
        return sum(1 for f in flags[:flags.index(True)] if not f)

    def get_indexer_shape(self) -> tuple:
        flags = self.is_int_indexing()
        slice_shape = tuple(i.size for i in self.indices if type(i) is Slice)
        if not any(flags):
            return slice_shape
        p = self.int_block_position()
        return slice_shape[:p] + self.int_indexer_shape + slice_shape[p:]

    def is_trivial(self) -> bool:
        return all(type(i) is Slice and not i.is_dynamic_start and i.start == 0
                   and i.stride == 1 and i.size == d for i, d in zip(self.indices, self.shape))

    def transform_type(self, aval):
        """The abstract value of the indexed part of ``aval`` (a ref type or array type)."""
        from kiln.core.ref import AbstractRef
        if type(aval) is AbstractRef:
            return aval.update(inner_aval=self.transform_type(aval.inner_aval))
        return aval.update(shape=self.get_indexer_shape())

    def __repr__(self):
        return (f"NDIndexer(indices={self.indices}, shape={self.shape}, "
                f"int_indexer_shape={self.int_indexer_shape})")


def _concrete_int(x):
    v = concretize(x)
    if isinstance(v, Tracer):
        return None
    try:
        return int(np.asarray(getattr(v, "_value", v)))
    except (TypeError, ValueError):
        return None


def _as_index_array(i):
    """An integer index array (a kiln Array or tracer) from an array-like index."""
    from kiln.array import Array, to_array
    if isinstance(i, Tracer):
        a = i
    elif type(i) is Array:
        a = i
    elif isinstance(i, (list, tuple)):
        raise ValueError("too many values to unpack (expected 1): a list or tuple cannot "
                         "index a Ref; use an integer array")
    else:
        a = to_array(np.asarray(i))
    dt = get_aval(a).dtype
    if not (np.issubdtype(dt, np.integer)):
        raise IndexError(f"Ref indices must be integers or slices, got an array of {dt}")
    return a


def _ndindexer_flatten(ix: NDIndexer):
    children, aux = [], []
    for i in ix.indices:
        if type(i) is Slice:
            if i.is_dynamic_start:
                children.append(i.start)
                aux.append(("ds", i.size, i.stride))
            else:
                aux.append(("s", i.start, i.size, i.stride))
        elif _is_python_int(i):
            aux.append(("i", int(i)))
        else:
            children.append(i)
            aux.append(("a",))
    return children, (tuple(aux), ix.shape, ix.int_indexer_shape)


def _ndindexer_unflatten(data, children):
    aux, shape, int_shape = data
    it = iter(children)
    indices = []
    for a in aux:
        if a[0] == "s":
            indices.append(Slice(a[1], a[2], a[3]))
        elif a[0] == "ds":
            indices.append(Slice(next(it), a[1], a[2]))
        elif a[0] == "i":
            indices.append(a[1])
        else:
            indices.append(next(it))
    return NDIndexer(tuple(indices), shape, int_shape)


register_pytree_node(NDIndexer, _ndindexer_flatten, _ndindexer_unflatten)
