"""The public transformations: grad, value_and_grad, jvp, vjp, linearize, jacfwd,
jacrev, hessian, vmap, jit, make_jaxpr, eval_shape, linear_transpose.

This module handles arguments (pytrees, argnums, static arguments, in/out axes)
and error messages; the work is done by the interpreters in ``kiln.interpreters``.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln import _compile_log, _hijax, _traceback_util, dtypes
from kiln import _key_boundary as _kb
from kiln import tree_util as _public_tree
from kiln._physical_tree import (
    Partial,
    tree_flatten,
    tree_map,
    tree_structure,
    tree_unflatten,
)
from kiln._physical_tree import is_transform_node as _is_key
from kiln._wraps import wraps as _wraps
from kiln.array import Array, make_array, to_array
from kiln.backends import cpu as _cpu
from kiln.callbacks import program_running
from kiln.config import config
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, check_jaxpr, pp_jaxpr
from kiln.core.ref import AbstractRef, Ref
from kiln.core.trace import EvalTrace, Tracer, get_aval
from kiln.core.trace import current_trace as _current_trace
from kiln.distributed import _state as _dist_state
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero
from kiln.interpreters.pjit import jit_p
from kiln.profiler import _recorder as _profiler

logger = logging.getLogger("kiln")

_array_types = (Array, Tracer, np.ndarray, np.generic, int, float, complex, bool, Ref)


def _check_arg(x, what: str):
    if not isinstance(x, _array_types):
        raise TypeError(f"Argument '{x}' of type {type(x)} is not a valid JAX type. "
                        f"({what} must be arrays, scalars, or pytrees of them.)")


def _ensure_index_tuple(x) -> tuple:
    if isinstance(x, int):
        return (x,)
    return tuple(int(i) for i in x)


# ================================================================================================
# Forward and reverse mode
# ================================================================================================

@_traceback_util.api_boundary
def jvp(fun: Callable, primals, tangents, has_aux: bool = False):
    """Forward-mode Jacobian-vector product of ``fun`` at ``primals`` along ``tangents``.

    Returns ``(primals_out, tangents_out)`` (and ``aux`` if ``has_aux``).
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("primal and tangent arguments to jax.jvp must be tuples or lists; found "
                        f"{type(primals).__name__} and {type(tangents).__name__}.")
    p_flat, p_tree = tree_flatten(tuple(primals))
    t_flat, t_tree = _public_tree.tree_flatten(tuple(tangents))
    p_keys = _public_tree.tree_leaves(tuple(primals))
    if _public_tree.tree_structure(tuple(primals)) != t_tree:
        raise TypeError("primal and tangent arguments to jax.jvp must have the same tree "
                        f"structure; primals have tree structure {p_tree} whereas tangents have "
                        f"tree structure {t_tree}.")
    ts = []
    for p, t, pk in zip(p_flat, t_flat, p_keys):
        if _is_key(pk):
            ts.append(_kb.physical_key_tangent(pk, t, "jax.jvp"))
            continue
        _check_arg(p, "jvp primals")
        pa, ta = get_aval(p), get_aval(t)
        expected = ad.tangent_aval(pa)
        if ta.dtype != expected.dtype:
            raise TypeError(
                "primal and tangent arguments to jax.jvp do not match; dtypes must be equal, "
                "or in case of int/bool primal dtype the tangent dtype must be float0. Got "
                f"primal dtype {pa.dtype.name} and so expected tangent dtype "
                f"{expected.dtype.name if expected.dtype != dtypes.float0 else 'float0'}, but "
                f"got tangent dtype {ta.dtype.name if ta.dtype != dtypes.float0 else 'float0'} "
                "instead.")
        if ta.shape != pa.shape:
            raise ValueError("jvp called with different primal and tangent shapes;Got primal "
                             f"shape {pa.shape} and tangent shape as {ta.shape}")
        ts.append(Zero(expected) if expected.dtype == dtypes.float0 else t)
    aux_cell = []
    flat_fun, out_tree = _flatten_fun(fun, p_tree, has_aux, aux_cell)
    p_out, t_out = ad.jvp_flat(flat_fun, p_flat, ts)
    tree = out_tree()
    n = tree.num_leaves
    outs = (tree_unflatten(tree, p_out[:n]),
            _user_float0_tree(_kb.key_tangents_to_float0(tree_unflatten(tree, t_out[:n]))))
    if has_aux:
        return outs[0], outs[1], _finish_aux(aux_cell, p_out[n:])
    return outs


def _flatten_fun(fun, in_tree, has_aux, aux_cell, kwargs=None):
    """Wrap ``fun`` as flat-args -> flat outputs (aux leaves appended after the outputs)."""
    store = {}

    def flat(*args):
        py_args = tree_unflatten(in_tree, list(args))
        out = fun(*py_args, **(kwargs or {}))
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError("has_aux=True requires the function to return a pair "
                                f"(output, aux); got {type(out).__name__}.")
            out, aux = out
            aux_leaves, aux_tree = tree_flatten(aux)
            arr = [isinstance(a, _array_types) for a in aux_leaves]
            aux_cell[:] = [aux_tree, aux_leaves, arr]
            extra = [a for a, is_arr in zip(aux_leaves, arr) if is_arr]
        else:
            extra = []
        out_leaves, tree = tree_flatten(out)
        store["tree"] = tree
        return list(out_leaves) + extra

    return flat, lambda: store["tree"]


def _finish_aux(aux_cell, array_leaves):
    aux_tree, leaves, is_arr = aux_cell
    it = iter(array_leaves)
    return tree_unflatten(aux_tree, [next(it) if a else leaf for leaf, a in zip(leaves, is_arr)])


@_traceback_util.api_boundary
def linearize(fun: Callable, *primals, has_aux: bool = False):
    """Returns ``(primals_out, f_jvp)`` where ``f_jvp(*tangents)`` is the JVP at ``primals``,
    evaluated from a stored linear jaxpr (and ``aux`` if ``has_aux``)."""
    p_flat, p_tree = tree_flatten(tuple(primals))
    for p in p_flat:
        _check_arg(p, "linearize primals")
    aux_cell = []
    flat_fun, out_tree = _flatten_fun(fun, p_tree, has_aux, aux_cell)
    p_out, lin = ad.linearize_flat(flat_fun, p_flat)
    tree = out_tree()
    n = tree.num_leaves

    p_keys = _public_tree.tree_leaves(tuple(primals))
    p_pub = _public_tree.tree_structure(tuple(primals))
    # A pytree (``Partial``) whose leaves are the residuals, as JAX's: ``f_jvp`` may be
    # returned from ``jit``/``vmap`` (Equinox's checkpointed loops do).
    f_jvp = Partial(functools.partial(_linearized_jvp, lin.jaxpr, tuple(lin.in_avals),
                                      tuple(lin.out_avals), tree, n, p_keys, p_pub),
                    list(lin.consts))
    out = tree_unflatten(tree, p_out[:n])
    if has_aux:
        return out, f_jvp, _finish_aux(aux_cell, p_out[n:])
    return out, f_jvp


@_traceback_util.api_boundary
def _linearized_jvp(jaxpr, in_avals, out_avals, tree, n, p_keys, p_pub, consts, *tangents):
    """The JVP that ``linearize`` returns: its stored linear jaxpr on ``tangents``."""
    t_flat, t_tree = _public_tree.tree_flatten(tuple(tangents))
    if t_tree != p_pub:
        raise TypeError(f"linearized function called on tangent values inconsistent with "
                        f"the original primal values: expected tree {p_pub}, got {t_tree}")
    t_flat = [ad.instantiate_zeros(_kb.physical_key_tangent(pk, t, "linearize"))
              if _is_key(pk) else t for t, pk in zip(t_flat, p_keys)]
    outs = ad.LinearFunction(jaxpr, consts, list(in_avals), list(out_avals))(*t_flat)
    return _user_float0_tree(_kb.key_tangents_to_float0(tree_unflatten(tree, outs[:n])))


def _vjp_flat(fun, p_flat, p_tree, has_aux):
    aux_cell = []
    flat_fun, out_tree = _flatten_fun(fun, p_tree, has_aux, aux_cell)
    p_out, lin = ad.linearize_flat(flat_fun, ad.scalars_to_arrays(p_flat))
    tree = out_tree()
    n = tree.num_leaves
    aux = _finish_aux(aux_cell, p_out[n:]) if has_aux else None
    return p_out[:n], tree, lin, aux


