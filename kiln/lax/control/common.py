"""Shared helpers of the control-flow primitives: tracing user functions to closed
jaxprs with hoisted consts, type checks with JAX's messages, and jaxpr transforms
(jvp / batching / transpose of a jaxpr, produced by tracing its evaluation)."""
from __future__ import annotations

import weakref

import numpy as np

from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal, eval_jaxpr
from kiln.core.ref import AbstractRef
from kiln.core.trace import apply_impl, get_aval
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero
from kiln.interpreters.transpose_jaxpr import match_aval, transpose_jaxpr  # noqa: F401


def trace_jaxpr(fun, in_avals):
    """Trace flat ``fun``; returns ``(ClosedJaxpr taking (*consts, *args), consts)``.

    All consts (concrete or traced) are hoisted to leading arguments, as JAX does for
    control-flow bodies."""
    jaxpr, consts = staging.trace_to_jaxpr(fun, list(in_avals))
    return ClosedJaxpr(staging.convert_constvars_jaxpr(jaxpr), ()), list(consts)


_trace_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cached_trace(fun, key, make):
    """``make()`` (a trace of the body ``fun``: ``(closed, consts, ...)``), cached per
    ``fun`` object and ``key`` (trees, avals) as JAX caches control-flow bodies: called
    again with the same function and argument types, ``scan`` does not run the Python body
    again (also inside another transformation). Only traces whose constants are all
    concrete are kept (a tracer constant belongs to one trace); the key includes the
    flags that change tracing and the named axes in scope."""
    from kiln._compile_log import trace_context
    from kiln.core.trace import Tracer, eager_folding
    try:
        per = _trace_cache.get(fun)
        full = (key, trace_context(), eager_folding(), tuple(batching.axis_env))
        hash(full)
    except TypeError:       # fun not weakly referenceable / hashable, or key unhashable
        return make()
    if per is not None:
        hit = per.get(full)
        if hit is not None:
            return hit
    out = make()
    if not any(isinstance(c, Tracer) for c in out[1]):
        try:
            _trace_cache.setdefault(fun, {})[full] = out
        except TypeError:
            pass
    return out


def trace_pytree_fun(fun, in_tree, in_avals):
    """Trace ``fun(*pytree_args)``; returns ``(closed, consts, out_tree)``."""
    store = {}

    def flat(*xs):
        args = tree_unflatten(in_tree, list(xs))
        out = fun(*args)
        leaves, tree = tree_flatten(out)
        store["tree"] = tree
        return leaves

    closed, consts = trace_jaxpr(flat, in_avals)
    return closed, consts, store["tree"]


def avals_of(xs):
    return [get_aval(x) for x in xs]


def same_type(a, b, check_weak=True) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype
            and (not check_weak or a.weak_type == b.weak_type))


def aval_str(a) -> str:
    w = ", weak_type=True" if a.weak_type else ""
    return f"ShapedArray({a.dtype.name}[{','.join(map(str, a.shape))}]{w})"


def jaxpr_fun(closed: ClosedJaxpr):
    def f(*args):
        return eval_jaxpr(closed.jaxpr, closed.consts, *args)
    return f


def jvp_jaxpr(closed: ClosedJaxpr, nonzeros, instantiate):
    """JVP of ``closed``: returns ``(jvp_closed, out_nonzeros)``; the new jaxpr takes
    ``(*primals, *nonzero_tangents)`` and returns ``(*primals_out, *nonzero_tangents_out)``.

    ``instantiate`` (bool per output) forces a tangent output even when it is zero."""
    n = len(closed.in_avals)
    cell = {}

    def fun(*args):
        ps = list(args[:n])
        it = iter(args[n:])
        ts = [next(it) if nz else Zero(ad.tangent_aval(a))
              for a, nz in zip(closed.in_avals, nonzeros)]
        p_out, t_out = ad.jvp_flat(jaxpr_fun(closed), ps, ts, instantiate=False)
        out_nz = []
        outs_t = []
        for p, t, inst in zip(p_out, t_out, instantiate):
            ta = ad.tangent_aval(get_aval(p))
            if type(t) is Zero and inst and ta.dtype != _float0():
                t = ad.instantiate_zeros(t)
            nz = type(t) is not Zero
            out_nz.append(nz)
            if nz:
                outs_t.append(t)
        cell["nz"] = out_nz
        return list(p_out) + outs_t

    in_avals = list(closed.in_avals) + [ad.tangent_aval(a) for a, nz in
                                        zip(closed.in_avals, nonzeros) if nz]
    jaxpr, consts = staging.trace_to_jaxpr(fun, in_avals)
    return ClosedJaxpr(jaxpr, consts), cell["nz"]


