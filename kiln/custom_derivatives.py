"""``custom_jvp``, ``custom_vjp`` and ``checkpoint``/``remat``.

A custom-derivative function reaches the current trace through
``process_custom_jvp_call``/``process_custom_vjp_call`` with *flat* callables:

- ``fun(*args) -> outs``
- ``jvp(primals, tangents) -> (primals_out, tangents_out)``
- ``fwd(primals, perturbed=None) -> (primals_out, residuals)``, where ``perturbed`` says
  which primals carry a (nonzero) tangent (``None``: all of them);
  ``bwd(residuals, cts_out) -> cts_in``

Eval runs ``fun``; JVP runs the rule; vmap batches all callables; staging records a
``custom_jvp_call``/``custom_vjp_call`` equation whose primitive carries the same rules,
so the behaviour survives ``jit``. For ``custom_vjp`` under differentiation the tangent
map is the ``custom_lin`` primitive: linear, transposed by calling ``bwd``; evaluating
it in forward mode raises JAX's error.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

import numpy as np

from kiln import _key_boundary as _kb
from kiln import dtypes
from kiln import tree_util as _public_tree
from kiln._physical_tree import is_transform_node as _is_key
from kiln._physical_tree import (
    register_pytree_node_class,
    tree_flatten,
    tree_map,
    tree_structure,
    tree_unflatten,
)
from kiln._traceback_util import api_boundary
from kiln._wraps import wraps as _wraps
from kiln.array import Array, make_array
from kiln.core.jaxpr import ClosedJaxpr, eval_jaxpr, pp_param_rules
from kiln.core.trace import Primitive, Tracer, current_trace, get_aval, set_current_trace
from kiln.interpreters import ad, batching, jax_protocol, staging
from kiln.interpreters.ad import Zero


def _resolve_kwargs(fun, args, kwargs, kind: str):
    """``args`` and ``kwargs`` as positional arguments of ``fun``, defaults applied (as JAX).

    ``fun``'s signature binds them: omitted positional parameters take their defaults,
    keyword arguments move to their positions. A ``functools.partial`` is opaque (its
    arguments stay as given, and keywords cannot be resolved). Keyword-only parameters
    the caller left out are dropped (``fun`` applies its own default); passing one raises.
    """
    try:
        sig = None if isinstance(fun, functools.partial) else inspect.signature(fun)
    except (TypeError, ValueError):
        sig = None
    try:
        if sig is None:
            if kwargs:
                raise TypeError("The following keyword arguments could not be resolved to "
                                f"positions: {', '.join(kwargs)}")
            return tuple(args)
        ba = sig.bind(*args, **kwargs)
        ba.apply_defaults()
        passed = [k for k in ba.kwargs if k in kwargs]
        if passed:
            raise TypeError("The following keyword arguments could not be resolved to "
                            f"positions: {', '.join(passed)}")
    except TypeError as e:
        raise TypeError(
            f"The input arguments to the {kind}-decorated function {_fn_name(fun)} could "
            "not be resolved to positional-only arguments. Binding failed with the "
            f"error:\n{e}") from e
    return tuple(ba.args)


def _nondiff_positions(fun, nondiff_argnums, nondiff_argnames) -> tuple:
    """The sorted union of ``nondiff_argnums`` and the positions of ``nondiff_argnames``
    (positional-or-keyword parameters of ``fun`` with those names)."""
    nums = set(int(i) for i in nondiff_argnums)
    if nondiff_argnames:
        names = (nondiff_argnames,) if isinstance(nondiff_argnames, str) \
            else tuple(nondiff_argnames)
        params = inspect.signature(fun).parameters.values()
        nums.update(i for i, p in enumerate(params)
                    if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name in names)
    return tuple(sorted(nums))


def _split_nondiff(args, nondiff_argnums):
    nondiff = {i: args[i] for i in nondiff_argnums}
    diff = [a for i, a in enumerate(args) if i not in nondiff]
    return nondiff, diff


def _arg_info(arg):
    """``(treedef, leaf avals, leaf is a key)`` of one differentiable argument."""
    leaves, tree = tree_flatten(arg)
    return (tree, [get_aval(x) for x in leaves],
            [_is_key(x) for x in _public_tree.tree_leaves(arg)])


def diff_trees_example(diff_info):
    """Stand-ins with the structure of the differentiable arguments (for error messages)."""
    return [tree_unflatten(t, [0] * t.num_leaves) for t, _, _ in diff_info]


def _merge(nondiff, diff, n):
    it = iter(diff)
    return [nondiff[i] if i in nondiff else next(it) for i in range(n)]


def _zeros_like(x):
    a = get_aval(x)
    ta = ad.tangent_aval(a)
    return ad.zeros_like_aval(ta.update(weak_type=a.weak_type and ta.dtype == a.dtype))


class SymbolicZero:
    """A zero tangent (or cotangent) that a ``symbolic_zeros=True`` custom rule sees in
    place of an array; a rule may also return one. Its aval's attributes (``shape``,
    ``dtype``, ``ndim``, ...) read through, as in JAX. It is a pytree leaf."""

    def __init__(self, aval):
        self.aval = aval

    def __getattr__(self, name):
        if name == "aval":              # not yet set (copy/pickle)
            raise AttributeError(name)
        try:
            return getattr(self.aval, name)
        except AttributeError:
            raise AttributeError(f"SymbolicZero has no attribute {name}") from None

    def __repr__(self):
        return f"SymbolicZero({self.aval.str_short()})"


def zero_from_primal(val, symbolic_zeros: bool = False):
    """A zero tangent for every leaf of ``val``: :class:`SymbolicZero` s when
    ``symbolic_zeros``, else zero arrays of the tangent dtype (``float0`` for integers)."""
    def zero(x):
        ta = ad.tangent_aval(get_aval(x))
        if symbolic_zeros:
            return SymbolicZero(ta)
        return make_array(np.zeros(ta.shape, ta.dtype), ta.weak_type)
    return tree_map(zero, val)


@dataclasses.dataclass(slots=True)
class CustomVJPPrimal:
    """What a ``custom_vjp`` forward rule defined with ``symbolic_zeros=True`` receives
    for each leaf of its arguments: the primal ``value`` and whether it is ``perturbed``
    (differentiated: when False, the rule's Jacobian column for it is zero)."""

    value: Any
    perturbed: bool


def custom_vjp_primal_tree_values(tree):
    """Replace each :class:`CustomVJPPrimal` leaf of ``tree`` by its ``value``."""
    def value(leaf):
        if type(leaf) is not CustomVJPPrimal:
            raise TypeError(f"unexpected leaf type {type(leaf)}")
        return leaf.value
    return tree_map(value, tree)





class custom_jvp:
    """A function with a custom JVP rule (``defjvp``/``defjvps``), as ``jax.custom_jvp``."""

    def __init__(self, fun, nondiff_argnums=(), nondiff_argnames=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff_positions(fun, nondiff_argnums, nondiff_argnames)
        self.jvp = None
        self.symbolic_zeros = False

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def defjvp(self, jvp, symbolic_zeros: bool = False):
        """Define the rule ``jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)``."""
        self.jvp = jvp
        self.symbolic_zeros = symbolic_zeros
        return jvp

    def defjvps(self, *jvps):
        """Define the JVP by one function per argument: ``jvp_i(g, ans, *primals)``."""
        if self.nondiff_argnums:
            raise TypeError("Can't use defjvps with nondiff_argnums.")

        def jvp(primals, tangents):
            ans = self(*primals)
            out = None
            for fn, t in zip(jvps, tangents):
                if fn is None:
                    continue
                c = fn(t, ans, *primals)
                out = c if out is None else tree_map(lambda a, b: a + b, out, c)
            if out is None:
                out = tree_map(_zeros_like, ans)
            return ans, out

        self.defjvp(jvp)

    @api_boundary
    def __call__(self, *args, **kwargs):
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {self.__name__} using "
                                 "defjvp.")
        args = _resolve_kwargs(self.fun, args, kwargs, "custom_jvp")
        n = len(args)
        for i in self.nondiff_argnums:
            if i >= n:
                raise TypeError(f"custom_jvp nondiff_argnums {self.nondiff_argnums} out of range "
                                f"for {n} arguments")
        if _outside_transformations(args):
            # As JAX: with nothing to differentiate, the function runs on the values as
            # given and its result comes back unchanged (a Python float stays one).
            return self.fun(*args)
        nondiff, diff = _split_nondiff(args, self.nondiff_argnums)
        flat, in_tree = tree_flatten(tuple(diff))
        # Python scalars reach the rule as given (JAX passes them through ``jvp``
        # unchanged; a library such as Equinox treats them as static values).
        store = {}
        user_fun, user_jvp, symbolic = self.fun, self.jvp, self.symbolic_zeros

        def flat_fun(*xs):
            out = user_fun(*_merge(nondiff, tree_unflatten(in_tree, list(xs)), n))
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return leaves

        def flat_jvp(primals, tangents):
            py_p = tree_unflatten(in_tree, list(primals))
            ts = [SymbolicZero(t.aval) if type(t) is Zero else t for t in tangents]
            py_t = _kb.key_tangents_to_float0(tree_unflatten(in_tree, ts))
            nd = [nondiff[i] for i in sorted(nondiff)]
            res = user_jvp(*nd, tuple(py_p), tuple(py_t))
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError("Custom JVP rule must produce a pair (list or tuple of length "
                                f"two) representing primal and tangent outputs, got {res}.")
            p_out, t_out = res
            p_leaves, p_tree = tree_flatten(p_out)
            p_keys = _public_tree.tree_leaves(p_out)
            t_leaves, t_tree = _public_tree.tree_flatten(
                t_out, is_leaf=lambda x: isinstance(x, SymbolicZero))
            if _public_tree.tree_structure(p_out) != t_tree:
                raise TypeError("Custom JVP rule must produce primal and tangent outputs with "
                                "equal container (pytree) structures, but got "
                                f"{_public_tree.tree_structure(p_out)} and {t_tree} "
                                "respectively.")
            if "tree" in store and store["tree"] != p_tree:
                raise TypeError("Custom JVP rule must produce a primal output with the same "
                                f"structure as the function's output: {store['tree']} vs "
                                f"{p_tree}")
            store["tree"] = p_tree
            outs_t = []
            for p, t, pk in zip(p_leaves, t_leaves, p_keys):
                pa = get_aval(p)
                if isinstance(t, SymbolicZero) or t is None or _is_key(pk):
                    # A key's tangent is float0: always a zero of its data.
                    outs_t.append(Zero(ad.tangent_aval(pa)))
                    continue
                ta = get_aval(t)
                exp = ad.tangent_aval(pa)
                if ta.shape != pa.shape:
                    raise ValueError("Custom JVP rule must produce primal and tangent outputs "
                                     f"with corresponding shapes, but got primal shape {pa.shape}"
                                     f" and tangent shape {ta.shape}.")
                if ta.dtype != exp.dtype and exp.dtype != dtypes.float0:
                    raise TypeError("Custom JVP rule must produce primal and tangent outputs with "
                                    f"corresponding dtypes, but got {pa.dtype.name} and "
                                    f"{ta.dtype.name}.")
                outs_t.append(Zero(exp) if exp.dtype == dtypes.float0 else t)
            return list(p_leaves), outs_t

        _set_display(flat_jvp, name=_fn_name(user_fun), jvp=user_jvp)
        outs = jax_protocol.custom_jvp_call(current_trace(), flat_fun, flat_jvp, flat,
                                            symbolic_zeros=symbolic)
        return tree_unflatten(store["tree"], outs)


class custom_vjp:
    """A function with a custom VJP (``defvjp(fwd, bwd)``), as ``jax.custom_vjp``."""

    def __init__(self, fun, nondiff_argnums=(), nondiff_argnames=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff_positions(fun, nondiff_argnums, nondiff_argnames)
        self.fwd = None
        self.bwd = None
        self.symbolic_zeros = False

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def defvjp(self, fwd, bwd, symbolic_zeros: bool = False, optimize_remat: bool = False):
        """``fwd(*args) -> (out, residuals)``; ``bwd(*nondiff, residuals, ct) -> cts tuple``."""
        self.fwd = fwd
        self.bwd = bwd
        self.symbolic_zeros = symbolic_zeros

    @api_boundary
    def __call__(self, *args, **kwargs):
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {self.__name__} using "
                                 "defvjp.")
        args = _resolve_kwargs(self.fun, args, kwargs, "custom_vjp")
        n = len(args)
        if _outside_transformations(args):
            return self.fun(*args)      # as custom_jvp's
        nondiff, diff = _split_nondiff(args, self.nondiff_argnums)
        flat, in_tree = tree_flatten(tuple(diff))
        store = {}
        user_fun, user_fwd, user_bwd = self.fun, self.fwd, self.bwd
        nd_list = [nondiff[i] for i in sorted(nondiff)]

        def flat_fun(*xs):
            out = user_fun(*_merge(nondiff, tree_unflatten(in_tree, list(xs)), n))
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return leaves

        symbolic = self.symbolic_zeros

        def flat_fwd(primals, perturbed=None):
            primals = list(primals)
            if symbolic:
                if perturbed is None:
                    perturbed = [True] * len(primals)
                primals = [CustomVJPPrimal(p, bool(z)) for p, z in zip(primals, perturbed)]
            res = user_fwd(*_merge(nondiff, tree_unflatten(in_tree, primals), n))
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError("Custom VJP fwd rule must produce a pair (list or tuple of length "
                                f"two) representing primal outputs and residuals, got {res}.")
            out, resid = res
            o_leaves, o_tree = tree_flatten(out)
            r_leaves, r_tree = tree_flatten(resid)
            store["tree"] = o_tree
            store["res_tree"] = r_tree
            return list(o_leaves), list(r_leaves)

        # What flat_bwd needs of the differentiable arguments: their structure, avals and
        # which leaves are keys (not the arguments: tracers must not outlive their trace
        # through the staged bwd rule).
        diff_info = [_arg_info(d) for d in diff]

        def flat_bwd(res_leaves, cts):
            resid = tree_unflatten(store["res_tree"], list(res_leaves))
            if symbolic:
                ct_vals = [SymbolicZero(c.aval) if type(c) is Zero else c for c in cts]
            else:
                ct_vals = [(_zeros_from_aval(c.aval) if type(c) is Zero else c) for c in cts]
            ct = _kb.key_tangents_to_float0(tree_unflatten(store["tree"], ct_vals))
            cts_in = user_bwd(*nd_list, resid, ct)
            if not isinstance(cts_in, (tuple, list)):
                raise TypeError("Custom VJP bwd rule must produce a tuple of cotangents, one per "
                                f"differentiable argument; got {type(cts_in).__name__}.")
            cts_in = tuple(cts_in)
            if len(cts_in) != len(diff_info):
                raise TypeError(f"Custom VJP bwd rule must produce an output with the same "
                                 f"container (pytree) structure as the args tuple of the primal "
                                 f"function: expected {len(diff_info)} cotangents, got "
                                 f"{len(cts_in)}.")
            leaves = []
            for (d_tree, d_avals, d_keys), c in zip(diff_info, cts_in):
                if c is None:
                    leaves.extend(Zero(ad.tangent_aval(xa)) for xa in d_avals)
                    continue
                c_leaves = _cotangent_leaves(c, d_tree, len(d_avals))
                if c_leaves is None:
                    raise TypeError(
                        "Custom VJP bwd rule must produce an output with the same container "
                        "(pytree) structure as the args tuple of the primal function, and in "
                        "particular must produce a tuple of length equal to the number of "
                        "arguments to the primal function, but got bwd output structure "
                        f"{tree_flatten(cts_in)[1]} for primal input structure "
                        f"{tree_flatten(tuple(diff_trees_example(diff_info)))[1]}.")
                for xa, cl, xk in zip(d_avals, c_leaves, d_keys):
                    if cl is None or xk:  # keys' cotangents are float0 zeros
                        leaves.append(Zero(ad.tangent_aval(xa)))
                    elif type(cl) is SymbolicZero:
                        if tuple(cl.aval.shape) != tuple(xa.shape) or (
                                cl.aval.dtype != ad.tangent_aval(xa).dtype):
                            raise ValueError(
                                "Custom VJP bwd rule produced a SymbolicZero with a "
                                "shape/dtype that does not match the corresponding input "
                                f"tangent shape/dtype: the SymbolicZero had "
                                f"{cl.aval.str_short()} while the corresponding input had "
                                f"{xa.str_short()}. Consider just returning a None here "
                                "instead of a SymbolicZero object.")
                        leaves.append(Zero(ad.tangent_aval(xa)))
                    else:
                        if get_aval(cl).shape != xa.shape:
                            raise ValueError(
                                f"Custom VJP bwd rule must produce cotangents with the same "
                                f"shapes as the primal inputs; got {get_aval(cl).shape} for an "
                                f"input of shape {xa.shape}.")
                        leaves.append(cl)
            return leaves

        _set_display(flat_fwd, name=_fn_name(user_fun), bwd=user_bwd, fwd=user_fwd)
        outs = jax_protocol.custom_vjp_call(current_trace(), flat_fun, flat_fwd, flat_bwd, flat,
                                            None, symbolic_zeros=self.symbolic_zeros)
        return tree_unflatten(store["tree"], outs)


def _cotangent_leaves(c, d_tree, n):
    """The cotangent leaves a ``custom_vjp`` bwd rule gave for one argument of structure
    ``d_tree`` (``n`` leaves), as in JAX: ``None`` stands for zeros of a whole subtree
    (so a ``None`` inside the argument is matched by ``None``), ``SymbolicZero`` for one
    leaf. Returns ``n`` entries, ``None`` for a zero; ``None`` overall when the structures
    do not match."""
    def is_leaf(x):
        return x is None or type(x) is SymbolicZero
    c_leaves, c_tree = tree_flatten(c, is_leaf=is_leaf)
    if c_tree == d_tree:
        return c_leaves
    out = []

    def take(x, d):
        k = len(tree_flatten(d)[0])
        out.extend([x] * k)

    try:
        tree_map(take, c, tree_unflatten(d_tree, list(range(n))), is_leaf=is_leaf)
    except (ValueError, TypeError):
        out = None
    if out is None or len(out) != n:
        if len(c_leaves) == n:        # same leaves in another container: accepted
            return c_leaves
        return None                   # the caller raises JAX's TypeError
    return out


def _outside_transformations(args) -> bool:
    """No transformation is active and no argument is a tracer (eager call)."""
    from kiln.core import trace as core
    if core.current_trace() is not core.eval_trace:
        return False
    return not any(isinstance(x, Tracer) for x in tree_flatten(args)[0])


def _zeros_from_aval(aval):
    return ad.zeros_like_aval(aval)     # an extended dtype's zero is its rules' zero


# ----------------------------------------------------------------------------------------------
# custom_lin: the linear tangent map of a custom_vjp function.

custom_lin_p = Primitive("custom_lin")
custom_lin_p.multiple_results = True


def _custom_lin_impl(*args, **params):
    raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


custom_lin_p.impl = _custom_lin_impl
custom_lin_p.abstract_eval = lambda *avals, out_avals, **_: list(out_avals)
custom_lin_p.weak_type_rule = lambda *w, out_avals, **_: [a.weak_type for a in out_avals]


def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals, in_avals, symbolic_zeros):
    res = args[:num_res]
    cts_in = bwd(list(res), list(cts))
    return [None] * num_res + list(cts_in)


