"""Per-primitive rules of :mod:`kiln.compiler.hlo.build`: equation -> HLO instructions,
and the lowering of a jaxpr through them (:func:`lower_jaxpr`, :func:`jaxpr_computation`:
control flow rules lower their bodies with these).

Each rule follows JAX's lowering of the primitive to HLO (the opcodes XLA's
``as_hlo_text`` shows for it); :func:`lower_eqn` falls back to a ``custom-call`` with
target ``kiln.<primitive>`` for primitives that have no HLO counterpart, so rendering never
fails.
"""
from __future__ import annotations

import numpy as np

from kiln.compiler.hlo.ir import Computation, Ctx, Instr, TensorT, sanitize, tensor_of
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal

UNARY = {
    "neg": "negate", "exp": "exponential", "log": "log", "sin": "sine", "cos": "cosine",
    "tan": "tan", "tanh": "tanh", "sqrt": "sqrt", "rsqrt": "rsqrt", "cbrt": "cbrt",
    "abs": "abs", "sign": "sign", "floor": "floor", "ceil": "ceil", "log1p": "log-plus-one",
    "expm1": "exponential-minus-one", "logistic": "logistic", "not": "not",
    "is_finite": "is-finite", "population_count": "popcnt", "clz": "count-leading-zeros",
    "real": "real", "imag": "imag", "erf": "erf", "xla_exp": "exponential",
    "xla_log": "log", "xla_log1p": "log-plus-one", "xla_tan": "tan", "xla_erf": "erf",
}
BINARY = {
    "add": "add", "add_any": "add", "sub": "subtract", "mul": "multiply", "div": "divide",
    "rem": "remainder", "max": "maximum", "min": "minimum", "pow": "power",
    "xla_pow": "power", "and": "and", "or": "or", "xor": "xor", "atan2": "atan2",
    "shift_left": "shift-left", "shift_right_arithmetic": "shift-right-arithmetic",
    "shift_right_logical": "shift-right-logical", "complex": "complex",
}
COMPARE = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}
# Primitives that are the identity on their (single) operand in a compiled program.
IDENTITY = {"stop_gradient", "pbroadcast", "optimization_barrier", "name", "rounded"}
# Call-like primitives (not inlined inside sub-jaxprs) -> the param holding the body.
CALLS = {"jit": "jaxpr", "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
         "checkpoint": "jaxpr", "composite": "jaxpr", "custom_lin": None}
# Reductions: primitive -> (region opcode, identity element or None for the dtype's extreme).
REDUCE = {"reduce_sum": ("add", 0), "reduce_prod": ("multiply", 1),
          "reduce_max": ("maximum", "min"), "reduce_min": ("minimum", "max"),
          "reduce_and": ("and", True), "reduce_or": ("or", False),
          "reduce_xor": ("xor", False)}
CUMULATIVE = {"cumsum": ("add", 0), "cumprod": ("multiply", 1), "cummax": ("maximum", "min"),
              "cummin": ("minimum", "max")}
WINDOW = {"reduce_window_sum": ("add", 0), "reduce_window_max": ("maximum", "min"),
          "reduce_window_min": ("minimum", "max")}
SCATTER = {"scatter": None, "scatter-add": "add", "scatter-mul": "multiply",
           "scatter-min": "minimum", "scatter-max": "maximum", "scatter-sub": "subtract"}


def _out(eqn, i=0) -> TensorT:
    return tensor_of(eqn.outvars[i].aval)


