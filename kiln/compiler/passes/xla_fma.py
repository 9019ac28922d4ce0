"""XLA's FMA contraction: a product feeding an add or subtract becomes one fused
multiply-add (``fma``, rounded once) where XLA's CPU code makes it one, so compiled kiln
programs give JAX's bits.

XLA's CPU backend compiles its fused loops with LLVM allowed to contract floating-point
operations; LLVM's instruction selection turns ``fadd (fmul x, y), z`` (either operand
order) and ``fsub`` into an FMA when the multiply has no other use in the same fused
kernel. Measured with JAX 0.10.2 on an AVX-512 CPU (``tests/parity/test_fma_parity.py``),
for float32 and float64 alike:

1. ``a*b + c``, ``c + a*b`` => ``fma(a, b, c)``; ``a*b - c`` => ``fma(a, b, -c)``;
   ``c - a*b`` => ``fma(-a, b, c)``; ``-(a*b) + c`` (XLA's ``c - a*b``) => ``fma(-a, b, c)``
   -- when the product has this one use in the whole program (not also an output, not
   also used by another operation).
2. Two products (``a*b + c*d``): the left one is contracted, ``fma(a, b, c*d)``; the
   right one when only it has a single use, or (an add) when the left product has a
   factor computed with an fma and the right one has none: ``(a*b + c)*d + a*c`` =>
   ``fma(a, c, fma(a, b, c)*d)`` (JAX's traced ``linspace``; ``y*(1 - x*0.3) + x*w`` and
   ``(x*y + z)*w + w*z`` contract the left one in JAX, not reproduced).
3. Chains contract at every step: ``(a*b + c)*d + e`` => ``fma(fma(a, b, c), d, e)``.
4. ``x**2``, ``x**3``, ... (``integer_pow``, ``square``): XLA's multiplies by binary
   powering, the last one contracted: ``x**3 + c`` => ``fma(x*x, x, c)``.
5. Short sums of products: ``sum(a*b, axis)`` over one axis of 2 to 32 elements, with
   operands of at most 4000 elements, folds in order, ``acc = fma(a_i, b_i, acc)``
   (``reduce_sum_fma``), but for minor-axis rows of 5 to 8 elements, squares, several
   axes, a rank-0 factor (XLA's vectorized or split reductions add rounded products).
6. No contraction across a broadcast (a product of a smaller shape, rank 0 included,
   added to a larger array), a conversion or a ``select``; eager operations are separate
   XLA programs and never contract.

Constants take part as any operand (``x*0.3 + 1`` => ``fma(x, 0.3, 1)``), after XLA's
own rewrites (``x/3 + y`` => ``fma(x, fl(1/3), y)``, ``xla_simplify.py``), as in JAX.
Only float32 and float64 are contracted. Not reproduced: a product used several times
that XLA duplicates into separate fusions (``(a*b + c, a*b + d)`` as two outputs
contracts both in JAX), and a transpose or reshape between the product and the add
(contracted in JAX). docs/compatibility.md, "FMA contraction", has the measurements.

The ``fma`` and ``reduce_sum_fma`` primitives are in ``kiln.lax._fma``: C's
``fmaf``/``fma`` in compiled code (``-ffp-contract=off`` stays: kiln decides every
contraction), exact NumPy implementations on the reference backend.
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.passes.common import literal_value, make_literal, rebuild
from kiln.core.jaxpr import ClosedJaxpr, JaxprEqn, Literal, Var
from kiln.lax._fma import fma_p, reduce_sum_fma_p
from kiln.lax.arith import mul_p, neg_p

FMA_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_ADDS = ("add", "add_any", "sub")


def contract_fma(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Fuse single-use products into the add/subtract they feed (module docstring).

    Args:
      closed: the optimised jaxpr (the last pass); not modified. Sub-jaxprs are
        optimised (and contracted) when they are lowered.

    Returns:
      ``closed`` itself when nothing is contracted, else a new ``ClosedJaxpr``.
    """
    j = closed.jaxpr
    uses: dict = {}
    for eqn in j.eqns:
        for v in eqn.invars:
            if isinstance(v, Var):
                uses[v] = uses.get(v, 0) + 1
    for v in j.outvars:
        if isinstance(v, Var):
            uses[v] = uses.get(v, 0) + 2
    producer: dict = {}
    plans: dict = {}            # id(add eqn) -> (product, negate it?, addend, negate it?),
    #                             id(reduce_sum eqn) -> product eqn
    dropped: set = set()        # ids of the product (and neg) equations folded into an fma
    fused: set = set()          # values whose elementwise computation holds an fma
    for eqn in j.eqns:
        name = eqn.primitive.name
        if name == "xla_fma" or (name in _ELEMENTWISE and any(
                isinstance(v, Var) and v in fused for v in eqn.invars)):
            fused.update(eqn.outvars)       # (xla_fma: kiln.random's explicit FMAs)
        if name in ("mul", "integer_pow", "square", "neg") and len(eqn.outvars) == 1:
            producer[eqn.outvars[0]] = eqn
            continue
        if name == "reduce_sum":
            prod = _reduced_product(eqn, producer, uses)
            if prod is not None:
                plans[id(eqn)] = prod
                dropped.add(id(prod))
            continue
        if name not in _ADDS or eqn.outvars[0].aval.dtype not in FMA_DTYPES:
            continue
        out = eqn.outvars[0].aval
        found = [_product(v, out, producer, uses) for v in eqn.invars]
        order = (0, 1)
        if name != "sub" and found[0] is not None and found[1] is not None and \
                _holds(found[0][0], fused) and not _holds(found[1][0], fused):
            order = (1, 0)      # (fma(...) * w) + x * z: XLA contracts the right one
        for pos in order:
            if found[pos] is None:
                continue
            prod, neg = found[pos]
            fused.update(eqn.outvars)
            negate_prod = (neg is not None) != (name == "sub" and pos == 1)
            negate_addend = name == "sub" and pos == 0
            plans[id(eqn)] = (prod, negate_prod, eqn.invars[1 - pos], negate_addend)
            dropped.add(id(prod))
            if neg is not None:
                dropped.add(id(neg))
            break
    if not plans:
        return closed
    eqns: list = []
    for eqn in j.eqns:
        if id(eqn) in dropped:
            continue
        plan = plans.get(id(eqn))
        if plan is None:
            eqns.append(eqn)
            continue
        if isinstance(plan, JaxprEqn):      # a reduce_sum of a product
            eqns.append(JaxprEqn(reduce_sum_fma_p, list(plan.invars), list(eqn.outvars),
                                 {"axes": tuple(eqn.params["axes"]),
                                  "weak_type": eqn.outvars[0].aval.weak_type},
                                 eqn.source_info))
            continue
        prod, negate_prod, addend, negate_addend = plan
        x, y = _factors(prod, eqns)
        if negate_prod:
            x = _negated(x, eqns, eqn)
        if negate_addend:
            addend = _negated(addend, eqns, eqn)
        eqns.append(JaxprEqn(fma_p, [x, y, addend], list(eqn.outvars),
                             {"weak_type": eqn.outvars[0].aval.weak_type}, eqn.source_info))
    return rebuild(closed, eqns, list(j.outvars))


