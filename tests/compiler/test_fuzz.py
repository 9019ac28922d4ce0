"""Differential fuzzing: random programs run compiled and on the reference backend.

Hypothesis draws a program (inputs of broadcast-compatible shapes, then a chain of
elementwise, reduction, layout, gather/scatter, cumulative, matrix-product and integer
operations, and control flow: ``fori_loop``/``while_loop``/``scan`` with random bodies
and trip counts (0 included), ``cond``; 1-D convolutions (dilated, depthwise) and
pooling),
traces it, and runs the jaxpr through the cpu backend's generated C and through the
NumPy interpreter. Integer results must be identical; floats agree to a tolerance
that catches wrong indexing, broadcasting, axes or fusion (errors of order one), not
last-bit rounding.

Deterministic (``derandomize``); ``KILN_FUZZ_EXAMPLES`` sets how many programs
(default 40; more for a longer local run).
"""
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import kiln  # noqa: E402
import kiln.numpy as jnp  # noqa: E402
from kiln import lax  # noqa: E402
from kiln.backends import cpu, reference  # noqa: E402

EXAMPLES = int(os.environ.get("KILN_FUZZ_EXAMPLES", "40"))

FLOAT_UNARY = {
    "neg": lambda u: -u,
    "abs": jnp.abs,
    "tanh": jnp.tanh,
    "sin": jnp.sin,
    "exp_clip": lambda u: jnp.exp(jnp.clip(u, -4.0, 4.0)),
    "log1p_abs": lambda u: jnp.log1p(jnp.abs(u)),
    "sqrt_abs": lambda u: jnp.sqrt(jnp.abs(u)),
    "floor": jnp.floor,
    "square": lambda u: u * u,
    "sigmoid": kiln.nn.sigmoid,
    "relu": kiln.nn.relu,
}
FLOAT_BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (jnp.abs(b) + 1.0),
    "max": jnp.maximum,
    "min": jnp.minimum,
    "where": lambda a, b: jnp.where(a > b, a, b * 0.5),
    "atan2": jnp.arctan2,
}
INT_BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": jnp.maximum,
    "and": lambda a, b: a & b,
    "xor": lambda a, b: a ^ b,
    "rem": lambda a, b: a % (jnp.abs(b) + 1),
    "floordiv": lambda a, b: a // (jnp.abs(b) + 1),
}
REDUCTIONS = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "mean": jnp.mean}


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
    """A program drawn step by step: ``ops`` replayed by ``__call__`` on the inputs.

    Value kinds: "f" float (float32, float64 under x64), "i" int32/int64, "b" bool."""

    def __init__(self, base, kinds, x64):
        self.base = base
        self.x64 = x64
        self.fdt = np.float64 if x64 else np.float32
        self.idt = np.int64 if x64 else np.int32
        self.kinds = list(kinds)
        self.shapes = []
        self.ops = []       # (kind, name, operand indices, extra)
        self.outputs = []

    def __call__(self, *args):
        vals = list(args)
        for kind, name, idx, extra in self.ops:
            vals.append(self.apply(kind, name, [vals[i] for i in idx], extra))
        return [vals[i] for i in self.outputs]

    def apply(self, kind, name, xs, extra):
        base = self.base
        if kind == "funary":
            return FLOAT_UNARY[name](xs[0])
        if kind == "fbinary":
            return FLOAT_BINARY[name](xs[0], xs[1])
        if kind == "ibinary":
            return INT_BINARY[name](xs[0], xs[1])
        if kind == "compare":
            return {"lt": jnp.less, "ge": jnp.greater_equal, "eq": jnp.equal,
                    "ne": jnp.not_equal}[name](xs[0], xs[1])
        if kind == "logic":
            return {"and": jnp.logical_and, "or": jnp.logical_or, "xor": jnp.logical_xor,
                    "not": lambda a, b: jnp.logical_not(a)}[name](xs[0], xs[1])
        if kind == "select":
            return jnp.where(xs[0], xs[1], xs[2])
        if kind == "to_float":
            return xs[0].astype(self.fdt) * 0.25
        if kind == "to_int":
            return (xs[0] * 8.0).astype(self.idt)
        if kind == "bool_to_float":
            return xs[0].astype(self.fdt)
        if kind == "bf16_round":
            return xs[0].astype(kiln.dtypes.bfloat16).astype(self.fdt)
        if kind == "reduce_keep":
            return REDUCTIONS[name](xs[0], axis=extra, keepdims=True)
        if kind == "broadcast_back":
            return jnp.broadcast_to(xs[0], base)
        if kind == "rev":
            return lax.rev(xs[0], (extra,))
        if kind == "roll":
            return jnp.roll(xs[0], extra[1], axis=extra[0])
        if kind == "cumsum":
            return jnp.cumsum(xs[0], axis=extra)
        if kind == "at_add":
            axis, idx = extra
            where = (slice(None),) * axis + (idx,)
            return xs[0].at[where].add(xs[0][where] * 0.5 if xs[0].dtype.kind == "f" else 3)
        if kind == "take":
            axis, idx = extra
            return jnp.take(xs[0], idx, axis=axis)
        if kind == "slice_pad":
            axis, lo = extra
            sl = lax.slice_in_dim(xs[0], lo, base[axis], axis=axis)
            pad = [(0, 0)] * len(base)
            pad[axis] = (lo, 0)
            return jnp.pad(sl, pad)
        if kind == "concat_halves":
            axis, cut = extra
            a = lax.slice_in_dim(xs[0], cut, base[axis], axis=axis)
            b = lax.slice_in_dim(xs[0], 0, cut, axis=axis)
            return jnp.concatenate([a, b], axis=axis)
        if kind == "matmul":
            return xs[0] @ extra.astype(self.fdt)
        if kind == "transpose_twice":
            inv = tuple(np.argsort(extra))
            return jnp.transpose(jnp.transpose(xs[0], extra) * 1.5, inv)
        if kind == "full_reduce":
            return REDUCTIONS[name](xs[0])
        if kind == "fori":
            n, coef = extra
            f = FLOAT_UNARY[name]
            return lax.fori_loop(0, n, lambda i, c: c * coef + f(c) * 0.25 + 0.125, xs[0])
        if kind == "while":
            n, coef = extra
            f = FLOAT_UNARY[name]

            def body(c):
                return c[0] * coef + jnp.tanh(f(c[0])) * 0.5, c[1] + 1
            return lax.while_loop(lambda c: c[1] < n, body, (xs[0], 0))[0]
        if kind == "scan":
            reverse, coef = extra
            f = FLOAT_UNARY[name]

            def step(c, x):
                c = c * coef + jnp.tanh(x)
                return c, f(c) + x * 0.5
            _, ys = lax.scan(step, jnp.zeros(xs[0].shape[1:], xs[0].dtype), xs[0],
                             reverse=reverse)
            return ys
        if kind == "conv1d":
            w, dil, groups = extra
            return lax.conv_general_dilated(xs[0], w.astype(self.fdt), (1,), "SAME",
                                            rhs_dilation=(dil,), feature_group_count=groups)
        if kind == "pool":
            op, window = extra
            fn, init = {"max": (lax.max, -jnp.inf), "sum": (lax.add, 0.0)}[op]
            y = lax.reduce_window(xs[0], init, fn, window, (1,) * len(window), "SAME")
            return y if op == "max" else y * 0.25
        if kind == "cond":
            g, h = FLOAT_UNARY[name], FLOAT_UNARY[extra]
            return lax.cond(jnp.sum(xs[0]) > 0, lambda u: g(u) * 2.0, lambda u: h(u) - 1.0,
                            xs[0])
        raise AssertionError(kind)


