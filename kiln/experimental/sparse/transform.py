"""``jax.experimental.sparse.sparsify``: run a function written for dense arrays on sparse
ones.

How: the function is traced to a jaxpr with each sparse argument standing in as a dense
array of its shape and dtype; the jaxpr is then evaluated with the real arguments. An
equation none of whose operands is sparse is bound as usual; one with a sparse operand goes
to the sparse rule of its primitive (``sparse_rules``), which computes the result with the
BCOO operations (BCSR operands go through BCOO and come back as BCSR when the result has two
sparse dimensions). ``jit`` and custom-derivative calls are entered and their bodies
evaluated the same way. A primitive with no sparse rule raises ``NotImplementedError``
naming it, as JAX's ``sparsify`` does.
"""
from __future__ import annotations

import functools

import numpy as np

from kiln.experimental.sparse._base import JAXSparse
from kiln.experimental.sparse._bcoo_core import BCOO

__all__ = ["sparse_rules", "sparsify"]

#: primitive name -> ``rule(*operands, **params)``; operands are dense arrays or BCOO
#: arrays (at least one sparse); the result is one value (a list for primitives with
#: several results).
sparse_rules: dict = {}


def _is_sparse(x) -> bool:
    return isinstance(x, JAXSparse)


def sparsify(f, use_tracer: bool = False):
    """``f`` made to accept sparse arrays (BCOO, BCSR) wherever it accepts dense ones.

    Args:
      f: a function of arrays built from ``kiln.numpy``/``kiln.lax`` operations.
      use_tracer: accepted for JAX's signature; kiln always uses the jaxpr interpreter.

    Returns:
      A function with ``f``'s signature returning sparse arrays where the computation
      kept them sparse (dense arrays elsewhere).
    """
    del use_tracer

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        from kiln.jitting import make_jaxpr
        from kiln.shape_eval import ShapeDtypeStruct
        from kiln.tree_util import tree_flatten, tree_unflatten
        leaves, tree = tree_flatten(args, is_leaf=_is_sparse)
        if not any(_is_sparse(x) for x in leaves):
            return f(*args, **kwargs)
        stand_ins = [ShapeDtypeStruct(tuple(x.shape), x.dtype) if _is_sparse(x) else x
                     for x in leaves]
        out_tree = []

        def flat_f(*xs):
            out = f(*tree_unflatten(tree, list(xs)), **kwargs)
            flat_out, t = tree_flatten(out)
            out_tree.append(t)
            return flat_out
        closed = make_jaxpr(flat_f)(*stand_ins)
        outs = eval_sparse(closed.jaxpr, closed.consts, leaves)
        return tree_unflatten(out_tree[0], outs)
    return wrapped


def eval_sparse(jaxpr, consts, args) -> list:
    """Evaluate ``jaxpr`` with ``args`` that may be sparse (see the module docstring)."""
    from kiln.core.jaxpr import Literal
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        prim = eqn.primitive
        if any(_is_sparse(x) for x in invals):
            outs = _apply_rule(prim, invals, eqn.params)
        else:
            outs = prim.bind(*invals, **eqn.params)
        if not prim.multiple_results:
            outs = [outs]
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _apply_rule(prim, invals, params):
    from kiln.experimental.sparse.bcsr import BCSR
    name = prim.name
    sub = _sub_jaxpr(name, params)
    if sub is not None:
        outs = eval_sparse(sub.jaxpr, sub.consts, invals)
        return outs if prim.multiple_results else outs[0]
    rule = sparse_rules.get(name)
    if rule is None:
        raise NotImplementedError(f"sparse rule for {name} is not implemented.")
    had_bcsr = any(isinstance(x, BCSR) for x in invals)
    invals = [x.to_bcoo() if isinstance(x, BCSR) else x for x in invals]
    if any(_is_sparse(x) and not isinstance(x, BCOO) for x in invals):
        raise NotImplementedError(f"sparse rule for {name} with operands of type "
                                  f"{[type(x).__name__ for x in invals]}.")
    if getattr(rule, "needs_primitive", False):
        out = rule(prim, *invals, **params)
    else:
        out = rule(*invals, **params)
    if had_bcsr:
        def back(x):
            return BCSR.from_bcoo(x) if isinstance(x, BCOO) and x.n_sparse == 2 else x
        out = [back(o) for o in out] if prim.multiple_results else back(out)
    return out


def _sub_jaxpr(name, params):
    if name in ("jit", "pjit", "closed_call", "core_call"):
        return params.get("jaxpr") or params.get("call_jaxpr")
    if name in ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"):
        return params.get("call_jaxpr") or params.get("fun_jaxpr")
    return None


# -- rules -----------------------------------------------------------------------------------

def _jnp():
    import kiln.numpy as jnp
    return jnp


def _rule(*names):
    def register(fn):
        for n in names:
            sparse_rules[n] = fn
        return fn
    return register


def _dedupe(mat: BCOO) -> BCOO:
    if mat.unique_indices:
        return mat
    from kiln.experimental.sparse._bcoo_dedupe import bcoo_sum_duplicates
    return bcoo_sum_duplicates(mat, nse=mat.nse)


def _unary(linear):
    def rule(prim, x, **params):
        mat = x if linear else _dedupe(x)
        return mat._with_data(prim.bind(mat.data, **params))
    rule.needs_primitive = True
    return rule


# Zero-preserving elementwise operations act on the stored values; the nonlinear ones sum
# duplicates first.
for _name in ("neg", "convert_element_type", "real", "imag", "conj", "copy", "copy_p",
              "reduce_precision"):
    sparse_rules[_name] = _unary(True)
