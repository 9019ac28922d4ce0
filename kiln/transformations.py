"""The differentiation and vectorization transformations: ``jvp``, ``linearize``, ``vjp``,
``grad``, ``value_and_grad``, ``jacfwd``, ``jacrev``, ``hessian``, ``linear_transpose``
and ``vmap``.

This module handles their arguments (pytrees, argnums, in/out axes, float0 outputs) and
error messages; the work is done by ``kiln.interpreters.ad`` and ``kiln.interpreters.batching``.
"""
from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable

import numpy as np

from kiln import _key_boundary as _kb
from kiln import _traceback_util, dtypes
from kiln import tree_util as _public_tree
from kiln._physical_tree import (
    Partial,
    tree_flatten,
    tree_unflatten,
)
from kiln._physical_tree import is_transform_node as _is_key
from kiln._wraps import check_callable as _check_callable
from kiln._wraps import wraps as _wraps
from kiln.array import Array, make_array, to_array
from kiln.core.avals import ShapedArray
from kiln.core.ref import AbstractRef, Ref
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero
from kiln.lax.control import loops as _loops
from kiln.shape_eval import ShapeDtypeStruct

logger = logging.getLogger("kiln")

_array_types = (Array, Tracer, np.ndarray, np.generic, int, float, complex, bool, Ref)


def _is_jax_value(x) -> bool:
    """Whether ``x`` can be a transformed function's output leaf: an array, a tracer, a
    scalar, a typed key array, or an object with ``__jax_array__``."""
    if isinstance(x, _array_types) and not isinstance(x, (np.str_, np.bytes_)):
        return True
    keys = sys.modules.get("kiln.random._keys")
    return ((keys is not None and isinstance(x, keys.PRNGKeyArray)) or _is_key(x)
            or hasattr(x, "__jax_array__"))


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
                raise TypeError("expected function with aux output to return a two-element "
                                f"tuple, but got type {type(out)} with value {out!r}")
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
    p_flat_arrays = ad.scalars_to_arrays(p_flat)
    p_out, out_tree, lin, aux = _vjp_flat(fun, p_flat_arrays, p_tree, has_aux)
    out_avals = [get_aval(o) for o in p_out]
    in_avals = [get_aval(p) for p in p_flat]

    out_keys = _public_tree.tree_leaves(tree_unflatten(out_tree, p_out))
    # The residuals are the returned function's pytree leaves (it is a ``Partial`` over
    # them), as JAX's: it can be returned from ``jit`` or stored as a custom_vjp residual.
    lin_jaxpr, lin_in, lin_out = lin.jaxpr, lin.in_avals, lin.out_avals

    @_traceback_util.api_boundary
    def vjp_fun(residuals, ct):
        lin = ad.LinearFunction(lin_jaxpr, list(residuals), lin_in, lin_out)
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
        res = [_zeros_for(ct, a, p) for ct, a, p in zip(cts_in, in_avals, p_flat)]
        return _user_float0_tree(_kb.key_tangents_to_float0(tree_unflatten(p_tree, res)))

    out = tree_unflatten(out_tree, p_out)
    f = VJP.split(vjp_fun, lin_jaxpr, p_flat_arrays, list(lin.consts))
    if has_aux:
        return out, f, aux
    return out, f


class NotNeeded:
    """Stands in ``VJP.args_res`` for a primal argument the backward pass does not use
    (an empty pytree node, as JAX's)."""

    def __repr__(self):
        return "NotNeeded()"


_public_tree.register_pytree_node(NotNeeded, lambda x: ((), None), lambda _a, _c: NotNeeded())


