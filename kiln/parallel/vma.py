"""Which manual mesh axes each value of a ``shard_map`` body varies along (JAX's
``check_vma`` type inference, over a traced per-device jaxpr).

An input varies along the mesh axes its ``in_spec`` names. Most primitives' outputs vary
along the union of their operands' axes; collectives change that: ``psum``/``pmax``/
``pmin``/``all_gather(to='invarying')`` make the result the same along their axes; ``axis_index``/``pvary``
(``lax.pcast(to='varying')``)/``ppermute``/``psum_scatter``/``all_to_all``/``all_gather``
make it vary along them (as JAX's types: an ``all_gather`` result is varying). ``cond``'s
branches must agree (JAX's TypeError; the predicate does not count),
``scan``/``while`` require a carry output to vary along no more axes than the carry input
(JAX's TypeError, with its hint to ``pcast`` the initial carry), other calls are
followed into their jaxprs.

The eager ``shard_map`` (``kiln.parallel.shard_map``) checks its outputs against their
``out_specs`` with this, as JAX does statically.
"""
from __future__ import annotations

from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal

_INVARIANT_OVER = {"psum", "pmax", "pmin", "all_gather_invariant"}
_VARYING_OVER = {"axis_index", "pvary", "ppermute", "reduce_scatter", "all_to_all",
                 "all_gather"}


def _axes(eqn) -> frozenset:
    names = eqn.params.get("axes", eqn.params.get("axis_name"))
    return frozenset(names if isinstance(names, (tuple, list)) else (names,))


def _open(j):
    return j.jaxpr if isinstance(j, ClosedJaxpr) else j


def _fmt(aval, vma) -> str:
    s = aval.str_short()
    return s + ("{" + ",".join(sorted(map(str, vma))) + "}" if vma else "")


def _check_carry(name, avals, carry_in, carry_out) -> None:
    bad = [i for i, (a, b) in enumerate(zip(carry_in, carry_out)) if not b <= a]
    if not bad:
        return
    diffs = [f"the input carry component carry[{i}] has type {_fmt(avals[i], carry_in[i])} "
             "but the corresponding output carry component has type "
             f"{_fmt(avals[i], carry_out[i])}, so the varying manual axes do not match"
             for i in bad]
    fixes = [f"applying `jax.lax.pcast(..., {tuple(sorted(carry_out[i] - carry_in[i]))}, "
             "to='varying')`, to the initial carry value corresponding to the input carry "
             f"component carry[{i}]" for i in bad]
    if len(bad) == 1:
        differences = diffs[0][0].upper() + diffs[0][1:] + ".\n"
        fix = f"This might be fixed by {fixes[0]}.\n"
    else:
        differences = "".join(f"  * {d};\n" for d in diffs)
        fix = "This might be fixed by:\n" + "".join(f"  * {d};\n" for d in fixes)
    raise TypeError(f"{name} function carry input and carry output must have equal types, "
                    f"but they differ:\n\n{differences}\n{fix}\nRevise the function so that "
                    "all output types match the corresponding input types.")


def _check_branches(branches, outs) -> None:
    """JAX's TypeError for ``cond``/``switch`` branches whose outputs vary along different
    manual axes."""
    n = len(branches)
    names = (["false_fun", "true_fun"] if n == 2 else [f"branch {i}" for i in range(n)])
    order = [1, 0] if n == 2 else list(range(n))     # JAX compares true_fun first
    i1 = order[0]
    for i2 in order[1:]:
        o1, o2 = outs[i1], outs[i2]
        bad = [k for k, (a, b) in enumerate(zip(o1, o2)) if a != b]
        if not bad:
            continue
        avals = [v.aval for v in _open(branches[i1]).outvars]
        comp = (lambda k: f"[{k}]") if len(o1) > 1 else (lambda k: "")
        n1, n2 = names[i1], names[i2]
        diffs = [f"the output of {n1}{comp(k)} has type {_fmt(avals[k], o1[k])} but the "
                 f"corresponding output of {n2} has type {_fmt(avals[k], o2[k])}, so the "
                 "varying manual axes do not match" for k in bad]
        fixes = []
        for k in bad:
            for name, need in ((n1, o2[k] - o1[k]), (n2, o1[k] - o2[k])):
                if need:
                    fixes.append(f"applying `jax.lax.pcast(..., {tuple(sorted(need))}, "
                                 f"to='varying')` to the output of {name}{comp(k)}")
        differences = (diffs[0][0].upper() + diffs[0][1:] + ".\n" if len(diffs) == 1 else
                       "".join(f"  * {d};\n" for d in diffs))
        fix = (f"This might be fixed by {fixes[0]}.\n" if len(fixes) == 1 else
               "This might be fixed by:\n" + "".join(f"  * {d};\n" for d in fixes))
        api = "cond" if n == 2 else "switch"
        raise TypeError(f"{api} branches must have equal output types but they differ.\n\n"
                        f"{differences}\n{fix}\nRevise {n1} and/or {n2} so that all output "
                        "types match.")


