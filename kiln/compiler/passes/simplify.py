"""Algebraic simplification of a jaxpr (``kiln.compiler.passes.passes.simplify``).

One forward sweep over the top-level equations. Each equation, with its operands already
substituted, is offered to the rule of its primitive (matched by identity, not by name:
``kiln.random`` has private primitives also called ``add``/``mul``). A rule may

- *alias* the output to an existing atom (the equation disappears), or
- *replace* the equation by another one defining the same output variable
  (``transpose∘transpose`` becomes one ``transpose``),

and looks through the producers of its operands as rewritten so far, so a chain of any
length collapses in one sweep. Every alias has exactly the output's aval (weak type
included) and every new equation passes its primitive's abstract evaluation with the
output's aval; otherwise the rule leaves the equation alone. Producers left without
users are removed by ``dce``, not here. Sub-jaxprs (``cond``/``while``/``scan`` bodies,
calls) are not entered.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from kiln.compiler.passes.common import (
    Subst,
    checked_eqn,
    is_numpy_aval,
    literal_value,
    make_literal,
    rebuild,
    same_aval,
)
from kiln.core.jaxpr import ClosedJaxpr, JaxprEqn, Literal, Var
from kiln.lax.arith import add_p, div_p, integer_pow_p, mul_p, sub_p
from kiln.lax.dot import dot_general_p
from kiln.lax.structural import (
    broadcast_in_dim_p,
    convert_element_type_p,
    reshape_p,
    squeeze_p,
    transpose_p,
)


def simplify(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Apply local algebraic rewrites to the top-level equations of ``closed``.

    Rewrites (each only when the result has exactly the replaced value's aval):

    - ``transpose`` by the identity permutation is removed; ``transpose∘transpose`` becomes
      one ``transpose`` (or nothing when the composition is the identity).
    - ``transpose(dot_general(a, b))`` that only swaps the two operands' free dimensions
      (the gradient of a matrix product with respect to its right operand) becomes
      ``dot_general(b, a)`` when the product has no other use.
    - ``broadcast_in_dim`` to the operand's own shape is removed;
      ``broadcast_in_dim∘broadcast_in_dim`` becomes one ``broadcast_in_dim``.
    - Reshape-like equations (``reshape`` without ``dimensions``, ``squeeze``, a
      ``broadcast_in_dim`` that only inserts unit axes, a ``transpose`` that only moves
      unit axes) to the operand's own shape are removed, and a chain of two or more of
      them becomes a single ``reshape``.
    - ``convert_element_type`` to the operand's own dtype and weak type is removed, and a
      round trip ``a -> b -> a`` is removed when ``a -> b`` is exact (every value of ``a``
      is representable in ``b``: ``f32 -> f64 -> f32``, ``i8 -> i32 -> i8``,
      ``bool -> f32 -> bool``; not ``f32 -> f16 -> f32`` nor ``i64 -> f64 -> i64``).
    - ``x * 1``, ``1 * x``, ``x / 1``, ``x + 0``, ``0 + x`` and ``x - 0`` become ``x``, where
      the constant is a literal or a ``broadcast_in_dim`` of one, and only when ``x``'s aval
      equals the result's (so neither a weak-type change nor the broadcast of a rank-0
      ``x`` is lost). As in XLA, ``x + 0.0`` is treated as ``x`` although IEEE gives
      ``+0.0`` for ``x = -0.0``; values compare equal.
    - ``integer_pow`` with ``y=1`` becomes ``x``; with ``y=0`` it becomes ones (a literal
      for a scalar result, else ``broadcast_in_dim`` of a literal ``1``). ``y=2`` is kept:
      it is one operation either way and a code generator can emit ``x*x`` for it.

    Args:
      closed: the jaxpr to simplify; not modified.

    Returns:
      A new ``ClosedJaxpr`` with the same invars, consts and output avals. Equations
      whose outputs became unused are kept (run :func:`kiln.compiler.passes.passes.dce`).
    """
    sub = Subst()
    producer = _Producers()   # Var -> the (rewritten) equation defining it
    for e in closed.jaxpr.eqns:
        for v in e.invars:
            if isinstance(v, Var):
                producer.uses[v] = producer.uses.get(v, 0) + 1
    for v in closed.jaxpr.outvars:
        if isinstance(v, Var):
            producer.uses[v] = producer.uses.get(v, 0) + 1
    eqns = []
    for eqn in closed.jaxpr.eqns:
        eqn = sub.eqn(eqn)
        rule = _RULES.get(eqn.primitive)
        result = rule(eqn, producer) if rule is not None and _simple(eqn) else None
        if result is None:
            pass
        elif isinstance(result, JaxprEqn):
            if result.source_info is None:     # the rewrite stands for the user's line
                result.source_info = eqn.source_info
            eqn = result
        elif same_aval(result.aval, eqn.outvars[0].aval):
            sub.bind(eqn.outvars[0], result)
            continue
        eqns.append(eqn)
        for v in eqn.outvars:
            producer[v] = eqn
    return rebuild(closed, eqns, sub.atoms(closed.jaxpr.outvars))