def _float0():
    from kiln import dtypes
    return dtypes.float0


def has_ref_operands(avals) -> bool:
    """Whether any of ``avals`` is a mutable reference type."""
    return any(type(a) is AbstractRef for a in avals)


def has_io_callback(jaxpr) -> bool:
    """Whether ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``), or a sub-jaxpr of it, calls
    ``io_callback``: JAX's IO effect, which a batched predicate or ``checkpoint``'s partial
    evaluation cannot keep (debug prints and callbacks are allowed there)."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in inner.eqns:
        if eqn.primitive.name == "io_callback":
            return True
        for p in eqn.params.values():
            for j in (p if isinstance(p, (tuple, list)) else (p,)):
                sub = getattr(j, "jaxpr", j)
                if type(sub).__name__ == "Jaxpr" and has_io_callback(sub):
                    return True
    return False


def state_under_batched_predicate(what: str) -> NotImplementedError:
    """JAX's error for a vmap whose batched predicate selects code that uses references."""
    return NotImplementedError(f"State effect not supported in vmap-of-{what}.")


def batch_jaxpr(closed: ClosedJaxpr, axis_data, in_dims, force_out):
    """Batch ``closed``: inputs have batch dims ``in_dims`` (None or 0); outputs are
    batched at 0 (or unbatched where possible and not forced). Returns
    ``(batched_closed, out_batched)``."""
    cell = {}

    def fun(*xs):
        outs, dims = batching.batch_flat(jaxpr_fun(closed), list(xs), list(in_dims), axis_data)
        res = []
        ob = []
        for o, d, f in zip(outs, dims, force_out):
            if d is None and not f:
                res.append(o)
                ob.append(False)
            else:
                res.append(batching.matchaxis(o, d, 0, axis_data.size))
                ob.append(True)
        cell["ob"] = ob
        return res

    in_avals = []
    for a, d in zip(closed.in_avals, in_dims):
        if d is not None and type(a) is AbstractRef:     # a batched reference
            inner = a.inner_aval
            a = a.update(inner_aval=inner.update(shape=(axis_data.size,) + inner.shape))
            d = None
        in_avals.append(a if d is None else ShapedArray((axis_data.size,) + a.shape, a.dtype,
                                                        a.weak_type))
    batching.axis_env.append((axis_data.name, axis_data.size))
    try:
        jaxpr, consts = staging.trace_to_jaxpr(fun, in_avals)
    finally:
        batching.axis_env.pop()
    return ClosedJaxpr(jaxpr, consts), cell["ob"]


def zeros(aval):
    return ad.zeros_like_aval(aval)


# ----------------------------------------------------------------------------------------------
# Error messages in JAX's words.

def fun_sourceinfo(fun) -> str:
    """``name at file:line`` of a user function, as JAX's errors name it."""
    import functools
    import inspect
    while isinstance(fun, functools.partial):
        fun = fun.func
    try:
        fun = inspect.unwrap(fun)
        code = fun.__code__
        return f"{fun.__name__} at {code.co_filename}:{code.co_firstlineno}"
    except (AttributeError, ValueError):
        name = getattr(fun, "__name__", None)
        return name if isinstance(name, str) else "<unknown>"


def capitalize(s: str) -> str:
    return s[:1].upper() + s[1:]


def types_match(a, b) -> bool:
    """JAX's ``typematch``: shape and dtype equal (weak types may differ)."""
    return a.shape == b.shape and a.dtype == b.dtype


def mismatch_extra(a, b) -> str:
    why = []
    if a.dtype != b.dtype:
        why.append("the dtypes do not match")
    if a.shape != b.shape:
        why.append("the shapes do not match")
    if not why:
        return ""
    return ", so " + (why[0] if len(why) == 1 else ", ".join(why[:-1]) + ", and " + why[-1])


def join_differences(diffs, capitalize_single=True) -> str:
    """One difference as a sentence; several as a bullet list (JAX's layout)."""
    if len(diffs) == 1:
        return f"{capitalize(diffs[0]) if capitalize_single else diffs[0]}.\n"
    return "\n".join(f"  * {d};\n" for d in diffs[:-1]) + f"  * {diffs[-1]}.\n"


def leaf_paths(tree, n):
    """Key paths of the ``n`` leaves of ``tree`` (a PyTreeDef)."""
    from kiln._physical_tree import tree_flatten_with_path
    marker = [object() for _ in range(n)]
    pairs, _ = tree_flatten_with_path(tree_unflatten(tree, marker))
    return [p for p, _ in pairs]


class _LeafMeta(type):
    def __repr__(cls):
        return "pytree leaf"

    __str__ = __repr__


