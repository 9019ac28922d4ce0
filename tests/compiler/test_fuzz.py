"""Differential fuzzing: random programs on kiln's three paths, checked against JAX.

Hypothesis draws a program (inputs of broadcast-compatible shapes, then a chain of
elementwise, reduction, layout, gather/scatter, cumulative, matrix-product and integer
operations, and control flow: ``fori_loop``/``while_loop``/``scan`` with random bodies
and trip counts (0 included), ``cond``; 1-D convolutions (dilated, depthwise) and
pooling), written once against a namespace (``numpy``/``lax``/``nn`` modules), so the
same program runs

- on kiln **eagerly**, op by op (each primitive's NumPy ``impl`` through ``EvalTrace``,
  with the eager fast paths),
- on kiln's **reference backend** (``run_jaxpr`` of its jaxpr: what
  ``KILN_BACKEND=reference``, ``jax_debug_nans`` and the no-compiler fallback run),
- **compiled** by kiln's C backend,
- and on **JAX** under ``jax.jit`` (the oracle; skipped when JAX is absent).

Integer programs use one integer dtype each (int8 ... uint64; 64-bit ones under x64)
with edge values among the inputs (INT_MIN, INT_MIN + 1, -1, 0, 1, the maximum, the
bit width) and raw ``lax.div``/``rem``, ``//``, ``%``, shifts, ``abs``/``neg``, integer
powers and narrowing conversions; a third of the float programs get NaN, +-inf and -0.0
among their inputs. Integer results must be identical on every path: kiln's reference
and compiled paths to each other always, and to JAX unless the value depends on a
float (a float -> int conversion or a float comparison, where a last-bit rounding
difference between kiln's and XLA's float math may legitimately flip an integer).
Floats agree to a tolerance that catches wrong indexing, broadcasting, axes, fusion or
special-value handling (errors of order one, misplaced NaN/inf), not last-bit rounding.

Two tests: mixed programs, and integer programs (integer inputs only, longer chains).
Deterministic (``derandomize``). The environment variable ``KILN_FUZZ_EXAMPLES`` sets
how many programs: that many mixed ones and half as many integer ones (default 20 + 10 in
the default test tier, 40 + 20 in the full tier ``KILN_TEST_TIER=full``, docs/testing.md;
e.g. ``KILN_FUZZ_EXAMPLES=1000`` for a long local run).
"""
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from _sampling import TIER  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import kiln  # noqa: E402
import kiln.numpy as jnp  # noqa: E402
from kiln import lax  # noqa: E402
from kiln.backends import cpu, reference  # noqa: E402
from kiln.config import config_context  # noqa: E402

