"""The sparse rules of ``sparsify`` for elementwise, arithmetic, structural and contraction
primitives (control flow: ``_sparsify_control.py``).

A rule is ``rule(spenv, *spvalues, **params) -> sequence of SparsifyValue``; it is looked up
in ``sparse_rules_bcsr`` when an operand is BCSR, else in ``sparse_rules_bcoo`` when an
operand is BCOO (an equation of dense operands is bound as usual). A primitive with no rule
raises ``NotImplementedError`` naming it; for one whose result would be dense (``exp``,
``cos``, comparisons, ...) the message says so, as JAX's.

What stays sparse, as in JAX:

- unary operations that map zero to zero act on the stored values (the nonlinear ones sum
  duplicate coordinates first; the linear ones, ``neg``, ``real``, ``imag``, ``conj``,
  ``copy``, keep the pattern buffers);
- ``integer_pow`` with a positive exponent; sparse times dense or scalar; sparse divided by
  dense or scalar; sparse plus or minus sparse (the stored elements concatenated, or the
  data added when both share their indices); ``dot_general``; ``reduce_sum``; the
  structural primitives (``transpose``, ``reshape``, ``squeeze``, ``broadcast_in_dim``,
  ``concatenate``, ``rev``, ``slice``, ``dynamic_slice``, ``gather``), and
  ``conv_general_dilated``; ``todense`` gives the dense array;
- sparse plus dense of the result's shape is dense; sparse minus dense, division by a
  sparse array and every other combination raise ``NotImplementedError``.

BCSR operands have rules for the unary operations, ``integer_pow``, ``dot_general``,
``broadcast_in_dim``, ``concatenate`` and ``todense`` (and the calls and custom
derivatives); any other primitive raises, as in JAX.
"""
from __future__ import annotations

from kiln import lax
from kiln.experimental.sparse._sparsify_env import (
    arrays_to_spvalues,
    spvalues_to_arrays,
)
from kiln.interpreters.ad import add_any_p

__all__ = ["densifying_primitives", "raise_unimplemented_primitive", "sparse_rules_bcoo",
           "sparse_rules_bcsr"]

#: primitive -> rule, for equations with a BCOO operand (and none BCSR).
sparse_rules_bcoo: dict = {}
#: primitive -> rule, for equations with a BCSR operand.
sparse_rules_bcsr: dict = {}

# Unary operations with f(0) == 0 that commute with summing duplicates: they act on the
# stored values without deduplicating.
_zero_preserving_linear_unary = [lax.conj_p, lax.copy_p, lax.imag_p, lax.neg_p, lax.real_p,
                                 lax.stop_gradient_p]
# Unary operations with f(0) == 0: duplicates are summed first.
_zero_preserving_unary = [
    lax.abs_p, lax.asin_p, lax.asinh_p, lax.atan_p, lax.atanh_p, lax.bessel_i1e_p,
    lax.expm1_p, lax.log1p_p, lax.sign_p, lax.sin_p, lax.sinh_p, lax.sqrt_p, lax.square_p,
    lax.tan_p, lax.tanh_p, lax.convert_element_type_p,
    # kiln also keeps these sparse (JAX raises for them): zero maps to zero.
    lax.cbrt_p, lax.ceil_p, lax.floor_p, lax.round_p, lax.erf_p, lax.erf_inv_p,
    lax.reduce_precision_p,
]

#: Primitives whose sparse rule would produce a dense result: their error says so.
densifying_primitives = [lax.acos_p, lax.acosh_p, lax.bessel_i0e_p, lax.cos_p, lax.cosh_p,
                         lax.eq_p, lax.exp_p, lax.ge_p, lax.gt_p, lax.le_p, lax.lt_p,
                         lax.log_p, lax.ne_p, lax.xor_p]


