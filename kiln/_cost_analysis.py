"""``cost_analysis()`` of a lowered or compiled ``jit``: XLA's counting rules on a jaxpr.

JAX's ``jit(f).lower(x).cost_analysis()`` runs XLA's ``HloCostAnalysis`` on the HLO of
``f`` and returns a dict of the properties it summed over every instruction (entries that
sum to zero are left out): ``flops``, ``transcendentals``, ``bytes accessed``, per
operand position ``i`` ``bytes accessed{i}{}`` and ``utilization{i}{}``, the output's
``bytes accessedout{}``, and ``optimal_seconds`` (only ever non-zero, -1, when the
program has a custom call). kiln has no HLO, so it applies the same rules to the jaxpr,
one equation standing for the HLO instruction(s) JAX lowers it to:

* ``dot_general``: ``2 * M * N * K`` flops (output elements × contraction size, times 2
  for the multiply-add); ``conv_general_dilated``: 2 × output features × input features
  per group × batch × the number of kernel taps that land inside the (unpadded, undilated)
  input, per spatial dimension, as XLA counts them; ``fft``: ``8 * n * prod(floor(log2
  length))``.
* Elementwise operations: one flop per output element, or one *transcendental* for
  ``exp``, ``log``, ``log1p``, ``expm1``, ``sin``, ``cos``, ``tan``, ``tanh``, ``sqrt``,
  ``rsqrt``, ``cbrt``, ``erf``, ``pow``, ``atan2``. Operations JAX lowers to several HLO
  operations (``logistic``, ``exp2``, ``asin``, ``sinh``, ``lgamma``, ``digamma``,
  ``erf_inv``, ``igamma``, ...) count the flops/transcendentals per element that XLA
  reports for JAX's float32 expansion (measured once, kept in a table here);
  ``integer_pow`` counts the multiplications of square-and-multiply (plus a division
  for a negative exponent). A rank-0 operand of a non-scalar elementwise operation is
  broadcast first, as in HLO (a broadcast instruction: bytes only).
* Reductions: ``elements in - elements out`` applications of the reducer (1 flop for
  sum/max/min/prod/and/or/xor; ``argmax``/``argmin`` 9 per step for floats, 7 for
  integers); cumulative reductions and ``reduce_window*``: ``(window - 1)`` reducer
  applications per output element; ``sort``: ``n * ceil(log2 n)``;
  ``select_and_scatter_add``: one comparison per window element but the first and one
  addition per source element; ``scatter-*``: one reducer application per update
  element.
* Bytes: by default the bytes of every operand plus the output (8 more per output for a
  tuple); ``slice``/``dynamic_slice``/``gather`` read and write the output's bytes (plus
  the indices); ``dynamic_update_slice``/``scatter`` touch the update's bytes (2× and 3×);
  ``transpose`` is a bitcast (no bytes); constants and literals cost nothing.
* Calls (``jit``, ``custom_jvp_call``, ``custom_vjp_call``, ``checkpoint``,
  ``composite``) count their bodies; ``while``/``scan`` count one iteration of the body
  (and the condition, or the loop counter and the slicing of ``xs``/``ys``), as XLA counts
  a while loop once; ``cond`` takes each property's maximum over the branches.
* LAPACK-backed linear algebra and host callbacks are custom calls in XLA: they add -1 to
  ``flops``, ``bytes accessed`` and ``optimal_seconds`` (XLA's "unknown").
* PRNG primitives count what JAX's threefry expansion costs per generated word.

The counts match XLA's exactly for matrix products, convolutions, plain elementwise
chains and reductions; for everything else they follow the rules above on kiln's own
jaxpr, which can differ from JAX's (kiln and JAX do not always stage the same equations).
``Compiled.cost_analysis()`` returns the same numbers (XLA's differ after fusion).
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr

__all__ = ["cost_analysis"]

FLOPS, TRANSC, BYTES, SECONDS = "flops", "transcendentals", "bytes accessed", "optimal_seconds"

# One flop per output element.
_ONE_FLOP = frozenset("""
abs add add_any and ceil clamp clz complex conj convert_element_type div eq floor ge gt imag
is_finite le lt max min mul ne neg not or population_count real reduce_precision rem round
select_n shift_left shift_right_arithmetic shift_right_logical sign square sub xor
""".split())
# One transcendental per output element (XLA's list of transcendental opcodes).
_ONE_TRANSC = frozenset("""
exp log log1p expm1 sin cos tan tanh sqrt rsqrt cbrt erf pow atan2
xla_exp xla_log xla_log1p xla_pow xla_tan xla_erf
""".split())
# (flops, transcendentals, bytes per element at 4 bytes) of JAX's expansion, per element,
# as XLA reports it for float32 operands.
_EXPANDED = {
    "acos": (3, 2, 60.0), "acosh": (7, 4, 126.0), "asin": (5, 2, 84.0),
    "asinh": (11, 3, 158.0), "atan": (0, 1, 16.0), "atanh": (6, 2, 90.0),
    "cosh": (3, 2, 56.0), "sinh": (10, 3, 150.0), "digamma": (73, 3, 958.0),
    "erf_inv": (37, 2, 546.0), "xla_erf_inv": (37, 2, 546.0), "erfc": (62, 1, 845.0),
    "exp2": (1, 1, 24.0), "lgamma": (53, 4, 730.0), "logistic": (3, 1, 44.0),
    "bessel_i0e": (83, 1, 1119.0), "bessel_i1e": (83, 1, 1111.0),
    "nextafter": (24, 0, 262.0), "igamma": (183, 6, 2182.0), "igammac": (183, 6, 2172.0),
    "zeta": (121, 11, 1673.0), "polygamma": (260, 19, 3375.0),
    "igamma_grad_a": (335, 14, 4020.0), "xla_fma": (2, 0, 24.0),
}
_REDUCE_ONE = frozenset("reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or "
                        "reduce_xor".split())
_CUMULATIVE = {"cumsum": (1, 0), "cumprod": (1, 0), "cummax": (1, 0), "cummin": (1, 0),
               "cumlogsumexp": (8, 2)}
_WINDOW_ONE = frozenset(("reduce_window_sum", "reduce_window_max", "reduce_window_min"))
_SCATTER_FLOPS = {"scatter": 0, "scatter-add": 1, "scatter-sub": 1, "scatter-mul": 1,
                  "scatter-min": 1, "scatter-max": 1}
# Custom calls in XLA on CPU (LAPACK, host callbacks): XLA's "unknown" (-1) costs.
_CUSTOM_CALLS = frozenset("""
cholesky triangular_solve lu qr geqrf householder_product eigh svd eig schur hessenberg
tridiagonal tridiagonal_solve pure_callback io_callback debug_callback
""".split())
# Bitcasts and no-ops: nothing counted but the utilization of the operand.
_FREE = frozenset(("transpose",))
_SKIP = frozenset(("stop_gradient", "pbroadcast", "axis_index", "random_wrap",
                   "random_unwrap", "optimization_barrier"))
# Call primitives: the parameter holding the body.
_CALLS = {"jit": "jaxpr", "checkpoint": "jaxpr", "remat": "jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
          "composite": "jaxpr", "custom_lin": None}


def _nbytes(aval) -> int:
    shape = getattr(aval, "shape", ())
    try:
        item = np.dtype(aval.dtype).itemsize
    except TypeError:                      # extended dtypes (PRNG keys): their data
        item = int(getattr(aval.dtype, "itemsize", 8))
    return int(math.prod(shape)) * item


def _size(aval) -> int:
    return int(math.prod(getattr(aval, "shape", ())))


class _Acc:
    """Running sums of XLA's properties."""

    def __init__(self):
        self.p = defaultdict(float)

    def add(self, key, val):
        self.p[key] += val

    def op(self, in_avals, out_avals, *, flops=0.0, transc=0.0, operand_bytes=None,
           out_bytes=None, util=None):
        """One HLO instruction: XLA's default bytes (operands + output) unless given."""
        ob = [_nbytes(a) for a in in_avals] if operand_bytes is None else operand_bytes
        if out_bytes is None:
            out_bytes = sum(_nbytes(a) for a in out_avals)
            if len(out_avals) > 1:
                out_bytes += 8 * len(out_avals)          # the tuple's pointer table
        for i, b in enumerate(ob):
            self.add(f"bytes accessed{i}{{}}", b)
            self.add(f"utilization{i}{{}}", 1.0 if util is None else util[i])
        self.add("bytes accessedout{}", out_bytes)
        self.add(BYTES, sum(ob) + out_bytes)
        if flops:
            self.add(FLOPS, flops)
        if transc:
            self.add(TRANSC, transc)

    def merge(self, props, scale=1.0):
        for k, v in props.items():
            self.add(k, v * scale)


