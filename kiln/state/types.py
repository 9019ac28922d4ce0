"""Types of mutable array references (``jax._src.state.types``): ``AbstractRef``, views of
references (``TransformedRef``, made by ``ref.at[...]`` on a traced reference) and the
state effect classes.

What it must not hold: the primitives' rules (``kiln.state.primitives``, ``rules``).
"""
from __future__ import annotations

import math

from kiln.core.ref import AbstractRef, Ref  # noqa: F401  (re-exported: jax._src.state.types)
from kiln.extend.core import Effect
from kiln.state.indexing import NDIndexer


class RefEffect(Effect):
    """An effect on the reference that is input ``input`` of a jaxpr (JAX's
    ``JaxprInputEffect``)."""

    name = "Ref"

    def __init__(self, input_index):
        self.input = input_index

    def __eq__(self, other):
        return type(self) is type(other) and self.input == other.input

    def __hash__(self):
        return hash((type(self), self.input))

    def __str__(self):
        return f"{self.name}<{self.input}>"

    __repr__ = __str__


class ReadEffect(RefEffect):
    name = "Read"


class WriteEffect(RefEffect):
    name = "Write"


class AccumEffect(RefEffect):
    name = "Accum"


StateEffect = (ReadEffect, WriteEffect, AccumEffect)


class Transform:
    """A view transformation of a reference (JAX's protocol); kiln's views are indexers."""

    def transform_type(self, x):
        raise NotImplementedError(type(self))


class RefIndexer:
    """What ``ref.at`` gives: ``ref.at[idx]`` is a view of the indexed part."""

    __slots__ = ("ref_or_view",)

    def __init__(self, ref_or_view):
        self.ref_or_view = ref_or_view

    def __getitem__(self, slc):
        if not isinstance(slc, tuple):
            slc = (slc,)
        indexer = NDIndexer.from_indices_shape(slc, self.ref_or_view.shape)
        if isinstance(self.ref_or_view, TransformedRef):
            view = self.ref_or_view
            return TransformedRef(view.ref, (*view.transforms, indexer))
        return TransformedRef(self.ref_or_view, (indexer,))


class TransformedRef:
    """A view of a reference through indexers: reads and writes go to the underlying
    reference (``ref.at[1:3][0] = v`` writes ``ref[1]``)."""

    __slots__ = ("ref", "transforms", "__dict__")

    def __init__(self, ref, transforms):
        self.ref = ref
        self.transforms = tuple(transforms)

    @property
    def type(self):
        from kiln.core.trace import get_aval
        ty = get_aval(self.ref) if not isinstance(self.ref, TransformedRef) else self.ref.type
        for t in self.transforms:
            ty = t.transform_type(ty)
        return ty

    shape = property(lambda self: self.type.shape)
    dtype = property(lambda self: self.type.dtype)
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))

    @property
    def at(self) -> RefIndexer:
        return RefIndexer(self)

    def get(self, idx=()):
        from kiln.state.primitives import ref_get
        return ref_get(self, idx)

    def set(self, value, idx=()):
        from kiln.state.primitives import ref_set
        return ref_set(self, idx, value)

    def swap(self, value, idx=()):
        from kiln.state.primitives import ref_swap
        return ref_swap(self, idx, value)

    def __getitem__(self, idx):
        from kiln.state.primitives import ref_get
        return ref_get(self, idx)

    def __setitem__(self, idx, value):
        from kiln.state.primitives import ref_set
        ref_set(self, idx, value)

    def bitcast(self, dtype):
        raise NotImplementedError("kiln: bitcast views of references are not supported")

    def reshape(self, *shape):
        raise NotImplementedError("kiln: reshaped views of references are not supported")

    def transpose(self, *perm):
        raise NotImplementedError("kiln: transposed views of references are not supported")

    def __repr__(self):
        return f"TransformedRef(ref={self.ref!r}, transforms={self.transforms!r})"


def shaped_array_ref(shape, dtype, weak_type: bool = False) -> AbstractRef:
    """``AbstractRef(ShapedArray(shape, dtype, weak_type))``."""
    from kiln.core.avals import ShapedArray
    return AbstractRef(ShapedArray(shape, dtype, weak_type=weak_type))


def get_ref_aval_from_value(x):
    """``(AbstractRef of x's type, x)``."""
    from kiln.core.trace import get_aval
    return AbstractRef(get_aval(x)), x
