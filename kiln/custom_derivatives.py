"""``custom_jvp``, ``custom_vjp``, ``custom_gradient`` and ``checkpoint``/``remat``.

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

The primitives and their rules live in the interpreters' layer
(:mod:`kiln.interpreters.custom_calls`, :mod:`kiln.interpreters.remat`); this module is
the user-facing API and re-exports them under their old names.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref
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
from kiln.array import make_array
from kiln.config import config as _cfg
from kiln.core.jaxpr import eval_jaxpr
from kiln.core.trace import Tracer, current_trace, get_aval
from kiln.interpreters import ad, jax_protocol, staging
from kiln.interpreters.ad import Zero
from kiln.interpreters.custom_calls import (  # noqa: F401  (re-exported)
    SymbolicZero,
    _copy_display,
    _fn_name,
    _set_display,
    _trace_fun,
    _zeros_from_aval,
    batch_custom_jvp,
    batch_custom_vjp,
    bind_custom_lin,
    custom_jvp_call_p,
    custom_lin_p,
    custom_vjp_call_p,
    stage_custom_jvp,
    stage_custom_vjp,
)
from kiln.interpreters.remat import remat_p
from kiln.lax import gather_scatter as _gather_scatter


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

    def __getattr__(self, name):
        # As JAX: attributes this object lacks (``def_vmap`` of a wrapped
        # ``custom_vmap``, ...) are the wrapped function's.
        if name == "fun":
            raise AttributeError(name)
        return getattr(self.fun, name)

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
            store["fun_type"] = (tree, [get_aval(x) for x in leaves])
            return leaves

        def flat_jvp(primals, tangents):
            py_p = tree_unflatten(in_tree, list(primals))
            ts = [SymbolicZero(t.aval) if type(t) is Zero else t for t in tangents]
            py_t = _kb.key_tangents_to_float0(tree_unflatten(in_tree, ts))
            nd = [nondiff[i] for i in sorted(nondiff)]
            res = user_jvp(*nd, tuple(py_p), tuple(py_t))
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError(f"Custom JVP rule {_fn_name(user_jvp)} for function "
                                f"{_fn_name(user_fun)} must produce a pair (list or tuple of "
                                "length two) representing primal and tangent outputs, but got "
                                f"{res}.")
            p_out, t_out = res
            p_leaves, p_tree = tree_flatten(p_out)
            p_keys = _public_tree.tree_leaves(p_out)
            t_leaves, t_tree = _public_tree.tree_flatten(
                t_out, is_leaf=lambda x: isinstance(x, SymbolicZero))
            if _public_tree.tree_structure(p_out) != t_tree:
                raise TypeError(f"Custom JVP rule {_fn_name(user_jvp)} for function "
                                f"{_fn_name(user_fun)} must produce primal and tangent outputs "
                                "with equal container (pytree) structures, but got "
                                f"{_public_tree.tree_structure(p_out)} and {t_tree} "
                                "respectively.")
            if "fun_type" in store:     # the function itself ran (staged): types must agree
                _check_jvp_primal_type(user_jvp, user_fun, store["fun_type"], p_tree,
                                       [get_aval(x) for x in p_leaves])
            store["tree"] = p_tree
            outs_t, bad = [], []
            for p, t, pk in zip(p_leaves, t_leaves, p_keys):
                pa = get_aval(p)
                if isinstance(t, SymbolicZero) or t is None or _is_key(pk):
                    # A key's tangent is float0: always a zero of its data.
                    outs_t.append(Zero(ad.tangent_aval(pa)))
                    continue
                ta = get_aval(t)
                exp = ad.tangent_aval(pa)
                if ta.shape != pa.shape or (ta.dtype != exp.dtype
                                            and exp.dtype != dtypes.float0):
                    bad.append((pa, exp, ta))
                outs_t.append(Zero(exp) if exp.dtype == dtypes.float0 else t)
            if bad:
                _raise_tangent_type_error(bad, len(p_leaves))
            return list(p_leaves), outs_t

        _set_display(flat_jvp, name=_fn_name(user_fun), jvp=user_jvp)
        outs = jax_protocol.custom_jvp_call(current_trace(), flat_fun, flat_jvp, flat,
                                            symbolic_zeros=symbolic)
        return tree_unflatten(store["tree"], outs)


def _strong(a) -> str:
    return a.update(weak_type=False).str_short(short_dtypes=False)


def _raise_tangent_type_error(bad, n_out: int):
    """JAX's TypeError for tangent outputs of a custom JVP rule whose types are not the
    tangent types of the primal outputs (``bad``: ``(primal, expected, got)`` avals)."""
    if n_out == 1:
        (pa, exp, ta), = bad
        raise TypeError("Custom JVP rule must produce primal and tangent outputs with "
                        f"corresponding shapes and dtypes. Expected {_strong(exp)} (tangent "
                        f"type of {_strong(pa)}) but got {_strong(ta)}.")
    lines = "\n".join(f"  primal {_strong(pa)} with tangent {_strong(ta)}, expecting tangent "
                      f"{_strong(exp)}" for pa, exp, ta in bad)
    raise TypeError("Custom JVP rule must produce primal and tangent outputs with "
                    f"corresponding shapes and dtypes, but got:\n{lines}")


def _check_jvp_primal_type(user_jvp, user_fun, fun_type, p_tree, p_avals):
    """JAX's TypeErrors for a JVP rule whose primal output differs in structure or in
    shapes/dtypes from the function's output (known when the function was staged)."""
    f_tree, f_avals = fun_type
    jvp_name, fun_name = _fn_name(user_jvp), _fn_name(user_fun)

    def shown(tree, avals):
        shorts = [a.str_short(short_dtypes=False) for a in avals]
        return str(tree_unflatten(tree, shorts)).replace("'", "")
    head = (f"Custom JVP rule {jvp_name} for function {fun_name} must produce a pair (list or "
            "tuple of length two) where the first element represents the primal output "
            "(equal in value to the output of the custom_jvp-decorated function "
            f"{fun_name}, ")
    if f_tree != p_tree:
        raise TypeError(
            head + "and in particular of the same container/pytree structure), but instead "
            "the JVP rule output's first element had container/pytree structure:\n"
            f"    {shown(p_tree, p_avals)}\nwhile the custom_jvp-decorated function "
            f"{fun_name} had output container/pytree structure:\n    "
            f"{shown(f_tree, f_avals)}.")
    if any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(p_avals, f_avals)):
        raise TypeError(
            head + "and in particular with leaves of the same shape/dtype), but instead the "
            "JVP rule output's first element had shapes/dtypes of:\n"
            f"    {shown(p_tree, p_avals)}\nwhile the custom_jvp-decorated function "
            f"{fun_name} had output shapes/dtypes of:\n    {shown(f_tree, f_avals)}")


