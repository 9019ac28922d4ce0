"""Host callbacks: ``pure_callback`` and what it shares with ``kiln.debug`` and
``kiln.experimental.io_callback``.

A callback is a primitive whose ``impl`` calls a Python function. The function receives
``kiln.Array`` values (as JAX passes ``jax.Array``s) and may return anything array-like;
its results are checked against the declared ``result_shape_dtypes`` (JAX's runtime
errors) and cast to them. Staged inside ``jit`` the callback is just an equation: the
reference backend runs equations in order, so callbacks run in program order.

``pure_callback`` is pure: it is removed by dead-code elimination when its results are
unused, is not differentiable (wrap it in ``custom_jvp``/``custom_vjp``) and is batched
according to ``vmap_method``. Effectful callbacks (``io_callback``, ``debug.print``) are
registered in ``staging.always_stage`` instead, so they are never removed.

This module must not import ``jax``.
"""
from __future__ import annotations

import logging
import sys
import threading
import traceback

import numpy as np

from kiln import dtypes
from kiln._fp_warnings import as_user
from kiln._physical_tree import tree_flatten, tree_leaves, tree_map, tree_unflatten
from kiln.core.avals import ShapedArray
from kiln.core.trace import Primitive, Tracer, get_aval
from kiln.errors import JaxRuntimeError
from kiln.interpreters import ad, batching

# ----------------------------------------------------------------------------------------------
# Shared machinery


_dynamic_types = (np.ndarray, np.generic, int, float, complex, bool)

# How many jitted programs the calling thread is running (``jit``'s impl counts them): a
# debug callback that fails inside one raises JaxRuntimeError, outside its own exception.
_in_program = threading.local()


def running_program() -> bool:
    return getattr(_in_program, "depth", 0) > 0


class program_running:
    """Marks the calling thread as running a jitted program (a context manager)."""

    __slots__ = ()

    def __enter__(self):
        _in_program.depth = getattr(_in_program, "depth", 0) + 1

    def __exit__(self, *exc):
        _in_program.depth -= 1


def _callback_logger() -> logging.Logger:
    # Code written for JAX filters the failure record on JAX's logger (Equinox does).
    alias = sys.modules.get("kiln.as_jax")
    if alias is not None and alias.installed():
        return logging.getLogger("jax._src.callback")
    return logging.getLogger("kiln.callbacks")


def call_user_callback(kind: str, callback, args, *, wrap: bool = True):
    """Call a user's callback as JAX does: a failure is logged (``"jax.<kind> failed"``,
    with the traceback) and, when ``wrap``, re-raised as ``JaxRuntimeError`` whose message
    holds the callback's traceback (``INTERNAL: CpuCallback error calling callback: ...``)."""
    try:
        return as_user(callback, *args)      # the user's NumPy error state, not kiln's
    except Exception as e:
        _callback_logger().exception("jax.%s failed", kind)
        if not wrap:
            raise
        raise JaxRuntimeError("INTERNAL: CpuCallback error calling callback: "
                              + traceback.format_exc()) from e


def _is_dynamic(x) -> bool:
    """Array-like leaves become primitive operands; anything else (strings, None, objects)
    is passed to the callback as it is, as JAX's ``_split_callback_args`` does."""
    from kiln.array import Array
    if isinstance(x, (Array, Tracer)):
        return True
    if isinstance(x, _dynamic_types):
        return np.asarray(x).dtype.kind in "biufc"
    return False


class FlatCallback:
    """A Python function called with flat operands: the static (non-array) arguments and
    the pytree structure of ``(args, kwargs)`` are kept here."""

    __slots__ = ("callback_func", "in_tree", "static_args")

    def __init__(self, callback_func, in_tree, static_args=()):
        self.callback_func = callback_func
        self.in_tree = in_tree
        self.static_args = tuple(static_args)   # ((flat position, value), ...)

    def __call__(self, *dyn_args):
        static = dict(self.static_args)
        n = len(static) + len(dyn_args)
        it = iter(dyn_args)
        flat = [static[i] if i in static else next(it) for i in range(n)]
        args, kwargs = tree_unflatten(self.in_tree, flat)
        return self.callback_func(*args, **kwargs)

    def _key(self):
        return (self.callback_func, self.in_tree, tuple(i for i, _ in self.static_args),
                tuple(id(v) for _, v in self.static_args))

    def __eq__(self, other):
        return type(other) is FlatCallback and self._key() == other._key()

    # Unhashable on purpose: eager evaluation memoizes hashable primitive parameters, and a
    # callback closes over arbitrary user data that must not be kept alive.
    __hash__ = None

    def __repr__(self):
        return f"_FlatCallback(callback_func={self.callback_func!r}, in_tree={self.in_tree})"


