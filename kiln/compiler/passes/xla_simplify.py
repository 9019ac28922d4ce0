"""XLA's value-changing simplifications of float arithmetic, so compiled kiln code gives
JAX's bits.

Before its CPU code runs, XLA's algebraic simplifier rewrites expressions in ways that
change their rounding (JAX 0.10.2 on CPU; each rule checked against JAX bit for bit in
``tests/compiler/test_xla_divide.py`` and ``tests/compiler/test_xla_simplify.py``).

Divisions, in this order, the first that matches:

1. ``exp(A) / exp(B)`` => ``exp(A - B)``
2. ``A / exp(B)`` => ``A * exp(-B)``
3. ``A / pow(B, C)`` => ``A * pow(B, -C)``
4. ``A / sqrt(B)`` => ``A * rsqrt(B)``, when the ``sqrt`` has no other use
5. ``A / rsqrt(B)`` => ``A * sqrt(B)``, when the ``rsqrt`` has no other use
6. ``A / constant`` => ``A * (1 / constant)`` (``A`` not a constant)
7. ``A / Broadcast(B)`` => ``A * Broadcast(1 / B)`` (``A`` not a constant)
8. ``(A / B) / (C / D)`` => ``(A * D) / (B * C)``
9. ``(A / B) / C`` => ``A / (B * C)``
10. ``A / (B / C)`` => ``(A * C) / B``

Products, sums and differences (``K``, ``K1``, ``K2``: "splat" constants, below; XLA moves
a constant to the right of a commutative operation first, so ``K * A`` is ``A * K``):

11. ``exp(A) * exp(B)`` => ``exp(A + B)``
12. ``(A * K1) * K2`` => ``A * fl(K1 * K2)`` (``A`` not a constant); the same for two
    closed-over arrays of the result's shape (``(A * C1) * C2`` => ``A * fl(C1 * C2)``,
    elementwise), but not for an array and a splat
12b. ``(A * K) * Broadcast(B)`` => ``A * Broadcast(fl(K * B))`` for any ``B`` broadcast
    to the result (a rank-0 or lower-shape operand, or a ``broadcast_in_dim``);
    ``(A * Broadcast(B)) * K`` is left alone
13. ``A - K`` => ``A + (-K)``, then ``(A + K1) + K2`` => ``A + fl(K1 + K2)`` and
    ``(K1 - A) + K2`` => ``fl(K1 + K2) - A``; the same for closed-over arrays

Logarithms and powers:

14. ``log(exp(A))`` => ``A``; ``log(pow(A, B))`` => ``B * log(|A|)``;
    ``log(sqrt(A))`` => ``0.5 * log(A)``; ``log(rsqrt(A))`` => ``-0.5 * log(A)``
15. ``pow(exp(A), B)`` => ``exp(A * B)``; ``pow(A, 2)`` => ``A * A``;
    ``pow(A, 3)`` => ``(A * A) * A``; ``pow(A, -1)`` => ``1 / A`` (a constant exponent)
16. ``sqrt(A * A)`` => ``|A|`` (so ``sqrt(x * x)`` does not overflow: ``1e30`` stays
    ``1e30``; ``x ** 2``, ``square(x)`` and ``pow(x, 2)`` are ``x * x`` by then)

and again on what they produce, to a fixed point. Each changes the rounding: ``x / 3.0``
is ``x * fl(1/3)``, a third of whose elements differ from a true division in the last
bit; layer norms (``(x - m) / sqrt(v + eps)``), softmax (``e / e.sum(1, keepdims=True)``)
and ``x / 255.0`` are all such divisions; ``(x + 0.1) + 0.2`` is ``x + fl(0.1 + 0.2)``.
:func:`xla_simplify` (alias :func:`xla_divisions`) is the last pass of ``optimize``;
kiln's eager ``div`` applies rules 6 and 7 to what a single operation sees (a rank-0 or
size-1-broadcast divisor, ``kiln.lax.arith.xla_true_divide``), as JAX's eager operations
are compiled one at a time (the other rules need two operations, so never apply eagerly).

In kiln's jaxprs a "broadcast" divisor is a ``broadcast_in_dim`` result or a rank-0
operand of a larger result; a "constant" is a literal or a closed-over array (a constvar:
JAX embeds closed-over arrays in its programs as constants, whatever their size), or a
``broadcast_in_dim`` of a literal. Rules 12 and 13 need "splat" constants, whose elements
are all equal (a literal, a broadcast literal, or a closed-over array of one repeated
value: JAX emits those as a broadcast scalar); ``(x * c) * 5`` with ``c`` an array of
different values is left alone, as XLA leaves it. The dtypes rewritten: float16, float32
and float64 (folded constants are rounded to the dtype); bfloat16 is computed in float32
by XLA's CPU code, and integer arithmetic is left alone. Complex divisions get rule 6
only (``A / constant`` => ``A * fl(1 / constant)``, the reciprocal as NumPy divides; the
product by a scalar constant is then XLA's, ``kiln.lax._xla_eager.complex_binary``).

Rules 4 and 5 need the root to have a single use in the program XLA simplifies: JAX's
program before any common-subexpression elimination (``a / sqrt(b) + sqrt(b)``, two
``sqrt`` operations, is rewritten; ``z = sqrt(b); a / z + z`` is not, nor is a ``z`` also
returned or divided into twice). A ``log`` of the root does not count: rule 14 removes it
first (XLA runs its rules to a fixed point). kiln's ``cse`` runs before this pass, so
:func:`shared_root_divisions` records those divisions on the program as traced
(``optimize`` calls it before ``cse``) and :func:`xla_simplify` leaves them alone.

What this module must not hold: value-preserving rewrites (``simplify.py``).
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
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, JaxprEqn, Literal, Var
from kiln.interpreters.staging import has_effects
from kiln.lax.arith import add_p, div_p, exp_p, integer_pow_p, log_p, mul_p, neg_p, square_p, sub_p
from kiln.lax.elementwise import abs_p, pow_p, rsqrt_p, sqrt_p
from kiln.lax.structural import broadcast_in_dim_p

DIVIDE_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
#: Complex divisions XLA rewrites (rule 6 only: a constant divisor).
COMPLEX_DIVIDE_DTYPES = (np.dtype(np.complex64), np.dtype(np.complex128))
MAX_ROUNDS = 4


def shared_root_divisions(closed: ClosedJaxpr) -> frozenset:
    """The outputs of the live top-level divisions by a ``sqrt`` or ``rsqrt`` result that
    has another live use (an operand slot anywhere, or a program output), a ``log`` of
    it aside: the divisions XLA's rules 4 and 5 leave alone (module docstring). Call it
    on the program before ``cse`` merges repeated roots."""
    jaxpr = closed.jaxpr
    producer = {}
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            producer[v] = eqn
    live = {v for v in jaxpr.outvars if isinstance(v, Var)}
    live_eqns = []
    for eqn in reversed(jaxpr.eqns):
        if any(v in live for v in eqn.outvars) or has_effects(eqn):
            live_eqns.append(eqn)
            live.update(v for v in eqn.invars if isinstance(v, Var))

    def root(atom):
        e = producer.get(atom) if isinstance(atom, Var) else None
        if e is None or e.primitive not in (sqrt_p, rsqrt_p) or len(e.outvars) != 1:
            return None
        return e

    uses: dict = {}
    for v in jaxpr.outvars:
        if isinstance(v, Var):
            uses[v] = uses.get(v, 0) + 1
    for eqn in live_eqns:
        for v in eqn.invars:
            if not isinstance(v, Var) or root(v) is None:
                continue
            if eqn.primitive is log_p and v.aval.dtype in DIVIDE_DTYPES:
                continue                # log(sqrt(B)) => 0.5 * log(B) drops this use
            uses[v] = uses.get(v, 0) + 1
    return frozenset(eqn.outvars[0] for eqn in live_eqns
                     if eqn.primitive is div_p and root(eqn.invars[1]) is not None
                     and uses.get(eqn.invars[1], 0) > 1)


def xla_simplify(closed: ClosedJaxpr, shared_roots: frozenset = frozenset()) -> ClosedJaxpr:
    """Apply XLA's rewrites (module docstring) to the top-level equations.

    Args:
      closed: the jaxpr; not modified. Sub-jaxprs are optimised when they are lowered.
      shared_roots: outputs of divisions rules 4 and 5 leave alone, from
        :func:`shared_root_divisions` on the program before ``cse``.

    Returns:
      ``closed`` itself when nothing is rewritten, else a new ``ClosedJaxpr`` with the
      same invars and outputs (run ``cse``/``dce`` after it).
    """
    out = closed
    for _ in range(MAX_ROUNDS):
        consts = _Consts(out)
        consts.shared_roots = shared_roots
        eqns, outvars, changed = _sweep(out.jaxpr.eqns, out.jaxpr.outvars, consts)
        if not changed:
            break
        out = rebuild(out, eqns, outvars, consts.vars, consts.values)
    return out


xla_divisions = xla_simplify


class _Consts:
    """The closed-over constants (XLA constants in JAX's programs) and their inverses."""

    def __init__(self, closed: ClosedJaxpr):
        self.shared_roots: frozenset = frozenset()   # divisions rules 4 and 5 skip
        self.vars = list(closed.jaxpr.constvars)
        self.values = list(closed.consts)
        self.index = {v: i for i, v in enumerate(self.vars)}

    def value(self, atom):
        i = self.index.get(atom) if isinstance(atom, Var) else None
        return None if i is None else concrete_value(self.values[i])

    def add(self, value, aval):
        """A new constvar holding ``value``."""
        var = Var(aval)
        self.vars.append(var)
        self.values.append(value)
        self.index[var] = len(self.vars) - 1
        return var

    def inverse(self, atom, dtypes=DIVIDE_DTYPES):
        """A new constvar holding ``1 / atom`` (rounded to its dtype), or None."""
        v = self.value(atom)
        if v is None or v.dtype not in dtypes:
            return None
        with np.errstate(all="ignore"):
            inv = np.asarray(v.dtype.type(1) / v, v.dtype)
        var = Var(atom.aval)
        self.vars.append(var)
        self.values.append(inv)
        self.index[var] = len(self.vars) - 1
        return var


def _sweep(eqns, outvars, consts):
    producer: dict = {}
    alias: dict = {}            # outputs replaced by an existing atom (log(exp(A)) => A)
    new_eqns: list = []
    changed = False
    for eqn in eqns:
        if alias and any(isinstance(v, Var) and v in alias for v in eqn.invars):
            eqn = JaxprEqn(eqn.primitive,
                           [alias.get(v, v) if isinstance(v, Var) else v for v in eqn.invars],
                           list(eqn.outvars), eqn.params, eqn.source_info)
        rewritten = _rewrite(eqn, producer, consts)
        if rewritten is None:
            new_eqns.append(eqn)
            for v in eqn.outvars:
                producer[v] = eqn
        elif isinstance(rewritten, _Alias):
            alias[eqn.outvars[0]] = rewritten.atom
            changed = True
        else:
            new_eqns.extend(rewritten)
            for e in rewritten:
                for v in e.outvars:
                    producer[v] = e
            changed = True
    outvars = [alias.get(v, v) if isinstance(v, Var) else v for v in outvars]
    return new_eqns, outvars, changed


class _Alias:
    """A rewrite whose result is an existing atom of the same aval."""

    def __init__(self, atom):
        self.atom = atom


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
    prim = eqn.primitive
    if prim not in _RULES or len(eqn.outvars) != 1:
        return None
    out = eqn.outvars[0]
    dt = out.aval.dtype
    if isinstance(dt, np.dtype) and dt in COMPLEX_DIVIDE_DTYPES:
        if prim is div_p:
            return _complex_divide(eqn, producer, consts)
        if prim is mul_p:
            return _complex_scale(eqn)
        return None
    if not isinstance(dt, np.dtype) or dt not in DIVIDE_DTYPES:
        return None
    if any(v.aval.dtype != dt for v in eqn.invars):
        return None
    build = _Builder(eqn.source_info)
    try:
        done = _RULES[prim](build, *eqn.invars, out, producer, consts)
    except _NoMatch:
        return None
    except Exception:       # an abstract evaluation refused the new equation
        return None
    if isinstance(done, _Alias):
        return done if same_aval(done.atom.aval, out.aval) else None
    return build.eqns if done else None


def _complex_divide(eqn: JaxprEqn, producer: dict, consts: _Consts):
    """Rule 6 alone for complex dtypes: ``A / constant`` => ``A * fl(1 / constant)``
    (a literal, a closed-over array, or a ``broadcast_in_dim`` of a literal). XLA's other
    division rules leave complex arithmetic alone (a runtime scalar divisor stays a
    division: JAX's eager ``x / y`` is one, as kiln's)."""
    a, b = eqn.invars
    out = eqn.outvars[0]
    if any(v.aval.dtype != out.aval.dtype for v in eqn.invars) or \
            _is_constant(a, producer, consts):
        return None
    build = _Builder(eqn.source_info)
    if isinstance(b, Literal):
        inv = _inverse_literal(b)
    else:
        inv = consts.inverse(b, COMPLEX_DIVIDE_DTYPES)
        if inv is None:
            bb = _made_by(b, producer, broadcast_in_dim_p)
            if bb is None or not isinstance(bb.invars[0], Literal):
                return None
            inv = build(broadcast_in_dim_p, _inverse_literal(bb.invars[0]),
                        params=bb.params)
    try:
        build(mul_p, a, inv, out=out)
    except Exception:       # an abstract evaluation refused the new equation
        return None
    return build.eqns


def _complex_scale(eqn: JaxprEqn):
    """``A * k`` (either order) for a complex scalar literal ``k`` with ``re(k) > 0 >
    im(k)``: ``A * Broadcast(k)``, so the product takes the form XLA's code has for such
    a constant (measured against JAX 0.10.2's ``jit``: its imaginary part fuses ``im(A)
    re(k)`` then, as for an operand of the result's shape, and ``re(A) im(k)`` for every
    other constant and for a runtime scalar, the form ``complex_binary`` gives a
    single-element operand)."""
    a, b = eqn.invars
    out = eqn.outvars[0]
    if isinstance(a, Literal):
        a, b = b, a
    if not isinstance(b, Literal) or isinstance(a, Literal) or b.aval.shape != () or \
            out.aval.shape == () or any(v.aval.dtype != out.aval.dtype for v in eqn.invars):
        return None
    k = complex(literal_value(b))
    if not (k.real > 0 and k.imag < 0):
        return None
    build = _Builder(eqn.source_info)
    try:
        full = build(broadcast_in_dim_p, b, params=dict(
            shape=tuple(out.aval.shape), broadcast_dimensions=(), sharding=None))
        build(mul_p, a, full, out=out)
    except Exception:       # an abstract evaluation refused the new equation
        return None
    return build.eqns


def _full(atom, out, producer, prim):
    """``atom``'s producer when it is ``prim`` and ``atom`` has the result's shape (a rank-0
    operand of a larger result is a Broadcast in XLA's program, which the rules do not
    see through)."""
    return _made_by(atom, producer, prim) if atom.aval.shape == out.aval.shape else None


def _apply(build, a, b, out, producer, consts) -> bool:
    ea, eb = _full(a, out, producer, exp_p), _full(b, out, producer, exp_p)
    if ea is not None and eb is not None:                                       # 1
        if ea.invars[0].aval.shape == eb.invars[0].aval.shape == out.aval.shape:
            build(exp_p, build(sub_p, ea.invars[0], eb.invars[0]), out=out)
            return True
    if eb is not None:                                                          # 2
        build(mul_p, a, build(exp_p, build(neg_p, eb.invars[0])), out=out)
        return True
    pb = _full(b, out, producer, pow_p)
    if pb is not None:                                                          # 3
        base, expo = pb.invars
        build(mul_p, a, build(pow_p, base, build(neg_p, expo)), out=out)
        return True
    shared = out in consts.shared_roots
    sb = _full(b, out, producer, sqrt_p)
    if sb is not None and not shared:                                           # 4
        build(mul_p, a, build(rsqrt_p, sb.invars[0]), out=out)
        return True
    rb = _full(b, out, producer, rsqrt_p)
    if rb is not None and not shared:                                           # 5
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
    da, db = _full(a, out, producer, div_p), _full(b, out, producer, div_p)
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


def _splat(atom, producer, consts):
    """The value of a constant whose elements are all equal (a NumPy scalar), or None."""
    if isinstance(atom, Literal):
        v = literal_value(atom)
    else:
        v = consts.value(atom)
        if v is None:
            e = _made_by(atom, producer, broadcast_in_dim_p)
            if e is None:
                return None
            src = e.invars[0]
            v = literal_value(src) if isinstance(src, Literal) else consts.value(src)
            if v is None:
                return None
    if v.size == 0 or not isinstance(v.dtype, np.dtype) or v.dtype not in DIVIDE_DTYPES:
        return None
    first = v.reshape(-1)[:1]
    if v.size > 1 and np.any(v.view(_UINT[v.dtype]) != first.view(_UINT[v.dtype])):
        return None
    return first[0]


_UINT = {np.dtype(np.float16): np.uint16, np.dtype(np.float32): np.uint32,
         np.dtype(np.float64): np.uint64}


def _scalar(value, out):
    """A rank-0 literal of ``value`` in ``out``'s dtype and weak type."""
    with np.errstate(all="ignore"):
        raw = np.asarray(value).astype(out.aval.dtype)
    lit = make_literal(raw, ShapedArray((), out.aval.dtype, out.aval.weak_type))
    if lit is None:
        raise _NoMatch
    return lit


def _fold(op, k1, k2):
    with np.errstate(all="ignore"):
        return op(k1, k2)


def _split_const(atom, prim, producer, consts):
    """``(A, K)`` when ``atom`` is ``prim(A, K)`` or ``prim(K, A)`` with ``K`` a splat
    constant and ``A`` not a constant; else None."""
    e = _made_by(atom, producer, prim)
    if e is None:
        return None
    p, q = e.invars
    kq, kp = _splat(q, producer, consts), _splat(p, producer, consts)
    if kq is not None and not _is_constant(p, producer, consts):
        return p, kq
    if kp is not None and not _is_constant(q, producer, consts):
        return q, kp
    return None


def _array_const(atom, out, consts):
    """The value of a closed-over array of ``out``'s shape whose elements differ, or None."""
    v = consts.value(atom)
    if v is None or v.shape != out.aval.shape or v.dtype != out.aval.dtype or v.size < 2:
        return None
    flat = v.reshape(-1).view(_UINT[v.dtype])
    return None if np.all(flat == flat[0]) else v


def _split_array_const(atom, prim, out, producer, consts):
    """``(A, C)`` when ``atom`` is ``prim(A, C)`` or ``prim(C, A)`` with ``C`` a
    closed-over array (rule 12/13's array form); else None."""
    e = _made_by(atom, producer, prim)
    if e is None:
        return None
    p, q = e.invars
    for x, c in ((p, q), (q, p)):
        v = _array_const(c, out, consts)
        if v is not None and not _is_constant(x, producer, consts):
            return x, v
    return None


def _reassociate_arrays(build, prim, op, a, b, out, producer, consts, negate=False):
    """``(A op C1) op C2`` => ``A op fl(C1 op C2)`` for closed-over arrays of the result's
    shape (XLA's constants); ``negate``: ``C2`` is subtracted."""
    if _array_const(a, out, consts) is not None and not negate:
        a, b = b, a
    v2 = _array_const(b, out, consts)
    if v2 is None:
        return False
    inner = _split_array_const(a, prim, out, producer, consts)
    if inner is None:
        return False
    x, v1 = inner
    with np.errstate(all="ignore"):
        folded = np.asarray(op(v1, -v2 if negate else v2), out.aval.dtype)
    build(prim, x, consts.add(folded, b.aval), out=out)
    return True


def _is_broadcast(atom, out, producer):
    """``(source, params)`` when ``atom`` is broadcast to ``out``: a ``broadcast_in_dim``
    result (its params) or an operand of another shape (params None); else None."""
    e = _made_by(atom, producer, broadcast_in_dim_p)
    if e is not None:
        return e.invars[0], e.params
    if atom.aval.shape != out.aval.shape:
        return atom, None
    return None


def _mul(build, a, b, out, producer, consts):
    ea, eb = _made_by(a, producer, exp_p), _made_by(b, producer, exp_p)
    if ea is not None and eb is not None:                                       # 11
        x, y = ea.invars[0], eb.invars[0]
        if x.aval.shape == y.aval.shape == out.aval.shape:
            build(exp_p, build(add_p, x, y), out=out)
            return True
    if _reassociate_arrays(build, mul_p, np.multiply, a, b, out, producer, consts):
        return True                                                             # 12
    if _splat(a, producer, consts) is not None:      # constants to the right
        a, b = b, a
    k2 = _splat(b, producer, consts)
    if k2 is None:
        return _mul_broadcast(build, a, b, out, producer, consts)
    if _is_constant(a, producer, consts):
        return False
    inner = _split_const(a, mul_p, producer, consts)
    if inner is None:
        return False
    x, k1 = inner                                                               # 12
    build(mul_p, x, _scalar(_fold(np.multiply, k1, k2), out), out=out)
    return True


def _mul_broadcast(build, a, b, out, producer, consts):
    """Rule 12b: ``(A * K) * Broadcast(B)`` => ``A * Broadcast(K * B)``."""
    for p, q in ((a, b), (b, a)):
        inner = _split_const(p, mul_p, producer, consts)
        if inner is None or _splat(q, producer, consts) is not None:
            continue
        bq = _is_broadcast(q, out, producer)
        if bq is None:
            continue
        x, k = inner
        src, params = bq
        if x.aval.shape != out.aval.shape:
            continue
        prod = build(mul_p, _scalar(k, out), src)
        if params is not None:
            prod = build(broadcast_in_dim_p, prod, params=params)
        build(mul_p, x, prod, out=out)
        return True
    return False


def _add_const(build, a, k2, out, producer, consts):
    """``a + k2`` (``k2`` a splat value) with ``a``'s constant reassociated (rule 13)."""
    inner = _split_const(a, add_p, producer, consts)
    if inner is not None:
        x, k1 = inner
        build(add_p, x, _scalar(_fold(np.add, k1, k2), out), out=out)
        return True
    e = _made_by(a, producer, sub_p)
    if e is not None:
        p, q = e.invars
        k1 = _splat(p, producer, consts)
        if k1 is not None and not _is_constant(q, producer, consts):
            build(sub_p, _scalar(_fold(np.add, k1, k2), out), q, out=out)
            return True
    return False


def _add(build, a, b, out, producer, consts):
    if _reassociate_arrays(build, add_p, np.add, a, b, out, producer, consts):
        return True
    if _splat(a, producer, consts) is not None:
        a, b = b, a
    k2 = _splat(b, producer, consts)
    if k2 is None or _is_constant(a, producer, consts):
        return False
    return _add_const(build, a, k2, out, producer, consts)


def _sub(build, a, b, out, producer, consts):
    if _reassociate_arrays(build, add_p, np.add, a, b, out, producer, consts, negate=True):
        return True
    v = _array_const(b, out, consts)
    if v is not None and not _is_constant(a, producer, consts):                # 13
        with np.errstate(all="ignore"):
            neg = np.negative(v)
        build(add_p, a, consts.add(neg, b.aval), out=out)
        return True
    k = _splat(b, producer, consts)
    if k is None or _is_constant(a, producer, consts):
        return False
    if _add_const(build, a, -k, out, producer, consts):                         # 13
        return True
    if a.aval.shape != out.aval.shape:
        return False
    build(add_p, a, _scalar(-k, out), out=out)
    return True


def _log(build, a, out, producer, consts):
    e = _made_by(a, producer, exp_p)
    if e is not None:                                                           # 14
        return _Alias(e.invars[0])
    e = _made_by(a, producer, pow_p)
    if e is not None:
        base, expo = e.invars
        build(mul_p, expo, build(log_p, build(abs_p, base)), out=out)
        return True
    for prim, half in ((sqrt_p, 0.5), (rsqrt_p, -0.5)):
        e = _made_by(a, producer, prim)
        if e is not None:
            build(mul_p, build(log_p, e.invars[0]), _scalar(half, out), out=out)
            return True
    return False


def _pow(build, a, b, out, producer, consts):
    e = _full(a, out, producer, exp_p)
    if e is not None:                                                           # 15
        build(exp_p, build(mul_p, e.invars[0], b), out=out)
        return True
    k = _splat(b, producer, consts)
    if k is None or a.aval.shape != out.aval.shape:
        return False
    if k == 2:
        build(mul_p, a, a, out=out)
    elif k == 3:
        build(mul_p, build(mul_p, a, a), a, out=out)
    elif k == -1:
        build(div_p, _scalar(1, out), a, out=out)
    else:
        return False
    return True


def _sqrt(build, a, out, producer, consts):
    e = _made_by(a, producer, mul_p)
    if e is not None and e.invars[0] is e.invars[1] and isinstance(e.invars[0], Var):
        build(abs_p, e.invars[0], out=out)                                      # 16
        return True
    e = _made_by(a, producer, integer_pow_p)        # JAX lowers x ** 2 to x * x
    if e is not None and e.params.get("y") == 2:
        build(abs_p, e.invars[0], out=out)
        return True
    e = _made_by(a, producer, square_p)             # and lax.square (jnp.square) too
    if e is not None:
        build(abs_p, e.invars[0], out=out)
        return True
    return False


def _div(build, a, b, out, producer, consts):
    return _apply(build, a, b, out, producer, consts)


_RULES = {div_p: _div, mul_p: _mul, add_p: _add, sub_p: _sub, log_p: _log, pow_p: _pow,
          sqrt_p: _sqrt}
