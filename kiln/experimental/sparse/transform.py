"""``jax.experimental.sparse.sparsify``: run a function written for dense arrays on sparse
ones (BCOO, BCSR).

Two implementations, as in JAX:

- the jaxpr interpreter (``sparsify(f)``): ``f`` is traced to a jaxpr with every argument
  standing in as a dense array of its shape and dtype, and the jaxpr is evaluated on
  ``SparsifyValue`` handles (``eval_sparse``);
- the tracer (``sparsify(f, use_tracer=True)``): ``f`` runs with ``SparseTracer`` arguments
  and each primitive it applies goes to ``SparseTrace.process_primitive``.

Both hand an operation with a sparse operand to the rule of its primitive
(``sparse_rules_bcoo``/``sparse_rules_bcsr``: ``_sparsify_rules.py``, and
``_sparsify_control.py`` for ``jit``, loops, ``cond`` and custom derivatives) and bind an
operation of dense operands as usual. A primitive with no rule raises
``NotImplementedError`` naming it.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from kiln.core.trace import (
    Trace,
    Tracer,
    check_foreign_tracer,
    current_trace,
    set_current_trace,
)
from kiln.experimental.sparse import _sparsify_control  # noqa: F401  (registers its rules)
from kiln.experimental.sparse._sparsify_env import (
    SparsifyEnv,
    SparsifyValue,
    arrays_to_spvalues,
    is_sparse_obj,
    spvalues_to_arrays,
    spvalues_to_avals,
)
from kiln.experimental.sparse._sparsify_eval import (
    apply_sparse_rule,
    eval_sparse,
    sparsify_raw,
)
from kiln.experimental.sparse._sparsify_rules import sparse_rules_bcoo, sparse_rules_bcsr

__all__ = ["SparseTrace", "SparseTracer", "SparsifyEnv", "SparsifyValue",
           "arrays_to_spvalues", "eval_sparse", "sparse_rules_bcoo", "sparse_rules_bcsr",
           "sparsify", "sparsify_raw", "spvalues_to_arrays", "spvalues_to_avals"]


class SparseTracer(Tracer):
    """A value of ``sparsify(f, use_tracer=True)``: a handle (``SparsifyValue``) into its
    trace's environment, dense or sparse; its abstract value is the dense array's."""

    __slots__ = ("_spvalue",)

    def __init__(self, trace: SparseTrace, *, spvalue: SparsifyValue):
        if not hasattr(trace, "spenv"):
            raise RuntimeError("Internal: trace does not have spenv defined.")
        self._trace = trace
        self._spvalue = spvalue
        self._jax_aval = spvalues_to_avals(trace.spenv, [spvalue])[0]

    @property
    def spenv(self) -> SparsifyEnv:
        """The environment holding this value's buffers."""
        return self._trace.spenv

    def full_lower(self):
        return self


class SparseTrace(Trace):
    """The trace of ``sparsify(f, use_tracer=True)``: primitives with a sparse operand go
    to their sparse rule, others are applied to the dense buffers under the parent trace.

    Args:
      parent: the enclosing trace.
      tag: an identity object (JAX's ``TraceTag``).
      spenv: the environment of the tracers' handles.
    """

    __slots__ = ("tag", "spenv")

    def __init__(self, parent, tag, spenv: SparsifyEnv):
        super().__init__(parent)
        self.tag = tag
        self.spenv = spenv

    def to_sparse_tracer(self, val) -> SparseTracer:
        """``val`` as a tracer of this trace (a value from outside becomes a dense one)."""
        if isinstance(val, SparseTracer) and val._trace is self:
            return val
        if isinstance(val, Tracer):
            check_foreign_tracer(self, val)
        with set_current_trace(self.parent):
            spvalue, = arrays_to_spvalues(self.spenv, [val])
        return SparseTracer(self, spvalue=spvalue)

    def process_primitive(self, prim, args, params):
        spvalues = [self.to_sparse_tracer(x)._spvalue for x in args]
        with set_current_trace(self.parent):
            if any(v.is_sparse() for v in spvalues):
                outs = apply_sparse_rule(self.spenv, prim, spvalues, params)
            else:
                bufs = prim.bind(*[self.spenv.data(v) for v in spvalues], **params)
                outs = arrays_to_spvalues(
                    self.spenv, list(bufs) if prim.multiple_results else [bufs])
        tracers = [SparseTracer(self, spvalue=v) for v in outs]
        return tracers if prim.multiple_results else tracers[0]

    def process_custom_jvp_call(self, fun, jvp, args, *, symbolic_zeros=False):
        # The function runs on the sparse values; its rule is not used (as in JAX).
        with set_current_trace(self):
            return fun(*args)

    def process_custom_vjp_call(self, fun, fwd, bwd, args, out_trees, *,
                                symbolic_zeros=False):
        with set_current_trace(self):
            return fun(*args)