def flatten_callback(callback, args, kwargs):
    """``(FlatCallback, dynamic operands)`` for calling ``callback(*args, **kwargs)``."""
    flat, in_tree = tree_flatten((tuple(args), dict(kwargs)))
    static, dyn = [], []
    for i, x in enumerate(flat):
        if _is_dynamic(x):
            dyn.append(x)
        else:
            static.append((i, x))
    return FlatCallback(callback, in_tree, static), dyn


def host_values(vals):
    """The NumPy operands of an impl as ``kiln.Array``s (what callbacks receive)."""
    from kiln.array import make_array
    return [make_array(np.asarray(v), False) for v in vals]


def result_avals_of(result_shape_dtypes):
    """``(flat avals, treedef)`` of a ``result_shape_dtypes`` pytree."""
    def check(x):
        dt = np.dtype(x.dtype)
        if dtypes.canonicalize_dtype(dt) != dt:
            raise ValueError("result_shape_dtypes cannot specify 64-bit types when "
                             "`jax_enable_x64` is disabled")
        return ShapedArray(tuple(x.shape), dt)
    avals = tree_map(check, result_shape_dtypes)
    flat, tree = tree_flatten(avals, is_leaf=lambda a: isinstance(a, ShapedArray))
    return tuple(flat), tree


def check_results(out, result_avals):
    """Flatten a callback's return value and check it against ``result_avals`` (shapes and
    canonical dtypes, as JAX's runtime does); returns NumPy arrays of exactly those types."""
    leaves = [] if out is None else tree_leaves(out)
    if len(leaves) != len(result_avals):
        raise JaxRuntimeError("Mismatched number of outputs from callback. "
                              f"Expected: {len(result_avals)}, Actual: {len(leaves)}")
    res = []
    for i, (o, a) in enumerate(zip(leaves, result_avals)):
        v = np.asarray(o)
        if v.shape != a.shape:
            raise JaxRuntimeError(f"Incorrect output shape for return value #{i}: "
                                  f"Expected: {a.shape}, Actual: {v.shape}")
        if dtypes.canonicalize_dtype(v.dtype) != a.dtype:
            raise JaxRuntimeError(f"Incorrect output dtype for return value #{i}: "
                                  f"Expected: {a.dtype.name}, Actual: {v.dtype.name}")
        res.append(v.astype(a.dtype, copy=False))
    return res


def sequential_batch(prim, vals, dims, params, unrolled=False):
    """Batch a callback by calling it once per batch element (``lax.map`` over the batched
    operands, or an unrolled Python loop)."""
    from kiln import lax
    moved = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    is_b = [d is not None for d in dims]

    def one(batched):
        it = iter(batched)
        args = [next(it) if b else v for v, b in zip(moved, is_b)]
        return list(prim.bind(*args, **params))

    batched_vals = [v for v, b in zip(moved, is_b) if b]
    if not unrolled:
        outs = lax.map(one, batched_vals)
    else:
        size = get_aval(batched_vals[0]).shape[0]
        per = [one([lax.index_in_dim(v, i, 0, keepdims=False) for v in batched_vals])
               for i in range(size)]
        outs = [lax.concatenate([lax.expand_dims(o, (0,)) for o in col], 0)
                for col in zip(*per)] if per and per[0] else []
    return list(outs), [0] * len(outs)


# ----------------------------------------------------------------------------------------------
# pure_callback

pure_callback_p = Primitive("pure_callback")
pure_callback_p.multiple_results = True


def _pure_callback_impl(*args, callback, result_avals, vmap_method, sharding=None):
    return check_results(call_user_callback("pure_callback", callback, host_values(args)),
                         result_avals)


def _pure_callback_abstract_eval(*avals, callback, result_avals, vmap_method, sharding=None):
    return list(result_avals)


pure_callback_p.impl = _pure_callback_impl
pure_callback_p.abstract_eval = _pure_callback_abstract_eval
pure_callback_p.weak_type_rule = lambda *w, result_avals, **_: [False] * len(result_avals)


def _pure_callback_jvp(primals, tangents, **params):
    raise ValueError("Pure callbacks do not support JVP. Please use `jax.custom_jvp` to use "
                     "callbacks while taking gradients.")


def _pure_callback_transpose(cts, *args, **params):
    raise ValueError("Pure callbacks do not support transpose. Please use `jax.custom_vjp` to "
                     "use callbacks while taking gradients.")