@_traceback_util.api_boundary
def vjp(fun: Callable, *primals, has_aux: bool = False, reduce_axes=()):
    """Reverse mode: returns ``(primals_out, vjp_fun)`` (and ``aux`` if ``has_aux``) where
    ``vjp_fun(cotangents)`` returns a tuple with one cotangent per primal argument."""
    p_flat, p_tree = tree_flatten(tuple(primals))
    for p in p_flat:
        _check_arg(p, "vjp primals")
    p_out, out_tree, lin, aux = _vjp_flat(fun, p_flat, p_tree, has_aux)
    out_avals = [get_aval(o) for o in p_out]
    in_avals = [get_aval(p) for p in p_flat]

    out_keys = _public_tree.tree_leaves(tree_unflatten(out_tree, p_out))

    @_traceback_util.api_boundary
    def vjp_fun(ct):
        ct_flat, ct_tree = _public_tree.tree_flatten(ct)
        out_pub = _public_tree.tree_structure(tree_unflatten(out_tree, out_keys))
        if ct_tree != out_pub:
            raise ValueError("unexpected tree structure of argument to vjp function: got "
                             f"{ct_tree}, but expected to match {out_pub}")
        cts = []
        for c, a, ok in zip(ct_flat, out_avals, out_keys):
            if _is_key(ok):
                cts.append(_kb.physical_key_tangent(ok, c, "vjp"))
                continue
            ca = get_aval(c)
            if ca.shape != a.shape:
                raise ValueError(f"unexpected JAX type (e.g. shape/dtype) for argument to vjp "
                                 f"function: got {ca.str_short()}, but expected "
                                 f"{ad.tangent_aval(a).str_short()} because the corresponding "
                                 "output of the function had matching shape/dtype")
            if type(c) in (int, float, complex, bool):
                c = to_array(c)     # a Python-scalar cotangent comes back as an array
            cts.append(Zero(ca) if ca.dtype == dtypes.float0 else c)
        cts_in = lin.transpose(cts)
        res = [_zeros_for(ct, a) for ct, a in zip(cts_in, in_avals)]
        return _user_float0_tree(_kb.key_tangents_to_float0(tree_unflatten(p_tree, res)))

    out = tree_unflatten(out_tree, p_out)
    f = Partial(vjp_fun)
    if has_aux:
        return out, f, aux
    return out, f


def _zeros_for(ct, primal_aval):
    """Instantiate a symbolic zero cotangent; integer primals get float0 zeros."""
    if type(ct) is Zero:
        ta = ad.tangent_aval(primal_aval)
        if type(ta) is AbstractRef:     # a new reference of zeros, as JAX
            return ad.zeros_like_aval(ta)
        return make_array(np.zeros(ta.shape, ta.dtype), False)
    return ct


def _match_input(g, aval):
    ga = get_aval(g)
    if ga.dtype == dtypes.float0 or (ga.dtype == aval.dtype and ga.weak_type == aval.weak_type):
        return g
    if ga.dtype != aval.dtype:
        return g
    from kiln.lax.structural import _convert_element_type
    return _convert_element_type(g, aval.dtype, aval.weak_type)


def _check_grad_input(x, holomorphic, allow_int, name="grad"):
    a = x.aval if _is_key(x) else get_aval(x)
    dt = a.dtype
    if _is_key(x) and name == "jacfwd":
        raise TypeError(f"jacfwd with input element type {dt.name}")
    if holomorphic:
        if not dtypes.issubdtype(dt, np.complexfloating):
            raise TypeError(f"{name} with holomorphic=True requires inputs with complex dtype, "
                            f"but got {dt.name}.")
        return
    if dtypes.issubdtype(dt, np.inexact):
        return
    if allow_int and (dtypes.issubdtype(dt, np.integer) or dt == np.bool_
                      or dtypes.issubdtype(dt, dtypes.prng_key)):
        return
    raise TypeError(f"{name} requires real- or complex-valued inputs (input dtype that is a "
                    f"sub-dtype of np.inexact), but got {dt.name}. If you want to use "
                    "Boolean- or integer-valued inputs, use vjp or set allow_int to True.")


@_traceback_util.api_boundary
def value_and_grad(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False,
                   allow_int: bool = False, reduce_axes=()) -> Callable:
    """Returns a function computing ``(fun(*args), grad(fun)(*args))``."""
    argnums_t = _ensure_index_tuple(argnums)

    @_wraps(fun)
    @_traceback_util.api_boundary
    def value_and_grad_f(*args, **kwargs):
        max_arg = max(argnums_t) if argnums_t else -1
        if max_arg >= len(args):
            raise TypeError(f"differentiating with respect to argnums={argnums} requires at "
                            f"least {max_arg + 1} positional arguments to be passed by the "
                            f"caller, but got only {len(args)} positional arguments.")
        dyn = tuple(args[i] for i in argnums_t)
        d_flat, d_tree = tree_flatten(dyn)
        for x in _public_tree.tree_leaves(dyn):
            if not _is_key(x):
                _check_arg(x, "grad inputs")
            _check_grad_input(x, holomorphic, allow_int)

        def f_dyn(*dyn_args):
            full = list(args)
            for i, v in zip(argnums_t, dyn_args):
                full[i] = v
            return fun(*full, **kwargs)

        p_out, out_tree, lin, aux = _vjp_flat(f_dyn, d_flat, d_tree, has_aux)
        if out_tree.num_leaves != 1 or len(p_out) != 1:
            raise TypeError("Gradient only defined for scalar-output functions. Output was "
                            f"{tree_unflatten(out_tree, p_out)}.")
        (ans,) = p_out
        a = get_aval(ans)
        if a.shape != ():
            raise TypeError("Gradient only defined for scalar-output functions. Output had "
                            f"shape: {a.shape}.")
        if holomorphic:
            if not dtypes.issubdtype(a.dtype, np.complexfloating):
                raise TypeError("grad with holomorphic=True requires outputs with complex dtype, "
                                f"but got {a.dtype.name}.")
        elif not dtypes.issubdtype(a.dtype, np.floating):
            raise TypeError(f"grad requires real-valued outputs (output dtype that is a sub-dtype "
                            f"of np.floating), but got {a.dtype.name}. For holomorphic "
                            "differentiation, pass holomorphic=True. For differentiation of "
                            "non-holomorphic functions involving complex outputs, use jax.vjp "
                            "directly.")
        one = make_array(np.ones((), a.dtype), False)
        cts = lin.transpose([one])
        # Gradients have their input's type (dtype and weak type), as in JAX.
        g_flat = [_match_input(_zeros_for(ct, get_aval(x)), get_aval(x))
                  for ct, x in zip(cts, d_flat)]
        g = _user_float0_tree(_kb.key_tangents_to_float0(tree_unflatten(d_tree, g_flat)))
        if isinstance(argnums, int):
            g = g[0]
        if has_aux:
            return (ans, aux), g
        return ans, g

    return value_and_grad_f


@_traceback_util.api_boundary
def grad(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False,
         allow_int: bool = False, reduce_axes=()) -> Callable:
    """The gradient of scalar-valued ``fun`` with respect to argument(s) ``argnums``.

    Example: ``grad(jnp.tanh)(1.0)`` is ``0.4199743``.
    """
    vg = value_and_grad(fun, argnums, has_aux=has_aux, holomorphic=holomorphic,
                        allow_int=allow_int)

    @_wraps(fun)
    @_traceback_util.api_boundary
    def grad_f(*args, **kwargs):
        if has_aux:
            (_, aux), g = vg(*args, **kwargs)
            return g, aux
        return vg(*args, **kwargs)[1]

    return grad_f


# ================================================================================================
# Jacobians
# ================================================================================================

def _std_basis(flat_avals, dtype=None):
    """Identity basis for the concatenated flattened leaves: shape (N, N)."""
    sizes = [a.size for a in flat_avals]
    n = sum(sizes)
    return n, sizes


def _basis_for(avals, sizes, n, holomorphic=False):
    """One (n, *aval.shape) basis block per leaf, concrete arrays."""
    out = []
    offset = 0
    for a, s in zip(avals, sizes):
        dt = ad.tangent_aval(a).dtype
        block = np.zeros((n, s), dt if dt != dtypes.float0 else np.float32)
        if dt == dtypes.float0:
            out.append(make_array(np.zeros((n,) + a.shape, dtypes.float0)))
        else:
            block[offset:offset + s] = np.eye(s, dtype=dt)
            out.append(make_array(block.reshape((n,) + a.shape)))
        offset += s
    return out


@_traceback_util.api_boundary
def jacfwd(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False) -> Callable:
    """Jacobian of ``fun`` by forward mode (vmap of jvp over a standard basis)."""
    argnums_t = _ensure_index_tuple(argnums)

    @_wraps(fun)
    @_traceback_util.api_boundary
    def jacfun(*args, **kwargs):
        dyn = tuple(args[i] for i in argnums_t)
        d_flat, d_tree = tree_flatten(dyn)
        for x in _public_tree.tree_leaves(dyn):
            _check_grad_input(x, holomorphic, False, "jacfwd")

        def f_dyn(*dyn_args):
            full = list(args)
            for i, v in zip(argnums_t, dyn_args):
                full[i] = v
            return fun(*full, **kwargs)

        avals = [get_aval(x) for x in d_flat]
        n, sizes = _std_basis(avals)
        basis = _basis_for(avals, sizes, n)
        aux_cell = []
        flat_fun, out_tree = _flatten_fun(f_dyn, d_tree, has_aux, aux_cell)

        def push(*ts):
            ts = [Zero(ad.tangent_aval(get_aval(x))) if get_aval(t).dtype == dtypes.float0
                  else t for x, t in zip(d_flat, ts)]
            p, t = ad.jvp_flat(flat_fun, d_flat, ts)
            return p + t

        outs, dims = batching.batch_flat(push, basis, [0] * len(basis),
                                         batching.AxisData(None, n))
        k = len(outs) // 2
        tree = out_tree()
        n_out = tree.num_leaves
        jac_leaves = [_fwd_jac_leaf(t, d, n, avals, sizes)
                      for t, d in zip(outs[k:k + n_out], dims[k:k + n_out])]
        jac = tree_unflatten(tree, [_split_in(j, d_tree, argnums) for j in jac_leaves])
        if has_aux:
            aux_vals = [_unmapped(p, d) for p, d in zip(outs[n_out:k], dims[n_out:k])]
            return jac, _finish_aux(aux_cell, aux_vals)
        return jac

    return jacfun