class VJP:
    """The backward function ``vjp`` returns (JAX's ``api.VJP``): call it on output
    cotangents. Its residuals are its pytree leaves, in two lists: ``args_res``, one entry
    per primal argument leaf (the argument itself when the backward pass uses it, else a
    :class:`NotNeeded`; it may be replaced, e.g. by the same arguments passed again), and
    ``opaque_residuals``, the values computed in the forward pass. ``jaxpr`` is the linear
    jaxpr (its constants are the residuals in the order it uses them)."""

    __slots__ = ("fun", "jaxpr", "spec", "args_res", "opaque_residuals", "__weakref__")

    def __init__(self, fun, jaxpr, spec, args_res, opaque_residuals):
        self.fun = fun
        self.jaxpr = jaxpr
        self.spec = spec        # per residual: (True, argument index) or (False, opaque index)
        self.args_res = list(args_res)
        self.opaque_residuals = list(opaque_residuals)

    @classmethod
    def split(cls, fun, jaxpr, primals, residuals):
        ids = {id(p): i for i, p in enumerate(primals)}
        spec, opaque, used = [], [], set()
        for r in residuals:
            i = ids.get(id(r))
            if i is not None:
                spec.append((True, i))
                used.add(i)
            else:
                spec.append((False, len(opaque)))
                opaque.append(r)
        args_res = [p if i in used else NotNeeded() for i, p in enumerate(primals)]
        return cls(fun, jaxpr, tuple(spec), args_res, opaque)

    def _residuals(self):
        args = ad.scalars_to_arrays(list(self.args_res))
        return [args[i] if primal else self.opaque_residuals[i] for primal, i in self.spec]

    def __call__(self, ct, *extra):
        if extra:
            raise TypeError(f"The function returned by `jax.vjp` applied to {self.fun} was "
                            f"called with {len(extra) + 1} arguments, but functions "
                            "returned by `jax.vjp` must be called with a single argument "
                            "corresponding to the single value returned by the function "
                            "being differentiated.")
        return self.fun(self._residuals(), ct)


_public_tree.register_pytree_node(
    VJP, lambda v: ((v.args_res, v.opaque_residuals), (v.fun, v.jaxpr, v.spec)),
    lambda aux, ch: VJP(aux[0], aux[1], aux[2], ch[0], ch[1]))