def _extreme(which, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return which == "max"
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return info.max if which == "max" else info.min
    return np.inf if which == "max" else -np.inf


def _identity(ident, dtype):
    return _extreme(ident, dtype) if isinstance(ident, str) else ident


def _flat(closed):
    return closed.jaxpr if isinstance(closed, ClosedJaxpr) else closed


# ----------------------------------------------------------------------------------------------
# Elementwise.


def _elementwise(ctx: Ctx, eqn, xs, opcode, **attrs):
    t = _out(eqn)
    xs = [ctx.broadcast_to(x, t.shape) for x in xs]
    return [ctx.emit(opcode, t, xs, eqn.primitive.name, **attrs)]


def _compare(ctx, eqn, xs):
    t = _out(eqn)
    xs = [ctx.broadcast_to(x, t.shape) for x in xs]
    return [ctx.emit("compare", t, xs, eqn.primitive.name,
                     direction=COMPARE[eqn.primitive.name])]


def _integer_pow(ctx, eqn, xs):
    (x,), y = xs, eqn.params["y"]
    t, hint = _out(eqn), eqn.primitive.name
    if y == 0:
        return [ctx.full(1, t)]
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else ctx.emit("multiply", t, [base, acc], hint)
        n >>= 1
        if n:
            base = ctx.emit("multiply", t, [base, base], hint)
    if y < 0:
        acc = ctx.emit("divide", t, [ctx.full(1, t), acc], hint)
    return [acc]


def _square(ctx, eqn, xs):
    return [ctx.emit("multiply", _out(eqn), [xs[0], xs[0]], "square")]


def _round(ctx, eqn, xs):
    op = "round-nearest-even" if int(eqn.params.get("rounding_method", 0)) else \
        "round-nearest-afz"
    return _elementwise(ctx, eqn, xs, op)


def _convert(ctx, eqn, xs):
    (x,), t = xs, _out(eqn)
    if t.dtype == x.type.dtype:
        return [x]
    if t.dtype == np.bool_:
        zero = ctx.full(0, x.type)
        return [ctx.emit("compare", t, [x, zero], eqn.primitive.name, direction="NE")]
    if np.issubdtype(x.type.dtype, np.complexfloating) and \
            not np.issubdtype(t.dtype, np.complexfloating):
        x = ctx.emit("real", TensorT(x.type.shape, np.finfo(x.type.dtype).dtype), [x],
                     eqn.primitive.name)
        if x.type.dtype == t.dtype:
            return [x]
    return [ctx.emit("convert", t, [x], eqn.primitive.name)]


def _conj(ctx, eqn, xs):
    (x,), t, hint = xs, _out(eqn), eqn.primitive.name
    if not np.issubdtype(x.type.dtype, np.complexfloating):
        return [ctx.emit("convert", t, [x], hint)]
    rt = TensorT(t.shape, np.finfo(t.dtype).dtype)
    re = ctx.emit("real", rt, [x], "real")
    im = ctx.emit("imag", rt, [x], "imag")
    neg = ctx.emit("negate", rt, [im], "neg")
    return [ctx.emit("complex", t, [re, neg], "complex")]


def _select_n(ctx, eqn, xs):
    t, hint = _out(eqn), eqn.primitive.name
    pred, cases = xs[0], [ctx.broadcast_to(c, t.shape) for c in xs[1:]]
    if len(cases) == 1:
        return [cases[0]]
    if pred.type.dtype == np.bool_:
        p = ctx.broadcast_to(pred, t.shape)
        return [ctx.emit("select", t, [p, cases[1], cases[0]], hint)]

    def tree(lo, hi):                       # cases[lo:hi] by an integer predicate
        if hi - lo == 1:
            return cases[lo]
        mid = (lo + hi) // 2
        bound = ctx.full(mid, pred.type)
        p = ctx.emit("compare", TensorT(pred.type.shape, np.bool_), [pred, bound], "lt",
                     direction="LT")
        return ctx.emit("select", t, [ctx.broadcast_to(p, t.shape), tree(lo, mid),
                                      tree(mid, hi)], hint)
    return [tree(0, len(cases))]


def _clamp(ctx, eqn, xs):
    t = _out(eqn)
    return [ctx.emit("clamp", t, [ctx.broadcast_to(x, t.shape) for x in xs], "clamp")]


# ----------------------------------------------------------------------------------------------
# Structural.


def _broadcast_in_dim(ctx, eqn, xs):
    dims = tuple(eqn.params["broadcast_dimensions"])
    return [ctx.emit("broadcast", _out(eqn), xs[:1], eqn.primitive.name, dimensions=dims)]


def _reshape(ctx, eqn, xs):
    return [ctx.emit("reshape", _out(eqn), xs[:1], eqn.primitive.name)]


def _transpose(ctx, eqn, xs):
    return [ctx.emit("transpose", _out(eqn), xs, "transpose",
                     dimensions=tuple(eqn.params["permutation"]))]


def _rev(ctx, eqn, xs):
    return [ctx.emit("reverse", _out(eqn), xs, "rev",
                     dimensions=tuple(eqn.params["dimensions"]))]


def _split(ctx, eqn, xs):
    """``split``: one ``slice`` per result, as XLA lowers it."""
    p, shape = eqn.params, eqn.invars[0].aval.shape
    outs, start = [], 0
    for i, size in enumerate(p["sizes"]):
        spec = tuple((start, start + int(size), 1) if d == p["axis"] else (0, n, 1)
                     for d, n in enumerate(shape))
        outs.append(ctx.emit("slice", _out(eqn, i), xs, "slice", slice=spec))
        start += int(size)
    return outs


def _slice(ctx, eqn, xs):
    p = eqn.params
    strides = p["strides"] or (1,) * len(p["start_indices"])
    spec = tuple(zip(p["start_indices"], p["limit_indices"], strides))
    return [ctx.emit("slice", _out(eqn), xs, "slice", slice=spec)]


def _concatenate(ctx, eqn, xs):
    return [ctx.emit("concatenate", _out(eqn), xs, "concatenate",
                     dimensions=(eqn.params["dimension"],))]


def _pad(ctx, eqn, xs):
    return [ctx.emit("pad", _out(eqn), xs, "pad",
                     padding=tuple(tuple(c) for c in eqn.params["padding_config"]))]


def _iota(ctx, eqn, xs):
    return [ctx.emit("iota", _out(eqn), [], "iota", iota_dimension=eqn.params["dimension"])]


def _precision_attrs(precision, algorithms: bool = True) -> dict:
    """XLA's attributes for a (canonical) ``precision`` parameter: ``operand_precision``
    (lower-case names of the two operands' ``Precision``) unless both are ``DEFAULT``, or
    for a ``DotAlgorithmPreset`` other than ``DEFAULT`` (dots only) ``algorithm``
    (``dot_bf16_bf16_f32``)."""
    from kiln.lax.dot import DotAlgorithmPreset
    if isinstance(precision, tuple) and len(precision) == 2:
        names = tuple(p.name.lower() for p in precision)
        return {} if names == ("default", "default") else {"operand_precision": names}
    if (algorithms and isinstance(precision, DotAlgorithmPreset)
            and precision is not DotAlgorithmPreset.DEFAULT):
        return {"algorithm": "dot_" + precision.name.lower()}
    return {}


def _dot_general(ctx, eqn, xs):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    attrs = {}
    if lb:
        attrs["lhs_batch_dims"] = tuple(lb)
    attrs["lhs_contracting_dims"] = tuple(lc)
    if rb:
        attrs["rhs_batch_dims"] = tuple(rb)
    attrs["rhs_contracting_dims"] = tuple(rc)
    attrs.update(_precision_attrs(eqn.params.get("precision")))
    return [ctx.emit("dot", _out(eqn), xs, "dot_general", **attrs)]


def _dynamic_slice(ctx, eqn, xs):
    return [ctx.emit("dynamic-slice", _out(eqn), xs, "dynamic_slice",
                     dynamic_slice_sizes=tuple(eqn.params["slice_sizes"]))]


def _dynamic_update_slice(ctx, eqn, xs):
    return [ctx.emit("dynamic-update-slice", _out(eqn), xs, "dynamic_update_slice")]


def _gather(ctx, eqn, xs):
    dn = eqn.params["dimension_numbers"]
    attrs = {"offset_dims": tuple(dn.offset_dims),
             "collapsed_slice_dims": tuple(dn.collapsed_slice_dims),
             "start_index_map": tuple(dn.start_index_map)}
    if dn.operand_batching_dims:
        attrs["operand_batching_dims"] = tuple(dn.operand_batching_dims)
        attrs["start_indices_batching_dims"] = tuple(dn.start_indices_batching_dims)
    attrs["index_vector_dim"] = len(xs[1].type.shape) - 1
    attrs["slice_sizes"] = tuple(eqn.params["slice_sizes"])
    if eqn.params.get("indices_are_sorted"):
        attrs["indices_are_sorted"] = True
    return [ctx.emit("gather", _out(eqn), xs[:2], "gather", **attrs)]


def _scatter(ctx, eqn, xs):
    name, dn = eqn.primitive.name, eqn.params["dimension_numbers"]
    t = _out(eqn)
    op = SCATTER[name]
    st = TensorT((), t.dtype)
    if op is None:
        region = ctx.region("region", [st, st], name, lambda c, ps: ps[1])
    else:
        region = ctx.scalar_binop_region("region", t.dtype, op, name)
    attrs = {"update_window_dims": tuple(dn.update_window_dims),
             "inserted_window_dims": tuple(dn.inserted_window_dims),
             "scatter_dims_to_operand_dims": tuple(dn.scatter_dims_to_operand_dims)}
    if dn.operand_batching_dims:
        attrs["input_batching_dims"] = tuple(dn.operand_batching_dims)
        attrs["scatter_indices_batching_dims"] = tuple(dn.scatter_indices_batching_dims)
    attrs["index_vector_dim"] = len(xs[1].type.shape) - 1
    if eqn.params.get("indices_are_sorted"):
        attrs["indices_are_sorted"] = True
    if eqn.params.get("unique_indices"):
        attrs["unique_indices"] = True
    attrs["to_apply"] = region
    return [ctx.emit("scatter", t, xs[:3], name, **attrs)]


# ----------------------------------------------------------------------------------------------
# Reductions and windows.


def _reduce(ctx, eqn, xs):
    name = eqn.primitive.name
    op, ident = REDUCE[name]
    t = _out(eqn)
    init = ctx.constant(_identity(ident, t.dtype), t.dtype)
    region = ctx.scalar_binop_region("region", t.dtype, op, name)
    return [ctx.emit("reduce", t, [xs[0], init], name,
                     dimensions=tuple(eqn.params["axes"]), to_apply=region)]


def _argminmax(ctx, eqn, xs):
    name = eqn.primitive.name
    (x,), t = xs, _out(eqn)
    axes = tuple(eqn.params["axes"])
    vt, it = TensorT((), x.type.dtype), TensorT((), t.dtype)
    better = "GT" if name == "argmax" else "LT"
    is_float = np.issubdtype(x.type.dtype, np.inexact)

    def body(c: Ctx, ps):
        v0, i0, v1, i1 = ps
        b = TensorT((), np.bool_)
        pick = c.emit("compare", b, [v0, v1], better.lower(), direction=better)
        if is_float:
            nan = c.emit("compare", b, [v0, v0], "ne", direction="NE")
            pick = c.emit("or", b, [pick, nan], "or")
        v = c.emit("select", vt, [pick, v0, v1], "select_n")
        eq = c.emit("compare", b, [v0, v1], "eq", direction="EQ")
        lt = c.emit("compare", b, [i0, i1], "lt", direction="LT")
        tie = c.emit("and", b, [eq, lt], "and")
        pick_i = c.emit("or", b, [pick, tie], "or")
        i = c.emit("select", it, [pick_i, i0, i1], "select_n")
        return c.tuple([v, i])

    comp = ctx.region("region", [vt, it, vt, it], "reduce", body)
    dim = axes[0]
    iota = ctx.emit("iota", TensorT(x.type.shape, t.dtype), [], "iota", iota_dimension=dim)
    init_v = ctx.constant(_extreme("min" if name == "argmax" else "max", x.type.dtype),
                          x.type.dtype)
    init_i = ctx.constant(0, t.dtype)
    red = ctx.emit("reduce", (TensorT(t.shape, x.type.dtype), t), [x, iota, init_v, init_i],
                   name, dimensions=axes, to_apply=comp)
    return [ctx.gte(red, 1, name)]


def _cumulative(ctx, eqn, xs):
    name = eqn.primitive.name
    op, ident = CUMULATIVE[name]
    (x,), t = xs, _out(eqn)
    axis, n = eqn.params["axis"], t.shape[eqn.params["axis"]]
    size = tuple(n if d == axis else 1 for d in range(len(t.shape)))
    pad = tuple(((0, n - 1) if eqn.params["reverse"] else (n - 1, 0)) if d == axis
                else (0, 0) for d in range(len(t.shape)))
    region = ctx.scalar_binop_region("region", t.dtype, op, name)
    init = ctx.constant(_identity(ident, t.dtype), t.dtype)
    return [ctx.emit("reduce-window", t, [x, init], name,
                     window={"size": size, "pad": pad}, to_apply=region)]


def _reduce_window(ctx, eqn, xs):
    name, p = eqn.primitive.name, eqn.params
    op, ident = WINDOW[name]
    t = _out(eqn)
    region = ctx.scalar_binop_region("region", t.dtype, op, name)
    init = ctx.constant(_identity(ident, t.dtype), t.dtype)
    window = {"size": tuple(p["window_dimensions"]), "stride": tuple(p["window_strides"]),
              "pad": tuple(tuple(q) for q in p["padding"]),
              "lhs_dilate": tuple(p["base_dilation"]), "rhs_dilate": tuple(p["window_dilation"])}
    return [ctx.emit("reduce-window", t, [xs[0], init], name, window=window, to_apply=region)]


def _conv(ctx, eqn, xs):
    p = eqn.params
    dn = p["dimension_numbers"]
    nsp = len(p["window_strides"])

    def labels(spec, first, second):
        out = [""] * (nsp + 2)
        out[spec[0]], out[spec[1]] = first, second
        for i, d in enumerate(spec[2:]):
            out[d] = str(i)
        return "".join(out)

    dim_labels = (f"{labels(dn.lhs_spec, 'b', 'f')}_{labels(dn.rhs_spec, 'o', 'i')}->"
                  f"{labels(dn.out_spec, 'b', 'f')}")
    rhs_shape = xs[1].type.shape
    window = {"size": tuple(rhs_shape[d] for d in dn.rhs_spec[2:]),
              "stride": tuple(p["window_strides"]),
              "pad": tuple(tuple(q) for q in p["padding"]),
              "lhs_dilate": tuple(p["lhs_dilation"]), "rhs_dilate": tuple(p["rhs_dilation"])}
    attrs = {"window": window, "dim_labels": dim_labels}
    if p["feature_group_count"] != 1:
        attrs["feature_group_count"] = p["feature_group_count"]
    if p["batch_group_count"] != 1:
        attrs["batch_group_count"] = p["batch_group_count"]
    # XLA keeps no algorithm on a convolution: a DotAlgorithmPreset prints nothing.
    attrs.update(_precision_attrs(p.get("precision"), algorithms=False))
    return [ctx.emit("convolution", _out(eqn), xs[:2], "conv_general_dilated", **attrs)]


def _sort(ctx, eqn, xs):
    p = eqn.params
    nk = p["num_keys"]
    b = TensorT((), np.bool_)

    def body(c: Ctx, ps):
        pairs = [(ps[2 * k], ps[2 * k + 1]) for k in range(nk)]
        result = None
        for a0, a1 in reversed(pairs):      # lexicographic over the keys
            kw = {"type": "TOTALORDER"} if np.issubdtype(a0.type.dtype, np.inexact) else {}
            lt = c.emit("compare", b, [a0, a1], "lt", direction="LT", **kw)
            if result is None:
                result = lt
            else:
                eq = c.emit("compare", b, [a0, a1], "eq", direction="EQ", **kw)
                result = c.emit("or", b, [lt, c.emit("and", b, [eq, result], "and")], "or")
        return result

    types = []
    for x in xs:
        types += [TensorT((), x.type.dtype)] * 2
    comp = ctx.region("region", types, "sort", body)
    outs = [_out(eqn, i) for i in range(len(eqn.outvars))]
    typ = outs[0] if len(outs) == 1 else tuple(outs)
    s = ctx.emit("sort", typ, xs, "sort", dimensions=(p["dimension"],),
                 is_stable=bool(p["is_stable"]), to_apply=comp)
    return [s] if len(outs) == 1 else [ctx.gte(s, i, "sort") for i in range(len(outs))]


# ----------------------------------------------------------------------------------------------
# Other single-instruction primitives.


def _bitcast(ctx, eqn, xs):
    return [ctx.emit("bitcast-convert", _out(eqn), xs, eqn.primitive.name)]


def _reduce_precision(ctx, eqn, xs):
    return [ctx.emit("reduce-precision", _out(eqn), xs, eqn.primitive.name,
                     exponent_bits=eqn.params["exponent_bits"],
                     mantissa_bits=eqn.params["mantissa_bits"])]


def _fft(ctx, eqn, xs):
    kind = ("FFT", "IFFT", "RFFT", "IRFFT")[int(eqn.params["fft_type"])]
    return [ctx.emit("fft", _out(eqn), xs, "fft", fft_type=kind,
                     fft_length=tuple(eqn.params["fft_lengths"]))]


# ----------------------------------------------------------------------------------------------
# Control flow and calls.


def _while(ctx, eqn, xs):
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, carry = xs[:nc], xs[nc:nc + nb], xs[nc + nb:]
    state_types = tuple(x.type for x in xs)
    cond_j, body_j = p["cond_jaxpr"], p["body_jaxpr"]

    def body(c: Ctx, ps):
        (arg,) = ps
        parts = [c.gte(arg, i) for i in range(len(xs))]
        new = lower_jaxpr(c, _flat(body_j), getattr(body_j, "consts", []),
                          parts[nc:nc + nb] + parts[nc + nb:])
        return c.tuple(parts[:nc + nb] + new)

    def cond(c: Ctx, ps):
        (arg,) = ps
        parts = [c.gte(arg, i) for i in range(len(xs))]
        return lower_jaxpr(c, _flat(cond_j), getattr(cond_j, "consts", []),
                           parts[:nc] + parts[nc + nb:])[0]

    body_c = ctx.region("region", [state_types], "arg_tuple", body)
    cond_c = ctx.region("region", [state_types], "arg_tuple", cond)
    init = ctx.tuple(list(cconsts) + list(bconsts) + list(carry), "while")
    loop = ctx.emit("while", state_types, [init], "while", condition=cond_c, body=body_c)
    return [ctx.gte(loop, nc + nb + i, "while") for i in range(len(carry))]


def _cond(ctx, eqn, xs):
    branches = eqn.params["branches"]
    index, ops = xs[0], xs[1:]
    if index.type.dtype == np.bool_:
        index = ctx.emit("convert", TensorT((), np.int32), [index], "convert_element_type")
    n_out = len(eqn.outvars)
    comps = [jaxpr_computation(ctx, br, "region", tuple_param=len(ops) != 1,
                               tuple_root=n_out != 1) for br in branches]
    operand = ops[0] if len(ops) == 1 else ctx.tuple(list(ops))
    outs = [_out(eqn, i) for i in range(n_out)]
    typ = outs[0] if n_out == 1 else tuple(outs)
    res = ctx.emit("conditional", typ, [index] + [operand] * len(comps), "cond",
                   branch_computations=tuple(comps))
    return [res] if n_out == 1 else [ctx.gte(res, i, "cond") for i in range(n_out)]


def _call(ctx, eqn, xs):
    key = CALLS[eqn.primitive.name]
    body = eqn.params.get(key) if key else None
    if body is None:
        return _custom_call(ctx, eqn, xs)
    name = sanitize(str(eqn.params.get("name", eqn.primitive.name)))
    comp = jaxpr_computation(ctx, body, name)
    outs = [_out(eqn, i) for i in range(len(eqn.outvars))]
    typ = outs[0] if len(outs) == 1 else tuple(outs)
    res = ctx.emit("call", typ, xs, f"jit_{name}_" if eqn.primitive.name == "jit" else
                   eqn.primitive.name, to_apply=comp)
    return [res] if len(outs) == 1 else [ctx.gte(res, i) for i in range(len(outs))]


def _composite(ctx, eqn, xs):
    """``lax.composite``: a ``composite`` instruction whose decomposition is a private
    computation named by the composite (kept only when the passes left the equation, as
    the StableHLO rendering asks them to)."""
    p = eqn.params
    comp = jaxpr_computation(ctx, p["jaxpr"], str(p["name"]))
    outs = [_out(eqn, i) for i in range(len(eqn.outvars))]
    res = ctx.emit("composite", outs[0] if len(outs) == 1 else tuple(outs), xs, "composite",
                   name=str(p["name"]), composite_attributes=tuple(p["attributes"]),
                   version=int(p["version"]), decomposition=comp)
    return [res] if len(outs) == 1 else [ctx.gte(res, i) for i in range(len(outs))]


def _top_k(ctx, eqn, xs):
    """``top_k`` along the last axis: CHLO's ``top_k`` (other axes: a custom-call)."""
    if eqn.params["axis"] not in (-1, len(eqn.invars[0].aval.shape) - 1):
        return _custom_call(ctx, eqn, xs)
    res = ctx.emit("top-k", (_out(eqn, 0), _out(eqn, 1)), xs, "top_k", k=int(eqn.params["k"]))
    return [ctx.gte(res, 0), ctx.gte(res, 1)]


def _sub_jaxprs(params):
    for key, v in params.items():
        items = v if isinstance(v, (tuple, list)) else (v,)
        for it in items:
            if isinstance(it, (ClosedJaxpr, Jaxpr)):
                yield key, it


def _custom_call(ctx, eqn, xs):
    name = eqn.primitive.name
    outs = [tensor_of(v.aval) for v in eqn.outvars]
    called = tuple(jaxpr_computation(ctx, j, f"{sanitize(name)}_{sanitize(k)}")
                   for k, j in _sub_jaxprs(eqn.params))
    attrs = {"custom_call_target": f"kiln.{name}"}
    if called:
        attrs["called_computations"] = called
    if len(outs) == 1 and not eqn.primitive.multiple_results:
        return [ctx.emit("custom-call", outs[0], xs, name, **attrs)]
    res = ctx.emit("custom-call", tuple(outs), xs, name, **attrs)
    return [ctx.gte(res, i, name) for i in range(len(outs))]


RULES = {
    "integer_pow": _integer_pow, "square": _square, "round": _round,
    "convert_element_type": _convert, "conj": _conj, "select_n": _select_n,
    "clamp": _clamp, "broadcast_in_dim": _broadcast_in_dim, "reshape": _reshape,
    "squeeze": _reshape, "transpose": _transpose, "rev": _rev, "slice": _slice, "split": _split,
    "concatenate": _concatenate, "pad": _pad, "iota": _iota, "dot_general": _dot_general,
    "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice,
    "gather": _gather, "argmax": _argminmax, "argmin": _argminmax, "sort": _sort,
    "bitcast_convert_type": _bitcast, "reduce_precision": _reduce_precision, "fft": _fft,
    "conv_general_dilated": _conv, "while": _while, "cond": _cond,
}
for _n in REDUCE:
    RULES[_n] = _reduce
for _n in CUMULATIVE:
    RULES[_n] = _cumulative
for _n in WINDOW:
    RULES[_n] = _reduce_window
for _n in SCATTER:
    RULES[_n] = _scatter
for _n in CALLS:
    RULES[_n] = _call
for _n in COMPARE:
    RULES[_n] = _compare
RULES["composite"] = _composite
RULES["top_k"] = _top_k


def lower_eqn(ctx: Ctx, eqn, xs: list[Instr]) -> list[Instr]:
    """The instructions of one equation's outputs (a ``custom-call`` when the primitive has
    no HLO form, or when its rule does not handle these parameters)."""
    name = eqn.primitive.name
    if name in IDENTITY and len(xs) == len(eqn.outvars):
        return list(xs)
    n_instrs, n_comps = len(ctx.comp.instrs), len(ctx.module.computations)
    try:
        if name in UNARY:
            return _elementwise(ctx, eqn, xs, UNARY[name])
        if name in BINARY:
            return _elementwise(ctx, eqn, xs, BINARY[name])
        rule = RULES.get(name)
        if rule is not None:
            return rule(ctx, eqn, xs)
    except (KeyError, AttributeError, TypeError, ValueError, IndexError):
        # Parameters this rendering does not know: drop what the rule emitted and print
        # the equation as a custom-call.
        del ctx.comp.instrs[n_instrs:]
        del ctx.module.computations[n_comps:]
        kept = {id(i) for i in ctx.comp.instrs}
        ctx.comp._consts = {k: v for k, v in ctx.comp._consts.items() if id(v) in kept}
    return _custom_call(ctx, eqn, xs)


# ----------------------------------------------------------------------------------------------
# Jaxprs to computations.


def lower_jaxpr(ctx: Ctx, jaxpr: Jaxpr, consts, args) -> list[Instr]:
    """Emit the equations of ``jaxpr`` into ``ctx`` with ``args`` for its invars; the
    instructions of its outputs."""
    env: dict = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[v] = ctx.constant(np.asarray(c), v.aval.dtype)
    for v, a in zip(jaxpr.invars, args):
        env[v] = a

    def read(v):
        if isinstance(v, Literal):
            return ctx.constant(np.asarray(v.val), v.aval.dtype)
        return env[v]

    for eqn in jaxpr.eqns:
        outs = lower_eqn(ctx, eqn, [read(v) for v in eqn.invars])
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def jaxpr_computation(ctx: Ctx, closed: ClosedJaxpr | Jaxpr, base_name: str,
                      param_hint: str | None = None, tuple_param: bool = False,
                      tuple_root: bool | None = None) -> Computation:
    """A called computation for a (closed) jaxpr. Parameters are ``Arg_i`` (JAX's names
    when the argument's name is unknown), or one tuple parameter when ``tuple_param``; the
    root is a tuple when there are several outputs (or ``tuple_root``)."""
    jaxpr = closed.jaxpr if isinstance(closed, ClosedJaxpr) else closed
    consts = closed.consts if isinstance(closed, ClosedJaxpr) else []
    comp = Computation(base_name)
    sub = Ctx(ctx.module, comp)
    types = [tensor_of(v.aval) for v in jaxpr.invars]
    if tuple_param:
        p = comp.add(Instr("parameter", tuple(types), [], param_hint or "arg_tuple", index=0))
        comp.params.append(p)
        args = [sub.gte(p, i) for i in range(len(types))]
    else:
        args = []
        for i, t in enumerate(types):
            p = comp.add(Instr("parameter", t, [], param_hint or f"Arg_{i}", index=i))
            comp.params.append(p)
            args.append(p)
    outs = lower_jaxpr(sub, jaxpr, consts, args)
    if tuple_root is None:
        tuple_root = len(outs) != 1
    comp.root = sub.tuple(outs) if tuple_root else outs[0]
    ctx.module.computations.append(comp)
    return comp