ad.transpose_rules[custom_lin_p] = _custom_lin_transpose
# The user's bwd runs even when every output cotangent is zero (it gets zeros), as in JAX.
ad.zero_cotangent_transposes[custom_lin_p] = lambda eqn: True


def bind_custom_lin(res, tangents, *, bwd, out_avals, in_avals, symbolic_zeros):
    """Bind ``custom_lin`` for residuals ``res`` of a forward rule.

    Residuals that are not arrays or tracers (Python scalars and other objects, such as
    the perturbation flags that Equinox keeps) reach ``bwd`` exactly as ``fwd`` returned
    them, as in JAX, where the forward rule's outputs are passed on untraced: they are
    closed over by the rule instead of becoming operands (which would turn them into
    arrays)."""
    res = list(res)
    dyn = [i for i, r in enumerate(res) if isinstance(r, (Tracer, Array))]
    if len(dyn) != len(res):
        static = {i: r for i, r in enumerate(res) if not isinstance(r, (Tracer, Array))}
        n_all = len(res)
        inner = bwd

        def bwd(dyn_res, cts):
            it = iter(dyn_res)
            return inner([static[i] if i in static else next(it) for i in range(n_all)], cts)
        _copy_display(bwd, inner)
        res = [res[i] for i in dyn]
    return custom_lin_p.bind(*res, *tangents, num_res=len(res), bwd=bwd,
                             out_avals=tuple(out_avals), in_avals=tuple(in_avals),
                             symbolic_zeros=symbolic_zeros)