def _zeros_for(ct, primal_aval, primal=None):
    """Instantiate a symbolic zero cotangent; integer primals get float0 zeros. The
    cotangent of a primal whose type has a sharding (``primal`` given) is laid out as
    its cotangent type (JAX's: reduced and unreduced mesh axes swapped)."""
    if type(ct) is Zero:
        ta = ad.tangent_aval(primal_aval)
        if type(ta) is AbstractRef:     # a new reference of zeros, as JAX
            return ad.zeros_like_aval(ta)
        ct = make_array(np.zeros(ta.shape, ta.dtype), False)
    if primal is not None and get_aval(ct).dtype != dtypes.float0:
        from kiln.parallel.placement import ct_layout
        return ct_layout(ct, primal)
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
    _check_callable(fun)
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
        g_flat = [_match_input(_zeros_for(ct, get_aval(x), x), get_aval(x))
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
    _check_callable(fun)
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
    _check_callable(fun)
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
        jac_leaves = [[_like(b, get_aval(p)) for b in _fwd_jac_leaf(t, d, n, avals, sizes)]
                      for p, t, d in zip(outs[:n_out], outs[k:k + n_out], dims[k:k + n_out])]
        jac = tree_unflatten(tree, [_split_in(j, d_tree, argnums) for j in jac_leaves])
        if has_aux:
            aux_vals = [_unmapped(p, d) for p, d in zip(outs[n_out:k], dims[n_out:k])]
            return jac, _finish_aux(aux_cell, aux_vals)
        return jac

    return jacfun


def _like(x, aval):
    """A Jacobian block cast to the dtype and weak type of the value it is taken against
    (JAX's: ``jacrev`` blocks as the input, ``jacfwd`` blocks as the output; a complex
    block of a real value keeps its real part). Only inexact blocks of inexact values."""
    from kiln import lax
    a = get_aval(x)
    if a.dtype.kind not in "fc" or getattr(aval.dtype, "kind", "") not in "fc":
        return x
    if a.dtype.kind == "c" and aval.dtype.kind != "c":
        x = lax.real(x)
    return lax._convert_element_type(x, aval.dtype, aval.weak_type)


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
    _check_callable(fun)
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
                leaves.append(_like(lax.reshape(blk, oa.shape + ia.shape), ia))
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
def _explicit_batch_axes(flat, axes):
    """The mesh axes of type ``Explicit`` that split the mapped dimension of the
    arguments (their types' shardings; JAX: they act as ``spmd_axis_name``), or None."""
    from kiln.parallel.placement import arg_type_sharding
    found = None
    for x, ax in zip(flat, axes):
        if ax is None:
            continue
        t = arg_type_sharding(x) if isinstance(x, (Array, Tracer)) else None
        if t is None:
            continue
        names = t.spec.axes_of(ax)
        if names:
            found = names[0] if len(names) == 1 else tuple(names)
            break
    return found


def vmap(fun: Callable, in_axes=0, out_axes=0, axis_name=None, axis_size=None,
         spmd_axis_name=None) -> Callable:
    """Vectorizing map: ``fun`` mapped over array axes ``in_axes`` of its arguments."""
    _check_callable(fun)
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
            if not a_flat:      # no array at all (JAX's two messages)
                raise ValueError(
                    "vmap wrapped function must be passed at least one argument containing "
                    "an array or axis_size must be specified, got empty *args="
                    f"{args} and **kwargs={kwargs}")
            raise ValueError("vmap must have at least one non-None value in in_axes or "
                             "axis_size must be specified")
        if len(sizes_set) > 1:
            raise ValueError(_inconsistent_sizes_message(
                fun, args, kwargs, [None if ax is None else get_aval(x).shape[ax]
                                    for x, ax in zip(a_flat, norm_axes)],
                norm_axes, axis_size))
        size = sizes_set.pop()
        store = {}

        def flat_fun(*xs):
            a, k = tree_unflatten(a_tree, list(xs))
            out = fun(*a, **k)
            leaves, tree = tree_flatten(out)
            for leaf in leaves:
                if not _is_jax_value(leaf):
                    raise TypeError(f"Output from batched function {leaf!r} with type "
                                    f"{type(leaf)} is not a valid JAX type")
            store["tree"] = tree
            return leaves

        spmd = spmd_axis_name
        explicit = _explicit_batch_axes(a_flat, norm_axes)
        if explicit is not None:
            as_t = (lambda a: tuple(a) if isinstance(a, (tuple, list)) else (a,))  # noqa: E731
            if spmd is not None and as_t(spmd) != as_t(explicit):
                raise ValueError("Only one of spmd_axis_name or arrays sharded on `Explicit` "
                                 f"mesh axis type is allowed. Got spmd_axis_name="
                                 f"{as_t(spmd)} and arrays sharded on explicit_mesh_axis="
                                 f"{as_t(explicit)}")
            spmd = explicit
        axis_data = batching.AxisData(axis_name, size, spmd, explicit=explicit is not None)
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
                    # JAX's words first (its axis canonicalization), then which axis
                    raise ValueError(f"axis {want} is out of bounds for array of dimension "
                                     f"{nd} (vmap out_axes{_out_path(tree, k)}: the output "
                                     f"has rank {nd} with the mapped axis)")
                final.append(batching.matchaxis(o, d, want % nd, size))
        return tree_unflatten(tree, final)

    return vmapped



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


_loops.set_vmap(vmap)      # lax.map(batch_size=...) and batched dynamic_update_slice


def _inconsistent_sizes_message(fun, args, kwargs, sizes, axes, axis_size) -> str:
    """JAX's message for mapped axes of different sizes: the most common size first, with
    an example argument (``argument x1``, ``args[2]`` past the signature, ``kwargs['a']``)
    and its type."""
    import collections
    import inspect

    from kiln.tree_util import keystr, tree_flatten_with_path
    try:
        params = list(inspect.signature(fun).bind(*args, **kwargs).signature.parameters)
    except (TypeError, ValueError):
        params = None

    def arg_name(path):
        i = path[0].idx
        if params is None or i >= len(params):
            return f"args{keystr(path)}"
        return f"argument {params[i]}" + (keystr(path[1:]) if len(path) > 1 else "")

    def type_of(x):
        try:
            return get_aval(x).str_short(short_dtypes=False)
        except TypeError:
            return "unknown"

    where = ([f"{arg_name(p)} of type {type_of(x)}"
              for p, x in tree_flatten_with_path(tuple(args))[0]]
             + [f"kwargs{keystr(p)} of type {type_of(x)}"
                for p, x in tree_flatten_with_path(kwargs)[0]])
    counts = collections.Counter(s for s in sizes if s is not None).most_common()
    lines = ["vmap got inconsistent sizes for array axes to be mapped:\n"]
    if axis_size is not None:
        lines.append(f"  * the `axis_size` argument was {axis_size};\n")
    for k, (sz, ct) in enumerate(counts):
        i = sizes.index(sz)
        if ct == 1:
            lines.append(f"  * one axis had size {sz}: axis {axes[i]} of {where[i]};\n")
        else:
            some = "most" if k == 0 else "some"
            lines.append(f"  * {some} axes ({ct} of them) had size {sz}, e.g. axis {axes[i]} "
                         f"of {where[i]};\n")
    return "".join(lines)[:-2]