def _unmapped(x, d):
    if d is None:
        return x
    from kiln import lax
    return lax.index_in_dim(x, 0, d, keepdims=False)


def _fwd_jac_leaf(t, d, n, in_avals, sizes):
    """From a batched tangent output (batch axis d, size n) to per-input jac blocks with
    shape out.shape + in.shape."""
    from kiln import lax
    t = batching.matchaxis(t, d, 0, n)
    out_shape = get_aval(t).shape[1:]
    blocks = []
    offset = 0
    for a, s in zip(in_avals, sizes):
        blk = lax.slice_in_dim(t, offset, offset + s, axis=0)
        blk = lax.reshape(blk, (s,) + out_shape)
        nd = len(out_shape)
        blk = lax.transpose(blk, tuple(range(1, nd + 1)) + (0,))
        blocks.append(lax.reshape(blk, out_shape + a.shape))
        offset += s
    return blocks


def _split_in(blocks, d_tree, argnums):
    tree = tree_unflatten(d_tree, blocks)
    return tree[0] if isinstance(argnums, int) else tree


@_traceback_util.api_boundary
def jacrev(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False,
           allow_int: bool = False) -> Callable:
    """Jacobian of ``fun`` by reverse mode (vmap of vjp over the output basis)."""
    argnums_t = _ensure_index_tuple(argnums)

    @_wraps(fun)
    @_traceback_util.api_boundary
    def jacfun(*args, **kwargs):
        from kiln import lax
        dyn = tuple(args[i] for i in argnums_t)
        d_flat, d_tree = tree_flatten(dyn)
        for x in _public_tree.tree_leaves(dyn):
            _check_grad_input(x, holomorphic, allow_int, "jacrev")

        def f_dyn(*dyn_args):
            full = list(args)
            for i, v in zip(argnums_t, dyn_args):
                full[i] = v
            return fun(*full, **kwargs)

        p_out, out_tree, lin, aux = _vjp_flat(f_dyn, d_flat, d_tree, has_aux)
        out_avals = [get_aval(o) for o in p_out]
        in_avals = [get_aval(x) for x in d_flat]
        m, sizes = _std_basis(out_avals)
        basis = _basis_for(out_avals, sizes, m)

        def pull(*cts):
            cts = [Zero(get_aval(c)) if get_aval(c).dtype == dtypes.float0 else c for c in cts]
            res = lin.transpose(list(cts))
            return [_zeros_for(r, a) for r, a in zip(res, in_avals)]

        cts_in, dims = batching.batch_flat(pull, basis, [0] * len(basis),
                                           batching.AxisData(None, m))
        cts_in = [batching.matchaxis(c, d, 0, m) for c, d in zip(cts_in, dims)]
        # cts_in[j] has shape (m,) + in_j.shape; split rows per output leaf.
        per_out = []
        offset = 0
        for oa, s in zip(out_avals, sizes):
            leaves = []
            for c, ia in zip(cts_in, in_avals):
                blk = lax.slice_in_dim(c, offset, offset + s, axis=0)
                leaves.append(lax.reshape(blk, oa.shape + ia.shape))
            per_out.append(_split_in(leaves, d_tree, argnums))
            offset += s
        jac = tree_unflatten(out_tree, per_out)
        if has_aux:
            return jac, aux
        return jac

    return jacfun


jacobian = jacrev


@_traceback_util.api_boundary
def hessian(fun: Callable, argnums=0, has_aux: bool = False, holomorphic: bool = False):
    """Hessian of scalar ``fun``: ``jacfwd(jacrev(fun))``."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums,
                  has_aux=has_aux, holomorphic=holomorphic)


def _primal_aval(x):
    """The abstract value of one example primal: an array, a scalar, or anything with
    ``shape`` and ``dtype`` (a ``ShapeDtypeStruct``, keeping its ``weak_type``)."""
    if isinstance(x, (Array, Tracer)) or type(x) in (int, float, complex, bool):
        return get_aval(x)
    if isinstance(x, ShapeDtypeStruct):
        return x.aval
    if not isinstance(x, (np.ndarray, np.generic)) and hasattr(x, "shape") \
            and hasattr(x, "dtype"):
        return ShapedArray(tuple(int(d) for d in x.shape),
                           dtypes.canonicalize_dtype(np.dtype(x.dtype)),
                           bool(getattr(x, "weak_type", False)))
    return get_aval(x)


@_traceback_util.api_boundary
def linear_transpose(fun: Callable, *primals, reduce_axes=()) -> Callable:
    """Transpose a function that is promised to be linear.

    Args:
      fun: the linear function to transpose.
      *primals: example primals: arrays, scalars or :class:`ShapeDtypeStruct` objects
        (only their shapes and dtypes are used).
      reduce_axes: deprecated; must be empty.

    Returns:
      A callable (a :class:`kiln.tree_util.Partial`, so it is a pytree) that takes one
      cotangent pytree matching ``fun``'s output and returns a tuple of cotangents with
      the structure, shapes and dtypes of ``primals``.
    """
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to transpose is deprecated")
    p_flat, p_tree = tree_flatten(tuple(primals))
    in_avals = [_primal_aval(p) for p in p_flat]
    store = {}

    def flat(*xs):
        out = fun(*tree_unflatten(p_tree, list(xs)))
        leaves, tree = tree_flatten(out)
        store["tree"] = tree
        return leaves

    jaxpr, consts = staging.trace_to_jaxpr(flat, in_avals)
    out_tree = store["tree"]
    out_avals = jaxpr.out_avals
    in_dts = [a.dtype for a in in_avals]
    out_dts = [a.dtype for a in out_avals]
    if not (all(dtypes.issubdtype(d, np.inexact) for d in in_dts + out_dts)
            or all(dtypes.issubdtype(d, np.integer) for d in in_dts + out_dts)):
        raise TypeError("linear_transpose only supports [float or complex] -> [float or "
                        "complex], and integer -> integer functions, but got "
                        f"{in_dts} -> {out_dts}.")

    @_traceback_util.api_boundary
    def transposed_fun(consts, out_cotangent):
        ct_flat, ct_tree = tree_flatten(out_cotangent)
        if ct_tree != out_tree:
            raise TypeError("cotangent tree does not match function output, expected "
                            f"{out_tree} but got {ct_tree}")
        for c, a in zip(ct_flat, out_avals):
            try:
                ca = get_aval(c)
            except TypeError:
                ca = None
            if ca is None or ca.shape != a.shape or ca.dtype != a.dtype:
                raise TypeError("cotangent type does not match function output, expected "
                                f"{tuple(out_avals)} but got {list(ct_flat)}")
        res = ad.backward_pass(jaxpr, list(consts),
                               [ad.UndefinedPrimal(a) for a in in_avals], list(ct_flat))
        return tree_unflatten(p_tree, [_zeros_for(r, a) for r, a in zip(res, in_avals)])

    from kiln._physical_tree import Partial
    return Partial(transposed_fun, tuple(consts))


# ================================================================================================
# vmap
# ================================================================================================

def _out_path(tree, k) -> str:
    """The key path (``[1]``, ``['b'][0]``) of the ``k``-th leaf of the tree ``tree``."""
    from kiln.tree_util import keystr, tree_flatten_with_path
    try:
        dummy = tree_unflatten(tree, list(range(tree.num_leaves)))
        for path, leaf in tree_flatten_with_path(dummy)[0]:
            if leaf == k:
                return keystr(path)
    except Exception:   # noqa: BLE001 - only for the message
        pass
    return ""


def _arg_names(fun, n):
    try:
        params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"args[{i}]" for i in range(n)]


def _flatten_axes(what, tree, axes_prefix, leaves_count):
    """Broadcast an axes prefix tree to one entry per leaf of ``tree``."""
    from kiln._physical_tree import tree_flatten as tf
    try:
        proxy = tree_unflatten(tree, [object()] * leaves_count)
        axes_leaves = []

        def expand(prefix, sub):
            if prefix is None or isinstance(prefix, int):
                n = len(tf(sub)[0])
                axes_leaves.extend([prefix] * n)
                return
            p_leaves, p_tree = tf(prefix, is_leaf=lambda x: x is None)
            subtrees = p_tree.flatten_up_to(sub)
            for pl, st in zip(p_leaves, subtrees):
                expand(pl, st)

        expand(axes_prefix, proxy)
        if len(axes_leaves) != leaves_count:
            raise ValueError
        return axes_leaves
    except (ValueError, TypeError) as e:
        raise ValueError(f"{what} specification must be a tree prefix of the corresponding value, "
                         f"got specification {axes_prefix} for value tree {tree}.") from e


@_traceback_util.api_boundary
def vmap(fun: Callable, in_axes=0, out_axes=0, axis_name=None, axis_size=None,
         spmd_axis_name=None) -> Callable:
    """Vectorizing map: ``fun`` mapped over array axes ``in_axes`` of its arguments."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not (in_axes is None or isinstance(in_axes, (int, tuple, dict)) or
            hasattr(in_axes, "__dict__")):
        raise TypeError("vmap in_axes must be an int, None, or a tuple of entries corresponding "
                        f"to the positional arguments passed to the function, but got {in_axes}.")

    @_wraps(fun)
    @_traceback_util.api_boundary
    def vmapped(*args, **kwargs):
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError("vmap in_axes must be an int, None, or a tuple of entries "
                             "corresponding to the positional arguments passed to the function, "
                             f"but got len(in_axes)={len(in_axes)}, len(args)={len(args)}")
        a_flat, a_tree = tree_flatten((args, kwargs))
        axes_full = (in_axes if isinstance(in_axes, tuple) else in_axes,
                     {k: 0 for k in kwargs})
        if not isinstance(in_axes, tuple):
            axes_full = (tuple([in_axes] * len(args)), {k: 0 for k in kwargs})
        axes = _flatten_axes("vmap in_axes", a_tree, axes_full, len(a_flat))
        names = _arg_names(fun, len(args))
        sizes = []
        norm_axes = []
        for x, ax in zip(a_flat, axes):
            if ax is None:
                norm_axes.append(None)
                continue
            if batching.vmappables and batching.is_vmappable(x):
                raise NotImplementedError(
                    f"vmap over a value of type {type(x).__name__}, registered with "
                    "batching.register_vmappable: kiln's vmap does not run custom "
                    "to_elt/from_elt handlers; register the type as a pytree instead")
            _check_arg(x, "vmap arguments")
            nd = get_aval(x).ndim
            if not -nd <= ax < nd:
                raise ValueError(f"vmap was requested to map its argument along axis {ax}, which "
                                 f"implies that its rank should be at least {ax + 1 if ax >= 0 else -ax}"
                                 f", but is only {nd} (its shape is {get_aval(x).shape})")
            ax = ax % nd
            norm_axes.append(ax)
            sizes.append(get_aval(x).shape[ax])
        if axis_size is not None:
            sizes_set = set(sizes) | {axis_size}
        else:
            sizes_set = set(sizes)
        if not sizes_set:
            raise ValueError("vmap must have at least one non-None value in in_axes")
        if len(sizes_set) > 1:
            lines = []
            # Name each mapped argument with its size.
            arg_leaf_counts = [len(tree_flatten(a)[0]) for a in args]
            owners = []
            for i, c in enumerate(arg_leaf_counts):
                owners += [names[i]] * c
            owners += [f"kwarg {k}" for k in kwargs for _ in tree_flatten(kwargs[k])[0]]
            for x, ax, owner in zip(a_flat, norm_axes, owners):
                if ax is None:
                    continue
                a = get_aval(x)
                lines.append(f"  * one axis had size {a.shape[ax]}: axis {ax} of argument "
                             f"{owner} of type {a.str_short()};")
            raise ValueError("vmap got inconsistent sizes for array axes to be mapped:\n"
                             + "\n".join(lines))
        size = sizes_set.pop()
        store = {}

        def flat_fun(*xs):
            a, k = tree_unflatten(a_tree, list(xs))
            out = fun(*a, **k)
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return leaves

        axis_data = batching.AxisData(axis_name, size, spmd_axis_name)
        outs, dims = batching.batch_flat(flat_fun, a_flat, norm_axes, axis_data)
        tree = store["tree"]
        oaxes = _flatten_axes("vmap out_axes", tree, out_axes, tree.num_leaves)
        final = []
        for k, (o, d, want) in enumerate(zip(outs, dims, oaxes)):
            if want is None:
                if d is not None:
                    raise ValueError(f"at vmap out_axes{_out_path(tree, k)}, got axis "
                                     f"spec None but output was batched on axis {d}")
                final.append(o)
            else:
                nd = get_aval(o).ndim + (1 if d is None else 0)
                if not -nd <= want < nd:
                    raise ValueError(f"vmap out_axes specification {want} is out of bounds for "
                                     f"an output of rank {nd}")
                final.append(batching.matchaxis(o, d, want % nd, size))
        return tree_unflatten(tree, final)

    return vmapped