def raise_unimplemented_primitive(prim):
    """JAX's ``NotImplementedError`` for a primitive without a sparse rule."""
    if prim in densifying_primitives:
        raise NotImplementedError(
            f"sparse rule for {prim.name} is not implemented because it would result in "
            "dense output. If this is your intent, use sparse.todense() to convert your "
            "arguments to dense matrices.")
    raise NotImplementedError(f"sparse rule for {prim.name} is not implemented.")


def _register(*prims, bcsr=False):
    def register(rule):
        for p in prims:
            sparse_rules_bcoo[p] = rule
            if bcsr:
                sparse_rules_bcsr[p] = rule
        return rule
    return register


# -- unary -----------------------------------------------------------------------------------

def ensure_unique_indices(spenv, spvalue):
    """``spvalue``, or a copy whose duplicate coordinates are summed (zeros kept)."""
    if spvalue.is_dense() or spvalue.unique_indices:
        return spvalue
    arr = spvalues_to_arrays(spenv, spvalue)
    arr = arr.sum_duplicates(nse=arr.nse, remove_zeros=False)
    return arrays_to_spvalues(spenv, arr)


def _unary_rule(prim, linear: bool):
    def rule(spenv, x, **params):
        if not linear:
            x = ensure_unique_indices(spenv, x)
        out = prim.bind(spenv.data(x), **params)
        return (spenv.sparse(x.shape, out, indices_ref=x.indices_ref,
                             indptr_ref=x.indptr_ref, indices_sorted=x.indices_sorted,
                             unique_indices=x.unique_indices),)
    return rule


for _p in _zero_preserving_linear_unary:
    _register(_p, bcsr=True)(_unary_rule(_p, linear=True))
for _p in _zero_preserving_unary:
    _register(_p, bcsr=True)(_unary_rule(_p, linear=False))


@_register(lax.integer_pow_p, bcsr=True)
def _integer_pow(spenv, x, *, y):
    if y <= 0:
        raise NotImplementedError(
            f"sparse rule for integer_pow with non-positive exponent {y} is not implemented "
            "because it would result in dense output. If this is your intent, use "
            "sparse.todense() to convert your argument to a dense array.")
    return _unary_rule(lax.integer_pow_p, linear=False)(spenv, x, y=y)


# -- rules that call a sparse operation on the arrays -----------------------------------------

def _standard(fn, multiple_results=False):
    def rule(spenv, *spvalues, **params):
        out = fn(*spvalues_to_arrays(spenv, spvalues), **params)
        return arrays_to_spvalues(spenv, list(out) if multiple_results else [out])
    return rule


def _bcoo_broadcast_in_dim(x, *dyn, shape, broadcast_dimensions, sharding=None):
    from kiln.experimental.sparse._bcoo_layout import bcoo_broadcast_in_dim
    if dyn:
        raise NotImplementedError("sparse rule for broadcast_in_dim with dynamic shapes.")
    return bcoo_broadcast_in_dim(x, shape=shape, broadcast_dimensions=broadcast_dimensions)


def _bcsr_broadcast_in_dim(x, *dyn, shape, broadcast_dimensions, sharding=None):
    from kiln.experimental.sparse.bcsr import bcsr_broadcast_in_dim
    if dyn:
        raise NotImplementedError("sparse rule for broadcast_in_dim with dynamic shapes.")
    return bcsr_broadcast_in_dim(x, shape=shape, broadcast_dimensions=broadcast_dimensions)


def _bcoo_concatenate(*operands, dimension):
    from kiln.experimental.sparse._bcoo_layout import bcoo_concatenate
    return bcoo_concatenate(operands, dimension=dimension)


def _bcsr_concatenate(*operands, dimension):
    from kiln.experimental.sparse.bcsr import bcsr_concatenate
    return bcsr_concatenate(operands, dimension=dimension)


