"""Custom-derivative calls between kiln's traces and traces written to JAX's protocol.

Libraries define their own transformations by subclassing ``jax.core.Trace`` and
``jax.core.Tracer`` (Haiku's ``to_dot``, Oryx, ...). Their methods follow JAX 0.10's
signatures, which differ from kiln's for custom derivatives:

=========================  ==========================================================
kiln's form                JAX's form
=========================  ==========================================================
``process_custom_jvp_call  ``process_custom_jvp_call(primitive, fun, jvp, tracers, *,
(fun, jvp, args, *,        symbolic_zeros)``: ``fun``/``jvp`` are ``lu.WrappedFun``\\ s;
symbolic_zeros)``          ``jvp.call_wrapped(*primals, *tangents)`` returns
                           ``[*primals_out, *tangents_out]``
``process_custom_vjp_call  ``process_custom_vjp_call(primitive, fun, fwd, bwd, tracers,
(fun, fwd, bwd, args,      *, out_trees, symbolic_zeros)``: ``fwd.call_wrapped`` takes
out_trees, *,              ``(x, x_is_perturbed)`` pairs and returns ``[*res, *outs]``;
symbolic_zeros)``          ``out_trees()`` gives ``(out_tree, res_tree, input_forwards)``
                           after it ran; ``bwd.call_wrapped(*res, *cts_out)``
=========================  ==========================================================

(kiln's callables are described in :mod:`kiln.interpreters.custom_calls`.)

:func:`kiln.core.trace.custom_jvp_call`/``custom_vjp_call`` are how kiln hands a
custom-derivative call to a trace: a trace of a class defined outside kiln
(``Trace.jax_protocol``) gets JAX's form, through :func:`custom_jvp_call`/
:func:`custom_vjp_call` here (this module installs them in ``kiln.core.trace`` when
imported; it sits above the interpreters, whose traces do not import it).
In the other direction, such a trace may forward a call to its parent (one of kiln's) in
JAX's form: kiln's trace classes accept it and convert it with :func:`to_kiln_form`.
"""
from __future__ import annotations

from kiln._physical_tree import tree_structure
from kiln.core import trace as _core_trace
from kiln.interpreters.ad import Zero, instantiate_zeros
from kiln.interpreters.custom_calls import SymbolicZero, custom_jvp_call_p, custom_vjp_call_p


def custom_jvp_call(trace, fun, jvp, args, *, symbolic_zeros=False):
    """``trace.process_custom_jvp_call`` with kiln's flat callables, in ``trace``'s form."""
    if not trace.jax_protocol:
        return trace.process_custom_jvp_call(fun, jvp, args, symbolic_zeros=symbolic_zeros)
    from kiln.extend.linear_util import wrap_init
    wfun = wrap_init(lambda *xs: list(fun(*xs)))
    n = len(args)

    def flat_jvp(*primals_and_tangents):
        primals, tangents = primals_and_tangents[:n], primals_and_tangents[n:]
        p_out, t_out = jvp(list(primals), [_to_zero(t) for t in tangents])
        return [*p_out, *[instantiate_zeros(t) for t in t_out]]

    return trace.process_custom_jvp_call(custom_jvp_call_p, wfun, wrap_init(flat_jvp),
                                         list(args), symbolic_zeros=symbolic_zeros)