def _sparsify_with_tracer(f: Callable) -> Callable:
    from kiln.tree_util import tree_flatten, tree_unflatten

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        flat, in_tree = tree_flatten(args, is_leaf=is_sparse_obj)
        spenv = SparsifyEnv()
        trace = SparseTrace(current_trace(), object(), spenv)
        spvalues = arrays_to_spvalues(spenv, flat)
        try:
            tracers = [SparseTracer(trace, spvalue=v) for v in spvalues]
            with set_current_trace(trace):
                out = f(*tree_unflatten(in_tree, tracers), **kwargs)
            out_flat, out_tree = tree_flatten(out)
            out_spvalues = [trace.to_sparse_tracer(o)._spvalue for o in out_flat]
        finally:
            trace.alive = False
        return tree_unflatten(out_tree, spvalues_to_arrays(spenv, out_spvalues))
    return wrapped


def _sparsify_with_interpreter(f: Callable) -> Callable:
    from kiln.tree_util import tree_unflatten
    f_raw = sparsify_raw(f)

    @functools.wraps(f)
    def wrapped(*args, **params):
        spenv = SparsifyEnv()
        spvalues = arrays_to_spvalues(spenv, args)
        out, out_tree = f_raw(spenv, *spvalues, **params)
        return tree_unflatten(out_tree, spvalues_to_arrays(spenv, out))
    return wrapped


def sparsify(f: Callable, use_tracer: bool = False) -> Callable:
    """Make ``f`` accept sparse arrays (BCOO, BCSR) wherever it accepts dense ones.

    Each operation ``f`` applies to a sparse value is computed by its primitive's sparse
    rule: zero-preserving elementwise operations act on the stored values, products,
    sums, contractions, reductions and structural operations stay sparse, ``jit``,
    ``cond``, ``while_loop``, ``fori_loop`` and ``scan`` run with sparse operands.
    Operations whose result would be dense (``exp``, ``cos``, comparisons, ...) raise
    ``NotImplementedError``; convert with ``sparse.todense`` where that is intended.

    Args:
      f: a function of arrays (pytrees) built from ``kiln.numpy``/``kiln.lax``.
      use_tracer: run ``f`` with ``SparseTracer`` arguments instead of tracing it to a
        jaxpr and interpreting that.

    Returns:
      A function with ``f``'s signature returning sparse arrays where the computation
      kept them sparse and dense arrays elsewhere.

    Examples:
      >>> import kiln.numpy as jnp
      >>> from kiln.experimental import sparse
      >>> @sparse.sparsify
      ... def f(M, v):
      ...   return 2 * M.T @ v
      >>> M = sparse.BCOO.fromdense(jnp.arange(12).reshape(3, 4))
      >>> f(M, jnp.array([3, 4, 2]))
      Array([ 64,  82, 100, 118], dtype=int32)
    """
    if use_tracer:
        return _sparsify_with_tracer(f)
    return _sparsify_with_interpreter(f)