LAYOUTS = ["rev", "roll", "cumsum", "take", "at_add", "slice_pad", "concat_halves",
           "transpose_twice"]


@st.composite
def programs(draw):
    base, shapes = _shapes(draw)
    rank = len(base)
    kinds = ["i" if draw(st.integers(0, 4)) == 0 else "f" for _ in shapes]
    prog = _Program(base, kinds, x64=draw(st.integers(0, 3)) == 0)
    prog.shapes = list(shapes)

    def push(op, kind, shape):
        prog.ops.append(op)
        prog.kinds.append(kind)
        prog.shapes.append(tuple(shape))
        return len(prog.kinds) - 1

    def of(kind, full=False):
        return [v for v, k in enumerate(prog.kinds)
                if k == kind and (not full or prog.shapes[v] == base)]

    def pick(pool):
        return draw(st.sampled_from(pool))

    for _ in range(draw(st.integers(1, 8))):
        floats, ints, bools = of("f"), of("i"), of("b")
        step = pick(["funary", "fbinary", "ibinary", "convert", "compare", "logic", "select",
                     "reduce_keep", "layout", "layout", "matmul", "control", "window"])
        shape_of = prog.shapes
        if step == "funary" and floats:
            v = pick(floats)
            push(("funary", pick(sorted(FLOAT_UNARY)), [v], None), "f", shape_of[v])
        elif step in ("fbinary", "ibinary", "compare") and (ints if step == "ibinary"
                                                            else floats):
            pool = ints if step == "ibinary" else floats
            a, b = pick(pool), pick(pool)
            table = {"fbinary": FLOAT_BINARY, "ibinary": INT_BINARY,
                     "compare": ["lt", "ge", "eq", "ne"]}[step]
            push((step, pick(sorted(table)), [a, b], None),
                 {"fbinary": "f", "ibinary": "i", "compare": "b"}[step],
                 np.broadcast_shapes(shape_of[a], shape_of[b]))
        elif step == "logic" and bools:
            a, b = pick(bools), pick(bools)
            push(("logic", pick(["and", "or", "xor", "not"]), [a, b], None), "b",
                 np.broadcast_shapes(shape_of[a], shape_of[b]))
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
            push((sub, "", [v], extra), prog.kinds[v], base)
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
            args.append(rng.integers(-20, 20, s).astype(prog.idt))
        else:
            args.append(rng.standard_normal(s).astype(prog.fdt))
    return prog, args


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


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(programs())
def test_compiled_matches_reference(case):
    prog, args = case
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", prog.x64)
    try:
        closed = kiln.make_jaxpr(prog)(*args)
        exe = cpu.executable_for(closed)
        if exe is None:     # nothing native: the program runs on the reference backend
            return
        flat = [np.asarray(a) for a in args]
        got = exe(flat)
        want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    finally:
        kiln.config.update("jax_enable_x64", old)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _close(g, w, f"output {i} of\n{closed}")