# ================================================================================================
# jit
# ================================================================================================

def _hashable_static(v, name):
    try:
        hash(v)
    except TypeError as e:
        raise ValueError(
            f"Non-hashable static arguments are not supported. An error occurred while trying "
            f"to hash an object of type {type(v)}, {v}. The error was:\n{e}\n"
            f"(static argument {name}: pass a hashable value such as a tuple, or make the "
            "argument non-static)") from None
    return v


def _extended_io(closed) -> bool:
    """Whether a jitted program takes or returns arrays of an extended dtype with rules
    (those go through ``jit_p`` and the eager trace, which handle their storage)."""
    from kiln._extended import has_rules
    return any(has_rules(a.dtype) for a in (*closed.in_avals, *closed.out_avals))


def _to_value(x):
    from kiln.array import to_array
    from kiln.errors import UnexpectedTracerError
    if isinstance(x, Tracer):
        raise UnexpectedTracerError(x)
    return to_array(x)._value


def _donated_reuse(entry, a_flat):
    """The (flat input, output) pairs whose output may be written into the donated
    input's memory on this call, or None (see ``kiln.donation.reusable``)."""
    from kiln.core.trace import _debug_checks
    if _debug_checks[0] or config.kiln_backend == "reference":
        return None     # a NaN check re-runs the program on the (intact) inputs
    from kiln import donation
    return donation.reusable(a_flat, entry.pairs) or None


class _HijaxArguments(Exception):
    """Raised while collecting a jit call's argument types: a hijax argument is present
    (the call goes through ``JitWrapped._call_hi``)."""


class _CacheEntry:
    __slots__ = ("jaxpr", "out_tree", "explain", "donated", "pairs", "ref_consts", "hi",
                 "float0_out")

    def __init__(self, jaxpr, out_tree):
        self.jaxpr = jaxpr
        self.out_tree = out_tree
        self.float0_out = any(a.dtype == dtypes.float0 for a in jaxpr.out_avals)
        self.donated = ()           # flat argument indices an output takes (donation)
        self.pairs = ()             # (flat argument, output index) for those
        self.ref_consts = ()        # closed-over mutable references (leading operands)
        self.hi = None              # hijax arguments: (number of outputs, final specs)


def _fun_src_info(wrapped) -> str:
    fun = wrapped._fun
    code = getattr(getattr(fun, "__wrapped__", fun), "__code__", None)
    name = getattr(fun, "__name__", "fun")
    if code is None:
        return name
    return f"{name} at {code.co_filename}:{code.co_firstlineno}"


def _flat_arg_names(wrapped, a_tree, n) -> list:
    """JAX's names of the flat arguments (``a``, ``args[1]``, ``x['w']``)."""
    from kiln.tree_util import keystr, tree_flatten_with_path
    try:
        params = [p.name for p in wrapped._params]
        (args, kwargs) = tree_unflatten(a_tree, list(range(n)))
        names = [None] * n
        for i, a in enumerate(args):
            base = params[i] if i < len(params) else f"args[{i}]"
            for path, leaf in tree_flatten_with_path(a)[0]:
                names[leaf] = base + keystr(path)
        for k, v in kwargs.items():
            for path, leaf in tree_flatten_with_path(v)[0]:
                names[leaf] = k + keystr(path)
        return [nm if nm is not None else f"flat index {i}" for i, nm in enumerate(names)]
    except Exception:   # noqa: BLE001 - names are only for the message
        return [f"flat index {i}" for i in range(n)]


def _check_no_aliased_ref_args(wrapped, a_flat, avals, a_tree):
    seen = {}
    for i, (x, a) in enumerate(zip(a_flat, avals)):
        if type(a) is AbstractRef:
            j = seen.setdefault(id(_referent(x)), i)
            if j != i:
                names = _flat_arg_names(wrapped, a_tree, len(a_flat))
                raise ValueError(
                    "only one reference to a mutable array may be passed as an argument to "
                    f"a function, but when tracing {_fun_src_info(wrapped)} for jit the "
                    f"mutable array reference of type {a.str_short(False)} appeared at both "
                    f"{names[j]} and {names[i]}.")


def _referent(x):
    return x


def _check_no_closed_over_ref_args(wrapped, consts, a_flat, a_tree):
    ids = {id(c) for c in consts}
    for i, x in enumerate(a_flat):
        if type(x) is Ref and id(x) in ids:
            names = _flat_arg_names(wrapped, a_tree, len(a_flat))
            raise ValueError(
                f"when tracing {_fun_src_info(wrapped)} for jit, a mutable array reference "
                f"of type {x._aval.str_short(False)} was both closed over and passed as the "
                f"argument {names[i]}")


def _raise_returned_ref(wrapped, leaf, args):
    aval = get_aval(leaf)
    origin = ""
    if any(leaf is a for a in args):
        origin = "\n\nThe returned mutable array was passed in as an argument."
    raise ValueError(
        f"function {_fun_src_info(wrapped)} traced for jit returned a mutable array "
        f"reference of type {aval.str_short(False)}, but mutable array references cannot "
        f"be returned.{origin}")