for _name in ("abs", "sign", "sin", "sinh", "tan", "tanh", "asin", "asinh", "atan", "atanh",
              "sqrt", "cbrt", "expm1", "log1p", "integer_pow", "round", "floor", "ceil",
              "erf", "erf_inv", "square"):
    sparse_rules[_name] = _unary(False)


@_rule("mul")
def _mul(x, y):
    from kiln.experimental.sparse._bcoo_arith import multiply
    return multiply(x, y)


@_rule("div")
def _div(x, y):
    if _is_sparse(y):
        raise NotImplementedError("Division by a sparse array is not implemented because it "
                                  "would result in dense output. If this is your intent, "
                                  "use sparse.todense() to convert your arguments to a "
                                  "dense array.")
    from kiln.experimental.sparse._bcoo_arith import bcoo_multiply_dense
    return x._with_data(bcoo_multiply_dense(x._with_data(x.data), 1 / _jnp().asarray(y)))


@_rule("add", "add_any")
def _add(x, y):
    from kiln.experimental.sparse._bcoo_arith import add
    return add(x, y)


@_rule("sub")
def _sub(x, y):
    from kiln.experimental.sparse._bcoo_arith import add
    if _is_sparse(x) and _is_sparse(y):
        return add(x, -y)
    raise NotImplementedError("Subtraction between sparse and dense array.")


@_rule("dot_general")
def _dot_general(lhs, rhs, *, dimension_numbers, precision=None,
                 preferred_element_type=None, out_sharding=None, **_):
    from kiln.experimental.sparse._bcoo_dot import bcoo_dot_general
    return bcoo_dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                            preferred_element_type=preferred_element_type)


@_rule("reduce_sum")
def _reduce_sum(x, *, axes, **_):
    from kiln.experimental.sparse._bcoo_struct import bcoo_reduce_sum
    return bcoo_reduce_sum(x, axes=axes)


@_rule("transpose")
def _transpose(x, *, permutation):
    from kiln.experimental.sparse._bcoo_struct import bcoo_transpose
    return bcoo_transpose(x, permutation=permutation)


@_rule("reshape")
def _reshape(x, *, new_sizes, dimensions=None, **_):
    from kiln.experimental.sparse._bcoo_struct import bcoo_reshape
    return bcoo_reshape(x, new_sizes=new_sizes, dimensions=dimensions)


@_rule("squeeze")
def _squeeze(x, *, dimensions):
    from kiln.experimental.sparse._bcoo_struct import bcoo_squeeze
    return bcoo_squeeze(x, dimensions=dimensions)


@_rule("broadcast_in_dim")
def _broadcast_in_dim(x, *dyn, shape, broadcast_dimensions, sharding=None):
    from kiln.experimental.sparse._bcoo_layout import bcoo_broadcast_in_dim
    return bcoo_broadcast_in_dim(x, shape=shape, broadcast_dimensions=broadcast_dimensions)


@_rule("concatenate")
def _concatenate(*operands, dimension):
    from kiln.experimental.sparse._bcoo_layout import bcoo_concatenate
    if not all(_is_sparse(x) for x in operands):
        raise NotImplementedError("concatenation between sparse and dense arrays.")
    return bcoo_concatenate(operands, dimension=dimension)


@_rule("rev")
def _rev(x, *, dimensions):
    from kiln.experimental.sparse._bcoo_layout import bcoo_rev
    return bcoo_rev(x, dimensions)


@_rule("slice")
def _slice(x, *, start_indices, limit_indices, strides):
    from kiln.experimental.sparse._bcoo_layout import bcoo_slice
    return bcoo_slice(x, start_indices=start_indices, limit_indices=limit_indices,
                      strides=strides)


@_rule("dynamic_slice")
def _dynamic_slice(x, *starts, slice_sizes):
    from kiln.experimental.sparse._bcoo_layout import bcoo_dynamic_slice
    if any(_is_sparse(s) for s in starts):
        raise NotImplementedError("dynamic_slice with sparse start indices.")
    return bcoo_dynamic_slice(x, starts[:x.ndim], slice_sizes=slice_sizes)


@_rule("gather")
def _gather(x, idx, *, dimension_numbers, slice_sizes, unique_indices=False,
            indices_are_sorted=False, mode=None, fill_value=None):
    from kiln.experimental.sparse._bcoo_layout import bcoo_gather
    if _is_sparse(idx):
        raise NotImplementedError("gather with sparse indices.")
    return bcoo_gather(x, idx, dimension_numbers, slice_sizes,
                       unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                       mode=mode, fill_value=fill_value)


@_rule("conv_general_dilated")
def _conv(lhs, rhs, **params):
    from kiln.experimental.sparse._bcoo_layout import bcoo_conv_general_dilated
    keep = ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "dimension_numbers",
            "feature_group_count", "batch_group_count", "precision",
            "preferred_element_type")
    return bcoo_conv_general_dilated(lhs, rhs, **{k: params[k] for k in keep if k in params})


@_rule("todense")
def _todense(*bufs, tree):
    from kiln.experimental.sparse.api import todense
    from kiln.tree_util import tree_unflatten
    return todense(tree_unflatten(tree, list(bufs)))


@_rule("pow")
def _pow(x, y):
    if _is_sparse(y):
        raise NotImplementedError("pow with a sparse exponent.")
    y = np.asarray(y) if not hasattr(y, "aval") else y
    from kiln.experimental.sparse._bcoo_arith import power
    return power(x, y)