def _custom_lin_jvp(primals, tangents, **params):
    raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


ad.jvp_rules[custom_lin_p] = _custom_lin_jvp


def _custom_lin_batch(axis_data, vals, dims, *, num_res, bwd, out_avals, in_avals,
                      symbolic_zeros):
    size = axis_data.size
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    res_avals = [get_aval(v) for v in vals[:num_res]]

    def batched_bwd(res, cts):
        def f(*xs):
            r, c = list(xs[:num_res]), list(xs[num_res:])
            out = bwd(r, c)
            return [_zeros_from_aval(o.aval) if type(o) is Zero else o for o in out]
        outs, odims = batching.batch_flat(f, list(res) + list(cts), [0] * (len(res) + len(cts)),
                                          axis_data)
        return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]

    b_out = tuple(a.update(shape=(size,) + a.shape) for a in out_avals)
    b_in = tuple(a.update(shape=(size,) + a.shape) for a in in_avals)
    del res_avals
    outs = custom_lin_p.bind(*vals, num_res=num_res, bwd=batched_bwd, out_avals=b_out,
                             in_avals=b_in, symbolic_zeros=symbolic_zeros)
    return outs, [0] * len(outs)


batching.batch_rules[custom_lin_p] = _custom_lin_batch


# ----------------------------------------------------------------------------------------------
# Staged custom_jvp_call / custom_vjp_call equations.