class Lowered:
    """The result of ``jit(f).lower(*args)``: the staged program, ready to compile."""

    def __init__(self, jaxpr: ClosedJaxpr, in_tree, out_tree, name, donated=()):
        self.jaxpr = jaxpr
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.name = name
        self.donated = list(donated)

    def as_text(self, dialect=None, **_kw) -> str:
        return pp_jaxpr(self.jaxpr.jaxpr)

    @property
    def out_info(self):
        """The outputs' shapes and dtypes: a pytree of ``ShapeDtypeStruct``
        (``jax.stages.Lowered.out_info``)."""
        return tree_unflatten(self.out_tree, [ShapeDtypeStruct(a.shape, a.dtype)
                                              for a in self.jaxpr.out_avals])

    @property
    def args_info(self):
        """The arguments' types and donation: a pytree ``(args, kwargs)`` of ``ArgInfo``
        (``jax.stages.Lowered.args_info``)."""
        donated = set(self.donated)
        n = len(self.jaxpr.in_avals) - self.in_tree.num_leaves
        infos = [ArgInfo(a, k in donated)
                 for k, a in enumerate(self.jaxpr.in_avals[n:])]
        return tree_unflatten(self.in_tree, infos)

    def compile(self, compiler_options=None) -> Compiled:
        """The executable (``jax.stages.Lowered.compile``). ``compiler_options`` are XLA's
        (``xla_*`` names): kiln runs no XLA, so they are checked for being XLA option
        names and otherwise ignored; any other name raises ``JaxRuntimeError`` as JAX's
        "No such compile option"."""
        _check_compiler_options(compiler_options)
        return Compiled(self)

    def compiler_ir(self, dialect: str | None = None):
        """The program in a compiler IR (``jax.stages.Lowered.compiler_ir``).

        kiln's compiler takes jaxprs: ``dialect=None`` (or ``"kiln"``/``"jaxpr"``) gives the
        staged jaxpr after the compiler's optimisation passes (inlining, simplification,
        constant folding, CSE, DCE), the program the C backend lowers. ``"hlo"`` gives that
        program printed in XLA's HLO syntax (an object with ``as_hlo_text()``, as JAX's
        ``XlaComputation``) and ``"stablehlo"`` in StableHLO MLIR syntax (an object whose
        ``str()`` and ``operation.get_asm()`` give the text, as JAX's ``ir.Module``); see
        ``kiln.compiler.hlo_text``. They are renderings of kiln's program, not XLA's
        output (XLA's passes never run).
        """
        from kiln.compiler.passes import optimize
        if dialect in (None, "kiln", "jaxpr"):
            return optimize(self.jaxpr)
        if dialect == "hlo":
            from kiln.compiler.hlo_text import lower_to_hlo
            return lower_to_hlo(optimize(self.jaxpr), self.name)
        if dialect == "stablehlo":
            from kiln.compiler.stablehlo_text import lower_to_stablehlo
            return lower_to_stablehlo(optimize(self.jaxpr), self.name, self.out_tree)
        raise ValueError(
            f"Lowered.compiler_ir: unknown dialect {dialect!r}; kiln renders None (its "
            "optimised jaxpr), 'hlo' and 'stablehlo'")

    def cost_analysis(self) -> dict:
        """XLA-style cost estimate of the program: ``flops``, ``transcendentals``,
        ``bytes accessed`` and XLA's per-operand entries (those that are not zero), counted
        with XLA's rules on the jaxpr (``kiln._cost_analysis`` documents them)."""
        from kiln._cost_analysis import cost_analysis
        return cost_analysis(self.jaxpr)


class ArgInfo:
    """An argument's abstract value and whether it is donated (``jax.stages.ArgInfo``)."""

    __slots__ = ("_aval", "donated")

    def __init__(self, aval, donated: bool):
        self._aval = aval
        self.donated = donated

    shape = property(lambda self: self._aval.shape)
    dtype = property(lambda self: self._aval.dtype)

    def __eq__(self, other):
        return (type(other) is ArgInfo and self._aval == other._aval
                and self.donated == other.donated)

    def __hash__(self):
        return hash((self._aval, self.donated))

    def __repr__(self):
        return f"ArgInfo(_aval={self._aval!r}, donated={self.donated})"

def _check_compiler_options(options) -> None:
    if not options:
        return
    from kiln.errors import JaxRuntimeError
    for name in options:
        if not (isinstance(name, str) and name.startswith("xla_")):
            raise JaxRuntimeError(f"INVALID_ARGUMENT: No such compile option: '{name}'")


class Compiled:
    """An executable for fixed argument types (from ``Lowered.compile()``)."""

    def __init__(self, lowered: Lowered):
        self.lowered = lowered

    out_info = property(lambda self: self.lowered.out_info)
    args_info = property(lambda self: self.lowered.args_info)

    def as_text(self) -> str:
        """The generated C source (the jaxpr's text when nothing in it compiles natively)."""
        from kiln.backends import cpu
        exe = cpu.executable_for(self.lowered.jaxpr, self.lowered.name)
        return exe.source if exe is not None else self.lowered.as_text()

    def as_c(self) -> str:
        """The generated C source, as :meth:`as_text`."""
        return self.as_text()

    @_traceback_util.api_boundary
    def __call__(self, *args, **kwargs):
        a_flat, a_tree = tree_flatten((args, kwargs))
        if a_tree != self.lowered.in_tree:
            raise TypeError(f"function compiled for {self.lowered.in_tree}, called with {a_tree}")
        exp = self.lowered.jaxpr.in_avals
        for x, a in zip(a_flat, exp):
            xa = get_aval(x)
            if xa.shape != a.shape or xa.dtype != a.dtype:
                raise TypeError(f"Argument types differ from the types for which this computation "
                                f"was compiled: got {xa.str_short()}, expected {a.str_short()}")
        outs = jit_p.bind(*a_flat, jaxpr=self.lowered.jaxpr, name=self.lowered.name)
        return tree_unflatten(self.lowered.out_tree, outs)

    def cost_analysis(self) -> dict:
        """The cost estimate of :meth:`Lowered.cost_analysis` (kiln does not re-count after
        its own fusion, where XLA's numbers change)."""
        return self.lowered.cost_analysis()

    def memory_analysis(self):
        """Argument, output, aliased (donated), temporary and peak bytes, as JAX's
        ``CompiledMemoryStats`` (see ``kiln.donation``)."""
        from kiln import donation
        return donation.memory_stats(self.lowered.jaxpr, self.lowered.donated,
                                     self.lowered.name)


class Traced:
    def __init__(self, jaxpr, lowered):
        self.jaxpr = jaxpr
        self._lowered = lowered

    def lower(self):
        return self._lowered


# The trace cache belongs to the function, as in JAX: ``jit(f)(x)`` written inline in a
# loop makes a new wrapper each time but traces once. Weak on ``f``, so the caches go
# when the function does; keyed by the options that change what a trace means.
_FUNCTION_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# First element of the pytree fast path's keys (the flat path's start with a bool).
_TREE_KEY = object()


def _trace_caches(fun, options) -> tuple[dict, dict]:
    try:
        per_fun = _FUNCTION_CACHES.get(fun)
        if per_fun is None:
            per_fun = _FUNCTION_CACHES[fun] = {}
    except TypeError:       # not weakly referenceable (or unhashable): a cache per wrapper
        caches = (_PrivateCache(), _PrivateCache())
        _PRIVATE_CACHES.update(caches)
        return caches
    caches = per_fun.get(options)
    if caches is None:
        caches = per_fun[options] = ({}, {})
    return caches


class _PrivateCache(dict):
    """The trace cache of a jitted function that cannot key ``_FUNCTION_CACHES``; weakly
    referenceable (and hashed by identity, unlike a dict) so that :func:`clear_caches`
    reaches it through a ``WeakSet``."""
    __slots__ = ("__weakref__",)
    __hash__ = object.__hash__
    __eq__ = object.__eq__


_PRIVATE_CACHES: weakref.WeakSet = weakref.WeakSet()


def clear_caches() -> None:
    """Clear all compilation and staging caches (JAX's ``jax.clear_caches``): every jitted
    function's traces and the compiled programs held in memory. The next call of a jitted
    function traces it again; kiln's on-disk cache of built C libraries is kept (as JAX keeps
    its persistent compilation cache), so rebuilding a program already built is quick."""
    for per_fun in list(_FUNCTION_CACHES.values()):
        for cache, fast in list(per_fun.values()):
            cache.clear()
            fast.clear()
    for cache in list(_PRIVATE_CACHES):
        cache.clear()
    from kiln.backends import cpu
    cpu.clear_cache()
    _compile_log.reset_counts()


def _clear_fast_caches(_value=None):
    """A tracing-context flag changed: the fast-path caches (keyed by argument types and
    x64 only) must not serve traces made under the old value."""
    for per_fun in list(_FUNCTION_CACHES.values()):
        for _, fast in list(per_fun.values()):
            fast.clear()


for _flag in _compile_log.CONTEXT_FLAGS[1:]:
    config.on_change(_flag, _clear_fast_caches)


def _validate_argnums(sig, argnums, what):
    """JAX's check of ``static_argnums``/``donate_argnums`` against the signature (any
    index is fine when the function takes ``*args``)."""
    n_pos = 0
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n_pos += 1
        elif p.kind is p.VAR_POSITIONAL:
            return
    if argnums and (-min(argnums) > n_pos or max(argnums) >= n_pos):
        raise ValueError(f"Jitted function has {what}={argnums}, "
                         f"but only accepts {n_pos} positional arguments.")


def _validate_argnames(sig, argnames, what):
    """JAX's check of ``static_argnames``/``donate_argnames`` against the signature."""
    valid, invalid, var_kw = set(), set(), False
    for name, p in sig.parameters.items():
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            valid.add(name)
        elif p.kind is p.VAR_KEYWORD:
            var_kw = True
        else:
            invalid.add(name)
    if bad := invalid & set(argnames):
        raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. "
                         "These are positional-only")
    if not var_kw and (bad := set(argnames) - valid):
        raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. "
                         "Function does not take these args.")


