"""XLA's rewrites of floating-point divisions, so compiled kiln code gives JAX's bits.

Before its CPU code runs, XLA's algebraic simplifier rewrites divisions (JAX 0.10.2 on
CPU; each checked against JAX bit for bit in ``tests/compiler/test_xla_divide.py``), in
this order, the first that matches:

1. ``exp(A) / exp(B)`` => ``exp(A - B)``
2. ``A / exp(B)`` => ``A * exp(-B)``
3. ``A / pow(B, C)`` => ``A * pow(B, -C)``
4. ``A / sqrt(B)`` => ``A * rsqrt(B)``
5. ``A / rsqrt(B)`` => ``A * sqrt(B)``
6. ``A / constant`` => ``A * (1 / constant)`` (``A`` not a constant)
7. ``A / Broadcast(B)`` => ``A * Broadcast(1 / B)`` (``A`` not a constant)
8. ``(A / B) / (C / D)`` => ``(A * D) / (B * C)``
9. ``(A / B) / C`` => ``A / (B * C)``
10. ``A / (B / C)`` => ``(A * C) / B``

and again on what they produce, to a fixed point. Each changes the rounding: ``x / 3.0``
is ``x * fl(1/3)``, a third of whose elements differ from a true division in the last
bit; layer norms (``(x - m) / sqrt(v + eps)``), softmax (``e / e.sum(1, keepdims=True)``)
and ``x / 255.0`` are all such divisions. :func:`xla_divisions` is the last pass of
``optimize``; kiln's eager ``div`` applies rules 6 and 7 to what a single operation sees
(a rank-0 or size-1-broadcast divisor, ``kiln.lax.arith.xla_true_divide``), as JAX's eager
operations are compiled one at a time.

In kiln's jaxprs a "broadcast" divisor is a ``broadcast_in_dim`` result or a rank-0
operand of a larger result; a "constant" is a literal or a closed-over array (a constvar:
JAX embeds closed-over arrays in its programs as constants, whatever their size). The dtypes rewritten: float16, float32 and float64;
bfloat16 is computed in float32 by XLA's CPU code, where a correctly rounded division
agrees, and complex and integer divisions are left alone.

What this module must not hold: other rewrites (``simplify.py``).
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.passes.common import (
    concrete_value,
    literal_value,
    make_literal,
    rebuild,
    same_aval,
)
from kiln.core.jaxpr import ClosedJaxpr, JaxprEqn, Literal, Var
from kiln.lax.arith import div_p, exp_p, mul_p, neg_p, sub_p
from kiln.lax.elementwise import pow_p, rsqrt_p, sqrt_p
from kiln.lax.structural import broadcast_in_dim_p

DIVIDE_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
MAX_ROUNDS = 4


def xla_divisions(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Apply XLA's division rewrites (module docstring) to the top-level equations.

    Args:
      closed: the jaxpr; not modified. Sub-jaxprs are optimised when they are lowered.

    Returns:
      ``closed`` itself when no division is rewritten, else a new ``ClosedJaxpr`` with the
      same invars and outputs (run ``cse``/``dce`` after it).
    """
    out = closed
    for _ in range(MAX_ROUNDS):
        consts = _Consts(out)
        eqns, changed = _sweep(out.jaxpr.eqns, consts)
        if not changed:
            break
        out = rebuild(out, eqns, list(out.jaxpr.outvars), consts.vars, consts.values)
    return out


class _Consts:
    """The closed-over constants (XLA constants in JAX's programs) and their inverses."""

    def __init__(self, closed: ClosedJaxpr):
        self.vars = list(closed.jaxpr.constvars)
        self.values = list(closed.consts)
        self.index = {v: i for i, v in enumerate(self.vars)}

    def value(self, atom):
        i = self.index.get(atom) if isinstance(atom, Var) else None
        return None if i is None else concrete_value(self.values[i])

    def inverse(self, atom):
        """A new constvar holding ``1 / atom`` (rounded to its dtype), or None."""
        v = self.value(atom)
        if v is None or v.dtype not in DIVIDE_DTYPES:
            return None
        with np.errstate(all="ignore"):
            inv = np.asarray(v.dtype.type(1) / v, v.dtype)
        var = Var(atom.aval)
        self.vars.append(var)
        self.values.append(inv)
        self.index[var] = len(self.vars) - 1
        return var


def _sweep(eqns, consts):
    producer: dict = {}
    new_eqns: list = []
    changed = False
    for eqn in eqns:
        rewritten = _rewrite(eqn, producer, consts)
        if rewritten is None:
            new_eqns.append(eqn)
            for v in eqn.outvars:
                producer[v] = eqn
        else:
            new_eqns.extend(rewritten)
            for e in rewritten:
                for v in e.outvars:
                    producer[v] = e
            changed = True
    return new_eqns, changed


