"""``lax.custom_linear_solve`` and ``lax.custom_root``: solves differentiated implicitly.

``custom_linear_solve[const_lengths, jaxprs] *consts *b`` returns ``solve(matvec, b)``
(plus the solver's auxiliary outputs). Its four functions (``matvec``, ``vecmat``, the
transpose of ``matvec``, ``solve`` and ``transpose_solve``) are traced to closed jaxprs
whose consts are hoisted into the operands, in that order (``const_lengths`` says how many
each takes). The rules never differentiate *through* ``solve``:

- JVP: ``A x = b`` gives ``A dx = db - dA x``, so the tangent is the same primitive applied
  to ``db - (jvp of matvec in its consts at x)``;
- transpose (reverse mode): the primitive is linear in ``b``; its transpose solves with
  ``transpose_solve`` and ``vecmat`` (the roles swapped);
- batching: every jaxpr is batched over the batched operands (all of ``b`` and ``x``
  batched once anything is).

``custom_root`` is a ``custom_jvp`` function whose tangent comes from the implicit
function theorem at the root, through the user's ``tangent_solve``.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.core.jaxpr import ClosedJaxpr, run_reference
from kiln.core.trace import Primitive, Tracer, get_aval
from kiln.interpreters import ad, batching, staging
from kiln.interpreters.ad import Zero, is_undefined_primal
from kiln.lax.control import common

__all__ = ["custom_linear_solve", "custom_linear_solve_p", "custom_root"]


class _Parts(NamedTuple):
    """One entry per function of a linear solve, in operand order."""
    matvec: Any
    vecmat: Any
    solve: Any
    transpose_solve: Any

    def transpose(self) -> _Parts:
        """The parts of the transposed solve: ``vecmat`` and ``transpose_solve`` take the
        places of ``matvec`` and ``solve``."""
        return _Parts(self.vecmat, self.matvec, self.transpose_solve, self.solve)


def _split(args, const_lengths):
    """``(_Parts of const lists, b)`` from a flat operand list."""
    out, i = [], 0
    for n in const_lengths:
        out.append(list(args[i:i + n]))
        i += n
    return _Parts(*out), list(args[i:])


custom_linear_solve_p = Primitive("custom_linear_solve")
custom_linear_solve_p.multiple_results = True


def _impl(*args, const_lengths, jaxprs):
    from kiln.core.jaxpr import check_lowerable
    consts, b = _split(args, const_lengths)
    check_lowerable(jaxprs.solve.jaxpr)
    return run_reference(jaxprs.solve.jaxpr, jaxprs.solve.consts, consts.solve + b)


def _abstract_eval(*avals, const_lengths, jaxprs):
    return list(jaxprs.solve.out_avals)


custom_linear_solve_p.impl = _impl
custom_linear_solve_p.abstract_eval = _abstract_eval
custom_linear_solve_p.weak_type_rule = (
    lambda *w, const_lengths, jaxprs: [a.weak_type for a in jaxprs.solve.out_avals])

# The forward computation as a jaxpr over all operands: what the compiler inlines and the
# reference backend runs for an equation of this primitive inside a program.
_expanded: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _expand(eqn) -> ClosedJaxpr:
    jaxprs, lengths = eqn.params["jaxprs"], eqn.params["const_lengths"]
    per = _expanded.setdefault(jaxprs.solve, {})
    hit = per.get(tuple(lengths))
    if hit is not None:
        return hit
    start = lengths.matvec + lengths.vecmat
    end = start + lengths.solve
    total = sum(lengths)
    solve = common.jaxpr_fun(jaxprs.solve)

    def fun(*args):
        return solve(*args[start:end], *args[total:])

    in_avals = [v.aval for v in eqn.invars]
    jaxpr, consts = staging.trace_to_jaxpr(fun, in_avals)
    out = ClosedJaxpr(jaxpr, consts)
    per[tuple(lengths)] = out
    return out


custom_linear_solve_p.expand = _expand


# -- JVP -------------------------------------------------------------------------------------------

def _jvp(primals, tangents, *, const_lengths, jaxprs):
    params = dict(const_lengths=const_lengths, jaxprs=jaxprs)
    outs = custom_linear_solve_p.bind(*primals, **params)
    consts, b = _split(primals, const_lengths)
    consts_dot, b_dot = _split(tangents, const_lengths)
    nb = len(b)
    x, aux = outs[:nb], outs[nb:]
    aux_dot = [Zero.from_primal_value(a) for a in aux]
    # d(A x) = dA x + A dx = db  ->  dx = solve(db - dA x); dA x is the JVP of matvec in
    # its consts at x (x held fixed). The tangents of the solvers' own consts do not enter.
    if all(type(t) is Zero for t in consts_dot.matvec):
        rhs = b_dot
    else:
        mv = common.jaxpr_fun(jaxprs.matvec)
        x_zero = [Zero(ad.tangent_aval(get_aval(xi))) for xi in x]
        _, dax = ad.jvp_flat(mv, consts.matvec + list(x), consts_dot.matvec + x_zero,
                             instantiate=False)
        rhs = [_sub_tangents(db, d) for db, d in zip(b_dot, dax)]
    if all(type(t) is Zero for t in rhs):
        return outs, [Zero.from_primal_value(xi) for xi in x] + aux_dot
    rhs = [ad.instantiate_zeros(t) if type(t) is Zero else t for t in rhs]
    rhs = [common.match_aval(r, get_aval(bi)) for r, bi in zip(rhs, b)]
    dx = custom_linear_solve_p.bind(*_flat(consts), *rhs, **params)[:nb]
    return outs, list(dx) + aux_dot


def _sub_tangents(a, b):
    from kiln.lax import neg, sub
    if type(b) is Zero:
        return a
    if type(a) is Zero:
        return neg(b)
    return sub(a, b)


def _flat(parts: _Parts) -> list:
    return [c for group in parts for c in group]


ad.jvp_rules[custom_linear_solve_p] = _jvp


# -- transpose -------------------------------------------------------------------------------------

def _transpose(cts, *args, const_lengths, jaxprs):
    if jaxprs.transpose_solve is None:
        raise TypeError("transpose_solve required for backwards mode automatic "
                        "differentiation of custom_linear_solve")
    consts, b = _split(args, const_lengths)
    if not all(is_undefined_primal(x) for x in b):
        raise ValueError("custom_linear_solve is linear in b only; the right-hand side "
                         "must be the linear input when transposing")
    if any(is_undefined_primal(c) for c in _flat(consts)):
        raise ValueError("custom_linear_solve cannot be transposed with respect to the "
                         "values its functions close over")
    nb = len(b)
    ct_x = [common.zeros(jaxprs.solve.out_avals[i]) if type(c) is Zero else c
            for i, c in enumerate(list(cts)[:nb])]
    ct_b = custom_linear_solve_p.bind(*_flat(consts.transpose()), *ct_x,
                                      const_lengths=const_lengths.transpose(),
                                      jaxprs=jaxprs.transpose())[:nb]
    return [None] * sum(const_lengths) + list(ct_b)


ad.transpose_rules[custom_linear_solve_p] = _transpose


# -- batching --------------------------------------------------------------------------------------

def _batch(axis_data, vals, dims, *, const_lengths, jaxprs):
    # Everything batched is moved to axis 0; once anything is batched, all of b and x
    # are (the four jaxprs must agree on which parts of the vector space are batched,
    # and batching all of it is the simple fixed point).
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    dims = [None if d is None else 0 for d in dims]
    consts, b = _split(vals, const_lengths)
    cdims, _ = _split(dims, const_lengths)
    b = [batching.matchaxis(v, d, 0, axis_data.size)
         for v, d in zip(b, dims[sum(const_lengths):])]
    nb = len(b)
    bdims = [0] * nb

    def batched(closed, const_dims):
        if closed is None:
            return None
        force = [True] * len(closed.out_avals)
        return common.batch_jaxpr(closed, axis_data, const_dims + bdims, force)[0]

    new = _Parts(*(batched(j, d) for j, d in zip(jaxprs, cdims)))
    outs = custom_linear_solve_p.bind(*_flat(consts), *b, const_lengths=const_lengths,
                                      jaxprs=new)
    return outs, [0] * len(outs)


batching.batch_rules[custom_linear_solve_p] = _batch


# -- construction ----------------------------------------------------------------------------------

def _asarray(x):
    from kiln.core.trace import to_array
    return x if isinstance(x, Tracer) else to_array(x)


def _check_tree(func_name: str, expected_name: str, actual, expected, has_aux: bool = False):
    if has_aux:
        kids = actual.children()
        if len(kids) != 2:
            raise ValueError(
                f"{func_name}() produced a pytree with structure {actual}, but a pytree "
                "tuple with auxiliary output was expected because has_aux was set to True.")
        actual = kids[0]
    if actual != expected:
        raise TypeError(f"{func_name}() output pytree structure must match {expected_name}, "
                        f"got {actual} and {expected}.")


def _check_shapes(func_name: str, out, b_leaves) -> None:
    got = [tuple(get_aval(_asarray(o)).shape) for o in tree_flatten(out)[0]]
    want = [tuple(get_aval(x).shape) for x in b_leaves]
    if got != want:
        raise ValueError(f"{func_name}() output shapes must match b, got {got} and {want}")


def _shape_checked(fun: Callable, name: str, b_leaves, has_aux: bool) -> Callable:
    def checked(x):
        out = fun(x)
        _check_shapes(name, out[0] if has_aux else out, b_leaves)
        return out
    return checked


def _trace(fun, in_tree, b_avals, b_leaves, name, has_aux, tree):
    """Trace ``fun(x)`` over the vector space of ``b``; outputs cast to ``b``'s types (the
    solution lives in the same space), auxiliary outputs as they come."""
    closed, consts, out_tree = common.trace_pytree_fun(fun, in_tree, b_avals)
    _check_tree(name, "b", out_tree, tree, has_aux)
    nb = len(b_avals)
    outs = list(closed.out_avals)
    if all(common.same_type(a, t) for a, t in zip(outs[:nb], b_avals)):
        return closed, consts, out_tree

    def cast(*args):
        res = common.jaxpr_fun(closed)(*args)
        return ([common.match_aval(r, a) for r, a in zip(res[:nb], b_avals)]
                + list(res[nb:]))

    jaxpr, jconsts = staging.trace_to_jaxpr(cast, list(closed.in_avals))
    return ClosedJaxpr(jaxpr, jconsts), consts, out_tree


@api_boundary
def custom_linear_solve(matvec: Callable, b: Any, solve: Callable,
                        transpose_solve: Callable | None = None, symmetric: bool = False,
                        has_aux: bool = False) -> Any:
    """Solve ``matvec(x) == b`` with ``solve``, differentiating implicitly.

    The derivatives are not taken through ``solve`` (which may use ``lax.while_loop``
    and need not be differentiable) but from the equation at the solution: the tangent
    of ``x`` solves ``matvec(dx) == db - dmatvec(x)`` (with ``solve`` again), and reverse
    mode solves the transposed system with ``transpose_solve``.

    Args:
      matvec: the linear function ``x -> A x`` (a pytree like ``b`` to one like ``b``);
        it must be differentiable in the values it closes over.
      b: the right-hand side: an array or pytree of arrays.
      solve: ``solve(matvec, b) -> x`` with ``matvec(x) == b`` (not checked); returns
        ``(x, aux)`` when ``has_aux``.
      transpose_solve: ``transpose_solve(vecmat, b) -> x`` for the transposed map
        ``vecmat`` (computed with :func:`kiln.linear_transpose`); needed for reverse-mode
        differentiation unless ``symmetric``.
      symmetric: whether ``matvec`` is its own transpose; then ``vecmat`` is ``matvec``
        and ``transpose_solve`` defaults to ``solve``.
      has_aux: whether ``solve`` and ``transpose_solve`` return auxiliary data (solver
        diagnostics) as a second output; it gets zero derivatives.

    Returns:
      ``solve(matvec, b)`` (with its auxiliary output when ``has_aux``), whose derivatives
      are those of the exact solution of ``matvec(x) == b``.
    """
    if transpose_solve is None and symmetric:
        transpose_solve = solve
    b_flat, in_tree = tree_flatten((b,))
    b_flat = [_asarray(x) for x in b_flat]
    b_avals = [get_aval(x) for x in b_flat]
    tree = in_tree.children()[0]

    mv_closed, mv_consts, _ = _trace(_shape_checked(matvec, "matvec", b_flat, False), in_tree,
                                  b_avals, b_flat, "matvec", False, tree)
    s_closed, s_consts, s_tree = _trace(
        _shape_checked(functools.partial(solve, matvec), "solve", b_flat, has_aux),
        in_tree, b_avals, b_flat, "solve", has_aux, tree)
    if transpose_solve is None:
        vm_closed = ts_closed = None
        vm_consts, ts_consts = [], []
    else:
        if symmetric:
            vecmat = matvec
            vm_closed, vm_consts = mv_closed, mv_consts
        else:
            # The transpose of matvec's jaxpr in x: (*consts, *ct) -> ct of x.
            n_mv = len(mv_consts)
            vm_closed = common.transpose_jaxpr(mv_closed, [False] * n_mv + [True] * len(b_flat),
                                               b_avals)
            vm_consts = mv_consts
            vm_fun = common.jaxpr_fun(vm_closed)

            def vecmat(x):
                leaves = [_asarray(v) for v in tree_flatten(x)[0]]
                return tree_unflatten(tree, list(vm_fun(*vm_consts, *leaves)))
        ts_closed, ts_consts, _ = _trace(
            _shape_checked(functools.partial(transpose_solve, vecmat), "transpose_solve",
                           b_flat, has_aux),
            in_tree, b_avals, b_flat, "transpose_solve", has_aux, tree)

    consts = _Parts(mv_consts, vm_consts, s_consts, ts_consts)
    lengths = _Parts(*(len(c) for c in consts))
    jaxprs = _Parts(mv_closed, vm_closed, s_closed, ts_closed)
    outs = custom_linear_solve_p.bind(*_flat(consts), *b_flat, const_lengths=lengths,
                                      jaxprs=jaxprs)
    nb = len(b_flat)
    x = tree_unflatten(tree, list(outs[:nb]))
    if not has_aux:
        return x
    return x, tree_unflatten(s_tree.children()[1], list(outs[nb:]))


# -- custom_root -----------------------------------------------------------------------------------

@api_boundary
def custom_root(f: Callable, initial_guess: Any, solve: Callable, tangent_solve: Callable,
                has_aux: bool = False) -> Any:
    """Find a root of ``f`` with ``solve``, differentiating implicitly.

    Derivatives with respect to the values ``f`` closes over come from the implicit
    function theorem at the root ``x*`` (``f(x*) == 0``): the tangent of ``x*`` is
    ``-tangent_solve(g, df)`` where ``g`` is ``f`` linearized at ``x*`` and ``df`` the
    tangent of ``f(x*)`` in its closed-over values. ``solve`` itself is not
    differentiated.

    Args:
      f: function whose root is wanted; takes and returns pytrees like ``initial_guess``.
      initial_guess: starting point for ``solve``.
      solve: ``solve(f, initial_guess) -> x`` with ``f(x) == 0`` (not checked); returns
        ``(x, aux)`` when ``has_aux``.
      tangent_solve: ``tangent_solve(g, y) -> x`` with ``g(x) == y`` for the linear map
        ``g`` (for a scalar, ``lambda g, y: y / g(1.0)``).
      has_aux: whether ``solve`` returns auxiliary data as a second output (it gets zero
        derivatives).

    Returns:
      ``solve(f, initial_guess)``, differentiable in the values ``f`` closes over.
    """
    guess_flat, in_tree = tree_flatten((initial_guess,))
    guess_flat = [_asarray(x) for x in guess_flat]
    avals = [get_aval(x) for x in guess_flat]
    tree = in_tree.children()[0]

    f_closed, f_consts, out_tree = common.trace_pytree_fun(f, in_tree, avals)
    _check_tree("f", "initial_guess", out_tree, tree, False)
    s_closed, s_consts, s_tree = common.trace_pytree_fun(
        functools.partial(solve, f), in_tree, avals)
    _check_tree("solve", "initial_guess", s_tree, tree, has_aux)
    pair_tree = tree_flatten((initial_guess, initial_guess))[1]

    def linearize_and_solve(x, y):
        x_flat = tree_flatten(x)[0]

        def f_flat(*leaves):
            return tree_flatten(f(tree_unflatten(tree, list(leaves))))[0]
        _, lin = ad.linearize_flat(f_flat, x_flat)

        def g(v):
            leaves = [_asarray(t) for t in tree_flatten(v)[0]]
            outs = [ad.instantiate_zeros(o) if type(o) is Zero else o for o in lin(*leaves)]
            return tree_unflatten(tree, outs)
        return tangent_solve(g, y)

    ls_closed, ls_consts, ls_tree = common.trace_pytree_fun(linearize_and_solve, pair_tree,
                                                            avals + avals)
    _check_tree("tangent_solve", "x", ls_tree, tree, False)
    n = len(guess_flat)
    run = _root_fn(f_closed, s_closed, ls_closed, len(f_consts), len(s_consts),
                   len(ls_consts), n)
    outs = run(*f_consts, *s_consts, *ls_consts, *guess_flat)
    x = tree_unflatten(tree, list(outs[:n]))
    if not has_aux:
        return x
    aux_tree = s_tree.children()[1]
    return x, tree_unflatten(aux_tree, list(outs[n:]))


def _root_fn(f_closed, s_closed, ls_closed, nf, ns, nls, n):
    """A ``custom_jvp`` function of ``(*f_consts, *solve_consts, *ls_consts, *guess)``
    returning ``(*root, *aux)``."""
    from kiln.lax import full_like, neg

    # ``kiln.custom_derivatives`` (above lax in the layers) installs its custom_jvp in
    # gather_scatter when it is imported.
    from kiln.lax.gather_scatter import _custom_jvp
    custom_jvp = _custom_jvp[0]

    def split(args):
        return (list(args[:nf]), list(args[nf:nf + ns]), list(args[nf + ns:nf + ns + nls]),
                list(args[nf + ns + nls:]))

    @custom_jvp
    def run(*args):
        _, sc, _, guess = split(args)
        return list(common.jaxpr_fun(s_closed)(*sc, *guess))

    @run.defjvp
    def run_jvp(primals, tangents):
        fc, _, lc, _ = split(primals)
        fc_dot = split(tangents)[0]
        outs = run(*primals)
        root, aux = outs[:n], outs[n:]
        f_fun = common.jaxpr_fun(f_closed)
        # d f(m, x*(m)) = 0: df/dm [dm] + df/dx [dx] = 0  ->  dx = -(df/dx)^-1 df/dm [dm]
        _, rhs = ad.jvp_flat(lambda *c: f_fun(*c, *root), fc, list(fc_dot))
        rhs = [ad.instantiate_zeros(t) if type(t) is Zero else t for t in rhs]
        dx = common.jaxpr_fun(ls_closed)(*lc, *root, *rhs)
        return outs, [neg(t) for t in dx] + [full_like(a, 0) for a in aux]

    return run
