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

from kiln.core.avals import ManualAxisType, empty_mat
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
    return [m.varying for m in infer_mat(jaxpr, [_as_mat(m) for m in in_vma])]


def infer_mat(jaxpr, in_mat: list) -> list:
    """The manual axis types (``ManualAxisType``: varying, unreduced and reduced axes) of
    ``jaxpr``'s outputs given its inputs'."""
    jaxpr = _open(jaxpr)
    env: dict = {}
    for v in jaxpr.constvars:
        env[v] = empty_mat
    for v, m in zip(jaxpr.invars, in_mat):
        env[v] = _as_mat(m)

    def read(v):
        return empty_mat if isinstance(v, Literal) else env.get(v, empty_mat)

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = mat_rule(eqn.primitive.name, eqn.params, ins, eqn)
        for v, m in zip(eqn.outvars, outs):
            env[v] = m
    return [read(v) for v in jaxpr.outvars]


def _as_mat(m) -> ManualAxisType:
    return m if isinstance(m, ManualAxisType) else ManualAxisType(varying=frozenset(m))


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
    output variables abstract values that carry their manual axis types, from its
    operands' (so ``x.aval.mat`` is known inside the body, as in JAX). Loop carry
    mismatches raise JAX's TypeError here, at trace time; an unreduced operand of an
    operation with no unreduced rule JAX's NotImplementedError."""
    from kiln.core.avals import ShapedArray
    ins = [_aval_mat(v.aval) for v in eqn.invars]
    outs = mat_rule(eqn.primitive.name, eqn.params, ins, eqn)
    for v, m in zip(eqn.outvars, outs):
        if not m.empty and type(v.aval) is ShapedArray:
            v.aval = v.aval.with_mat(m)
    _type_sharding_rule(eqn)


# Elementwise operations: their result's type keeps the sharding of the operands of its
# shape (the automatic mesh axes of a partially manual body, ``x.aval.sharding``).
_ELEMENTWISE_TYPES = frozenset('''
add sub mul div neg max min abs sign floor ceil round exp exp2 log log1p expm1 tanh logistic
sin cos tan asin acos atan sinh cosh asinh acosh atanh atan2 sqrt rsqrt cbrt pow integer_pow
square rem eq ne lt le gt ge and or xor not select_n convert_element_type clamp is_finite
erf erfc add_any real imag conj stop_gradient pvary psum pmax pmin copy
'''.split())


def _type_sharding_rule(eqn) -> None:
    from kiln.core.avals import ShapedArray
    if eqn.primitive.name not in _ELEMENTWISE_TYPES or len(eqn.outvars) != 1:
        return
    out = eqn.outvars[0]
    if type(out.aval) is not ShapedArray or out.aval._tsh is not None:
        return
    tshs = [v.aval._tsh for v in eqn.invars
            if type(getattr(v, "aval", None)) is ShapedArray
            and v.aval.shape == out.aval.shape and v.aval._tsh is not None]
    if tshs and all(t == tshs[0] for t in tshs[1:]):
        out.aval = out.aval.with_type_sharding(tshs[0])


def _aval_mat(aval) -> ManualAxisType:
    mat = getattr(aval, "mat", None)
    return mat if mat is not None else empty_mat


# Operations linear in each operand that JAX gives an unreduced rule: an unreduced
# operand (partials of a sum) stays unreduced. Any other operation of an unreduced value
# is JAX's NotImplementedError.
_UNREDUCED_LINEAR = {
    "add", "sub", "add_any", "neg", "reduce_sum", "transpose", "reshape",
    "broadcast_in_dim", "squeeze", "expand_dims", "convert_element_type", "concatenate",
    "pad", "select_n", "copy", "copy_p", "reduce_precision", "mul", "split", "slice",
    "pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
    "remat", "checkpoint", "sharding_constraint", "optimization_barrier", "real", "imag",
    "conj", "cumsum", "dynamic_slice", "dynamic_update_slice", "gather", "rev",
}
_CASTS = {  # primitive: (from, to) of the axes it names
    "pvary": ("invarying", "varying"), "preduced": ("invarying", "reduced"),
    "vary_unreduced_cast": ("varying", "unreduced"),
    "reduced_vary_cast": ("reduced", "varying"),
    "unreduced_psum": ("unreduced", "invarying"),
    "unreduced_reduce_scatter": ("unreduced", "varying"),
    "all_gather_reduced": ("varying", "reduced"),
}