EXAMPLES = int(os.environ.get("KILN_FUZZ_EXAMPLES", "40" if TIER == "full" else "20"))
INT_EXAMPLES = max(1, EXAMPLES // 2)


class Namespace:
    """The modules a program is written against: kiln's or JAX's."""

    def __init__(self, np_mod, lax_mod, nn_mod, bfloat16):
        self.np, self.lax, self.nn, self.bfloat16 = np_mod, lax_mod, nn_mod, bfloat16


KILN = Namespace(jnp, lax, kiln.nn, kiln.dtypes.bfloat16)


def _jax_namespace():
    try:
        import jax
    except ImportError:
        return None
    return jax, Namespace(jax.numpy, jax.lax, jax.nn, jax.numpy.bfloat16)


FLOAT_UNARY = {
    "neg": lambda N, u: -u,
    "abs": lambda N, u: N.np.abs(u),
    "tanh": lambda N, u: N.np.tanh(u),
    "sin": lambda N, u: N.np.sin(u),
    "exp_clip": lambda N, u: N.np.exp(N.np.clip(u, -4.0, 4.0)),
    "log1p_abs": lambda N, u: N.np.log1p(N.np.abs(u)),
    "sqrt_abs": lambda N, u: N.np.sqrt(N.np.abs(u)),
    "floor": lambda N, u: N.np.floor(u),
    "square": lambda N, u: u * u,
    "sigmoid": lambda N, u: N.nn.sigmoid(u),
    "relu": lambda N, u: N.nn.relu(u),
}
FLOAT_BINARY = {
    "add": lambda N, a, b: a + b,
    "sub": lambda N, a, b: a - b,
    "mul": lambda N, a, b: a * b,
    "div": lambda N, a, b: a / (N.np.abs(b) + 1.0),
    "max": lambda N, a, b: N.np.maximum(a, b),
    "min": lambda N, a, b: N.np.minimum(a, b),
    "where": lambda N, a, b: N.np.where(a > b, a, b * 0.5),
    "atan2": lambda N, a, b: N.np.arctan2(a, b),
}
# Raw integer operations: division by zero, INT_MIN / -1, shifts by negative amounts or
# by at least the bit width all occur (XLA's values on every path).
INT_BINARY = {
    "add": lambda N, a, b: a + b,
    "sub": lambda N, a, b: a - b,
    "mul": lambda N, a, b: a * b,
    "max": lambda N, a, b: N.np.maximum(a, b),
    "min": lambda N, a, b: N.lax.min(*N.np.broadcast_arrays(a, b)),
    "and": lambda N, a, b: a & b,
    "or": lambda N, a, b: a | b,
    "xor": lambda N, a, b: a ^ b,
    "div": lambda N, a, b: N.lax.div(*N.np.broadcast_arrays(a, b)),
    "rem": lambda N, a, b: N.lax.rem(*N.np.broadcast_arrays(a, b)),
    "floordiv": lambda N, a, b: a // b,
    "mod": lambda N, a, b: a % b,
    "fmod": lambda N, a, b: N.np.fmod(a, b),
    "shl": lambda N, a, b: a << b,
    "shr": lambda N, a, b: a >> b,
    "shrl": lambda N, a, b: N.lax.shift_right_logical(*N.np.broadcast_arrays(a, b)),
    "clamp": lambda N, a, b: N.np.clip(a, b, None),
}
INT_UNARY = {
    "neg": lambda N, u: -u,
    "abs": lambda N, u: N.np.abs(u),
    "sign": lambda N, u: N.np.sign(u),
    "not": lambda N, u: ~u,
    "popcount": lambda N, u: N.lax.population_count(u),
    "clz": lambda N, u: N.lax.clz(u),
    "cube": lambda N, u: N.lax.integer_pow(u, 3),
    "wrap8": lambda N, u: u.astype(N.np.int8).astype(u.dtype),
    "wrap_u16": lambda N, u: u.astype(N.np.uint16).astype(u.dtype),
    "scalar_ops": lambda N, u: (u // 3) ^ (u % -1 if u.dtype.kind == "i" else u % 7) ^ (u >> 9),
}
REDUCTIONS = {"sum": lambda N, u, **k: N.np.sum(u, **k), "max": lambda N, u, **k: N.np.max(u, **k),
              "min": lambda N, u, **k: N.np.min(u, **k), "mean": lambda N, u, **k: N.np.mean(u, **k)}
INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]
INT_DTYPES_X64 = INT_DTYPES + [np.int64, np.uint64]


def _shapes(draw):
    """A base shape and input shapes that broadcast to it."""
    rank = draw(st.integers(0, 3))
    base = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    n_in = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n_in):
        drop = draw(st.integers(0, rank))
        s = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in base[drop:])
        shapes.append(s)
    shapes[0] = base    # one input has the full shape, so values keep it
    return base, shapes