class _Builder:
    """Equations of one rewrite, each typed by its primitive's abstract evaluation."""

    def __init__(self, info):
        self.eqns: list = []
        self.info = info

    def __call__(self, prim, *invars, params=None, out=None):
        params = dict(params or {})
        aval = prim.abstract_eval(*[v.aval for v in invars], **params)
        if out is None:
            out = Var(aval)
        elif not same_aval(aval, out.aval):
            raise _NoMatch
        self.eqns.append(JaxprEqn(prim, list(invars), [out], params, self.info))
        return out


class _NoMatch(Exception):
    pass


def _made_by(atom, producer, prim):
    if not isinstance(atom, Var):
        return None
    e = producer.get(atom)
    return e if e is not None and e.primitive is prim and len(e.outvars) == 1 else None


def _is_constant(atom, producer, consts) -> bool:
    if isinstance(atom, Literal) or consts.value(atom) is not None:
        return True
    e = _made_by(atom, producer, broadcast_in_dim_p)
    return e is not None and isinstance(e.invars[0], Literal)


def _inverse_literal(lit: Literal):
    v = literal_value(lit)
    with np.errstate(all="ignore"):
        inv = np.asarray(v.dtype.type(1) / v, v.dtype)
    return make_literal(inv, lit.aval)


def _rewrite(eqn: JaxprEqn, producer: dict, consts: _Consts):
    if eqn.primitive is not div_p or len(eqn.outvars) != 1:
        return None
    out = eqn.outvars[0]
    dt = out.aval.dtype
    if not isinstance(dt, np.dtype) or dt not in DIVIDE_DTYPES:
        return None
    a, b = eqn.invars
    if a.aval.dtype != dt or b.aval.dtype != dt:
        return None
    build = _Builder(eqn.source_info)
    try:
        done = _apply(build, a, b, out, producer, consts)
    except _NoMatch:
        return None
    except Exception:       # an abstract evaluation refused the new equation
        return None
    return build.eqns if done else None


def _apply(build, a, b, out, producer, consts) -> bool:
    ea, eb = _made_by(a, producer, exp_p), _made_by(b, producer, exp_p)
    if ea is not None and eb is not None:                                       # 1
        if ea.invars[0].aval.shape == eb.invars[0].aval.shape == out.aval.shape:
            build(exp_p, build(sub_p, ea.invars[0], eb.invars[0]), out=out)
            return True
    if eb is not None:                                                          # 2
        build(mul_p, a, build(exp_p, build(neg_p, eb.invars[0])), out=out)
        return True
    pb = _made_by(b, producer, pow_p)
    if pb is not None:                                                          # 3
        base, expo = pb.invars
        build(mul_p, a, build(pow_p, base, build(neg_p, expo)), out=out)
        return True
    sb = _made_by(b, producer, sqrt_p)
    if sb is not None:                                                          # 4
        build(mul_p, a, build(rsqrt_p, sb.invars[0]), out=out)
        return True
    rb = _made_by(b, producer, rsqrt_p)
    if rb is not None:                                                          # 5
        build(mul_p, a, build(sqrt_p, rb.invars[0]), out=out)
        return True
    if not _is_constant(a, producer, consts):
        if isinstance(b, Literal):                                              # 6
            inv = _inverse_literal(b)
            if inv is not None:
                build(mul_p, a, inv, out=out)
                return True
        inv = consts.inverse(b)                                                 # 6
        if inv is not None:
            build(mul_p, a, inv, out=out)
            return True
        bb = _made_by(b, producer, broadcast_in_dim_p)
        if bb is not None:                                                      # 6, 7
            (src,) = bb.invars
            if isinstance(src, Literal):
                inv = _inverse_literal(src)
                if inv is None:
                    raise _NoMatch
            else:
                inv = build(div_p, make_literal(1, src.aval.update(shape=())), src)
            build(mul_p, a, build(broadcast_in_dim_p, inv, params=bb.params), out=out)
            return True
        if b.aval.shape == () and out.aval.shape != ():                         # 7
            inv = build(div_p, make_literal(1, b.aval), b)
            build(mul_p, a, inv, out=out)
            return True
    da, db = _made_by(a, producer, div_p), _made_by(b, producer, div_p)
    if da is not None and db is not None:                                       # 8
        (p, q), (r, s) = da.invars, db.invars
        build(div_p, build(mul_p, p, s), build(mul_p, q, r), out=out)
        return True
    if da is not None:                                                          # 9
        p, q = da.invars
        build(div_p, p, build(mul_p, q, b), out=out)
        return True
    if db is not None:                                                          # 10
        r, s = db.invars
        build(div_p, build(mul_p, a, s), r, out=out)
        return True
    return False