class custom_vjp:
    """A function with a custom VJP (``defvjp(fwd, bwd)``), as ``jax.custom_vjp``."""

    def __init__(self, fun, nondiff_argnums=(), nondiff_argnames=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff_positions(fun, nondiff_argnums, nondiff_argnames)
        self.fwd = None
        self.bwd = None
        self.symbolic_zeros = False
        self.optimize_remat = False

    def __getattr__(self, name):
        # As JAX: attributes this object lacks (``def_vmap`` of a wrapped
        # ``custom_vmap``, ...) are the wrapped function's.
        if name == "fun":
            raise AttributeError(name)
        return getattr(self.fun, name)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def defvjp(self, fwd, bwd, symbolic_zeros: bool = False, optimize_remat: bool = False):
        """``fwd(*args) -> (out, residuals)``; ``bwd(*nondiff, residuals, ct) -> cts tuple``.

        ``optimize_remat``: the forward rule runs as a ``remat_opt`` equation that
        dead-code elimination (``jit``, ``checkpoint``) replaces by the function itself
        where none of its residuals is used (:func:`optimize_remat_of_custom_vjp_fwd`)."""
        self.fwd = fwd
        self.bwd = bwd
        self.symbolic_zeros = symbolic_zeros
        self.optimize_remat = optimize_remat
        if symbolic_zeros and optimize_remat:
            raise NotImplementedError(
                "remat optimization for custom_vjp does not support symbolic zeros")

    @api_boundary
    def __call__(self, *args, **kwargs):
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {self.__name__} using "
                                 "defvjp.")
        args = _resolve_kwargs(self.fun, args, kwargs, "custom_vjp")
        n = len(args)
        if _outside_transformations(args):
            return self.fun(*args)      # as custom_jvp's
        for i in self.nondiff_argnums:
            _check_for_tracers(args[i])
        nondiff, diff = _split_nondiff(args, self.nondiff_argnums)
        flat, in_tree = tree_flatten(tuple(diff))
        store = {}
        user_fun, user_fwd, user_bwd = self.fun, self.fwd, self.bwd
        if self.optimize_remat:
            user_fwd = optimize_remat_of_custom_vjp_fwd(
                user_fun, None, user_fwd, None, nondiff_argnums=self.nondiff_argnums)
        nd_list = [nondiff[i] for i in sorted(nondiff)]

        def flat_fun(*xs):
            out = user_fun(*_merge(nondiff, tree_unflatten(in_tree, list(xs)), n))
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            store["fun_type"] = (tree, [get_aval(x) for x in leaves])
            return leaves

        symbolic = self.symbolic_zeros

        def flat_fwd(primals, perturbed=None):
            primals = list(primals)
            if symbolic:
                if perturbed is None:
                    perturbed = [True] * len(primals)
                primals = [CustomVJPPrimal(p, bool(z)) for p, z in zip(primals, perturbed)]
            res = user_fwd(*_merge(nondiff, tree_unflatten(in_tree, primals), n))
            fwd_name, fun_name = _fn_name(user_fwd), _fn_name(user_fun)
            pair = (f"Custom VJP fwd rule {fwd_name} for function {fun_name} must produce a "
                    "pair (list or tuple of length two) where the first element represents "
                    "the primal output (equal to the output of the custom_vjp-decorated "
                    f"function {fun_name}) and the second element represents residuals (i.e. "
                    "values stored from the forward pass for use on the backward pass), but ")
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError(pair + f"instead of a pair the fwd rule {fwd_name} produced "
                                f"{res}.")
            out, resid = res
            o_leaves, o_tree = tree_flatten(out)
            r_leaves, r_tree = tree_flatten(resid)
            if "fun_type" in store:     # the function itself ran (staged): types must agree
                f_tree, f_avals = store["fun_type"]
                o_avals = [get_aval(x) for x in o_leaves]

                def shown(tree, avals):
                    return str(tree_unflatten(tree, [a.str_short(short_dtypes=False)
                                                     for a in avals])).replace("'", "")
                if f_tree != o_tree:
                    raise TypeError(
                        pair + "instead the fwd rule output's first element had "
                        f"container/pytree structure:\n    {shown(o_tree, o_avals)}\nwhile "
                        f"the custom_vjp-decorated function {fun_name} had output "
                        f"container/pytree structure:\n    {shown(f_tree, f_avals)}.")
                bad = [i for i, (a, b) in enumerate(zip(o_avals, f_avals))
                       if a.shape != b.shape or a.dtype != b.dtype]
                if bad and getattr(_cfg, "jax_custom_vjp3", False):
                    # JAX's custom_vjp3 names the first leaf that differs.
                    i = bad[0]
                    path = _public_tree.tree_flatten_with_path(out)[0][i][0]
                    raise TypeError(
                        f"at {_public_tree.keystr(path)}, got fwd output type "
                        f"{o_avals[i].str_short(short_dtypes=False)} which doesn't match "
                        f"primal output type {f_avals[i].str_short(short_dtypes=False)}")
                if bad:
                    raise TypeError(
                        pair + "instead the fwd rule output's first element had "
                        f"shapes/dtypes of:\n    {shown(o_tree, o_avals)}\nwhile the "
                        f"custom_vjp-decorated function {fun_name} had output shapes/dtypes "
                        f"of:\n    {shown(f_tree, f_avals)}")
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
            if isinstance(cts_in, list) and len(cts_in) == len(diff_info):
                cts_in = tuple(cts_in)
            if not isinstance(cts_in, tuple) or len(cts_in) != len(diff_info):
                raise TypeError(_bwd_structure_message(cts_in, diff_info))
            leaves = []
            for argnum, ((d_tree, d_avals, d_keys), c) in enumerate(zip(diff_info, cts_in)):
                if c is None:
                    leaves.extend(Zero(ad.tangent_aval(xa)) for xa in d_avals)
                    continue
                c_leaves = _cotangent_leaves(c, d_tree, len(d_avals))
                if c_leaves is None:
                    raise TypeError(_bwd_structure_message(cts_in, diff_info))
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
                        if get_aval(cl).shape != xa.shape and not _cfg.jax_disable_bwd_checks:
                            raise ValueError(
                                "Custom VJP bwd rule must produce an output with the same "
                                "type as the args tuple of the primal function, but at "
                                f"output{_leaf_keystr(argnum, d_tree, c_leaves, cl)} the bwd "
                                "rule produced an output of type "
                                f"{get_aval(cl).str_short(short_dtypes=False)} corresponding "
                                f"to an input of type {xa.str_short(short_dtypes=False)}")
                        leaves.append(cl)
            return leaves

        if getattr(_cfg, "jax_custom_vjp3", False):
            _check_no_closed_over_tracers(flat_fun, flat, user_fun)
        _set_display(flat_fwd, name=_fn_name(user_fun), bwd=user_bwd, fwd=user_fwd)
        _set_display(flat_bwd, bwd=user_bwd)
        outs = jax_protocol.custom_vjp_call(current_trace(), flat_fun, flat_fwd, flat_bwd, flat,
                                            None, symbolic_zeros=self.symbolic_zeros)
        return tree_unflatten(store["tree"], outs)