class JitWrapped:
    """``jit(fun)``: traces once per argument signature, then runs the staged program."""

    def __init__(self, fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
                 inline, keep_unused):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._inline = inline
        try:
            sig = inspect.signature(fun)
            self._params = list(sig.parameters.values())
        except (TypeError, ValueError):
            sig, self._params = None, []
        self._sig = sig
        # JAX infers static_argnums from static_argnames and back through the signature
        # only when one of them is not given (both given: each is taken as it is).
        infer = static_argnums is None or static_argnames is None
        if static_argnums is None:
            static_argnums = ()
        static_argnums = _ensure_index_tuple(static_argnums)
        if isinstance(static_argnames, str):
            static_argnames = (static_argnames,)
        static_argnames = tuple(static_argnames or ())
        if sig is not None:  # as JAX, when jit wraps the function (not at call time)
            _validate_argnums(sig, static_argnums, "static_argnums")
            _validate_argnames(sig, static_argnames, "static_argnames")
            if donate_argnums is not None:
                _validate_argnums(sig, _ensure_index_tuple(donate_argnums), "donate_argnums")
            if donate_argnames is not None:
                _validate_argnames(sig, (donate_argnames,) if isinstance(donate_argnames, str)
                                   else tuple(donate_argnames), "donate_argnames")
        nums = set(static_argnums)
        names = set(static_argnames)
        kw_pos = [p.name if p.kind == p.POSITIONAL_OR_KEYWORD else None
                  for p in self._params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for i in (static_argnums if infer else ()):
            if 0 <= i < len(kw_pos) and kw_pos[i] is not None:
                names.add(kw_pos[i])
        for nm in (static_argnames if infer else ()):
            if nm in kw_pos:
                nums.add(kw_pos.index(nm))
        self._static_argnums = tuple(sorted(nums))
        self._static_argnames = tuple(sorted(names))
        self._name = getattr(fun, "__name__", "fun")
        from kiln import donation
        self._donate_argnums, self._donate_argnames = donation.resolve_donation(
            self._params, donate_argnums, donate_argnames, self._static_argnums)
        self._donating = bool(self._donate_argnums or self._donate_argnames)
        self._cache, self._fast = _trace_caches(
            fun, (self._static_argnums, self._static_argnames, bool(inline), bool(keep_unused),
                  self._donate_argnums, self._donate_argnames))

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _split(self, args, kwargs):
        nargs = len(args)
        static_pos = []
        dyn_args = []
        for i, a in enumerate(args):
            if i in self._static_argnums or (i - nargs) in self._static_argnums:
                static_pos.append((i, _hashable_static(a, f"at position {i}")))
            else:
                dyn_args.append(a)
        static_kw = []
        dyn_kw = {}
        for k, v in kwargs.items():
            if k in self._static_argnames:
                static_kw.append((k, _hashable_static(v, f"'{k}'")))
            else:
                dyn_kw[k] = v
        return tuple(static_pos), tuple(sorted(static_kw)), dyn_args, dyn_kw

    def _trace(self, args, kwargs, abstract: bool = False):
        """Trace (or find in the cache) for ``args``; with ``abstract`` (``lower``/``trace``)
        a ``ShapeDtypeStruct`` stands for an array of its shape and dtype."""
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        a_flat, a_tree = tree_flatten((tuple(dyn_args), dyn_kw))
        avals = []
        for x in a_flat:
            if isinstance(x, Tracer):
                avals.append(x.aval)
            elif type(x) is Array:
                avals.append(ShapedArray(x._value.shape, x._value.dtype, x.weak_type))
            elif abstract and isinstance(x, ShapeDtypeStruct):
                avals.append(ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype),
                                         getattr(x, "weak_type", False)))
            else:
                if type(x) in _hijax.hi_types and not abstract:
                    raise _HijaxArguments
                _check_arg_jit(x, self._name, self._fun, args, kwargs)
                avals.append(get_aval(x))
        key = (a_tree, tuple(avals), static_pos, static_kw, _compile_log.trace_context())
        entry = self._cache.get(key)
        tconsts = []
        if any(type(a) is AbstractRef for a in avals):
            _check_no_aliased_ref_args(self, a_flat, avals, a_tree)
        if entry is not None and entry.ref_consts:
            tconsts = list(entry.ref_consts)
        if entry is None:
            if config.jax_explain_cache_misses:
                _compile_log.explain_miss(self, key)
            t_start = time.perf_counter()
            store = {}
            nargs = len(args)

            def flat_fun(*xs):
                d_args, d_kw = tree_unflatten(a_tree, list(xs))
                full = []
                it = iter(d_args)
                sp = dict(static_pos)
                for i in range(nargs):
                    full.append(sp[i] if i in sp else next(it))
                kw = dict(d_kw)
                kw.update(dict(static_kw))
                out = self._fun(*full, **kw)
                leaves, tree = tree_flatten(out)
                for leaf in leaves:
                    if not isinstance(leaf, _array_types):
                        raise TypeError(f"function {self._name} traced for jit returned a value "
                                        f"of type {type(leaf)}, which is not a valid JAX type")
                    if isinstance(leaf, Ref):
                        _raise_returned_ref(self, leaf, xs)
                store["tree"] = tree
                return leaves

            with _profiler.span(f"trace {self._name}", "trace", function=self._name):
                jaxpr, consts = staging.trace_to_jaxpr(flat_fun, avals)
            _compile_log.log_trace(self._name, time.perf_counter() - t_start)
            if config.jax_enable_checks:
                check_jaxpr(jaxpr)
            closed, tconsts = staging.split_concrete_consts(jaxpr, consts)
            _profiler.note_source(closed, self._fun, self._name)
            entry = _CacheEntry(closed, store["tree"])
            if tconsts and all(type(c) is Ref for c in tconsts):
                # Closed-over references are operands of the call; they stay the same
                # objects from call to call, so the trace is cached with them.
                _check_no_closed_over_ref_args(self, tconsts, a_flat, a_tree)
                entry.ref_consts = tuple(tconsts)
            if self._donating:
                from kiln import donation
                flags = self._donated_flags(args, kwargs, static_pos, dyn_kw)
                entry.donated, unusable = donation.plan(avals, closed.out_avals, flags)
                entry.pairs = donation.pair_outputs(avals, closed.out_avals, entry.donated)
                donation.warn_unusable(unusable)
            if not tconsts or entry.ref_consts:
                self._cache[key] = entry
                _compile_log.note_trace(self, key)
        return entry, tconsts, a_flat, a_tree

    def _call_inline(self, args, kwargs):
        """``jit(f, inline=True)`` under a jaxpr trace: ``f`` runs on the outer trace, so its
        equations land in the enclosing jaxpr. Its dynamic arguments are still arrays, as in
        a traced call (a Python scalar is a weak Array, a NumPy value a canonical one), and
        its outputs must be JAX types."""
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        a_flat, a_tree = tree_flatten((tuple(dyn_args), dyn_kw))
        conv = []
        for x in a_flat:
            if type(x) in _inline_convert:
                _check_arg_jit(x, self._name)
                x = _to_array(x)
            conv.append(x)
        d_args, d_kw = tree_unflatten(a_tree, conv)
        it = iter(d_args)
        sp = dict(static_pos)
        full = [sp[i] if i in sp else next(it) for i in range(len(args))]
        out = self._fun(*full, **dict(d_kw), **dict(static_kw))
        for leaf in tree_flatten(out)[0]:
            if not isinstance(leaf, _array_types):
                raise TypeError(f"function {self._name} traced for jit returned a value of type "
                                f"{type(leaf)}, which is not a valid JAX type")
        return out

    def _donated_flags(self, args, kwargs, static_pos, dyn_kw) -> list[bool]:
        """Per flat dynamic argument leaf: whether it is donated."""
        static = {i for i, _ in static_pos}
        flags = []
        for i, a in enumerate(args):
            if i in static:
                continue
            d = i in self._donate_argnums or (i - len(args)) in self._donate_argnums
            flags += [d] * len(tree_flatten(a)[0])
        for k in sorted(dyn_kw):
            flags += [k in self._donate_argnames] * len(tree_flatten(dyn_kw[k])[0])
        return flags

    def __call__(self, *args, **kwargs):
        # The API boundary of jit, inline: a wrapper frame would cost more than the
        # try, which is free on the success path (see kiln/_traceback_util.py).
        try:
            if config.jax_disable_jit:
                return self._fun(*args, **kwargs)
            if _dist_state["process_count"] > 1 and _spans_processes(args, kwargs):
                # global arrays of several processes: run the function eagerly (its
                # shard_maps and sharded jits are SPMD calls; kiln.parallel.global_array)
                return self._fun(*args, **kwargs)
            # Fast path: concrete Array arguments only, outside any transformation: one dict
            # lookup, then straight to the backend (no pytree flattening, no bind).
            if not kwargs and not self._donating and type(_current_trace()) is EvalTrace:
                try:
                    key = (config.jax_enable_x64,) + tuple(
                        [(a._value.shape, a._value.dtype, a.weak_type) for a in args])
                except AttributeError:
                    key = None
                hit = self._fast.get(key) if key is not None else None
                if hit is not None and all(type(a) is Array for a in args):
                    closed, out_tree, weaks, exe = hit
                    return self._run_hit(hit, [a._value for a in args], args, kwargs)
            else:
                key = None
            tree_key = None
            if key is None and type(_current_trace()) is EvalTrace:
                # Fast path for pytrees of concrete Arrays (static arguments allowed, no
                # donated leaves): the same lookup keyed by the tree and leaf types.
                tree_key, leaves = self._tree_key(args, kwargs)
                if tree_key is not None:
                    try:
                        hit = self._fast.get(tree_key)
                    except TypeError:       # an unhashable static: _trace says so
                        tree_key = hit = None
                    if hit is not None:
                        return self._run_hit(hit, [a._value for a in leaves], args, kwargs)
            if self._inline and isinstance(_current_trace(), staging.JaxprTrace):
                return self._call_inline(args, kwargs)
            try:
                entry, tconsts, a_flat, _ = self._trace(args, kwargs)
            except _HijaxArguments:
                return self._call_hi(args, kwargs)
            reuse = None
            if entry.pairs and not tconsts and type(_current_trace()) is EvalTrace \
                    and not _extended_io(entry.jaxpr):
                reuse = _donated_reuse(entry, a_flat)
            if reuse:
                # Outputs written into donated inputs' memory (kiln.donation).
                vals = [a._value if type(a) is Array else _to_value(a) for a in a_flat]
                outs = [make_array(o, a.weak_type) for o, a in
                        zip(_cpu.run(entry.jaxpr, vals, self._name, reuse=reuse),
                            entry.jaxpr.out_avals)]
                del vals
            else:
                try:
                    outs = jit_p.bind(*tconsts, *a_flat, jaxpr=entry.jaxpr, name=self._name)
                except FloatingPointError as e:
                    _rerun_deoptimized(self, e, args, kwargs)
            if entry.donated and type(_current_trace()) is EvalTrace:
                from kiln import donation
                donation.delete_donated(a_flat, entry.donated)
            if (key is not None and not tconsts and not self._static_argnums
                    and all(type(a) is Array for a in args) and len(a_flat) == len(args)
                    and len(self._fast) < 64 and not _extended_io(entry.jaxpr)):
                self._fast[key] = (entry.jaxpr, entry.out_tree,
                                   [None if a.dtype == dtypes.float0 else a.weak_type
                                    for a in entry.jaxpr.out_avals], [])
            elif (tree_key is not None and not tconsts and len(self._fast) < 64
                    and not _extended_io(entry.jaxpr)):
                self._fast[tree_key] = (entry.jaxpr, entry.out_tree,
                                        [None if a.dtype == dtypes.float0 else a.weak_type
                                         for a in entry.jaxpr.out_avals], [])
            if entry.float0_out and type(_current_trace()) is EvalTrace:
                outs = user_float0(outs)
            return tree_unflatten(entry.out_tree, outs)
        except Exception as e:
            _traceback_util.filter_exception(e)
            if _traceback_util._BARE_RAISE_KEEPS_OLD_TB:
                raise e  # noqa: B904  (Python 3.10)
            raise

    def _call_hi(self, args, kwargs):
        """A call with hijax arguments (Flax NNX's ``HijaxVariable``): they are passed as
        their low-level values, the traced function gets new hijax values over the traced
        ones, and mutable ones get their final values back after the call (``kiln._hijax``)."""
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        a_flat, a_tree = tree_flatten((tuple(dyn_args), dyn_kw))
        specs, lo_vals = _hijax.lower_args(a_flat)
        lo_flat, lo_tree = tree_flatten(lo_vals)    # (key arrays cross as their data)
        lo_avals = [get_aval(x) for x in lo_flat]
        key = ("hijax", a_tree, tuple(lo_avals), tuple(None if s is None else s.key()
                                                       for s in specs),
               static_pos, static_kw, _compile_log.trace_context())
        try:
            entry = self._cache.get(key)
        except TypeError:       # unhashable quasi-dynamic data: no caching
            key, entry = None, None
        tconsts = []
        if entry is None:
            store = {}
            nargs = len(args)

            def flat_fun(*xs):
                inner = _hijax.raise_args(specs, tree_unflatten(lo_tree, list(xs)))
                d_args, d_kw = tree_unflatten(a_tree, inner)
                full, it, sp = [], iter(d_args), dict(static_pos)
                for i in range(nargs):
                    full.append(sp[i] if i in sp else next(it))
                kw = dict(d_kw)
                kw.update(dict(static_kw))
                out = self._fun(*full, **kw)
                leaves, tree = tree_flatten(out)
                for leaf in leaves:
                    if _hijax.is_hi(leaf):
                        raise NotImplementedError(
                            f"kiln: function {self._name} traced for jit returned a hijax "
                            "value; returning hijax values from jit is not supported")
                    if not isinstance(leaf, _array_types):
                        raise TypeError(f"function {self._name} traced for jit returned a "
                                        f"value of type {type(leaf)}, which is not a valid "
                                        "JAX type")
                finals, extra = [], []
                for s, obj in zip(specs, inner):
                    f = None if s is None else _hijax.final(s, obj)
                    finals.append(None if f is None else (f[0], len(f[1])))
                    if f is not None:
                        extra.extend(f[1])
                extra, store["extra_tree"] = tree_flatten(extra)
                store["tree"], store["n_out"], store["finals"] = tree, len(leaves), finals
                return leaves + extra

            jaxpr, consts = staging.trace_to_jaxpr(flat_fun, lo_avals)
            closed, tconsts = staging.split_concrete_consts(jaxpr, consts)
            entry = _CacheEntry(closed, store["tree"])
            entry.hi = (store["n_out"], store["finals"], store["extra_tree"])
            if key is not None and not tconsts:
                self._cache[key] = entry
        n_out, finals, extra_tree = entry.hi
        outs = jit_p.bind(*tconsts, *lo_flat, jaxpr=entry.jaxpr, name=self._name)
        it = iter(tree_unflatten(extra_tree, outs[n_out:]))
        for s, obj, f in zip(specs, a_flat, finals):
            if f is not None:
                _hijax.write_back(s, obj, f[0], [next(it) for _ in range(f[1])])
        return tree_unflatten(entry.out_tree, outs[:n_out])

    def _run_hit(self, hit, vals, args, kwargs):
        """Run a fast-path cache entry on the flat argument values."""
        closed, out_tree, weaks, exe = hit
        with program_running():
            if exe and _cpu.plain_mode():
                # the cache entry, not the executable: an evicted one reloads (cpu LRU)
                outs = _cpu.run_ready(exe[0], closed, vals, self._name)
            else:
                try:
                    outs = _cpu.run(closed, vals, self._name)
                except FloatingPointError as e:
                    _rerun_deoptimized(self, e, args, kwargs)
                ready = _cpu.ready_entry(closed)
                if ready is not None and not exe:
                    exe.append(ready)
        return tree_unflatten(out_tree, [make_array(o, w) if w is not None else
                                         _float0_value(o) for o, w in zip(outs, weaks)])

    def _tree_key(self, args, kwargs):
        """``(key, leaves)`` of the pytree fast path, or ``(None, None)`` when the call
        cannot take it (a leaf that is not a concrete Array, or a donated leaf)."""
        if self._donating and self._donates_leaves(args, kwargs):
            return None, None
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        leaves, a_tree = tree_flatten((tuple(dyn_args), dyn_kw))
        sig = []
        for a in leaves:
            if type(a) is not Array:
                return None, None
            v = a._value
            sig.append((v.shape, v.dtype, a.weak_type))
        return (_TREE_KEY, config.jax_enable_x64, a_tree, tuple(sig), static_pos,
                static_kw), leaves

    def _donates_leaves(self, args, kwargs) -> bool:
        n = len(args)
        for i, a in enumerate(args):
            if (i in self._donate_argnums or (i - n) in self._donate_argnums) and \
                    tree_flatten(a)[0]:
                return True
        return any(k in self._donate_argnames and tree_flatten(v)[0]
                   for k, v in kwargs.items())

    @_traceback_util.api_boundary
    def lower(self, *args, **kwargs) -> Lowered:
        args, kwargs = _kb.specs_to_keys((args, kwargs))
        entry, tconsts, _, a_tree = self._trace(args, kwargs, abstract=True)
        if tconsts:
            raise TypeError("jit(f).lower() of a function closing over traced values")
        return Lowered(entry.jaxpr, a_tree, entry.out_tree, self._name,
                       donated=entry.donated)

    @_traceback_util.api_boundary
    def trace(self, *args, **kwargs) -> Traced:
        lowered = self.lower(*args, **kwargs)
        return Traced(lowered.jaxpr, lowered)

    def eval_shape(self, *args, **kwargs):
        return eval_shape(self, *args, **kwargs)

    def clear_cache(self):
        self._cache.clear()
        self._fast.clear()

    def _cache_size(self):
        return len(self._cache)