class _Producers(dict):
    """Var -> defining equation, plus how many times each original variable is used."""

    def __init__(self):
        super().__init__()
        self.uses: dict = {}


def _simple(eqn: JaxprEqn) -> bool:
    return (not eqn.primitive.multiple_results and len(eqn.outvars) == 1
            and is_numpy_aval(eqn.outvars[0].aval))


# ----------------------------------------------------------------------------------------------
# Movement: transpose, broadcast_in_dim, reshape-like chains.

def _is_identity(perm) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


def _reshape_like(eqn: JaxprEqn | None) -> bool:
    """Whether ``eqn`` only reinterprets its operand's row-major data under a new shape."""
    if eqn is None or len(eqn.invars) != 1:
        return False
    p, params = eqn.primitive, eqn.params
    if p is reshape_p:
        return params.get("dimensions") is None
    if p is squeeze_p:
        return True
    in_shape, out_shape = eqn.invars[0].aval.shape, eqn.outvars[0].aval.shape
    if p is broadcast_in_dim_p:
        dims = params["broadcast_dimensions"]
        return (all(in_shape[i] == out_shape[d] for i, d in enumerate(dims))
                and all(out_shape[d] == 1 for d in range(len(out_shape)) if d not in dims))
    if p is transpose_p:
        moved = [a for a in params["permutation"] if in_shape[a] != 1]
        return moved == sorted(moved)
    return False


def _as_reshape(x, eqn: JaxprEqn, producer):
    """Collapse a reshape-like ``eqn`` of ``x`` with a reshape-like producer of ``x``."""
    out = eqn.outvars[0]
    if x.aval.shape == out.aval.shape:
        return x
    prev = producer.get(x) if isinstance(x, Var) else None
    if not _reshape_like(prev):
        return None
    src = prev.invars[0]
    if src.aval.shape == out.aval.shape:
        return src
    return checked_eqn(reshape_p, [src], out,
                       dict(new_sizes=tuple(out.aval.shape), dimensions=None, sharding=None))


def _transpose_rule(eqn, producer):
    (x,), perm = eqn.invars, tuple(eqn.params["permutation"])
    if _is_identity(perm):
        return x
    prev = producer.get(x) if isinstance(x, Var) else None
    if prev is not None and prev.primitive is transpose_p:
        inner = prev.params["permutation"]
        composed = tuple(int(inner[i]) for i in perm)
        src = prev.invars[0]
        if _is_identity(composed):
            return src
        return checked_eqn(transpose_p, [src], eqn.outvars[0], dict(permutation=composed))
    if prev is not None and prev.primitive is dot_general_p and \
            getattr(producer, "uses", {}).get(x, 2) == 1:
        swapped = _swapped_dot(prev, perm, eqn.outvars[0])
        if swapped is not None:
            return swapped
    if _reshape_like(eqn):
        return _as_reshape(x, eqn, producer)
    return None


def _swapped_dot(dot: JaxprEqn, perm, out):
    """``transpose(dot_general(a, b))`` that puts b's free dims before a's is
    ``dot_general(b, a)``: the product is computed in the wanted layout (no copy)."""
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    lhs, rhs = dot.invars
    nb = len(lb)
    nlf = len(lhs.aval.shape) - len(lc) - nb
    nrf = len(rhs.aval.shape) - len(rc) - nb
    want = tuple(range(nb)) + tuple(nb + nlf + j for j in range(nrf)) + \
        tuple(nb + i for i in range(nlf))
    if tuple(perm) != want:
        return None
    params = dict(dot.params)
    params["dimension_numbers"] = ((tuple(rc), tuple(lc)), (tuple(rb), tuple(lb)))
    return checked_eqn(dot_general_p, [rhs, lhs], out, params)


def _broadcast_rule(eqn, producer):
    (x,) = eqn.invars
    shape, dims = tuple(eqn.params["shape"]), tuple(eqn.params["broadcast_dimensions"])
    if x.aval.shape == shape and _is_identity(dims):
        return x
    prev = producer.get(x) if isinstance(x, Var) else None
    if _reshape_like(eqn) and _reshape_like(prev):
        return _as_reshape(x, eqn, producer)
    if prev is not None and prev.primitive is broadcast_in_dim_p:
        src = prev.invars[0]
        composed = tuple(dims[d] for d in prev.params["broadcast_dimensions"])
        if src.aval.shape == shape and _is_identity(composed):
            return src
        params = dict(eqn.params, broadcast_dimensions=composed)
        return checked_eqn(broadcast_in_dim_p, [src], eqn.outvars[0], params)
    return None