def _bcsr_reshape(x, *dyn, new_sizes, dimensions=None, **_):
    """A reshape that only inserts axes of size 1 (``jnp.stack``, ``expand_dims``, ``x[None]``)
    as ``bcsr_broadcast_in_dim``; JAX stacks BCSR arrays the same way."""
    from kiln.experimental.sparse.bcsr import bcsr_broadcast_in_dim
    old, new = tuple(x.shape), tuple(int(d) for d in new_sizes)
    kept, j = [], 0
    for i, size in enumerate(new):
        if j < len(old) and size == old[j]:
            kept.append(i)
            j += 1
        elif size != 1:
            break
    if dyn or dimensions is not None or j != len(old) or len(new) != len(kept) + sum(
            1 for i, s in enumerate(new) if i not in kept and s == 1):
        raise NotImplementedError("sparse rule for reshape of a BCSR array is not implemented "
                                  "except for inserting axes of size 1; convert it with "
                                  ".to_bcoo() first.")
    return bcsr_broadcast_in_dim(x, shape=new, broadcast_dimensions=tuple(kept))


def _bcoo_dot_general(lhs, rhs, *, dimension_numbers, precision=None,
                      preferred_element_type=None, out_sharding=None, **_):
    from kiln.experimental.sparse._bcoo_dot import bcoo_dot_general
    return bcoo_dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                            preferred_element_type=preferred_element_type)


def _bcsr_dot_general(lhs, rhs, *, dimension_numbers, precision=None,
                      preferred_element_type=None, out_sharding=None, **_):
    from kiln.experimental.sparse.bcsr import BCSR, bcsr_dot_general
    if isinstance(lhs, BCSR) and not isinstance(rhs, BCSR):
        return bcsr_dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                                preferred_element_type=preferred_element_type)
    # kiln: a BCSR right operand (JAX raises) contracts through BCOO.
    lhs, rhs = (x.to_bcoo() if isinstance(x, BCSR) else x for x in (lhs, rhs))
    return _bcoo_dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                             preferred_element_type=preferred_element_type)


def _conv(lhs, rhs, **params):
    from kiln.experimental.sparse._bcoo_layout import bcoo_conv_general_dilated
    keep = ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "dimension_numbers",
            "feature_group_count", "batch_group_count", "precision",
            "preferred_element_type")
    return bcoo_conv_general_dilated(lhs, rhs, **{k: params[k] for k in keep if k in params})


def _dense_operands_only(name, operands):
    from kiln.experimental.sparse._base import JAXSparse
    if any(isinstance(x, JAXSparse) for x in operands):
        raise NotImplementedError(f"sparse rule for {name} with sparse indices is not "
                                  "implemented.")


def _dynamic_slice(x, *starts, slice_sizes, **_):
    from kiln.experimental.sparse._bcoo_layout import bcoo_dynamic_slice
    _dense_operands_only("dynamic_slice", starts)
    return bcoo_dynamic_slice(x, starts[:x.ndim], slice_sizes=slice_sizes)


def _gather(x, idx, *, dimension_numbers, slice_sizes, unique_indices=False,
            indices_are_sorted=False, mode=None, fill_value=None):
    from kiln.experimental.sparse._bcoo_layout import bcoo_gather
    _dense_operands_only("gather", [idx])
    return bcoo_gather(x, idx, dimension_numbers, slice_sizes, unique_indices=unique_indices,
                       indices_are_sorted=indices_are_sorted, mode=mode,
                       fill_value=fill_value)


def _reshape(x, *dyn, new_sizes, dimensions=None, **_):
    from kiln.experimental.sparse._bcoo_struct import bcoo_reshape
    if dyn:
        raise NotImplementedError("sparse rule for reshape with dynamic shapes.")
    return bcoo_reshape(x, new_sizes=new_sizes, dimensions=dimensions)


def _rev(x, *, dimensions):
    from kiln.experimental.sparse._bcoo_layout import bcoo_rev
    return bcoo_rev(x, dimensions)


def _slice(x, *, start_indices, limit_indices, strides):
    from kiln.experimental.sparse._bcoo_layout import bcoo_slice
    return bcoo_slice(x, start_indices=start_indices, limit_indices=limit_indices,
                      strides=strides)