_traceback_util.register_boundary(JitWrapped.__call__)


def _float0_value(v):
    return np.zeros(np.shape(v), dtypes.float0)


def user_float0(leaves):
    """``float0`` values handed to the user are NumPy arrays, as JAX's (a kiln Array of
    ``float0`` would take part in ``jnp`` arithmetic, which JAX's cannot)."""
    return [_float0_value(x) if type(x) is Array and x.dtype == dtypes.float0 else x
            for x in leaves]


def _user_float0_tree(tree):
    leaves, treedef = tree_flatten(tree)
    if not any(type(x) is Array and x.dtype == dtypes.float0 for x in leaves):
        return tree
    return tree_unflatten(treedef, user_float0(leaves))


def _spans_processes(args, kwargs) -> bool:
    """Whether a jit argument is a global array over several processes (eager calls only)."""
    if type(_current_trace()) is not EvalTrace:
        return False
    from kiln.parallel.global_array import any_spans
    return any_spans(tree_flatten((args, kwargs))[0])


def _rerun_deoptimized(wrapped: JitWrapped, err: FloatingPointError, args, kwargs):
    """``jax_debug_nans``/``jax_debug_infs``: the jitted call raised ``err`` (a NaN/Inf in
    its outputs, located op by op on the reference backend). As JAX does, say so and call
    the Python function again without this ``jit``, so that the error is raised again by
    the operation itself, with the user's frames in the traceback; raise that error (or
    ``err`` when the de-optimized call runs clean)."""
    if getattr(err, "_kiln_deoptimized", False) or not (config.jax_debug_nans
                                                         or config.jax_debug_infs):
        raise err
    print("Invalid nan value encountered in the output of a jax.jit function. Calling the "
          "de-optimized version.")
    try:
        wrapped._fun(*args, **kwargs)
    except FloatingPointError as e2:
        e2._kiln_deoptimized = True
        raise e2 from None
    err._kiln_deoptimized = True
    raise err


