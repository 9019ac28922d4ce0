"""``ShapeDtypeStruct`` and ``eval_shape``: shapes and dtypes of arrays and of a
function's outputs, without computing anything.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln import _hijax, _traceback_util, dtypes
from kiln import _key_boundary as _kb
from kiln._physical_tree import (
    tree_flatten,
    tree_unflatten,
)
from kiln.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer, get_aval, pytype_aval_mappings
from kiln.interpreters import staging


class ShapeDtypeStruct:
    """A shape/dtype description usable in place of an array for tracing."""

    __slots__ = ("shape", "dtype", "sharding", "weak_type", "manual_axis_type")

    def __init__(self, shape, dtype, *, sharding=None, weak_type=False,
                 manual_axis_type=None):
        self.shape = tuple(shape)
        if dtype == dtypes.float0 or isinstance(dtype, dtypes.ExtendedDType):
            self.dtype = dtype
        elif dtypes.explicit_x64_allowed():     # a 64-bit dtype is kept
            self.dtype = np.dtype(dtype)
        else:
            self.dtype = dtypes.canonicalize_dtype(dtype)
        self.sharding = sharding
        self.weak_type = weak_type
        # the manual axis types inside shard_map (JAX's ``ManualAxisType``, ``aval.mat``)
        from kiln.core.avals import ManualAxisType
        if manual_axis_type is not None and not isinstance(manual_axis_type, ManualAxisType):
            raise TypeError("`manual_axis_type` argument passed to ShapeDtypeStruct should "
                            "be of type `jax.sharding.ManualAxisType`. Got type "
                            f"{type(manual_axis_type)}")
        self.manual_axis_type = manual_axis_type

    @classmethod
    def like(cls, x) -> ShapeDtypeStruct:
        """The shape, dtype, weak type, sharding and manual axis types of ``x`` (JAX's
        ``ShapeDtypeStruct.like``)."""
        from kiln.core.ref import AbstractRef
        from kiln.core.trace import get_aval
        aval = x.aval if isinstance(x, ShapeDtypeStruct) else get_aval(x)
        if type(aval) is AbstractRef:
            raise NotImplementedError("Ref/AbstractRef support is not implemented. Please "
                                      "file an issue at https://github.com/jax-ml/jax/issues")
        from kiln.array import Array
        from kiln.core.trace import Tracer
        if isinstance(x, ShapeDtypeStruct):
            sharding = x.sharding
        elif type(x) is Array:          # an uncommitted array has no sharding to keep
            sharding = x.sharding if x._committed else None
        elif isinstance(x, Tracer):     # the type's sharding (over Explicit mesh axes)
            from kiln.parallel.placement import arg_type_sharding
            sharding = arg_type_sharding(x)
        else:
            sharding = None
        mat = getattr(aval, "mat", None)
        return cls(aval.shape, aval.dtype, sharding=sharding, weak_type=aval.weak_type,
                   manual_axis_type=None if mat is None or mat.empty else mat)

    def __len__(self):
        try:
            return self.shape[0]
        except IndexError as err:
            raise TypeError("len() of unsized object") from err

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def aval(self):
        a = ShapedArray(self.shape, self.dtype, self.weak_type)
        return a.with_mat(self.manual_axis_type) if self.manual_axis_type is not None else a

    def update(self, **kwargs) -> ShapeDtypeStruct:
        """A copy with some of ``shape``, ``dtype``, ``sharding``, ``weak_type`` replaced."""
        unknown = set(kwargs) - {"shape", "dtype", "sharding", "weak_type"}
        if unknown:
            raise TypeError(f"ShapeDtypeStruct.update() got unexpected keyword arguments "
                            f"{sorted(unknown)}")
        return ShapeDtypeStruct(kwargs.get("shape", self.shape), kwargs.get("dtype", self.dtype),
                                sharding=kwargs.get("sharding", self.sharding),
                                weak_type=kwargs.get("weak_type", self.weak_type))

    def __repr__(self):
        w = ", weak_type=True" if self.weak_type else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{w})"

    def __eq__(self, other):
        return (isinstance(other, ShapeDtypeStruct) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type))


@_traceback_util.api_boundary
def eval_shape(fun: Callable, *args, **kwargs):
    """Output shapes/dtypes of ``fun`` (as ShapeDtypeStructs) without computing anything."""
    a_flat, a_tree = tree_flatten(_kb.specs_to_keys((args, kwargs)))
    # Arrays and specs are taken at their canonical dtype, as JAX's ``shaped_abstractify``
    # (a NumPy float64 array is float32 without x64).
    avals = [ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype, allow_extended_dtype=True),
                         getattr(x, "weak_type", False))
             if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, Tracer)
             and not isinstance(x, Array) else get_aval(x) for x in a_flat]
    store = {}

    def flat_fun(*xs):
        a, k = tree_unflatten(a_tree, list(xs))
        out = fun(*a, **k)
        leaves, tree = tree_flatten(out)
        store["tree"] = tree
        return leaves

    if _hijax.any_hi(a_flat):       # hijax arguments: their low-level values are traced
        specs, lo_vals = _hijax.lower_args(a_flat)
        a_flat, lo_tree = tree_flatten(lo_vals)
        avals = [get_aval(x) for x in a_flat]
        plain_fun = flat_fun

        def flat_fun(*xs):
            return plain_fun(*_hijax.raise_args(specs, tree_unflatten(lo_tree, list(xs))))

    jaxpr, _ = staging.trace_to_jaxpr(flat_fun, avals)
    return _kb.keys_to_specs(tree_unflatten(store["tree"], [
        ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in jaxpr.out_avals]))




# JAX maps a ShapeDtypeStruct to its abstract value (``core.pytype_aval_mappings``): one
# returned from a traced function (``eval_shape(lambda: struct)``, as Equinox's
# ``closure_convert`` does with Lineax's input structures) keeps its shape and dtype.
pytype_aval_mappings[ShapeDtypeStruct] = lambda x: x.aval
staging.aval_only_const_types.add(ShapeDtypeStruct)
