"""Abstract values: what a tracer knows about the array it stands for.

``ShapedArray`` carries a shape, a canonical NumPy dtype and JAX's ``weak_type``
flag (set for values born from Python scalars, which promote without widening).
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.dtypes import ExtendedDType

_SHORT = {
    "float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "complex64": "c64", "complex128": "c128", "bool": "bool",
    "int4": "i4", "uint4": "u4",
}


def short_dtype_name(dtype: np.dtype) -> str:
    """The name JAX's pretty printer uses for ``dtype`` (``f32``, ``i32`` ...)."""
    if getattr(dtype, "names", None) == ("float0",):
        return "float0"
    name = dtype.name
    return _SHORT.get(name, name)


class AbstractValue:
    """Base class of abstract values (``jax.core.AbstractValue``)."""

    __slots__ = ()
    # JAX's hijax protocol: high-level types lower to lists of ordinary ones.
    is_high = False
    has_qdd = False


class ShardingTypeError(Exception):
    """Values whose types' shardings cannot be combined by an operation (JAX's
    ``core.ShardingTypeError``, e.g. contracting dimensions split along different mesh
    axes)."""


class ManualAxisType:
    """How a value inside ``shard_map`` varies over the mesh's manual axes (JAX's
    ``aval.mat``): ``varying`` holds the axes along which devices may hold different
    values; ``unreduced``/``reduced`` are always empty in kiln."""

    __slots__ = ("varying", "unreduced", "reduced")

    def __init__(self, *, varying=frozenset(), unreduced=frozenset(), reduced=frozenset()):
        object.__setattr__(self, "varying", frozenset(varying))
        object.__setattr__(self, "unreduced", frozenset(unreduced))
        object.__setattr__(self, "reduced", frozenset(reduced))

    def __setattr__(self, name, value):
        raise AttributeError(f"ManualAxisType is immutable: cannot set {name!r} (use "
                             "update)")

    def __reduce__(self):       # pickle and copy through the constructor (immutable)
        return (_make_mat, (self.varying, self.unreduced, self.reduced))

    def update(self, **kw) -> ManualAxisType:
        return ManualAxisType(varying=kw.get("varying", self.varying),
                              unreduced=kw.get("unreduced", self.unreduced),
                              reduced=kw.get("reduced", self.reduced))

    @property
    def empty(self) -> bool:
        return not (self.varying or self.unreduced or self.reduced)

    @property
    def vur(self) -> frozenset:
        """The varying, unreduced and reduced axes together."""
        return self.varying | self.unreduced | self.reduced

    def invarying(self, mesh) -> frozenset:
        """The manual axes of ``mesh`` this value is the same along."""
        return frozenset(getattr(mesh, "manual_axes", ())) - self.vur

    def __eq__(self, other):
        return (isinstance(other, ManualAxisType) and self.varying == other.varying
                and self.unreduced == other.unreduced and self.reduced == other.reduced)

    def __hash__(self):
        return hash((self.varying, self.unreduced, self.reduced))

    def __repr__(self):
        return (f"ManualAxisType(varying={set(self.varying) or 'set()'}, "
                f"unreduced={set(self.unreduced) or 'set()'}, "
                f"reduced={set(self.reduced) or 'set()'})")


def _make_mat(varying, unreduced, reduced) -> ManualAxisType:
    return ManualAxisType(varying=varying, unreduced=unreduced, reduced=reduced)


empty_mat = ManualAxisType()