class _CustomJVPCallPrimitive(Primitive):
    """``custom_jvp_call``: also re-bindable as JAX 0.10 re-binds it, from
    :meth:`get_bind_params`' ``subfuns=(fun, jvp)`` (``lu.WrappedFun`` s: ``fun`` applies
    the function; ``jvp(*primals, *tangents)`` returns ``(*primals_out, *tangents_out)``,
    zeros as :class:`SymbolicZero`)."""

    def get_bind_params(self, params):
        from kiln.extend.linear_util import wrap_init
        new = dict(params)
        call_jaxpr = new.pop("call_jaxpr")
        new.pop("num_consts")
        jvp_fun = new.pop("jvp_jaxpr_fun")

        def fun(*xs):
            return eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *xs)

        def jvp(*xs):
            n = len(xs) // 2
            ts = [Zero(t.aval) if type(t) is SymbolicZero else t for t in xs[n:]]
            p_out, t_out = jvp_fun(list(xs[:n]), ts)
            return [*p_out, *[SymbolicZero(t.aval) if type(t) is Zero else t for t in t_out]]

        new["subfuns"] = (wrap_init(fun), wrap_init(jvp))
        return new

    def bind(self, *args, **params):
        if "subfuns" not in params:
            return super().bind(*args, **params)
        fun, jvp = params.pop("subfuns")
        symbolic = params.pop("symbolic_zeros", False)

        def flat_fun(*xs):
            return list(fun.call_wrapped(*xs))

        def flat_jvp(primals, tangents):
            ts = [SymbolicZero(t.aval) if type(t) is Zero else t for t in tangents]
            outs = list(jvp.call_wrapped(*primals, *ts))
            k = len(outs) // 2
            return outs[:k], [Zero(t.aval) if type(t) is SymbolicZero else t for t in outs[k:]]

        return current_trace().process_custom_jvp_call(flat_fun, flat_jvp, list(args),
                                                       symbolic_zeros=symbolic)