_PytreeLeaf = _LeafMeta("Leaf", (), {})


def structure_diffs(tree1, tree2, describe, leaf=None):
    """``describe(path, thing1, thing2, why)`` for each structural difference of two
    treedefs. Leaves are shown as ``leaf`` (default: "pytree leaf", as JAX does)."""
    from kiln._physical_tree import equality_errors
    leaf = _PytreeLeaf() if leaf is None else leaf
    a = tree_unflatten(tree1, [leaf] * tree1.num_leaves)
    b = tree_unflatten(tree2, [leaf] * tree2.num_leaves)
    return [describe(p, t1, t2, why) for p, t1, t2, why in equality_errors(a, b)]


# ----------------------------------------------------------------------------------------------
# Running a loop body many times on NumPy values (the impls of while and scan).

def _has_sub_jaxpr(eqn) -> bool:
    for p in eqn.params.values():
        for s in (p if isinstance(p, (tuple, list)) else (p,)):
            if isinstance(s, (ClosedJaxpr, Jaxpr)):
                return True
    return False


def _impl_of(prim):
    """A callable ``impl(*numpy_values, **params)`` for ``prim`` (see ``apply_impl``)."""
    if not prim.array_impl:
        return prim.impl
    return lambda *vals, **params: apply_impl(prim, vals, params)


class LoopBody:
    """A closed jaxpr prepared for repeated evaluation with some inputs fixed.

    Equations that depend only on the fixed inputs, constants and literals (e.g. a
    constant broadcast to the carry's shape) are evaluated once, up front; effectful
    equations and those holding sub-jaxprs are never hoisted. The rest become a flat
    list of instructions over numbered slots, so each iteration pays for the impls and
    little else. Semantics are those of ``reference.run_jaxpr`` (which is used instead
    under ``jax_debug_nans``/``jax_debug_infs``, to keep their per-equation checks)."""

    __slots__ = ("_slots", "_program", "_in_slots", "_out_slots", "_fallback")

    def __init__(self, closed: ClosedJaxpr, fixed_args):
        from kiln.config import config
        from kiln.core.physical import physical_closed
        closed = physical_closed(closed)     # extended dtypes run on their storage dtypes
        jaxpr = closed.jaxpr
        n_fixed = len(fixed_args)
        if config.jax_debug_nans or config.jax_debug_infs:
            from kiln.core.jaxpr import run_reference
            fixed = list(fixed_args)
            self._fallback = lambda args: run_reference(jaxpr, closed.consts, [*fixed, *args])
            return
        self._fallback = None
        index = {}
        slots = []

        def slot_of(v):
            k = index.get(v)
            if k is None:
                k = index[v] = len(slots)
                slots.append(None)
            return k

        def literal_slot(lit):
            slots.append(lit.val._value if hasattr(lit.val, "_value") else np.asarray(lit.val))
            return len(slots) - 1

        known = set()
        for v, c in zip(jaxpr.constvars, closed.consts):
            slots[slot_of(v)] = getattr(c, "_value", c)
            known.add(v)
        for v, x in zip(jaxpr.invars[:n_fixed], fixed_args):
            slots[slot_of(v)] = x
            known.add(v)
        self._in_slots = [slot_of(v) for v in jaxpr.invars[n_fixed:]]
        program = []
        for eqn in jaxpr.eqns:
            idx = [literal_slot(v) if type(v) is Literal else slot_of(v) for v in eqn.invars]
            outs = [slot_of(v) for v in eqn.outvars]
            multi = eqn.primitive.multiple_results
            invariant = (all(type(v) is Literal or v in known for v in eqn.invars)
                         and eqn.primitive not in staging.always_stage
                         and not _has_sub_jaxpr(eqn))
            if invariant:
                r = apply_impl(eqn.primitive, [slots[i] for i in idx], eqn.params)
                for k, o in zip(outs, r if multi else [r]):
                    slots[k] = o
                known.update(eqn.outvars)
            else:
                program.append((_impl_of(eqn.primitive), eqn.params, idx,
                                outs if multi else outs[0], multi))
        self._out_slots = [literal_slot(v) if type(v) is Literal else slot_of(v)
                           for v in jaxpr.outvars]
        self._slots = slots
        self._program = program

    def __call__(self, args):
        if self._fallback is not None:
            return self._fallback(args)
        slots = self._slots
        for k, x in zip(self._in_slots, args):
            slots[k] = x
        for impl, params, idx, out, multi in self._program:
            r = impl(*[slots[i] for i in idx], **params)
            if multi:
                for k, o in zip(out, r):
                    slots[k] = o
            else:
                slots[out] = r
        return [slots[k] for k in self._out_slots]