def _squeeze(x, *, dimensions):
    from kiln.experimental.sparse._bcoo_struct import bcoo_squeeze
    return bcoo_squeeze(x, dimensions=dimensions)


for _p, _fn in [(lax.broadcast_in_dim_p, _bcoo_broadcast_in_dim),
                (lax.concatenate_p, _bcoo_concatenate),
                (lax.conv_general_dilated_p, _conv),
                (lax.dot_general_p, _bcoo_dot_general),
                (lax.dynamic_slice_p, _dynamic_slice),
                (lax.gather_p, _gather),
                (lax.reshape_p, _reshape),
                (lax.rev_p, _rev),
                (lax.slice_p, _slice),
                (lax.squeeze_p, _squeeze)]:
    sparse_rules_bcoo[_p] = _standard(_fn)
for _p, _fn in [(lax.broadcast_in_dim_p, _bcsr_broadcast_in_dim),
                (lax.concatenate_p, _bcsr_concatenate),
                (lax.dot_general_p, _bcsr_dot_general),
                (lax.reshape_p, _bcsr_reshape)]:
    sparse_rules_bcsr[_p] = _standard(_fn)


@_register(lax.transpose_p)
def _transpose(spenv, x, *, permutation):
    from kiln.experimental.sparse._bcoo_struct import bcoo_transpose
    perm = tuple(int(p) for p in permutation)
    mat = spvalues_to_arrays(spenv, x)
    out = bcoo_transpose(mat, permutation=perm)
    nb, ns = mat.n_batch, mat.n_sparse
    same = [perm[a:b] == tuple(range(a, b)) for a, b in
            [(0, nb), (nb, nb + ns), (nb + ns, mat.ndim)]]
    batch_same, sparse_same, dense_same = same
    # The buffers that the permutation leaves alone are shared with the operand.
    kw = {}
    if batch_same and dense_same:
        kw["data_ref"] = x.data_ref
    else:
        kw["data"] = out.data
    if batch_same and sparse_same:
        kw["indices_ref"] = x.indices_ref
    else:
        kw["indices"] = out.indices
    return (spenv.sparse(out.shape, indices_sorted=out.indices_sorted,
                         unique_indices=out.unique_indices, **kw),)


# -- arithmetic ------------------------------------------------------------------------------

def _same_pattern(spenv, x, y) -> bool:
    return x.indices_ref == y.indices_ref and x.indptr_ref == y.indptr_ref


@_register(lax.add_p)
def _add(spenv, x, y):
    import numpy as np

    import kiln.numpy as jnp
    out_shape = tuple(np.broadcast_shapes(x.shape, y.shape))
    if x.is_sparse() and y.is_sparse():
        if x.shape != y.shape:
            raise NotImplementedError("Addition between sparse matrices of different shapes.")
        if _same_pattern(spenv, x, y):
            data = lax.add(spenv.data(x), spenv.data(y))
            return (spenv.sparse(x.shape, data, indices_ref=x.indices_ref,
                                 indices_sorted=x.indices_sorted,
                                 unique_indices=x.unique_indices),)
        xi, yi = spenv.indices(x), spenv.indices(y)
        xd, yd = spenv.data(x), spenv.data(y)
        if xi.ndim != yi.ndim or xd.ndim != yd.ndim:
            raise NotImplementedError("Addition between sparse matrices with different "
                                      "batch/dense dimensions.")
        axis = xi.ndim - 2
        if xi.dtype != yi.dtype:
            dt = jnp.promote_types(xi.dtype, yi.dtype)
            xi, yi = xi.astype(dt), yi.astype(dt)
        return (spenv.sparse(x.shape, lax.concatenate([xd, yd], axis),
                             lax.concatenate([xi, yi], axis)),)
    sp, dense = (x, y) if x.is_sparse() else (y, x)
    if dense.shape != out_shape:
        raise NotImplementedError(
            "Addition between a sparse array X and a dense array Y is not implemented when "
            "the output shape is larger than Y.shape. This is to prevent silent densification "
            "of a large sparse array. If this is your intent, you can explicitly cast the "
            "sparse array to a dense matrix.")
    out = spvalues_to_arrays(spenv, sp).todense() + spenv.data(dense)
    return (spenv.dense(out),)