# Elementwise operations of several operands (JAX's ``standard_vma_rule``): with the
# option ``jax_auto_pcast`` off their operands must vary along the same manual axes.
_MATCHING = {
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "and", "or", "xor", "eq", "ne",
    "ge", "gt", "le", "lt", "atan2", "nextafter", "complex", "shift_left",
    "shift_right_logical", "shift_right_arithmetic", "select_n", "clamp", "dot_general",
}


def check_matching(name: str, varying: list) -> None:
    """JAX's ValueError when ``jax_auto_pcast`` is off and the operands of ``name`` vary
    along different manual axes (with it on, a less varying operand is ``pvary``-ed)."""
    from kiln.config import config
    if config.jax_auto_pcast or len(varying) < 2:
        return
    if any(v != varying[0] for v in varying[1:]):
        raise ValueError(
            f"Primitive {name} requires varying manual axes to match, but got "
            f"{[set(v) if v else frozenset() for v in varying]}. Please open an issue at "
            "https://github.com/jax-ml/jax/issues and as a temporary workaround pass the "
            "check_vma=False argument to `jax.shard_map`")


def _set(m: ManualAxisType, axes, state: str) -> ManualAxisType:
    v, u, r = m.varying - axes, m.unreduced - axes, m.reduced - axes
    if state == "varying":
        v |= axes
    elif state == "unreduced":
        u |= axes
    elif state == "reduced":
        r |= axes
    return ManualAxisType(varying=v, unreduced=u, reduced=r)


def mat_rule(name: str, params, ins: list, eqn=None, n_out: int = 1) -> list:
    """The manual axis types of an operation's outputs from its operands' (JAX's
    ``vma_rule`` and ``ur_rule``s): varying as ``_rule`` says; the casts and collectives
    of the reduced/unreduced types set their axes; otherwise unreduced axes pass through
    operations linear in that operand, and reduced axes through any operation, unless
    another operand varies along them (JAX inserts a ``reduced_vary_cast`` then)."""
    n_out = len(eqn.outvars) if eqn is not None else n_out
    if name in _MATCHING:
        check_matching(name, [m.varying for m in ins])
    if name in _CASTS:
        axes = frozenset(_axes_of(params))
        return [_set(m, axes, _CASTS[name][1]) for m in ins][:n_out]
    plain = not any(m.unreduced or m.reduced for m in ins)
    if eqn is not None:
        if plain and name not in ("cond", "scan", "while") and not _subs(params):
            return [ManualAxisType(varying=v) for v in _rule(eqn, [m.varying for m in ins])]
        if name in ("cond", "scan", "while") or _subs(params):
            return _call_rule(eqn, ins)
    varying = _union([m.varying for m in ins])
    unreduced = _union([m.unreduced for m in ins])
    reduced = _union([m.reduced for m in ins])
    if name in _INVARIANT_OVER:
        varying -= _axes_of(params)
    elif name in _VARYING_OVER:
        varying |= _axes_of(params)
    if unreduced:
        if name not in _UNREDUCED_LINEAR:
            raise NotImplementedError(f"unreduced rule for {name} is not implemented. Please "
                                      "file an issue at https://github.com/jax-ml/jax/issues")
        if name == "mul":
            if all(m.unreduced for m in ins):
                raise ValueError("lhs and rhs to `mul` cannot be unreduced since mul is "
                                 f"bilinear. Got lhs={ins[0].unreduced}, "
                                 f"rhs={ins[1].unreduced}")
            if varying & unreduced:
                raise ValueError("An operand of `mul` is unreduced along mesh axes "
                                 f"{set(unreduced)} that the other varies along.")
        elif name in ("add", "sub", "add_any"):
            us = {m.unreduced for m in ins}
            if len(us) > 1:
                raise ValueError(
                    "lhs and rhs to `add` must be unreduced along the same mesh axes. Got "
                    + ", ".join(str(set(u)) for u in us))
        reduced -= unreduced
    reduced -= varying
    return [ManualAxisType(varying=varying, unreduced=unreduced, reduced=reduced)] * n_out


def _axes_of(params) -> frozenset:
    names = params.get("axes", params.get("axis_name"))
    return frozenset(names if isinstance(names, (tuple, list)) else (names,))


def _subs(params) -> list:
    return [v for v in params.values() if isinstance(v, (ClosedJaxpr, Jaxpr))]