ad.jvp_rules[pure_callback_p] = _pure_callback_jvp
ad.transpose_rules[pure_callback_p] = _pure_callback_transpose

VMAP_METHODS = ["sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                "legacy_vectorized", None]


def _pure_callback_batch(axis_data, vals, dims, *, callback, result_avals, vmap_method,
                         sharding=None):
    params = dict(callback=callback, result_avals=result_avals, vmap_method=vmap_method,
                  sharding=sharding)
    if vmap_method in ("sequential", "sequential_unrolled"):
        return sequential_batch(pure_callback_p, vals, dims, params,
                                unrolled=vmap_method == "sequential_unrolled")
    if vmap_method not in ("expand_dims", "broadcast_all", "legacy_vectorized"):
        raise NotImplementedError(
            "vmap is only supported for the pure_callback primitive when vmap_method is one of "
            "'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or "
            f"'legacy_vectorized'. Got vmap_method={vmap_method}.")
    from kiln import lax
    size = axis_data.size
    args = []
    for v, d in zip(vals, dims):
        if d is not None:
            v = batching.moveaxis(v, d, 0)
        elif vmap_method == "expand_dims":
            v = lax.expand_dims(v, (0,))
        elif vmap_method == "broadcast_all":
            v = batching.broadcast_batched(v, size, 0)
        args.append(v)
    params["result_avals"] = tuple(ShapedArray((size,) + a.shape, a.dtype)
                                   for a in result_avals)
    outs = pure_callback_p.bind(*args, **params)
    return list(outs), [0] * len(outs)


batching.batch_rules[pure_callback_p] = _pure_callback_batch


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None,
                  **kwargs):
    """Call the pure Python function ``callback(*args, **kwargs)`` from (possibly
    transformed, staged) kiln code.

    ``callback`` receives ``kiln.Array``s and must return a pytree of arrays matching
    ``result_shape_dtypes`` (leaves with ``shape`` and ``dtype``, e.g.
    ``kiln.ShapeDtypeStruct``). Being pure, the call may be dropped when its results are
    unused, or repeated. Under ``vmap`` its behaviour is chosen by ``vmap_method``:
    ``"sequential"`` (one call per batch element, via ``lax.map``),
    ``"sequential_unrolled"``, ``"expand_dims"`` (unbatched operands get a leading axis
    of size 1), ``"broadcast_all"`` (unbatched operands are tiled) or
    ``"legacy_vectorized"`` (unbatched operands as they are); ``None`` raises under vmap.
    Not differentiable: wrap it in ``custom_jvp``/``custom_vjp``."""
    if vmap_method not in VMAP_METHODS:
        raise ValueError(f"vmap_method must be on of the allowed methods {VMAP_METHODS}, "
                         f"but got: {vmap_method}")
    if not callable(callback):
        raise TypeError(f"pure_callback: callback must be callable, got {type(callback)}")
    result_avals, out_tree = result_avals_of(result_shape_dtypes)
    flat_cb, dyn = flatten_callback(callback, args, kwargs)
    outs = pure_callback_p.bind(*dyn, callback=flat_cb, result_avals=result_avals,
                                vmap_method=vmap_method, sharding=sharding)
    return tree_unflatten(out_tree, outs)


__all__ = ["pure_callback", "pure_callback_p"]


# ----------------------------------------------------------------------------------------------
# Host callbacks emitted by lowering rules (``mlir.emit_python_callback``)

class _LoweringCallback:
    """A callback emitted by a lowering rule: called with NumPy arrays (``float0``
    operands as booleans, as XLA passes them), returning a sequence of arrays."""

    __slots__ = ("callback",)

    def __init__(self, callback):
        self.callback = callback

    def __call__(self, *args):
        vals = [np.zeros(np.shape(a), bool) if getattr(a, "dtype", None) == dtypes.float0
                else np.asarray(a) for a in args]
        return tuple(self.callback(*vals))


def _bind_lowering_callback(callback, args, result_avals, has_side_effect):
    avals = tuple(ShapedArray(a.shape, a.dtype) for a in result_avals)
    cb = FlatCallback(_LoweringCallback(callback), tree_flatten((tuple(args), {}))[1])
    if has_side_effect:
        from kiln.experimental.io_callback import io_callback_p
        return io_callback_p.bind(*args, callback=cb, result_avals=avals, ordered=False)
    return pure_callback_p.bind(*args, callback=cb, result_avals=avals, vmap_method=None)


def _register_lowering_callbacks():
    from kiln.interpreters import mlir
    mlir._callback_binder[:] = [_bind_lowering_callback]


_register_lowering_callbacks()