def _jaxpr_props(jaxpr: Jaxpr) -> dict:
    acc = _Acc()
    for eqn in jaxpr.eqns:
        _eqn_cost(acc, eqn)
    return dict(acc.p)


def _body(v):
    if isinstance(v, ClosedJaxpr):
        return v.jaxpr
    return v if isinstance(v, Jaxpr) else None


def _max_merge(acc, branch_props):
    keys = set().union(*branch_props) if branch_props else set()
    for k in keys:
        acc.add(k, max(p.get(k, 0.0) for p in branch_props))


def _elementwise(acc, in_avals, out_avals, name):
    out = out_avals[0]
    n = _size(out)
    ob = []
    for a in in_avals:
        if not a.shape and out.shape:
            # HLO broadcasts the scalar operand first (a constant costs nothing itself).
            bcast = [a.update(shape=out.shape)]
            acc.op([a], bcast)
            ob.append(_nbytes(bcast[0]))
        else:
            ob.append(_nbytes(a))
    if name in _ONE_TRANSC:
        acc.op(in_avals, out_avals, transc=n, operand_bytes=ob)
    else:
        acc.op(in_avals, out_avals, flops=n, operand_bytes=ob)


def _integer_pow(acc, eqn, in_avals, out_avals):
    y = int(eqn.params["y"])
    out = out_avals[0]
    n = _size(out)
    b = _nbytes(out)
    if y == 0:                  # broadcast of 1
        acc.op([out.update(shape=())], out_avals)
        return
    muls, e, first = 0, abs(y), True
    while e:
        if e & 1:
            muls += 0 if first else 1
            first = False
        e >>= 1
        if e:
            muls += 1
    for _ in range(muls):
        acc.op([out, out], [out], flops=n, operand_bytes=[b, b])
    if y < 0:                   # 1 / acc: a broadcast 1 and a division
        acc.op([out.update(shape=())], [out])
        acc.op([out, out], [out], flops=n)