class _Program:
    """A program drawn step by step: ``ops`` replayed on the inputs by ``bind(N)(*args)``
    with the modules of namespace ``N`` (kiln's or JAX's).

    Value kinds: "f" float (float32, float64 under x64), "i" the program's integer dtype
    ``idt``, "b" bool. ``exact[v]``: value ``v`` depends on no float, so it must equal
    JAX's bit for bit."""

    def __init__(self, base, kinds, x64, idt):
        self.base = base
        self.x64 = x64
        self.fdt = np.float64 if x64 else np.float32
        self.idt = np.dtype(idt)
        self.kinds = list(kinds)
        self.exact = [k != "f" for k in kinds]
        self.shapes = []
        self.ops = []       # (kind, name, operand indices, extra)
        self.outputs = []

    def bind(self, N):
        def run(*args):
            vals = list(args)
            for kind, name, idx, extra in self.ops:
                vals.append(self.apply(N, kind, name, [vals[i] for i in idx], extra))
            return [vals[i] for i in self.outputs]
        return run

    def apply(self, N, kind, name, xs, extra):
        base = self.base
        np_, lax_ = N.np, N.lax
        if kind == "funary":
            return FLOAT_UNARY[name](N, xs[0])
        if kind == "fbinary":
            return FLOAT_BINARY[name](N, xs[0], xs[1])
        if kind == "ibinary":
            return INT_BINARY[name](N, xs[0], xs[1])
        if kind == "iunary":
            return INT_UNARY[name](N, xs[0])
        if kind == "ibinary_const":     # with a constant array of edge values
            const, const_first = extra
            a, b = (const, xs[0]) if const_first else (xs[0], const)
            return INT_BINARY[name](N, N.np.asarray(a), N.np.asarray(b))
        if kind == "compare":
            return {"lt": np_.less, "ge": np_.greater_equal, "eq": np_.equal,
                    "ne": np_.not_equal}[name](xs[0], xs[1])
        if kind == "logic":
            return {"and": np_.logical_and, "or": np_.logical_or, "xor": np_.logical_xor,
                    "not": lambda a, b: np_.logical_not(a)}[name](xs[0], xs[1])
        if kind == "select":
            return np_.where(xs[0], xs[1], xs[2])
        if kind == "to_float":
            return xs[0].astype(self.fdt) * 0.25
        if kind == "to_int":
            return (xs[0] * 8.0).astype(self.idt)
        if kind == "bool_to_float":
            return xs[0].astype(self.fdt)
        if kind == "bf16_round":
            return xs[0].astype(N.bfloat16).astype(self.fdt)
        if kind == "reduce_keep":
            return REDUCTIONS[name](N, xs[0], axis=extra, keepdims=True)
        if kind == "broadcast_back":
            return np_.broadcast_to(xs[0], base)
        if kind == "rev":
            return lax_.rev(xs[0], (extra,))
        if kind == "roll":
            return np_.roll(xs[0], extra[1], axis=extra[0])
        if kind == "cumsum":
            return np_.cumsum(xs[0], axis=extra).astype(xs[0].dtype)
        if kind == "at_add":
            axis, idx = extra
            where = (slice(None),) * axis + (idx,)
            return xs[0].at[where].add(xs[0][where] * 0.5 if xs[0].dtype.kind == "f" else 3)
        if kind == "take":
            axis, idx = extra
            return np_.take(xs[0], idx, axis=axis)
        if kind == "slice_pad":
            axis, lo = extra
            sl = lax_.slice_in_dim(xs[0], lo, base[axis], axis=axis)
            pad = [(0, 0)] * len(base)
            pad[axis] = (lo, 0)
            return np_.pad(sl, pad)
        if kind == "concat_halves":
            axis, cut = extra
            a = lax_.slice_in_dim(xs[0], cut, base[axis], axis=axis)
            b = lax_.slice_in_dim(xs[0], 0, cut, axis=axis)
            return np_.concatenate([a, b], axis=axis)
        if kind == "matmul":
            return xs[0] @ extra.astype(self.fdt)
        if kind == "transpose_twice":
            inv = tuple(np.argsort(extra))
            return np_.transpose(np_.transpose(xs[0], extra) * 1.5, inv)
        if kind == "full_reduce":
            return REDUCTIONS[name](N, xs[0])
        if kind == "fori":
            n, coef = extra
            f = FLOAT_UNARY[name]
            return lax_.fori_loop(0, n, lambda i, c: c * coef + f(N, c) * 0.25 + 0.125, xs[0])
        if kind == "while":
            n, coef = extra
            f = FLOAT_UNARY[name]

            def body(c):
                return c[0] * coef + np_.tanh(f(N, c[0])) * 0.5, c[1] + 1
            return lax_.while_loop(lambda c: c[1] < n, body, (xs[0], 0))[0]
        if kind == "scan":
            reverse, coef = extra
            f = FLOAT_UNARY[name]

            def step(c, x):
                c = c * coef + np_.tanh(x)
                return c, f(N, c) + x * 0.5
            _, ys = lax_.scan(step, np_.zeros(xs[0].shape[1:], xs[0].dtype), xs[0],
                              reverse=reverse)
            return ys
        if kind == "conv1d":
            w, dil, groups = extra
            return lax_.conv_general_dilated(xs[0], w.astype(self.fdt), (1,), "SAME",
                                             rhs_dilation=(dil,), feature_group_count=groups)
        if kind == "pool":
            op, window = extra
            fn, init = {"max": (lax_.max, -np.inf), "sum": (lax_.add, 0.0)}[op]
            y = lax_.reduce_window(xs[0], init, fn, window, (1,) * len(window), "SAME")
            return y if op == "max" else y * 0.25
        if kind == "cond":
            g, h = FLOAT_UNARY[name], FLOAT_UNARY[extra]
            return lax_.cond(np_.sum(xs[0]) > 0, lambda u: g(N, u) * 2.0,
                             lambda u: h(N, u) - 1.0, xs[0])
        raise AssertionError(kind)


