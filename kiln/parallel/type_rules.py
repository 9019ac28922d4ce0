"""Shardings in types through operations (JAX's sharding rules, explicit mode).

A value laid out over mesh axes of type ``Explicit`` carries the layout in its type
(``x.aval.sharding``: the abstract mesh and a spec naming only ``Explicit`` axes): a
``jit``'s argument made from such an array, or a sharding constraint's result
(``kiln.parallel.placement.note_type``). While a ``jit`` (or ``make_jaxpr``) stages an
equation with such an operand, :func:`propagate` (installed as ``staging.type_rule``)
gives its outputs' types the sharding JAX's rule for that primitive computes, and raises
JAX's ``ShardingTypeError`` where JAX's rule does for elementwise operands split along
different axes. Where JAX raises for a product whose batch or contracting dimensions are
split differently or on both sides (unless given ``out_sharding``), or for a cumulative
reduction along a split dimension, kiln computes it (the partitioner gathers or adds
partial products) and leaves the result untyped. A ``jit``'s outputs are laid out as their types say (``kiln.jitting``).

Primitives with no rule here leave their outputs untyped (``P(None, ...)``), as before.
"""
from __future__ import annotations

from kiln.core.avals import ShapedArray, ShardingTypeError
from kiln.interpreters import staging
from kiln.sharding import NamedSharding, PartitionSpec

#: Elementwise primitives: operands broadcast against each other (JAX's
#: ``broadcasting_sharding_rule``).
ELEMENTWISE = frozenset("""
add sub mul div neg max min abs sign floor ceil round exp exp2 log log1p expm1 tanh logistic
sin cos tan asin acos atan sinh cosh asinh acosh atanh atan2 sqrt rsqrt cbrt pow integer_pow
square rem eq ne lt le gt ge and or xor not select_n convert_element_type clamp is_finite
erf erfc erf_inv lgamma digamma igamma igammac add_any real imag conj complex stop_gradient
copy copy_p nextafter population_count clz shift_left shift_right_logical
shift_right_arithmetic reduce_precision to_edtype from_edtype bitcast_convert_type
""".split())

#: Reductions over ``axes``: the reduced dimensions leave the spec.
REDUCTIONS = frozenset("""
reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor argmax argmin
""".split())

#: Cumulative reductions along ``axis``: the spec is kept; the axis must not be split.
CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())


def _tsh(aval):
    return aval._tsh if type(aval) is ShapedArray else None


def _parts(aval) -> tuple:
    """``aval``'s spec, one entry per dimension (``None``: not split)."""
    t = _tsh(aval)
    n = len(aval.shape)
    if t is None:
        return (None,) * n
    parts = tuple(t.spec)
    return parts[:n] + (None,) * (n - len(parts))


def _mesh(avals, name: str):
    """The abstract mesh of the operands' types (all the same, JAX's ShardingTypeError
    otherwise)."""
    mesh = None
    for a in avals:
        t = _tsh(a)
        if t is None or t.mesh.empty:
            continue
        if mesh is not None and mesh != t.mesh:
            raise ShardingTypeError(f"Mesh for all inputs should be equal. Got one mesh: "
                                    f"{mesh} and another mesh: {t.mesh}")
        mesh = t.mesh
    return mesh


def _spec_str(parts) -> str:
    return str(tuple(parts))


def broadcasting_parts(name: str, avals) -> tuple | None:
    """The spec of an elementwise operation's result (JAX's
    ``broadcasting_sharding_rule``); rank-0 operands take no part."""
    shaped = [a for a in avals if a.shape]
    if not shaped:
        return ()
    if len({len(a.shape) for a in shaped}) != 1:
        return None
    specs = [_parts(a) for a in shaped]
    out = []
    for i in range(len(shaped[0].shape)):
        ss = [s[i] for s in specs]
        if all(s == ss[0] for s in ss[1:]):
            out.append(ss[0])
            continue
        nontrivial = [s for s, a in zip(ss, shaped) if not (a.shape[i] == 1 and s is None)]
        if not nontrivial:
            out.append(None)
        elif all(s == nontrivial[0] for s in nontrivial[1:]):
            out.append(nontrivial[0])
        else:
            got = None
            for s in ss:
                if got is None and s is not None:
                    got = s
                elif got is not None and s is not None and got != s:
                    raise ShardingTypeError(
                        f"{name} got incompatible shardings for broadcasting: "
                        f"{', '.join(_spec_str(s) for s in specs)}.")
            out.append(got)
    return tuple(out)