custom_jvp_call_p = _CustomJVPCallPrimitive("custom_jvp_call")
custom_jvp_call_p.multiple_results = True
custom_vjp_call_p = Primitive("custom_vjp_call")
custom_vjp_call_p.multiple_results = True


def _fn_name(f) -> str:
    f = getattr(f, "func", f)          # functools.partial
    return getattr(f, "__name__", type(f).__name__)


def _set_display(fn, **shown):
    """Attach what a staged equation prints (JAX prints the user's function names, not our
    internal wrappers) to the callable that is stored in the equation's params."""
    fn._kiln_display = shown
    return fn


def _copy_display(dst, src):
    shown = getattr(src, "_kiln_display", None)
    if shown is not None:
        dst._kiln_display = shown
    return dst


def _pp_custom_jvp(params):
    shown = dict(getattr(params["jvp_jaxpr_fun"], "_kiln_display", {}))
    shown.update(call_jaxpr=params["call_jaxpr"], symbolic_zeros=params["symbolic_zeros"])
    return shown


def _pp_custom_vjp(params):
    shown = dict(getattr(params["fwd_jaxpr_thunk"], "_kiln_display", {}))
    shown.update(call_jaxpr=params["call_jaxpr"], symbolic_zeros=params["symbolic_zeros"])
    return shown


pp_param_rules["custom_jvp_call"] = _pp_custom_jvp
pp_param_rules["custom_vjp_call"] = _pp_custom_vjp


def _call_impl(*args, call_jaxpr: ClosedJaxpr, **_):
    from kiln.backends import reference
    return reference.run_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, args)


for _p in (custom_jvp_call_p, custom_vjp_call_p):
    _p.impl = _call_impl
    _p.abstract_eval = lambda *avals, call_jaxpr, **_: call_jaxpr.out_avals
    _p.weak_type_rule = lambda *w, call_jaxpr, **_: [a.weak_type for a in call_jaxpr.out_avals]


def _trace_fun(fun, args):
    jaxpr, consts = staging.trace_to_jaxpr(fun, [get_aval(a) for a in args])
    return staging.split_concrete_consts(jaxpr, consts)


def stage_custom_jvp(trace, fun, jvp, args, symbolic_zeros):
    with set_current_trace(trace):
        closed, tconsts = _trace_fun(fun, args)
    nc = len(tconsts)

    def jvp_c(primals, tangents):
        return jvp(list(primals[nc:]), list(tangents[nc:]))
    _copy_display(jvp_c, jvp)

    return trace.stage(custom_jvp_call_p, [*tconsts, *args],
                       dict(call_jaxpr=closed, jvp_jaxpr_fun=jvp_c, num_consts=nc,
                            symbolic_zeros=symbolic_zeros),
                       out_avals=closed.out_avals)


def _custom_jvp_call_jvp(primals, tangents, *, call_jaxpr, jvp_jaxpr_fun, num_consts,
                         symbolic_zeros):
    if not symbolic_zeros:
        tangents = [ad.instantiate_zeros(t) for t in tangents]
    return jvp_jaxpr_fun(list(primals), list(tangents))


ad.jvp_rules[custom_jvp_call_p] = _custom_jvp_call_jvp