def _reshape_rule(eqn, producer):
    if not _reshape_like(eqn):
        return None
    return _as_reshape(eqn.invars[0], eqn, producer)


# ----------------------------------------------------------------------------------------------
# convert_element_type round trips.

def _float_info(dtype):
    try:
        f = ml_dtypes.finfo(dtype)
    except Exception:
        return None
    return int(f.nmant), int(f.minexp), int(f.maxexp)


def _component(dtype):
    """The real component dtype of a complex dtype; the dtype itself otherwise."""
    return np.empty((), dtype).real.dtype if dtype.kind == "c" else dtype


def exact_conversion(src, dst) -> bool:
    """Whether converting every value of dtype ``src`` to ``dst`` is exact (so converting
    back to ``src`` gives the original value)."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst or src == np.bool_:
        return True
    if dst == np.bool_ or (src.kind == "c" and dst.kind != "c"):
        return False
    if src.kind in "iu" and dst.kind in "iu":
        s, d = np.iinfo(src), np.iinfo(dst)
        return d.min <= s.min and s.max <= d.max
    dst_f = _float_info(_component(dst))
    if dst_f is None:
        return False
    nmant, minexp, maxexp = dst_f
    if src.kind in "iu":
        s = np.iinfo(src)
        bound = 2 ** (nmant + 1)        # every integer of magnitude <= 2**(nmant+1) is exact
        return -bound <= int(s.min) and int(s.max) <= bound and maxexp > nmant + 1
    src_f = _float_info(_component(src))
    if src_f is None:
        return False
    s_nmant, s_minexp, s_maxexp = src_f
    return (nmant >= s_nmant and maxexp >= s_maxexp
            and minexp - nmant <= s_minexp - s_nmant)


def _convert_rule(eqn, producer):
    (x,), out = eqn.invars, eqn.outvars[0]
    if same_aval(x.aval, out.aval):
        return x
    prev = producer.get(x) if isinstance(x, Var) else None
    if prev is None or prev.primitive is not convert_element_type_p:
        return None
    src = prev.invars[0]
    if (same_aval(src.aval, out.aval) and is_numpy_aval(src.aval)
            and exact_conversion(src.aval.dtype, x.aval.dtype)):
        return src
    return None


# ----------------------------------------------------------------------------------------------
# Arithmetic identities.

def _splat_value(atom, producer):
    """The value of a literal, or of a ``broadcast_in_dim`` of a literal; else ``None``."""
    if isinstance(atom, Var):
        prev = producer.get(atom)
        if prev is None or prev.primitive is not broadcast_in_dim_p:
            return None
        atom = prev.invars[0]
    if isinstance(atom, Literal):
        return literal_value(atom)
    return None


def _is_const(atom, producer, target) -> bool:
    v = _splat_value(atom, producer)
    return v is not None and bool(v == target)


def _identity_rule(unit, commutes):
    def rule(eqn, producer):
        x, y = eqn.invars
        out = eqn.outvars[0]
        if _is_const(y, producer, unit) and same_aval(x.aval, out.aval):
            return x
        if commutes and _is_const(x, producer, unit) and same_aval(y.aval, out.aval):
            return y
        return None
    return rule


def _integer_pow_rule(eqn, producer):
    (x,), out, y = eqn.invars, eqn.outvars[0], eqn.params["y"]
    if y == 1:
        return x
    if y != 0:
        return None
    lit = make_literal(1, out.aval.update(shape=()))
    if lit is None:
        return None
    if out.aval.shape == ():
        return lit
    return checked_eqn(broadcast_in_dim_p, [lit], out,
                       dict(shape=tuple(out.aval.shape), broadcast_dimensions=(),
                            sharding=None))


_RULES = {
    transpose_p: _transpose_rule,
    broadcast_in_dim_p: _broadcast_rule,
    reshape_p: _reshape_rule,
    squeeze_p: _reshape_rule,
    convert_element_type_p: _convert_rule,
    mul_p: _identity_rule(1, commutes=True),
    div_p: _identity_rule(1, commutes=False),
    add_p: _identity_rule(0, commutes=True),
    sub_p: _identity_rule(0, commutes=False),
    integer_pow_p: _integer_pow_rule,
}