def _check_no_closed_over_tracers(flat_fun, flat, user_fun):
    """With ``jax_custom_vjp3`` (JAX's rewrite of custom_vjp): the function traced on its
    own must close over no tracer (of ``vmap``, ``jit``, ``jvp``, ...): JAX's error."""
    from kiln.errors import UnexpectedTracerError
    _, consts = staging.trace_to_jaxpr(flat_fun, [get_aval(x) for x in flat])
    t = next((c for c in consts if isinstance(c, Tracer)), None)
    if t is not None:
        raise UnexpectedTracerError(
            f"custom_vjp-decorated function {user_fun} closed over a {type(t).__name__} of "
            f"type {get_aval(t).str_short()}, but custom_vjp functions can't close over "
            f"Tracers. Rewrite {user_fun} to take it as an explicit input.")


def _check_for_tracers(x):
    """JAX's error for a tracer among a ``custom_vjp``'s ``nondiff_argnums`` arguments."""
    from kiln.errors import UnexpectedTracerError
    if any(isinstance(leaf, Tracer) for leaf in tree_flatten(x)[0]):
        raise UnexpectedTracerError(
            "Found a JAX Tracer object passed as an argument to a custom_vjp function in a "
            "position indicated by nondiff_argnums as non-differentiable. Tracers cannot be "
            "passed as non-differentiable arguments to custom_vjp functions; instead, "
            "nondiff_argnums should only be used for arguments that can't be or contain JAX "
            "tracers, e.g. function-valued arguments. In particular, array-valued arguments "
            "should typically not be indicated as nondiff_argnums.")