def _custom_jvp_call_batch(axis_data, vals, dims, *, call_jaxpr, jvp_jaxpr_fun, num_consts,
                           symbolic_zeros):
    fun = functools.partial(eval_jaxpr, call_jaxpr.jaxpr, call_jaxpr.consts)
    bfun, bjvp, bvals = _batched_jvp_callables(axis_data, fun, jvp_jaxpr_fun, vals, dims)
    with set_current_trace(current_trace()):
        closed, tconsts = _trace_fun(bfun, bvals)
    outs = custom_jvp_call_p.bind(*tconsts, *bvals, call_jaxpr=closed,
                                  jvp_jaxpr_fun=_copy_display(_drop_consts(bjvp, len(tconsts)),
                                                              jvp_jaxpr_fun),
                                  num_consts=len(tconsts), symbolic_zeros=symbolic_zeros)
    return outs, [0] * len(outs)


def _drop_consts(jvp, nc):
    if nc == 0:
        return jvp
    return lambda p, t: jvp(list(p[nc:]), list(t[nc:]))


batching.batch_rules[custom_jvp_call_p] = _custom_jvp_call_batch


def _batched_jvp_callables(axis_data, fun, jvp, vals, dims):
    size = axis_data.size
    bvals = [batching.bdim_at_front(v, d, size) if d is not None else v
             for v, d in zip(vals, dims)]
    bdims = [None if d is None else 0 for d in dims]

    def bfun(*xs):
        outs, odims = batching.batch_flat(fun, list(xs), bdims, axis_data)
        return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]

    def bjvp(primals, tangents):
        n = len(primals)
        tangents = [ad.instantiate_zeros(t) for t in tangents]

        def f(*xs):
            p_out, t_out = jvp(list(xs[:n]), list(xs[n:]))
            return list(p_out) + [ad.instantiate_zeros(t) for t in t_out]
        tdims = [d if get_aval(t).ndim == get_aval(p).ndim else None
                 for p, t, d in zip(primals, tangents, bdims)]
        outs, odims = batching.batch_flat(f, list(primals) + list(tangents), bdims + tdims,
                                          axis_data)
        outs = [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]
        k = len(outs) // 2
        return outs[:k], outs[k:]

    return bfun, bjvp, bvals


def batch_custom_jvp(trace, fun, jvp, vals, dims, symbolic_zeros):
    bfun, bjvp, bvals = _batched_jvp_callables(trace.axis_data, fun, jvp, vals, dims)
    _copy_display(bjvp, jvp)
    outs = jax_protocol.custom_jvp_call(trace.parent, bfun, bjvp, bvals, symbolic_zeros=False)
    return [batching.BatchTracer(trace, o, 0) for o in outs]


def stage_custom_vjp(trace, fun, fwd, bwd, args, out_trees, symbolic_zeros):
    with set_current_trace(trace):
        closed, tconsts = _trace_fun(fun, args)
    nc = len(tconsts)

    def fwd_c(primals, perturbed=None):
        return fwd(list(primals[nc:]), None if perturbed is None else list(perturbed[nc:]))
    _copy_display(fwd_c, fwd)

    def bwd_c(res, cts):
        return [None] * 0 + list(bwd(res, cts))

    return trace.stage(custom_vjp_call_p, [*tconsts, *args],
                       dict(call_jaxpr=closed, fwd_jaxpr_thunk=fwd_c, bwd=bwd_c, num_consts=nc,
                            symbolic_zeros=symbolic_zeros),
                       out_avals=closed.out_avals)


def _custom_vjp_call_jvp(primals, tangents, *, call_jaxpr, fwd_jaxpr_thunk, bwd, num_consts,
                         symbolic_zeros):
    nc = num_consts
    perturbed = [type(t) is not Zero for t in tangents]
    p_out, res = fwd_jaxpr_thunk(list(primals), perturbed)
    tangents = [ad.instantiate_zeros(t) for t in tangents[nc:]]
    in_avals = [get_aval(p) for p in primals[nc:]]
    out_avals = [ad.tangent_aval(get_aval(p)) for p in p_out]
    t_out = bind_custom_lin(res, tangents, bwd=bwd, out_avals=out_avals, in_avals=in_avals,
                            symbolic_zeros=symbolic_zeros)
    return p_out, t_out


ad.jvp_rules[custom_vjp_call_p] = _custom_vjp_call_jvp


def _batched_vjp_callables(axis_data, fun, fwd, bwd, vals, dims):
    size = axis_data.size
    bvals = [batching.bdim_at_front(v, d, size) if d is not None else v
             for v, d in zip(vals, dims)]
    bdims = [None if d is None else 0 for d in dims]
    res_dims = {}

    def bfun(*xs):
        outs, odims = batching.batch_flat(fun, list(xs), bdims, axis_data)
        return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]

    def bfwd(primals, perturbed=None):
        cell = {}

        def f(*xs):
            p_out, res = fwd(list(xs), perturbed)
            cell["n"] = len(p_out)
            return list(p_out) + list(res)
        outs, odims = batching.batch_flat(f, list(primals), bdims, axis_data)
        outs = [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]
        k = cell["n"]
        res_dims["n"] = len(outs) - k
        return outs[:k], outs[k:]

    def bbwd(res, cts):
        n = len(res)

        def f(*xs):
            out = bwd(list(xs[:n]), list(xs[n:]))
            return [_zeros_from_aval(o.aval) if type(o) is Zero else o for o in out]
        cts = [ad.instantiate_zeros(c) for c in cts]
        outs, odims = batching.batch_flat(f, list(res) + list(cts), [0] * (n + len(cts)),
                                          axis_data)
        from kiln.lax import reduce_sum
        # Inputs that were not batched get the sum of the per-lane cotangents.
        return [batching.matchaxis(o, d, 0, size) if bd is not None else
                (reduce_sum(o, (d,)) if d is not None else o)
                for o, d, bd in zip(outs, odims, bdims)]

    return bfun, bfwd, bbwd, bvals