_ELEMENTWISE = frozenset((
    "add", "add_any", "sub", "mul", "div", "neg", "max", "min", "abs", "sign", "exp",
    "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "sqrt",
    "rsqrt", "cbrt", "pow", "integer_pow", "square", "select_n", "convert_element_type",
    "clamp", "erf", "erfc", "erf_inv", "atan2", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "floor", "ceil", "round", "rem", "fma"))


def _holds(prod, fused) -> bool:
    """Whether a factor of the product ``prod`` is computed with an fma."""
    return any(isinstance(v, Var) and v in fused for v in prod.invars)


def _product(atom, out, producer, uses):
    """``(product eqn, neg eqn or None)`` when ``atom`` is a float product of ``out``'s
    shape and dtype used only here (or the negation of one, itself used only here)."""
    if not isinstance(atom, Var) or uses.get(atom, 0) != 1:
        return None
    eqn = producer.get(atom)
    neg = None
    if eqn is not None and eqn.primitive.name == "neg":
        neg = eqn
        inner = eqn.invars[0]
        if not isinstance(inner, Var) or uses.get(inner, 0) != 1 or \
                inner.aval.shape != atom.aval.shape:
            return None
        eqn = producer.get(inner)
    if eqn is None or eqn.primitive.name == "neg":
        return None
    aval = eqn.outvars[0].aval
    if aval.shape != out.shape or aval.dtype != out.dtype:
        return None                 # a broadcast between: XLA does not contract
    if eqn.primitive.name == "integer_pow" and int(eqn.params["y"]) < 2:
        return None
    return eqn, neg