LAYOUTS = ["rev", "roll", "cumsum", "take", "at_add", "slice_pad", "concat_halves",
           "transpose_twice"]


@st.composite
def programs(draw, integer=False):
    """A program and its inputs; ``integer=True``: integer inputs and more steps."""
    base, shapes = _shapes(draw)
    rank = len(base)
    p_int = 1 if integer else draw(st.sampled_from([0, 1, 2, 4]))  # 1/p_int are integers
    kinds = ["i" if p_int and draw(st.integers(1, p_int)) == 1 else "f" for _ in shapes]
    x64 = draw(st.integers(0, 3)) == 0
    prog = _Program(base, kinds, x64, pick_from(draw, INT_DTYPES_X64 if x64 else INT_DTYPES))
    prog.shapes = list(shapes)
    specials = draw(st.integers(0, 2)) == 0     # NaN/inf/-0.0 among the float inputs

    def push(op, kind, shape, exact=False):
        prog.ops.append(op)
        prog.kinds.append(kind)
        prog.shapes.append(tuple(shape))
        prog.exact.append(exact)
        return len(prog.kinds) - 1

    def exact(*vs):
        return all(prog.exact[v] for v in vs)

    def of(kind, full=False):
        return [v for v, k in enumerate(prog.kinds)
                if k == kind and (not full or prog.shapes[v] == base)]

    def pick(pool):
        return draw(st.sampled_from(pool))

    for _ in range(draw(st.integers(3, 12) if integer else st.integers(1, 8))):
        floats, ints, bools = of("f"), of("i"), of("b")
        full_f, full_i = of("f", True), of("i", True)
        able = {"funary": floats, "fbinary": floats, "ibinary": ints, "iunary": ints,
                "convert": True, "compare": floats or ints, "logic": bools,
                "select": bools and floats, "reduce_keep": rank >= 1 and full_f,
                "layout": rank >= 1 and (full_f or full_i), "matmul": rank >= 1 and full_f,
                "control": floats, "window": rank == 3 and full_f, "ibinary_const": ints}
        step = pick([k for k, ok in able.items() if ok] + ["ibinary"] * 2 * bool(ints)
                    + ["layout"] * bool(able["layout"]))
        shape_of = prog.shapes
        if step == "funary" and floats:
            v = pick(floats)
            push(("funary", pick(sorted(FLOAT_UNARY)), [v], None), "f", shape_of[v])
        elif step == "ibinary_const":
            v = pick(ints)
            const = _int_input(np.random.default_rng(draw(st.integers(0, 2 ** 16))),
                               shape_of[v], prog.idt)
            push(("ibinary_const", pick(sorted(INT_BINARY)), [v], (const, draw(st.booleans()))),
                 "i", shape_of[v], exact(v))
        elif step == "iunary" and ints:
            v = pick(ints)
            push(("iunary", pick(sorted(INT_UNARY)), [v], None), "i", shape_of[v], exact(v))
        elif step in ("fbinary", "ibinary", "compare") and (ints if step == "ibinary"
                                                            else floats or ints):
            pool = ints if step == "ibinary" else \
                (ints if ints and (not floats or draw(st.booleans())) else floats)
            a, b = pick(pool), pick(pool)
            table = {"fbinary": FLOAT_BINARY, "ibinary": INT_BINARY,
                     "compare": ["lt", "ge", "eq", "ne"]}[step]
            push((step, pick(sorted(table)), [a, b], None),
                 {"fbinary": "f", "ibinary": "i", "compare": "b"}[step],
                 np.broadcast_shapes(shape_of[a], shape_of[b]),
                 step != "fbinary" and exact(a, b))
        elif step == "logic" and bools:
            a, b = pick(bools), pick(bools)
            push(("logic", pick(["and", "or", "xor", "not"]), [a, b], None), "b",
                 np.broadcast_shapes(shape_of[a], shape_of[b]), exact(a, b))
        elif step == "select" and bools and floats:
            c, a, b = pick(bools), pick(floats), pick(floats)
            push(("select", "", [c, a, b], None), "f",
                 np.broadcast_shapes(shape_of[c], shape_of[a], shape_of[b]))
        elif step == "convert":
            v = pick(list(range(len(prog.kinds))))
            k = prog.kinds[v]
            if k == "f" and draw(st.booleans()):
                push(("bf16_round", "", [v], None), "f", shape_of[v])
            else:
                name = {"f": "to_int", "i": "to_float", "b": "bool_to_float"}[k]
                push((name, "", [v], None), "i" if k == "f" else "f", shape_of[v])
        elif step == "reduce_keep" and rank >= 1 and of("f", full=True):
            v = pick(of("f", full=True))
            axes = tuple(sorted(set(draw(st.lists(st.integers(0, rank - 1), min_size=1,
                                                  max_size=rank)))))
            kept = tuple(1 if i in axes else d for i, d in enumerate(base))
            r = push(("reduce_keep", pick(sorted(REDUCTIONS)), [v], axes), "f", kept)
            if draw(st.booleans()):     # broadcast back: a fused broadcast of a reduction
                push(("broadcast_back", "", [r], None), "f", base)
        elif step == "layout" and rank >= 1 and (of("f", True) or of("i", True)):
            v = pick(of("f", True) + of("i", True))
            axis = draw(st.integers(0, rank - 1))
            n = base[axis]
            sub = pick(LAYOUTS)
            if sub == "roll":
                extra = (axis, draw(st.integers(-n, n)))
            elif sub in ("take", "at_add"):
                extra = (axis, np.array(draw(st.lists(st.integers(-n, n - 1), min_size=n,
                                                      max_size=n)), np.int32))
            elif sub == "slice_pad":
                extra = (axis, draw(st.integers(0, n - 1)))
            elif sub == "concat_halves":
                extra = (axis, draw(st.integers(0, n)))
            elif sub == "transpose_twice" and prog.kinds[v] == "f":
                extra = tuple(draw(st.permutations(range(rank))))
            else:
                sub, extra = ("cumsum" if sub == "cumsum" else "rev"), axis
            push((sub, "", [v], extra), prog.kinds[v], base, exact(v))
        elif step == "control" and floats:
            v = pick(floats)
            sub = pick(["fori", "while", "scan", "cond"])
            name = pick(sorted(FLOAT_UNARY))
            coef = draw(st.sampled_from([0.5, 0.9, -0.75]))
            if sub in ("fori", "while"):
                push((sub, name, [v], (draw(st.integers(0, 4)), coef)), "f", shape_of[v])
            elif sub == "scan" and len(shape_of[v]) >= 1:
                push(("scan", name, [v], (draw(st.booleans()), coef)), "f", shape_of[v])
            elif sub == "cond":
                push(("cond", name, [v], pick(sorted(FLOAT_UNARY))), "f", shape_of[v])
        elif step == "window" and rank == 3 and of("f", True):
            v = pick(of("f", True))
            c = base[1]
            if draw(st.booleans()):
                groups = c if draw(st.booleans()) else 1
                k = draw(st.integers(1, 3))
                w = np.random.default_rng(draw(st.integers(0, 2 ** 16))).standard_normal(
                    (c, c // groups, k)) / (k * c)
                push(("conv1d", "", [v], (w, draw(st.integers(1, 2)), groups)), "f", base)
            else:
                window = tuple(draw(st.integers(1, min(3, d))) for d in base)
                push(("pool", "", [v], (pick(["max", "sum"]), window)), "f", base)
        elif step == "matmul" and rank >= 1 and of("f", True):
            v = pick(of("f", True))
            k = base[-1]
            m = np.random.default_rng(draw(st.integers(0, 2 ** 16))).standard_normal((k, k))
            push(("matmul", "", [v], m / k), "f", base)
    n = len(prog.kinds)
    prog.outputs = [n - 1]
    if draw(st.booleans()) and n > 1:
        prog.outputs.append(draw(st.integers(0, n - 1)))
    if draw(st.booleans()) and of("f"):
        prog.outputs.append(push(("full_reduce", pick(sorted(REDUCTIONS)), [pick(of("f"))],
                                  None), "f", ()))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    args = []
    for s, k in zip(shapes, kinds):
        if k == "i":
            args.append(_int_input(rng, s, prog.idt))
        else:
            x = rng.standard_normal(s).astype(prog.fdt)
            if specials:
                x = np.where(rng.random(s) < 0.2, rng.choice(FLOAT_SPECIALS, s), x)
            args.append(np.asarray(x, prog.fdt))
    return prog, args


FLOAT_SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0])