def infer(jaxpr, in_vma: list) -> list:
    """The varying manual axes of ``jaxpr``'s outputs given its inputs' (frozensets)."""
    jaxpr = _open(jaxpr)
    env: dict = {}
    for v in jaxpr.constvars:
        env[v] = frozenset()
    for v, m in zip(jaxpr.invars, in_vma):
        env[v] = frozenset(m)

    def read(v):
        return frozenset() if isinstance(v, Literal) else env.get(v, frozenset())

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _rule(eqn, ins)
        for v, m in zip(eqn.outvars, outs):
            env[v] = m
    return [read(v) for v in jaxpr.outvars]


def _union(ins) -> frozenset:
    out = frozenset()
    for m in ins:
        out |= m
    return out


def _rule(eqn, ins) -> list:
    name = eqn.primitive.name
    n_out = len(eqn.outvars)
    p = eqn.params
    if name in _INVARIANT_OVER:
        return [m - _axes(eqn) for m in ins][:n_out] if n_out == len(ins) else \
            [_union(ins) - _axes(eqn)] * n_out
    if name in _VARYING_OVER:
        if name == "axis_index":
            return [_axes(eqn)]
        return [m | _axes(eqn) for m in ins][:n_out] if n_out == len(ins) else \
            [_union(ins) | _axes(eqn)] * n_out
    if name == "cond":
        # as JAX's: the branches' outputs must agree (the predicate's axes are not added)
        ops = ins[1:]
        brs = p["branches"]
        outs = [infer(br, ops) for br in brs]
        _check_branches(brs, outs)
        return outs[0]
    if name == "scan":
        nc, nk = p["num_consts"], p["num_carry"]
        consts, carry, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
        body = p["jaxpr"]
        outs = infer(body, consts + carry + xs)
        _check_carry("scan body", [v.aval for v in _open(body).invars[nc:nc + nk]], carry,
                     outs[:nk])
        return carry + outs[nk:]
    if name == "while":
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        bconsts, carry = ins[cn:cn + bn], ins[cn + bn:]
        outs = infer(p["body_jaxpr"], bconsts + carry)
        _check_carry("body_fun", [v.aval for v in _open(p["body_jaxpr"]).invars[bn:]],
                     carry, outs)
        return carry
    subs = [v for v in p.values() if isinstance(v, (ClosedJaxpr, Jaxpr))]
    if len(subs) == 1:
        sub = _open(subs[0])
        if len(sub.invars) == len(ins) and len(sub.outvars) == n_out:
            return infer(sub, ins)
    return [_union(ins)] * n_out


def stage_rule(eqn) -> None:
    """While an eager ``shard_map`` body is traced (``staging.vma_rule``): give ``eqn``'s
    output variables abstract values that carry their varying manual axes, from its
    operands' (so ``x.aval.mat.varying`` is known inside the body, as in JAX). Loop carry
    mismatches raise JAX's TypeError here, at trace time."""
    from kiln.core.avals import ManualAxisType, ShapedArray
    ins = [_aval_vma(v.aval) for v in eqn.invars]
    outs = _rule(eqn, ins)
    for v, m in zip(eqn.outvars, outs):
        if m and type(v.aval) is ShapedArray:
            v.aval = v.aval.with_mat(ManualAxisType(varying=m))


def _aval_vma(aval) -> frozenset:
    mat = getattr(aval, "mat", None)
    return mat.varying if mat is not None else frozenset()