# Argument types an inlined jit converts to Arrays (Python scalars weak, NumPy canonical).
_inline_convert = frozenset([bool, int, float, complex, np.ndarray]) | frozenset(
    np.sctypeDict.values())


def _to_array(x):
    from kiln.array import to_array
    return to_array(x)


def _check_arg_jit(x, name, fun=None, args=(), kwargs=None):
    if not isinstance(x, _array_types):
        path = _arg_path(x, fun, args, kwargs or {}) if fun is not None else repr(x)
        raise TypeError(f"Error interpreting argument to {name} as an abstract array. The "
                        f"problematic value is of type {type(x)} and was passed to the function "
                        f"at path {path}.\nThis typically means that a jit-wrapped function was "
                        "called with a non-array argument, and this argument was not marked as "
                        "static using the static_argnums or static_argnames parameters of jit.")


def _arg_path(leaf, fun, args, kwargs) -> str:
    """Where ``leaf`` sits in a call's arguments, as JAX names it: the parameter's name
    followed by the key path inside it (``m.activation``, ``b['k'][1]``)."""
    from kiln.tree_util import keystr, tree_flatten_with_path
    names = _arg_names(fun, len(args))
    for group, tree in ((0, tuple(args)), (1, kwargs)):
        for path, x in tree_flatten_with_path(tree)[0]:
            if x is leaf and path:
                head = path[0]
                first = (names[head.idx] if group == 0 else str(head.key))
                return first + keystr(tuple(path[1:]))
    return repr(leaf)


def jit(fun: Callable | None = None, *, in_shardings=None, out_shardings=None,
        static_argnums=None, static_argnames=None, donate_argnums=None, donate_argnames=None,
        keep_unused: bool = False, device=None, backend=None, inline: bool = False,
        abstracted_axes=None, compiler_options=None):
    """Compile ``fun``: trace it to a jaxpr once per argument signature and run that.

    ``static_argnums``/``static_argnames`` mark arguments that are Python values baked
    into the trace (they must be hashable). ``donate_argnums`` is accepted.
    """
    if fun is None:
        return lambda f: jit(f, in_shardings=in_shardings, out_shardings=out_shardings,
                             static_argnums=static_argnums, static_argnames=static_argnames,
                             donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                             keep_unused=keep_unused, inline=inline)
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun}")
    jitted = JitWrapped(fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
                        inline, keep_unused)
    if in_shardings is not None or out_shardings is not None:
        from kiln.parallel.placement import ShardedJit
        return ShardedJit(jitted, in_shardings, out_shardings)
    return jitted


@_traceback_util.api_boundary
def make_jaxpr(fun: Callable, static_argnums=(), axis_env=None, return_shape: bool = False,
               abstracted_axes=None) -> Callable:
    """Returns a function that gives the ClosedJaxpr of ``fun`` for given example args."""
    static_argnums = _ensure_index_tuple(static_argnums)

    @_wraps(fun)
    @_traceback_util.api_boundary
    def make(*args, **kwargs):
        dyn = [a for i, a in enumerate(args) if i not in static_argnums]
        a_flat, a_tree = tree_flatten((tuple(dyn), kwargs))
        for x in a_flat:
            if not isinstance(x, ShapeDtypeStruct):
                _check_arg_jit(x, repr(fun), fun, args, kwargs)
        avals = [x.aval if isinstance(x, ShapeDtypeStruct) else get_aval(x) for x in a_flat]
        store = {}

        def flat_fun(*xs):
            d_args, d_kw = tree_unflatten(a_tree, list(xs))
            it = iter(d_args)
            full = [a if i in static_argnums else next(it) for i, a in enumerate(args)]
            out = fun(*full, **d_kw)
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return leaves

        if axis_env:
            batching.axis_env.extend(axis_env)
        try:
            jaxpr, consts = staging.trace_to_jaxpr(flat_fun, avals)
            if config.jax_enable_checks:    # collectives check their axes are bound
                check_jaxpr(jaxpr)
        finally:
            for _ in axis_env or ():
                batching.axis_env.pop()
        closed = ClosedJaxpr(jaxpr, consts)
        if return_shape:
            shapes = tree_unflatten(store["tree"], [ShapeDtypeStruct(a.shape, a.dtype,
                                                                     weak_type=a.weak_type)
                                                    for a in jaxpr.out_avals])
            return closed, shapes
        return closed

    # Named as in JAX: ``make_jaxpr(f)``.
    if hasattr(fun, "__qualname__"):
        make.__qualname__ = f"make_jaxpr({fun.__qualname__})"
    if hasattr(fun, "__name__"):
        make.__name__ = f"make_jaxpr({fun.__name__})"
    return make


class ShapeDtypeStruct:
    """A shape/dtype description usable in place of an array for tracing."""

    __slots__ = ("shape", "dtype", "sharding", "weak_type")

    def __init__(self, shape, dtype, *, sharding=None, weak_type=False):
        self.shape = tuple(shape)
        self.dtype = (dtypes.canonicalize_dtype(dtype, allow_extended_dtype=True)
                      if dtype != dtypes.float0 else dtype)
        self.sharding = sharding
        self.weak_type = weak_type

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def aval(self):
        return ShapedArray(self.shape, self.dtype, self.weak_type)

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
    avals = [ShapedArray(x.shape, x.dtype, getattr(x, "weak_type", False))
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


# ================================================================================================
# Misc
# ================================================================================================

def block_until_ready(x):
    """Wait for every array in the pytree ``x`` (kiln's CPU arrays are always ready)."""
    return tree_map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, x)


def effects_barrier() -> None:
    """Wait until every effect issued so far (``debug.print``, ``debug.callback``,
    ``io_callback``, ...) has run, as ``jax.effects_barrier``. kiln runs effects
    synchronously, in program order, while a computation executes, so none is pending
    when this is called and it returns at once."""
    return None


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
    """Put the pytree ``x`` on ``device`` as kiln Arrays.

    ``device`` may be a Device, a Sharding (``NamedSharding(mesh, P(...))``: the
    arrays are laid out over the mesh's devices), or a tree prefix of those."""
    from kiln.array import to_array
    if device is not None and not _is_default_device(device):
        from kiln.parallel.placement import place_tree
        return place_tree(x, device, "device_put")

    def put(a):
        if isinstance(a, Tracer):
            return a
        if type(a) is Array:
            return a
        return to_array(np.asarray(a)) if not isinstance(a, (int, float, complex, bool)) \
            else to_array(a)
    return tree_map(put, x)


def _is_default_device(d) -> bool:
    from kiln.devices import Device, devices
    return isinstance(d, Device) and d == devices()[0]


def device_get(x):
    """Fetch the pytree ``x`` as NumPy arrays (arrays of an extended dtype, which have no
    NumPy form, come back as they are, as in JAX)."""
    from kiln._extended import EValue
    return tree_map(lambda a: np.asarray(a) if isinstance(a, Array)
                    and type(a._value) is not EValue else a, x)


def _unused(*_a: Any) -> None:
    return None


_ = (Sequence, tree_structure, _unused)


# ================================================================================================
# Context helpers
# ================================================================================================

class ensure_compile_time_eval(contextlib.ContextDecorator):
    """Within this context, operations whose operands are all concrete run eagerly even
    inside ``jit``, ``scan`` and other staging transformations (JAX's eager constant
    folding): their results are concrete and can drive Python control flow. Operations on
    traced values are still traced, exactly as outside the context.

    Example::

      @jit
      def f(x):
        with ensure_compile_time_eval():
          y = jnp.sin(3.0)          # concrete: usable in `if y > 0:`
          z = x * 2                 # traced as usual
        return z.sum() + y
    """

    def __enter__(self):
        from kiln.core import trace as core
        self._cm = core.set_eager_folding(True)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


class named_scope:
    """Enter a named scope: equations staged inside it carry the name in their name stack
    (``eqn.source_info.name_stack``, ``outer/inner``), as in JAX. Usable as a decorator."""

    def __init__(self, name: str):
        if not isinstance(name, str):
            raise TypeError("named_scope name argument must be a string.")
        self.name = name

    def __enter__(self):
        from kiln.core import source_info
        self._cm = source_info.extend_name_stack(self.name)
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)

    def __call__(self, fun: Callable) -> Callable:
        """Used as a decorator: ``fun`` runs inside this scope (as JAX allows)."""
        @_wraps(fun)
        def wrapped(*args, **kwargs):
            with named_scope(self.name):
                return fun(*args, **kwargs)
        return wrapped


def named_call(fun: Callable, *, name: str | None = None) -> Callable:
    """``fun`` running inside :class:`named_scope` ``name`` (default: ``fun.__name__``): the
    equations it stages carry the name, as JAX's ``named_call`` (Haiku names its modules
    this way)."""
    if name is None:
        name = fun.__name__
    return named_scope(name)(fun)