def pick_from(draw, pool):
    return draw(st.sampled_from(pool))


def _int_input(rng, shape, dtype):
    """Small values, full-range values and edge values (INT_MIN, INT_MIN + 1, -1, 0, 1,
    the maximum, the bit width and its neighbours), mixed."""
    info = np.iinfo(dtype)
    bits = info.bits
    edge = np.array([e for e in (info.min, info.min + 1, -1, 0, 1, bits - 1, bits, bits + 1,
                                 info.max - 1, info.max) if info.min <= e <= info.max],
                    dtype)
    small = rng.integers(max(info.min, -20), 20, shape).astype(dtype)
    full = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    which = rng.integers(0, 4, shape)
    return np.where(which == 0, small, np.where(which == 1, full,
                                                rng.choice(edge, shape))).astype(dtype)


def _close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        (what, got.shape, want.shape, got.dtype, want.dtype)
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    finite = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * scale, equal_nan=True,
                               err_msg=what)


JAX = _jax_namespace()


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(programs())
def test_paths_agree_with_each_other_and_with_jax(case):
    _check_paths(case)


@settings(max_examples=INT_EXAMPLES, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(programs(integer=True))
def test_integer_programs_agree_with_jax(case):
    _check_paths(case)


def _check_paths(case):
    prog, args = case
    flat = [np.asarray(a) for a in args]
    with config_context(jax_enable_x64=prog.x64):
        fn = prog.bind(KILN)
        closed = kiln.make_jaxpr(fn)(*args)
        ref = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
        exe = cpu.executable_for(closed)
        paths = {"eager": [np.asarray(o) for o in fn(*[jnp.asarray(a) for a in args])]}
        if exe is not None:     # else nothing native: the program runs on the reference
            paths["compiled"] = [np.asarray(o) for o in exe(flat)]
    paths["reference"] = [np.asarray(o) for o in ref]
    assert all(len(outs) == len(prog.outputs) for outs in paths.values())
    for path in ("compiled", "eager"):
        for i, (g, w) in enumerate(zip(paths.get(path, ()), paths["reference"])):
            _close(g, w, f"{path} vs reference: output {i} of\n{closed}")
    if JAX is None:
        return
    jax, N = JAX
    with jax.enable_x64(prog.x64):
        want = [np.asarray(o) for o in jax.jit(prog.bind(N))(*args)]
    for path, outs in paths.items():
        for i, (g, w) in enumerate(zip(outs, want)):
            what = f"{path} vs JAX: output {i} of\n{closed}\ninputs {flat}"
            if w.dtype.kind in "fc" or prog.exact[prog.outputs[i]]:
                _close(g, w, what)
            else:   # an integer that depends on a float: its dtype and shape
                assert (g.dtype, g.shape) == (w.dtype, w.shape), what
