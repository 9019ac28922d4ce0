"""``io_callback``: a host callback with side effects (``jax.experimental.io_callback``).

Unlike ``pure_callback`` it is never removed by dead-code elimination (its primitive is
in ``staging.always_stage``) and never duplicated by vmap's ``expand_dims`` tricks:
under ``vmap`` it is called once per batch element (``lax.map``), and an ``ordered``
io_callback cannot be vmapped. It is not differentiable.
"""
from __future__ import annotations

from kiln._fp_warnings import as_user
from kiln.callbacks import (
    check_results,
    flatten_callback,
    host_values,
    result_avals_of,
    sequential_batch,
)
from kiln.core.trace import Primitive
from kiln.interpreters import ad, batching, staging
from kiln.tree_util import tree_unflatten

io_callback_p = Primitive("io_callback")
io_callback_p.multiple_results = True
staging.always_stage.add(io_callback_p)


def _io_callback_impl(*args, callback, result_avals, ordered, sharding=None):
    return check_results(as_user(callback, *host_values(args)), result_avals)


def _io_callback_abstract_eval(*avals, callback, result_avals, ordered, sharding=None):
    return list(result_avals)


io_callback_p.impl = _io_callback_impl
io_callback_p.abstract_eval = _io_callback_abstract_eval
io_callback_p.weak_type_rule = lambda *w, result_avals, **_: [False] * len(result_avals)


def _io_callback_jvp(primals, tangents, **params):
    raise ValueError("IO callbacks do not support JVP.")


def _io_callback_transpose(cts, *args, **params):
    raise ValueError("IO callbacks do not support transpose.")


ad.jvp_rules[io_callback_p] = _io_callback_jvp
ad.transpose_rules[io_callback_p] = _io_callback_transpose


def _io_callback_batch(axis_data, vals, dims, *, callback, result_avals, ordered,
                       sharding=None):
    if ordered:
        raise ValueError("Cannot `vmap` ordered IO callback.")
    params = dict(callback=callback, result_avals=result_avals, ordered=False,
                  sharding=sharding)
    return sequential_batch(io_callback_p, vals, dims, params)


batching.batch_rules[io_callback_p] = _io_callback_batch


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered: bool = False,
                **kwargs):
    """Call the impure Python function ``callback(*args, **kwargs)`` from (possibly
    staged) kiln code; it always runs, in program order, once per evaluation.

    ``callback`` receives ``kiln.Array``s and returns a pytree of arrays matching
    ``result_shape_dtypes`` (``None`` for no results)."""
    if not callable(callback):
        raise TypeError(f"io_callback: callback must be callable, got {type(callback)}")
    result_avals, out_tree = result_avals_of(result_shape_dtypes)
    flat_cb, dyn = flatten_callback(callback, args, kwargs)
    outs = io_callback_p.bind(*dyn, callback=flat_cb, result_avals=result_avals,
                              ordered=bool(ordered), sharding=sharding)
    return tree_unflatten(out_tree, outs)


__all__ = ["io_callback", "io_callback_p"]