def optimize_remat_of_custom_vjp_fwd(fun, debug_fun, fwd, debug_fwd, nondiff_argnums=(),
                                     symbolic_zeros: bool = False):
    """``fwd`` (a ``custom_vjp`` forward rule of ``fun``) as one ``remat_opt`` equation:
    the same ``(out, residuals)``, but where dead-code elimination finds none of the
    residuals used (under ``jit``, or the forward pass of a ``checkpoint``) the
    equation becomes ``fun`` itself (:mod:`kiln.interpreters.remat_opt`). Residuals that
    are arguments of ``fwd`` are passed through, not outputs of the equation.
    ``debug_fun``/``debug_fwd`` (JAX's debug infos) are accepted and not used."""
    from kiln.interpreters.remat_opt import memoize, remat_opt_p
    del debug_fun, debug_fwd
    if symbolic_zeros:
        raise NotImplementedError(
            "remat optimization for custom_vjp does not support symbolic zeros")
    nondiff_argnums = tuple(nondiff_argnums)

    @_wraps(fwd)
    def wrapped_fwd(*args, **kwargs):
        args = _resolve_kwargs(fun, args, kwargs, "custom_vjp")
        n = len(args)
        for i in nondiff_argnums:
            _check_for_tracers(args[i])
        nondiff, diff = _split_nondiff(args, nondiff_argnums)
        flat, in_tree = tree_flatten(tuple(diff))
        avals = [get_aval(x) for x in flat]
        store = {}

        def flat_fwd(*xs):
            pair = fwd(*_merge(nondiff, tree_unflatten(in_tree, list(xs)), n))
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(
                    f"Custom VJP fwd rule {_fn_name(fwd)} for function {_fn_name(fun)} must "
                    "produce a pair (list or tuple of length two) where the first element "
                    "represents the primal output and the second element represents "
                    f"residuals, but instead the fwd rule produced {pair}.")
            o_leaves, store["out_tree"] = tree_flatten(pair[0])
            r_leaves, store["res_tree"] = tree_flatten(pair[1])
            store["n_out"] = len(o_leaves)
            return [*r_leaves, *o_leaves]

        jaxpr, consts = staging.trace_to_jaxpr(flat_fwd, avals)
        closed, tconsts = staging.split_concrete_consts(jaxpr, consts)
        j = closed.jaxpr
        nc, n_out = len(tconsts), store["n_out"]
        n_res = len(j.outvars) - n_out
        arg_vars = j.invars[nc:]
        # Residuals that are arguments: passed through (JAX's forwarding).
        fwds = [arg_vars.index(v) if any(v is a for a in arg_vars) else None
                for v in j.outvars[:n_res]]
        kept = [v for v, f in zip(j.outvars[:n_res], fwds) if f is None]
        body = j.__class__(j.constvars, j.invars, [*kept, *j.outvars[n_res:]], j.eqns,
                           j.effects, j.debug_info)
        fwd_closed = closed.__class__(body, closed.consts)

        @memoize
        def fun_jaxpr():
            def flat_fun(*xs):
                out = fun(*_merge(nondiff, tree_unflatten(in_tree, list(xs)), n))
                return tree_flatten(out)[0]
            fj, fconsts = staging.trace_to_jaxpr(flat_fun, avals)
            fclosed, ftconsts = staging.split_concrete_consts(fj, fconsts)
            if ftconsts:
                raise NotImplementedError(
                    f"remat optimization for custom_vjp: {_fn_name(fun)} closes over a "
                    "traced value; pass it as an argument instead")
            return fclosed

        outs = remat_opt_p.bind(*tconsts, *flat, num_consts=nc, num_res=len(kept),
                                fwd_jaxpr=fwd_closed, fun_jaxpr_thunk=fun_jaxpr)
        it = iter(outs[:len(kept)])
        res = [next(it) if f is None else flat[f] for f in fwds]
        out = tree_unflatten(store["out_tree"], list(outs[len(kept):]))
        return out, tree_unflatten(store["res_tree"], res)

    return wrapped_fwd