# ``add_any`` (the sum of cotangents in gradients staged by ``grad``) adds as ``add``.
sparse_rules_bcoo[add_any_p] = _add


@_register(lax.sub_p)
def _sub(spenv, x, y):
    if x.is_sparse() and y.is_sparse():
        neg_y, = sparse_rules_bcoo[lax.neg_p](spenv, y)
        return _add(spenv, x, neg_y)
    raise NotImplementedError("Subtraction between sparse and dense array.")


@_register(lax.mul_p)
def _mul(spenv, x, y, **params):
    from kiln.experimental.sparse._bcoo_arith import bcoo_multiply_dense, bcoo_multiply_sparse
    out_dtype = params.get("out_dtype")
    if x.is_sparse() and y.is_sparse():
        if _same_pattern(spenv, x, y) and x.unique_indices:
            data = lax.mul(spenv.data(x), spenv.data(y))
            if out_dtype is not None:
                data = data.astype(out_dtype)
            return (spenv.sparse(x.shape, data, indices_ref=x.indices_ref,
                                 indices_sorted=x.indices_sorted, unique_indices=True),)
        a, b = spvalues_to_arrays(spenv, (x, y))
        if out_dtype is not None:
            a, b = a.astype(out_dtype), b.astype(out_dtype)
        mat = bcoo_multiply_sparse(a, b)
        return (spenv.sparse(mat.shape, mat.data, mat.indices),)
    sp, dense = (x, y) if x.is_sparse() else (y, x)
    mat = spvalues_to_arrays(spenv, sp)
    v = spenv.data(dense)
    if out_dtype is not None:
        mat, v = mat.astype(out_dtype), v.astype(out_dtype)
    data = bcoo_multiply_dense(mat, v)
    return (spenv.sparse(sp.shape, data, indices_ref=sp.indices_ref,
                         indices_sorted=sp.indices_sorted, unique_indices=sp.unique_indices),)


@_register(lax.div_p)
def _div(spenv, x, y):
    import numpy as np

    import kiln.numpy as jnp
    from kiln.experimental.sparse._bcoo_arith import bcoo_multiply_dense
    if y.is_sparse():
        raise NotImplementedError(
            "Division by a sparse array is not implemented because it would result in dense "
            "output. If this is your intent, use sparse.todense() to convert your arguments "
            "to a dense array.")
    mat = spvalues_to_arrays(spenv, x)
    v = spenv.data(y)
    if np.issubdtype(mat.dtype, np.inexact):
        data = bcoo_multiply_dense(mat, 1. / v)
    else:     # integer division rounds: divide the stored values by the divisor's values
        divisor = bcoo_multiply_dense(mat._with_data(jnp.ones_like(mat.data)), v)
        data = lax.div(mat.data, divisor.astype(mat.dtype))
    return (spenv.sparse(x.shape, data, indices_ref=x.indices_ref,
                         indices_sorted=x.indices_sorted, unique_indices=x.unique_indices),)


@_register(lax.reduce_sum_p)
def _reduce_sum(spenv, x, *, axes, **_):
    from kiln.experimental.sparse._bcoo_struct import bcoo_reduce_sum
    mat = bcoo_reduce_sum(spvalues_to_arrays(spenv, x), axes=axes)
    if mat.shape == ():
        return (spenv.dense(mat.data.sum()),)
    return (spenv.sparse(mat.shape, mat.data, mat.indices),)


# -- todense ---------------------------------------------------------------------------------

def _todense(spenv, x, *, tree):
    del tree
    return (spenv.dense(spvalues_to_arrays(spenv, x).todense()),)


def _register_todense():
    from kiln.experimental.sparse.api import todense_p
    sparse_rules_bcoo[todense_p] = _todense
    sparse_rules_bcsr[todense_p] = _todense


_register_todense()