def _call_rule(eqn, ins) -> list:
    """Control flow and calls: their varying axes as ``_rule`` infers them; their
    unreduced/reduced axes from the called jaxpr when there is one to follow."""
    varying = _rule(eqn, [m.varying for m in ins])
    subs = _subs(eqn.params)
    if len(subs) == 1 and eqn.primitive.name not in ("scan", "while"):
        sub = _open(subs[0])
        if len(sub.invars) == len(ins) and len(sub.outvars) == len(eqn.outvars):
            outs = infer_mat(sub, ins)
            return [ManualAxisType(varying=v, unreduced=o.unreduced,
                                   reduced=o.reduced - v) for v, o in zip(varying, outs)]
    return [ManualAxisType(varying=v) for v in varying]


def _emulation_hook(trace, prim, args, params, kinds):
    """shard_map's vmap emulation (``batching.ur_hook``): the outputs of ``prim`` on the
    manual axis of ``trace``, typed reduced/unreduced along it as ``mat_rule`` says."""
    outs = trace.process_plain(prim, args, params)
    many = prim.multiple_results
    final = tag_outputs(trace, prim.name, params, args, kinds, list(outs) if many else [outs])
    return final if many else final[0]


def tag_outputs(trace, name, params, args, kinds, outs: list) -> list:
    """``outs`` (of an operation named ``name`` on ``args``, whose types along the manual
    axis of ``trace`` are ``kinds``) typed reduced/unreduced along it as ``mat_rule``
    says (``BatchTracer.ur``)."""
    from kiln.interpreters.batching import BatchTracer
    axname = trace.axis_data.name
    axis = frozenset({axname})
    ins = []
    for x, k in zip(args, kinds):
        batched = isinstance(x, BatchTracer) and x._trace is trace and x.bdim is not None
        state = k or ("varying" if batched else "invarying")
        ins.append(_set(empty_mat, axis, state))
    mats = mat_rule(name, params, ins, None, len(outs))
    final = []
    for o, m in zip(outs, mats + [empty_mat] * (len(outs) - len(mats))):
        mine = isinstance(o, BatchTracer) and o._trace is trace
        if axname in m.unreduced and mine and o.bdim is not None:
            o = BatchTracer(trace, o.val, o.bdim, "unreduced")
        elif axname in m.reduced and not (mine and o.bdim is not None):
            o = BatchTracer(trace, o.val if mine else o, None, "reduced")
        final.append(o)
    return final


def _emulation_check(name, args) -> None:
    if name in _MATCHING:
        from kiln.core.trace import get_aval
        check_matching(name, [getattr(get_aval(a), "mat", empty_mat).varying for a in args])


def install_emulation_hook() -> None:
    from kiln.config import config
    from kiln.interpreters import batching
    batching.ur_hook[0] = _emulation_hook
    batching.ur_tag[0] = tag_outputs
    batching.ur_prims.update(_CASTS)

    def on_auto_pcast(value):
        batching.vma_check[0] = None if value else _emulation_check
    on_auto_pcast(config.jax_auto_pcast)
    config.on_change("jax_auto_pcast", on_auto_pcast)


# Elementwise operations whose operands JAX ``pvary``s to a common type (with
# ``jax_auto_pcast``, in a body whose types are checked).
_PVARY_OPERANDS = _MATCHING - {"dot_general"}


def pvary_operands(trace, prim, args):
    """``args`` of an elementwise ``prim`` staged in ``trace`` (a checked shard_map body),
    each not varying along every manual axis another varies along first ``pvary``-ed along
    the missing ones (JAX's implicit pcast); other primitives' as they are."""
    if prim.name not in _PVARY_OPERANDS or len(args) < 2:
        return args
    from kiln.core.trace import get_aval
    from kiln.interpreters import batching
    from kiln.lax.parallel import pvary_p
    vs = [_aval_mat(get_aval(x)).varying if trace.is_own(x) else frozenset() for x in args]
    union = frozenset().union(*vs)
    if all(v == union for v in vs):
        return args
    order = [n for n, _ in batching.axis_env]
    out = []
    for x, v in zip(args, vs):
        missing = tuple(sorted(union - v, key=lambda a: order.index(a) if a in order
                               else len(order)))
        out.append(trace.stage(pvary_p, [x], {"axes": missing}) if missing else x)
    return out