def _conv_flops(eqn, in_avals, out_avals) -> int:
    lhs, rhs = in_avals
    out = out_avals[0]
    p = eqn.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
    batch = lhs.shape[lhs_spec[0]]
    in_feat = lhs.shape[lhs_spec[1]]
    out_feat = out.shape[out_spec[1]]
    valid = 1
    for i in range(len(lhs_spec) - 2):
        n_in = lhs.shape[lhs_spec[2 + i]]
        n_k = rhs.shape[rhs_spec[2 + i]]
        n_out = out.shape[out_spec[2 + i]]
        stride = p["window_strides"][i]
        lo = p["padding"][i][0]
        base = p["lhs_dilation"][i]
        wdil = p["rhs_dilation"][i]
        count = 0
        for k in range(n_k):
            for o in range(n_out):
                u = o * stride - lo + k * wdil
                if u % base:
                    continue
                j = u // base
                if 0 <= j < n_in:
                    count += 1
        valid *= count
    fgc = p.get("feature_group_count", 1)
    bgc = p.get("batch_group_count", 1)
    return 2 * (in_feat // fgc) * out_feat * (batch // bgc) * valid


def _eqn_cost(acc: _Acc, eqn) -> None:
    name = eqn.primitive.name
    in_avals = [v.aval for v in eqn.invars]
    out_avals = [v.aval for v in eqn.outvars]
    p = eqn.params
    if name in _SKIP:
        return
    if name in _CALLS:
        body = _body(p.get(_CALLS[name])) if _CALLS[name] else None
        if body is not None:
            acc.merge(_jaxpr_props(body))
        return
    if name == "while":
        acc.merge(_jaxpr_props(_body(p["body_jaxpr"])))
        acc.merge(_jaxpr_props(_body(p["cond_jaxpr"])))
        return
    if name == "scan":
        acc.merge(_jaxpr_props(_body(p["jaxpr"])))
        scalar = ShapedArray((), np.dtype(np.int32))
        acc.op([scalar, scalar], [ShapedArray((), np.dtype(np.bool_))], flops=1)  # i < n
        acc.op([scalar, scalar], [scalar], flops=1)                              # i + 1
        n_fixed = p["num_consts"] + p["num_carry"]
        for a in in_avals[n_fixed:]:                      # x = xs[i]
            row = a.update(shape=a.shape[1:])
            acc.op([a, scalar], [row], operand_bytes=[_nbytes(row), 4],
                   out_bytes=_nbytes(row), util=[1.0 / max(a.shape[0], 1), 1.0])
        for a in out_avals[p["num_carry"]:]:              # ys[i] = y
            row = a.update(shape=a.shape[1:])
            acc.op([a, row, scalar], [a], operand_bytes=[0, _nbytes(row), 4],
                   out_bytes=_nbytes(row))
        return
    if name == "cond":
        _max_merge(acc, [_jaxpr_props(_body(b)) for b in p["branches"]])
        return
    if name in _ONE_FLOP or name in _ONE_TRANSC:
        _elementwise(acc, in_avals, out_avals, name)
        return
    if name in _EXPANDED:
        f, t, per = _EXPANDED[name]
        n = _size(out_avals[0])
        item = _nbytes(in_avals[0]) / max(_size(in_avals[0]), 1) if in_avals else 4
        total = per * n * item / 4.0
        acc.add(FLOPS, f * n)
        acc.add(TRANSC, t * n)
        acc.add(BYTES, total)
        return
    if name == "integer_pow":
        _integer_pow(acc, eqn, in_avals, out_avals)
        return
    if name == "dot_general":
        (lc, _), _ = p["dimension_numbers"]
        k = int(math.prod(in_avals[0].shape[d] for d in lc))
        acc.op(in_avals, out_avals, flops=2 * _size(out_avals[0]) * k)
        return
    if name == "conv_general_dilated":
        acc.op(in_avals, out_avals, flops=_conv_flops(eqn, in_avals, out_avals))
        return
    if name == "fft":
        logs = 1
        for n in p["fft_lengths"]:
            logs *= int(math.floor(math.log2(n))) if n > 0 else 0
        acc.op(in_avals, out_avals, flops=2 * 4 * logs * _size(in_avals[0]))
        return
    if name in _REDUCE_ONE or name in ("argmax", "argmin"):
        x = in_avals[0]
        steps = _size(x) - _size(out_avals[0])
        init = x.update(shape=())
        if name in ("argmax", "argmin"):
            per = 9 if np.dtype(x.dtype).kind in "fc" else 7
            idx = out_avals[0].update(shape=x.shape)
            acc.op([], [idx])                                      # the iota of indices
            acc.op([x, idx, init, out_avals[0].update(shape=())],
                   [out_avals[0].update(dtype=x.dtype), out_avals[0]], flops=per * steps)
        else:
            acc.op([x, init], out_avals, flops=steps)
        return
    if name in _CUMULATIVE:
        f, t = _CUMULATIVE[name]
        x = in_avals[0]
        n_axis = x.shape[p["axis"]] if x.shape else 1
        steps = _size(out_avals[0]) * (n_axis - 1)
        acc.op([x, x.update(shape=())], out_avals, flops=f * steps, transc=t * steps)
        return
    if name in _WINDOW_ONE or name == "reduce_window":
        x = in_avals[0]
        window = int(math.prod(p["window_dimensions"]))
        steps = _size(out_avals[0]) * (window - 1)
        flops, transc = steps, 0.0
        if name == "reduce_window":
            sub = _jaxpr_props(p["jaxpr"])
            flops, transc = sub.get(FLOPS, 0.0) * steps, sub.get(TRANSC, 0.0) * steps
        acc.op([x, x.update(shape=())], out_avals, flops=flops, transc=transc)
        return
    if name == "select_and_scatter_add":
        src = in_avals[0]
        window = int(math.prod(p["window_dimensions"]))
        acc.op(in_avals, out_avals, flops=_size(src) * (window - 1) + _size(src))
        return
    if name == "sort":
        n = _size(in_avals[0])
        acc.op(in_avals, out_avals, flops=n * (math.ceil(math.log2(n)) if n > 1 else 0))
        return
    if name == "split":         # one slice per result (XLA's lowering)
        for o in out_avals:
            ob = _nbytes(o)
            acc.op(in_avals, [o], operand_bytes=[ob], out_bytes=ob,
                   util=[_size(o) / max(_size(in_avals[0]), 1)])
        return
    if name == "slice":
        ob = _nbytes(out_avals[0])
        acc.op(in_avals, out_avals, operand_bytes=[ob], out_bytes=ob,
               util=[_size(out_avals[0]) / max(_size(in_avals[0]), 1)])
        return
    if name == "dynamic_slice":
        ob = _nbytes(out_avals[0])
        idx = [_nbytes(a) for a in in_avals[1:]]
        acc.op(in_avals, out_avals, operand_bytes=[ob] + idx, out_bytes=ob,
               util=[_size(out_avals[0]) / max(_size(in_avals[0]), 1)] + [1.0] * len(idx))
        return
    if name == "dynamic_update_slice":
        ub = _nbytes(in_avals[1])
        idx = [_nbytes(a) for a in in_avals[2:]]
        n_out = max(_size(out_avals[0]), 1)
        acc.op(in_avals, out_avals, operand_bytes=[0, ub] + idx, out_bytes=ub,
               util=[(n_out - _size(in_avals[1])) / n_out, 1.0] + [1.0] * len(idx))
        return
    if name == "gather":
        ob = _nbytes(out_avals[0])
        acc.op(in_avals, out_avals, operand_bytes=[ob, _nbytes(in_avals[1])], out_bytes=ob,
               util=[_size(out_avals[0]) / max(_size(in_avals[0]), 1), 1.0])
        return
    if name in _SCATTER_FLOPS:
        ub = _nbytes(in_avals[2])
        acc.op(in_avals, out_avals, operand_bytes=[ub, _nbytes(in_avals[1]), ub],
               out_bytes=ub, flops=_SCATTER_FLOPS[name] * _size(in_avals[2]))
        return
    if name in _FREE:
        acc.op(in_avals, out_avals, operand_bytes=[0] * len(in_avals), out_bytes=0)
        return
    if name in _CUSTOM_CALLS:
        for i in range(len(in_avals)):
            acc.add(f"bytes accessed{i}{{}}", -1.0)
            acc.add(f"utilization{i}{{}}", 1.0)
        acc.add("bytes accessedout{}", -1.0)
        acc.add(BYTES, -1.0)
        acc.add(FLOPS, -1.0)
        acc.add(SECONDS, -1.0)
        return
    if name == "random_bits":
        n = _size(out_avals[0])
        per = 29 if p.get("bit_width", 32) >= 32 else 30
        acc.add(FLOPS, per * n + 10)
        acc.add(BYTES, 428.0 * n + 104)
        return
    if name == "random_split":
        n = int(math.prod(p.get("shape", (2,))))
        acc.add(FLOPS, 28 * n + 9)
        return
    if name == "random_fold_in":
        acc.add(FLOPS, 35.0)
        return
    if name == "threefry2x32":
        acc.add(FLOPS, 29.0 * sum(_size(a) for a in out_avals))
        return
    # Movement and creation (reshape, broadcast_in_dim, concatenate, pad, rev, iota,
    # squeeze, copy, top_k, ...) and anything else: XLA's default bytes, no flops.
    acc.op(in_avals, out_avals)


def cost_analysis(closed: ClosedJaxpr) -> dict:
    """XLA-style cost properties of a closed jaxpr (see the module docstring)."""
    from kiln.compiler.passes import passes
    # As XLA simplifies before counting (``x * 1``, ``x + 0`` and unused results vanish;
    # broadcasts and iotas are not folded), count after kiln's local algebraic rewrites
    # and dead-code elimination.
    closed = passes.dce(passes.simplify(closed))
    props = _jaxpr_props(closed.jaxpr)
    return {k: float(v) for k, v in props.items() if v != 0}