def batch_custom_vjp(trace, fun, fwd, bwd, vals, dims, out_trees, symbolic_zeros):
    bfun, bfwd, bbwd, bvals = _batched_vjp_callables(trace.axis_data, fun, fwd, bwd, vals, dims)
    _copy_display(bfwd, fwd)
    outs = jax_protocol.custom_vjp_call(trace.parent, bfun, bfwd, bbwd, bvals, out_trees,
                                        symbolic_zeros=symbolic_zeros)
    return [batching.BatchTracer(trace, o, 0) for o in outs]


def _custom_vjp_call_batch(axis_data, vals, dims, *, call_jaxpr, fwd_jaxpr_thunk, bwd,
                           num_consts, symbolic_zeros):
    fun = functools.partial(eval_jaxpr, call_jaxpr.jaxpr, call_jaxpr.consts)
    bfun, bfwd, bbwd, bvals = _batched_vjp_callables(axis_data, fun, fwd_jaxpr_thunk, bwd, vals,
                                                     dims)
    closed, tconsts = _trace_fun(bfun, bvals)
    nc = len(tconsts)
    outs = custom_vjp_call_p.bind(*tconsts, *bvals, call_jaxpr=closed,
                                  fwd_jaxpr_thunk=_copy_display(
                                      (lambda p, z=None: bfwd(
                                          list(p[nc:]), None if z is None else list(z[nc:])))
                                      if nc else bfwd,
                                      fwd_jaxpr_thunk),
                                  bwd=bbwd, num_consts=nc, symbolic_zeros=symbolic_zeros)
    return outs, [0] * len(outs)


batching.batch_rules[custom_vjp_call_p] = _custom_vjp_call_batch


# ----------------------------------------------------------------------------------------------
# checkpoint / remat

remat_p = Primitive("checkpoint")
remat_p.multiple_results = True
remat_p.impl = lambda *args, jaxpr, prevent_cse, differentiated, policy: _call_impl(
    *args, call_jaxpr=jaxpr)
remat_p.abstract_eval = lambda *avals, jaxpr, **_: jaxpr.out_avals
remat_p.weak_type_rule = lambda *w, jaxpr, **_: [a.weak_type for a in jaxpr.out_avals]


def _remat_jvp(primals, tangents, *, jaxpr, prevent_cse, differentiated, policy):
    nonzero = [type(t) is not Zero for t in tangents]
    n = len(primals)

    def fun(*args):
        ps = list(args[:n])
        it = iter(args[n:])
        ts = [next(it) if nz else Zero(ad.tangent_aval(get_aval(p)))
              for p, nz in zip(ps, nonzero)]
        p_out, t_out = ad.jvp_flat(lambda *xs: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *xs), ps, ts)
        return list(p_out) + list(t_out)

    args = list(primals) + [t for t in tangents if type(t) is not Zero]
    closed, tconsts = _trace_fun(fun, args)
    outs = remat_p.bind(*tconsts, *args, jaxpr=closed, prevent_cse=prevent_cse,
                        differentiated=True, policy=policy)
    k = len(outs) // 2
    return outs[:k], outs[k:]


ad.jvp_rules[remat_p] = _remat_jvp


def _remat_partial_eval(trace, args, params):
    """Known part: compute only the primal outputs. Unknown part: recompute the forward
    pass from the (known) inputs inside the linear jaxpr, so no intermediate is saved."""
    from kiln.interpreters.pjit import partial_eval_jaxpr
    jaxpr = params["jaxpr"]
    unknowns = [trace.is_own(x) for x in args]
    known, unknown, out_unk, num_res = partial_eval_jaxpr(jaxpr, unknowns)
    known_args = [x for x, u in zip(args, unknowns) if not u]
    with set_current_trace(trace.parent):
        kouts = eval_jaxpr(known.jaxpr, known.consts, *known_args)
    n_known_out = len(kouts) - num_res
    known_outs = kouts[:n_known_out]
    unknown_args = [x for x, u in zip(args, unknowns) if u]
    n_k = len(known_args)

    def recompute(*xs):
        ka, ua = xs[:n_k], xs[n_k:]
        res = eval_jaxpr(known.jaxpr, known.consts, *ka)[n_known_out:]
        return eval_jaxpr(unknown.jaxpr, unknown.consts, *res, *ua)

    rec_avals = [get_aval(x) for x in known_args] + [x.aval for x in unknown_args]
    rec_jaxpr, rec_consts = staging.trace_to_jaxpr(recompute, rec_avals)
    closed, tconsts = staging.split_concrete_consts(rec_jaxpr, rec_consts)
    uouts = trace.stage(remat_p, [*tconsts, *known_args, *unknown_args],
                        dict(jaxpr=closed, prevent_cse=params["prevent_cse"],
                             differentiated=True, policy=params["policy"]),
                        out_avals=closed.out_avals)
    ki, ui = iter(known_outs), iter(uouts)
    return [next(ui) if u else next(ki) for u in out_unk]


staging.partial_eval_rules[remat_p] = _remat_partial_eval