def _leaf_keystr(argnum, d_tree, c_leaves, leaf) -> str:
    """JAX's key path (``[1]``, ``[0]['a']``) of ``leaf`` among the bwd rule's outputs."""
    i = next(k for k, x in enumerate(c_leaves) if x is leaf)
    paths = _public_tree.tree_flatten_with_path(tree_unflatten(d_tree, [0] * len(c_leaves)))[0]
    return f"[{argnum}]" + _public_tree.keystr(paths[i][0])


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
    # Traces of ``fun`` by argument signature (types, static values, trace context), as
    # JAX caches them: calling the checkpointed function again does not retrace it.
    traces: dict = {}

    @_wraps(fun)
    @api_boundary
    def wrapped(*args, **kwargs):
        dyn = [a for i, a in enumerate(args) if i not in static_argnums]
        flat, in_tree = tree_flatten((tuple(dyn), kwargs))
        key = _remat_key(args, static_argnums, flat, in_tree)
        hit = traces.get(key) if key is not None else None
        if hit is not None:
            closed, out_tree = hit
            outs = remat_p.bind(*flat, jaxpr=closed, prevent_cse=prevent_cse,
                                differentiated=False, policy=policy)
            return tree_unflatten(out_tree, outs)
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
        if key is not None and not tconsts and len(traces) < 64:
            traces[key] = (closed, store["tree"])   # closes over no tracer: reusable
        outs = remat_p.bind(*tconsts, *flat, jaxpr=closed, prevent_cse=prevent_cse,
                            differentiated=False, policy=policy)
        return tree_unflatten(store["tree"], outs)

    return wrapped


def _remat_key(args, static_argnums, flat, in_tree):
    """The trace-cache key of a checkpointed call, or ``None`` (an unhashable static
    argument, a value without a type)."""
    from kiln._compile_log import trace_context
    try:
        avals = tuple((a.shape, a.dtype, a.weak_type) for a in map(get_aval, flat))
        statics = tuple((i, args[i]) for i in static_argnums if -len(args) <= i < len(args))
        key = (in_tree, avals, statics, trace_context())
        hash(key)
    except Exception:       # noqa: BLE001 - no key: trace every call
        return None
    return key


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