class ShapedArray(AbstractValue):
    """An abstract array: shape, dtype and weak type, no values."""

    __slots__ = ("shape", "dtype", "weak_type", "_mat", "_tsh")
    array_abstraction_level = 1

    def __init__(self, shape, dtype, weak_type: bool = False, *, sharding=None, vma=None,
                 memory_space=None):
        # ``sharding``/``vma``/``memory_space``: accepted as JAX's constructor takes them;
        # kiln's abstract values carry no sharding, varying axes or memory space (values
        # are the same whatever the layout), so they are not stored.
        self.shape = tuple(shape)
        # Extended dtypes (typed PRNG keys: ``typeof(key)`` is ``key<fry>[]``) are kept
        # as they are; abstract values of traced arrays always have NumPy dtypes.
        self.dtype = dtype if isinstance(dtype, ExtendedDType) else np.dtype(dtype)
        self.weak_type = bool(weak_type)
        self._mat = None
        self._tsh = None

    @property
    def mat(self) -> ManualAxisType:
        """The manual axes this value varies along inside ``shard_map`` (JAX's
        ``aval.mat``; ``.varying``). Set on the abstract values of a ``shard_map``
        body's values under a transformation (the axes along which the value is mapped);
        empty elsewhere. Not part of the type's equality."""
        return self._mat if self._mat is not None else empty_mat

    @property
    def vma(self) -> frozenset:
        """JAX's earlier name: the varying manual axes."""
        return self.mat.varying

    def with_mat(self, mat: ManualAxisType) -> ShapedArray:
        out = ShapedArray(self.shape, self.dtype, self.weak_type)
        out._mat = None if mat.empty else mat
        return out

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def sharding(self):
        """The sharding in the type (``kiln.typeof(x).sharding``): kiln's abstract values
        are unsharded, ``NamedSharding(AbstractMesh(()), P(None, ...))``, except a traced
        value laid out by ``reshard``/a ``shard_map``'s ``out_specs`` over a mesh with
        ``Explicit`` axes (``with_type_sharding``). Not part of the type's equality."""
        if self._tsh is not None:
            return self._tsh
        from kiln.sharding import unsharded_type_sharding
        return unsharded_type_sharding(len(self.shape))

    def with_type_sharding(self, sharding) -> ShapedArray:
        out = ShapedArray(self.shape, self.dtype, self.weak_type)
        out._mat = self._mat
        out._tsh = sharding
        return out

    def update(self, shape=None, dtype=None, weak_type=None) -> ShapedArray:
        out = ShapedArray(self.shape if shape is None else shape,
                          self.dtype if dtype is None else dtype,
                          self.weak_type if weak_type is None else weak_type)
        out._mat = self._mat
        return out

    # JAX's hijax protocol for an ordinary type: it lowers to itself.
    def lo_ty(self) -> list:
        return [self]

    def lower_val(self, val) -> list:
        return [val]

    def raise_val(self, val):
        return val

    def normalize(self) -> ShapedArray:
        return self.strip_weak_type()

    def strip_weak_type(self) -> ShapedArray:
        return self.update(weak_type=False) if self.weak_type else self

    def to_tangent_aval(self) -> ShapedArray:
        """The abstract value of this value's tangents: the same for inexact dtypes,
        ``float0`` of the same shape for integers, booleans and keys (JAX's rule)."""
        if not isinstance(self.dtype, ExtendedDType) and dtypes.issubdtype(self.dtype,
                                                                           np.inexact):
            return self
        return ShapedArray(self.shape, dtypes.float0, self.weak_type)

    def at_least_vspace(self) -> ShapedArray:
        """JAX's older name of :meth:`to_tangent_aval`."""
        return self.to_tangent_aval()

    # Cotangents have the same type as tangents in kiln (no varying-axes annotation).
    to_ct_aval = to_tangent_aval
    to_cotangent_aval = to_tangent_aval

    def str_short(self, short_dtypes: bool = True) -> str:
        dt = short_dtype_name(self.dtype) if short_dtypes else (
            "float0" if getattr(self.dtype, "names", None) == ("float0",) else self.dtype.name)
        return f"{dt}[{','.join(str(d) for d in self.shape)}]"

    def __eq__(self, other):
        return (type(other) is ShapedArray and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type))

    def __repr__(self):
        w = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.str_short(False)}{w})"

    def __str__(self) -> str:
        # JAX's: the full dtype name, ``~`` for a weak type (``float32[3]``, ``~int32[]``);
        # the jaxpr printer and error messages use ``str_short`` (``f32[3]``).
        return ("~" if self.weak_type else "") + self.str_short(False)


class AbstractToken(AbstractValue):
    """The abstract value of an effect-ordering token."""

    shape = ()
    dtype = np.dtype(bool)
    weak_type = False
    ndim = 0

    def str_short(self, short_dtypes: bool = True) -> str:
        return "Token"

    def __eq__(self, other):
        return isinstance(other, AbstractToken)

    def __hash__(self):
        return hash("AbstractToken")


abstract_token = AbstractToken()