def _dot_general_parts(lhs, rhs, params) -> tuple | None:
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    lp, rp = _parts(lhs), _parts(rhs)
    lbs, rbs = tuple(lp[i] for i in lb), tuple(rp[i] for i in rb)
    lcs, rcs = tuple(lp[i] for i in lc), tuple(rp[i] for i in rc)
    if any(a is not None and b is not None and a != b for a, b in zip(lbs, rbs)):
        return None
    if any(a is not None and b is not None for a, b in zip(lcs, rcs)):
        # JAX raises ShardingTypeError (batch or contracting dimensions split differently,
        # contracting dimensions split on both sides) unless an ``out_sharding`` is given;
        # kiln's ``einsum``/``dot``/``matmul`` apply theirs as a constraint after the
        # product, so the product stays untyped here and the constraint types it
        return None
    lfree = tuple(p for i, p in enumerate(lp) if i not in set(lc) | set(lb))
    rfree = tuple(p for i, p in enumerate(rp) if i not in set(rc) | set(rb))
    return lbs + lfree + rfree


def _out_parts(eqn) -> list | None:
    """One spec per output of ``eqn`` (``None``: no rule, the output stays untyped)."""
    name = eqn.primitive.name
    p = eqn.params
    ins = [getattr(v, "aval", None) for v in eqn.invars]
    ins = [a for a in ins if isinstance(a, ShapedArray)]
    outs = [v.aval for v in eqn.outvars]
    if name in ELEMENTWISE:
        parts = broadcasting_parts(name, ins)
        if parts is None:
            return None
        return [parts if len(o.shape) == len(parts) else None for o in outs]
    if not ins:
        return None
    x = ins[0]
    xp = _parts(x)
    if name in REDUCTIONS:
        axes = set(p["axes"])
        return [tuple(s for i, s in enumerate(xp) if i not in axes)] * len(outs)
    if name in CUMULATIVE:
        # along a split axis JAX raises ShardingTypeError; kiln gathers it (the SPMD
        # partitioner's rule) and leaves the result untyped
        return None if xp[p["axis"]] is not None else [xp]
    if name == "transpose":
        return [tuple(xp[i] for i in p["permutation"])]
    if name == "broadcast_in_dim":
        out = [None] * len(outs[0].shape)
        for i, d in enumerate(p["broadcast_dimensions"]):
            if x.shape[i] == outs[0].shape[d]:
                out[d] = xp[i]
        return [tuple(out)]
    if name == "squeeze":
        dims = {d % len(x.shape) for d in p["dimensions"]}
        return [tuple(s for i, s in enumerate(xp) if i not in dims)]
    if name == "expand_dims":
        out = list(xp)
        for d in sorted(p["dimensions"]):
            out.insert(d, None)
        return [tuple(out)]
    if name == "dot_general":
        if p.get("out_sharding") is not None or len(ins) != 2:
            return None
        parts = _dot_general_parts(ins[0], ins[1], p)
        return None if parts is None else [parts]
    if name in ("slice", "dynamic_slice", "dynamic_update_slice", "pad", "rev", "sort",
                "reduce_window_sum", "reduce_window_max", "reduce_window_min",
                "reduce_window", "select_and_scatter_add", "top_k"):
        # dimensions keep their split where the operation keeps their size
        res = []
        for o in outs:
            if len(o.shape) != len(x.shape):
                res.append(None)
                continue
            res.append(tuple(s if x.shape[i] == o.shape[i] else None
                             for i, s in enumerate(xp)))
        return res
    if name == "concatenate":
        d = p["dimension"]
        parts = broadcasting_parts(name, [ShapedArray(tuple(1 if i == d else n for i, n in
                                                            enumerate(a.shape)), a.dtype)
                                          .with_type_sharding(_tsh(a)) if _tsh(a) else a
                                          for a in ins])
        if parts is None:
            return None
        return [tuple(None if i == d else s for i, s in enumerate(parts))]
    return None


def _in_transpose(eqn) -> bool:
    """Whether ``eqn`` was staged by a backward pass (``transpose`` in its name stack)."""
    stack = getattr(getattr(eqn, "source_info", None), "name_stack", None)
    return any(getattr(t, "name", None) == "transpose" and type(t).__name__ == "Transform"
               for t in getattr(stack, "stack", ()))


def propagate(eqn) -> None:
    """Give ``eqn``'s outputs the shardings of their types, from its operands' (see the
    module's docstring). Called for equations with an operand whose type has one."""
    mesh = _mesh([getattr(v, "aval", None) for v in eqn.invars], eqn.primitive.name)
    if mesh is None:
        return
    try:
        outs = _out_parts(eqn)
    except ShardingTypeError:
        if not _in_transpose(eqn):
            raise
        # JAX's transpose rules give their operations the primal's sharding as
        # ``out_sharding``, which no check questions; kiln's leave the result untyped
        return
    if outs is None:
        return
    for v, parts in zip(eqn.outvars, outs):
        a = v.aval
        if parts is None or type(a) is not ShapedArray or a._tsh is not None:
            continue
        if len(parts) != len(a.shape):
            continue
        used = [ax for p in parts if p is not None
                for ax in (p if isinstance(p, tuple) else (p,))]
        if len(used) != len(set(used)):
            # one mesh axis on two dimensions (a product of operands split on the same
            # axis, whose out_sharding kiln's einsum/dot apply after it): left untyped
            continue
        v.aval = a.with_type_sharding(NamedSharding(mesh, PartitionSpec(*parts)))


staging.type_rule[0] = propagate