_gather_scatter.set_custom_jvp(custom_jvp)


# ----------------------------------------------------------------------------------------------
# closure_convert: hoist the closed-over values a custom rule must see as arguments.

def _maybe_perturbed(x) -> bool:
    """JAX's private name of :func:`_jax_maybe_perturbed`."""
    return _jax_maybe_perturbed(x)


def _jax_maybe_perturbed(x) -> bool:
    """JAX's test of whether a closed-over value may carry a tangent: a JVP tracer (kiln
    makes none for a zero tangent); a staged value unless its tangent type is ``float0``
    (integers, booleans, keys); a vmapped value when what it batches is one."""
    from kiln.interpreters.batching import BatchTracer
    from kiln.interpreters.staging import JaxprTracer
    if not isinstance(x, Tracer):
        return False
    if isinstance(x, JaxprTracer):
        return ad.tangent_dtype(get_aval(x).dtype) != dtypes.float0
    if isinstance(x, BatchTracer):
        return _jax_maybe_perturbed(x.val)
    return True


_converted_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _closure_convert(fun, example_args, perturbed):
    """``(converted, hoisted)`` for ``fun`` at ``example_args``' types: the closed-over
    values for which ``perturbed`` holds become trailing arguments."""
    flat, in_tree = tree_flatten(tuple(example_args))
    avals = tuple(get_aval(x) for x in flat)
    key = (in_tree, avals, perturbed)
    try:
        per_fun = _converted_cache.get(fun)
    except TypeError:       # not weakly referenceable: never cached
        per_fun = None
    if per_fun is not None and key in per_fun:
        return per_fun[key], []

    store = {}

    def flat_fun(*xs):
        out = fun(*tree_unflatten(in_tree, list(xs)))
        leaves, store["tree"] = tree_flatten(out)
        return leaves

    jaxpr, consts = staging.trace_to_jaxpr(flat_fun, list(avals))
    out_tree = store["tree"]
    hoist = [perturbed(c) for c in consts]
    kept = [None if h else c for c, h in zip(consts, hoist)]
    hoisted = [c for c, h in zip(consts, hoist) if h]
    n_hoisted = len(hoisted)

    def converted(*args_and_consts):
        n_args = len(args_and_consts) - n_hoisted
        args, extra = args_and_consts[:n_args], list(args_and_consts[n_args:])
        it = iter(extra)
        all_consts = [next(it) if h else c for c, h in zip(kept, hoist)]
        args_flat, tree2 = tree_flatten(tuple(args))
        if tree2 != in_tree:
            raise TypeError("The inputs to the closure produced by closure_convert must have "
                            "the same Pytree structure as the example arguments passed when "
                            f"closure_convert was called. Expected {in_tree}, but got {tree2}")
        return tree_unflatten(out_tree, eval_jaxpr(jaxpr, all_consts, *args_flat))

    converted.__name__ = getattr(fun, "__name__", "func")
    if not any(isinstance(c, Tracer) for c in consts):
        try:
            _converted_cache.setdefault(fun, {})[key] = converted
        except TypeError:
            pass
    return converted, hoisted


def closure_convert(fun, *example_args):
    """``(converted, hoisted)``: ``converted(*args, *hoisted)`` computes ``fun(*args)`` for
    arguments of ``example_args``' structure and types, with the values ``fun`` closes
    over that may carry a tangent (tracers of differentiation, and staged values of a
    differentiable type) passed explicitly, so that a ``custom_vjp``/``custom_jvp`` rule
    can see and differentiate them (``jax.closure_convert``)."""
    return _closure_convert(fun, example_args, _jax_maybe_perturbed)


def _bwd_structure_message(cts_in, diff_info) -> str:
    """JAX's error for a custom_vjp ``bwd`` output whose structure is not the primal args'."""
    return ("Custom VJP bwd rule must produce an output with the same container "
            "(pytree) structure as the args tuple of the primal function, and in "
            "particular must produce a tuple of length equal to the number of "
            "arguments to the primal function, but got bwd output structure "
            f"{tree_flatten(cts_in)[1]} for primal input structure "
            f"{tree_flatten(tuple(diff_trees_example(diff_info)))[1]}.")