def custom_vjp_call(trace, fun, fwd, bwd, args, out_trees, *, symbolic_zeros=False):
    """``trace.process_custom_vjp_call`` with kiln's flat callables, in ``trace``'s form."""
    if not trace.jax_protocol:
        return trace.process_custom_vjp_call(fun, fwd, bwd, args, out_trees,
                                             symbolic_zeros=symbolic_zeros)
    from kiln.extend.linear_util import wrap_init
    wfun = wrap_init(lambda *xs: list(fun(*xs)))
    trees = {}

    def flat_fwd(*pairs):
        # JAX's fwd takes (primal, is_perturbed) pairs; kiln's takes the two lists.
        outs, res = fwd(list(pairs[::2]), [bool(p) for p in pairs[1::2]])
        trees["out"] = (tree_structure([0] * len(outs)), tree_structure([0] * len(res)),
                        [None] * len(res))
        return [*res, *outs]

    def jax_out_trees():
        if "out" not in trees:
            raise RuntimeError("out_trees() of a custom_vjp call read before its fwd ran")
        return trees["out"]

    def flat_bwd(*res_and_cts):
        n_res = jax_out_trees()[1].num_leaves
        res, cts = res_and_cts[:n_res], res_and_cts[n_res:]
        return list(bwd(list(res), [_to_zero(c) for c in cts]))

    return trace.process_custom_vjp_call(custom_vjp_call_p, wfun, wrap_init(flat_fwd),
                                         wrap_init(flat_bwd), list(args),
                                         out_trees=jax_out_trees,
                                         symbolic_zeros=symbolic_zeros)


def to_kiln_form(kind: str, args: tuple, kwargs: dict):
    """Convert the arguments of a JAX-form ``process_custom_{kind}_call`` (``kind`` is
    ``"jvp"`` or ``"vjp"``) into ``(args, kwargs)`` of kiln's form."""
    symbolic_zeros = bool(kwargs.get("symbolic_zeros", False))
    if kind == "jvp":
        _prim, fun, jvp, tracers = args
        return ((_fun(fun), _jvp(jvp, symbolic_zeros), list(tracers)),
                {"symbolic_zeros": symbolic_zeros})
    _prim, fun, fwd, bwd, tracers = args[:5]
    out_trees = args[5] if len(args) > 5 else kwargs.get("out_trees")
    fwd_k, bwd_k = _vjp(fwd, bwd, out_trees, symbolic_zeros)
    return (_fun(fun), fwd_k, bwd_k, list(tracers), None), {"symbolic_zeros": symbolic_zeros}


def _call(f):
    return f.call_wrapped if hasattr(f, "call_wrapped") else f


def _fun(fun):
    call = _call(fun)
    return lambda *xs: list(call(*xs))


def _jvp(jvp, symbolic_zeros):
    call = _call(jvp)

    def kiln_jvp(primals, tangents):
        if not symbolic_zeros:
            tangents = [instantiate_zeros(t) for t in tangents]
        else:   # JAX's rules see zero tangents as ``SymbolicZero``s
            tangents = [SymbolicZero(t.aval) if type(t) is Zero else t for t in tangents]
        outs = list(call(*primals, *tangents))
        k = len(outs) // 2
        return outs[:k], [_to_zero(t) for t in outs[k:]]
    return kiln_jvp


def _vjp(fwd, bwd, out_trees, symbolic_zeros):
    fwd_call, bwd_call = _call(fwd), _call(bwd)
    del symbolic_zeros    # kiln's rules see instantiated perturbation flags as JAX's do

    def kiln_fwd(primals, perturbed=None):
        if perturbed is None:
            perturbed = [True] * len(primals)
        outs = list(fwd_call(*[v for p, z in zip(primals, perturbed) for v in (p, z)]))
        _out_tree, res_tree, forwards = out_trees()
        n_kept = sum(f is None for f in forwards)
        kept, p_out = iter(outs[:n_kept]), outs[n_kept:]
        res = [next(kept) if f is None else primals[f] for f in forwards]
        assert len(res) == res_tree.num_leaves
        return p_out, res

    def kiln_bwd(res, cts):
        return [_to_zero(c) for c in bwd_call(*res, *[instantiate_zeros(c) for c in cts])]
    return kiln_fwd, kiln_bwd


def _to_zero(t):
    """JAX's ``SymbolicZero`` (from a rule) as kiln's ``Zero``; anything else unchanged."""
    return Zero(t.aval) if isinstance(t, SymbolicZero) else t


# kiln's traces (in ``kiln.core`` and the interpreters, below this module) hand calls to
# JAX-protocol traces and take JAX-form calls through these.
_core_trace.set_jax_protocol(to_kiln_form=to_kiln_form, custom_jvp_call=custom_jvp_call,
                             custom_vjp_call=custom_vjp_call)