def _remat_transpose(cts, *args, jaxpr, prevent_cse, differentiated, policy):
    # The transposed body stays inside a checkpoint equation, so the recomputed forward
    # pass remains a separate region of the program.
    from kiln.lax.control.common import transpose_jaxpr
    linear = [ad.is_undefined_primal(x) for x in args]
    ct_avals = jaxpr.out_avals
    cts = [ad.instantiate_zeros(c) if type(c) is Zero else c for c in cts]
    t = transpose_jaxpr(jaxpr, linear, ct_avals)
    nonlin = [x for x, lin in zip(args, linear) if not lin]
    outs = remat_p.bind(*nonlin, *cts, jaxpr=t, prevent_cse=prevent_cse,
                        differentiated=True, policy=policy)
    it = iter(outs)
    return [next(it) if lin else None for lin in linear]


ad.transpose_rules[remat_p] = _remat_transpose


def _remat_batch(axis_data, vals, dims, *, jaxpr, prevent_cse, differentiated, policy):
    size = axis_data.size

    def fun(*xs):
        outs, odims = batching.batch_flat(
            lambda *a: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a), list(xs), list(dims), axis_data)
        return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, odims)]

    closed, tconsts = _trace_fun(fun, vals)
    outs = remat_p.bind(*tconsts, *vals, jaxpr=closed, prevent_cse=prevent_cse,
                        differentiated=differentiated, policy=policy)
    return outs, [0] * len(outs)


batching.batch_rules[remat_p] = _remat_batch


@api_boundary
def checkpoint(fun=None, *, prevent_cse: bool = True, policy=None, static_argnums=()):
    """Rematerialize ``fun``'s intermediates in the backward pass instead of storing them.

    Gradients are identical to those of ``fun``; only memory/compute trade off. ``policy``
    is accepted; every intermediate is recomputed (JAX's default ``nothing_saveable``).
    """
    if fun is None:
        return lambda f: checkpoint(f, prevent_cse=prevent_cse, policy=policy,
                                    static_argnums=static_argnums)
    static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(
        static_argnums)

    @_wraps(fun)
    @api_boundary
    def wrapped(*args, **kwargs):
        dyn = [a for i, a in enumerate(args) if i not in static_argnums]
        flat, in_tree = tree_flatten((tuple(dyn), kwargs))
        store = {}

        def flat_fun(*xs):
            d, kw = tree_unflatten(in_tree, list(xs))
            it = iter(d)
            full = [a if i in static_argnums else next(it) for i, a in enumerate(args)]
            out = fun(*full, **kw)
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return leaves

        closed, tconsts = _trace_fun(flat_fun, flat)
        outs = remat_p.bind(*tconsts, *flat, jaxpr=closed, prevent_cse=prevent_cse,
                            differentiated=False, policy=policy)
        return tree_unflatten(store["tree"], outs)

    return wrapped


remat = checkpoint
_ = (tree_structure,)


# ----------------------------------------------------------------------------------------------
# custom_gradient: a TensorFlow-style front end to custom_vjp.

@register_pytree_node_class
class _GradientRule:
    """Residuals of a ``custom_gradient`` function: its gradient rule traced to a jaxpr
    (static) and the values the rule closes over (the pytree's leaves)."""

    def __init__(self, jaxpr, in_tree, out_tree, consts):
        self.jaxpr = jaxpr
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.consts = consts

    def tree_flatten(self):
        return tuple(self.consts), (self.jaxpr, self.in_tree, self.out_tree)

    @classmethod
    def tree_unflatten(cls, aux, consts):
        jaxpr, in_tree, out_tree = aux
        return cls(jaxpr, in_tree, out_tree, list(consts))


def custom_gradient(fun):
    """Define a function and its gradient together, as ``tf.custom_gradient`` does.

    ``fun(*args)`` returns a pair ``(value, vjp_fn)``: the function's output and a function
    mapping an output cotangent to a tuple of cotangents, one per argument. The result is a
    ``custom_vjp`` function that returns ``value``; reverse-mode differentiation calls
    ``vjp_fn``. ``vjp_fn`` may close over intermediate values of ``fun`` (sharing work between
    the forward and backward passes), but it is traced with abstract cotangents, so Python
    control flow on the cotangents raises an error. Forward-mode differentiation (``jvp``)
    is not available, as for any ``custom_vjp`` function.

    Args:
      fun: a callable returning ``(output, vjp_fn)``.

    Returns:
      A callable with the signature of ``fun`` that returns only the output.

    Example:
      >>> @custom_gradient
      ... def f(x):
      ...   return x ** 2, lambda g: (g * x,)
      >>> print(grad(f)(3.))
      3.0
    """
    @custom_vjp
    def wrapped(*args, **kwargs):
        ans, _ = fun(*args, **kwargs)
        return ans

    def fwd(*args, **kwargs):
        ans, rule = fun(*args, **kwargs)
        ans_flat, out_tree = tree_flatten((ans,))
        store = {}

        def flat_rule(*cts):
            out = rule(*tree_unflatten(out_tree, list(cts)))
            leaves, store["in_tree"] = tree_flatten(out)
            return leaves

        ct_avals = [ad.tangent_aval(get_aval(x)) for x in ans_flat]
        jaxpr, consts = staging.trace_to_jaxpr(flat_rule, ct_avals)
        return ans, _GradientRule(jaxpr, store["in_tree"], out_tree, list(consts))

    def bwd(res, cts):
        cts_flat, out_tree = tree_flatten((cts,))
        if out_tree != res.out_tree:
            raise TypeError(f"{res.out_tree}\n!=\n{out_tree}")
        cts_out = tree_unflatten(res.in_tree, eval_jaxpr(res.jaxpr, res.consts, *cts_flat))
        if res.in_tree.num_nodes == 1:     # a bare leaf (or None): one argument
            cts_out = (cts_out,)
        return cts_out

    wrapped.defvjp(fwd, bwd)
    return wrapped