# XLA's reductions fold in order with the product contracted (``acc = fma(x, y, acc)``)
# when they stay in one fused loop: one reduced axis of at most 32 elements, in an operand
# of at most 4000 elements (larger ones are split, run in parallel or on products
# computed apart); along the minor axis, rows of 5 to 8 elements fold the rounded
# products instead (XLA's vectorized form).
REDUCE_MAX_LENGTH = 32
REDUCE_MAX_SIZE = 4000
_MINOR_UNFUSED = range(5, 9)


def _reduced_product(eqn, producer, uses):
    """The single-use product ``x * y`` (distinct ``x`` and ``y`` of the operand's shape)
    that the ``reduce_sum`` ``eqn`` folds with one fma per element, or None."""
    atom = eqn.invars[0]
    aval = atom.aval
    if aval.dtype not in FMA_DTYPES or not isinstance(atom, Var) or uses.get(atom, 0) != 1:
        return None
    prod = producer.get(atom)
    if prod is None or prod.primitive.name != "mul":
        return None
    x, y = prod.invars
    if x is y or any(getattr(v, "aval", None) is None or v.aval.shape != aval.shape or
                     v.aval.dtype != aval.dtype for v in (x, y)):
        return None                     # squares and broadcast scalars: left alone
    axes = tuple(eqn.params["axes"])
    if len(axes) != 1:
        return None
    (ax,) = axes
    n = aval.shape[ax]
    if not 2 <= n <= REDUCE_MAX_LENGTH or int(np.prod(aval.shape)) > REDUCE_MAX_SIZE:
        return None
    if ax == len(aval.shape) - 1 and n in _MINOR_UNFUSED:
        return None
    return prod


def _factors(prod, eqns):
    """The two factors of the product's last multiply, emitting the multiplies before it
    (XLA's binary powering for ``integer_pow``, as the renderer computes it)."""
    name = prod.primitive.name
    if name == "mul":
        return prod.invars[0], prod.invars[1]
    x = prod.invars[0]
    if name == "square":
        return x, x
    n = int(prod.params["y"])
    base = x
    terms = []
    last_base = None
    while n:
        if n & 1:
            terms.append(base)
        n >>= 1
        if n:
            last_base = base
            base = _emit(mul_p, [base, base], eqns, prod)
    if len(terms) == 1:                 # a power of two: the last multiply is a squaring
        eqns.pop()                      # (it made ``terms[0]``)
        return last_base, last_base
    acc = terms[0]
    for t in terms[1:-1]:
        acc = _emit(mul_p, [acc, t], eqns, prod)
    return acc, terms[-1]


def _emit(prim, invars, eqns, like):
    out = Var(like.outvars[0].aval)
    eqns.append(JaxprEqn(prim, list(invars), [out], {}, like.source_info))
    return out


def _negated(atom, eqns, like):
    if isinstance(atom, Literal):
        lit = make_literal(-literal_value(atom), atom.aval)
        if lit is not None:
            return lit
    out = Var(atom.aval)
    eqns.append(JaxprEqn(neg_p, [atom], [out], {}, like.source_info))
    return out

