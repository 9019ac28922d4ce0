"""float16/bfloat16 arithmetic, comparisons, max/min, roots, ``integer_pow``, ``pow`` and
``nextafter`` give JAX's bits at subnormals and signed zeros, eager and jit.

XLA's CPU code runs each bfloat16 op in float32 under DAZ/FTZ (a bfloat16 subnormal is a
float32 subnormal: it reads as zero, and a float32 result below the smallest normal
becomes zero before rounding); ``max``/``min`` order ``-0`` below ``+0``; ``integer_pow``
rounds each product of its chain (``kiln/lax/_half_flush.py``). Pinned values run
without JAX; all 2**16 values of both types against a few partners are compared with
live JAX when it is importable.
"""
import numpy as np
import pytest

import kiln
from kiln import lax as klax

ml_dtypes = pytest.importorskip("ml_dtypes")

BF = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


def _bits(dt, bits):
    return np.array(bits, np.uint16).view(dt)


def _out_bits(v):
    v = np.asarray(v)
    return v.tolist() if v.dtype == bool else v.view(np.uint16).tolist()


# (op, dtype, operands' bits, JAX 0.10.2's result bits (or bools)).
PINNED = [
    # bfloat16: subnormal operands read as zeros; products below the smallest normal
    # are zeros (0x0080 * 0x3f7f rounds to 0x0080 exactly, flushed first in XLA).
    ("mul", "bfloat16", [[0x1, 0x8003, 0x80, 0x80, 0x7f80], [0x3f80, 0x3f80, 0x3f00, 0x3f7f, 0x1]],
     [0x0, 0x8000, 0x0, 0x0, 0xffc0]),
    ("add", "bfloat16", [[0x1, 0x81, 0x8001, 0x80], [0x0, 0x8080, 0x3f80, 0x8001]],
     [0x0, 0x0, 0x3f80, 0x80]),
    ("sub", "bfloat16", [[0x1, 0x81, 0x8001], [0x0, 0x80, 0x3f80]], [0x0, 0x0, 0xbf80]),
    ("div", "bfloat16", [[0x80, 0x1, 0x3f80, 0x1], [0x4000, 0x3f80, 0x1, 0x1]],
     [0x0, 0x0, 0x7f80, 0xffc0]),
    ("max", "bfloat16", [[0x1, 0x8000, 0x0, 0x8001], [0x0, 0x0, 0x8000, 0xbf80]],
     [0x0, 0x0, 0x0, 0x8000]),
    ("min", "bfloat16", [[0x1, 0x8000, 0x0, 0x8001], [0x0, 0x0, 0x8000, 0x0]],
     [0x0, 0x8000, 0x8000, 0x8000]),
    ("lt", "bfloat16", [[0x0, 0x8001, 0x1], [0x1, 0x0, 0x3f80]], [False, False, True]),
    ("eq", "bfloat16", [[0x0, 0x8001, 0x1], [0x1, 0x0, 0x2]], [True, True, True]),
    ("nextafter", "bfloat16", [[0x2, 0x0, 0x1], [0x0, 0x3, 0x3f80]], [0x0, 0x3, 0x2]),
    ("pow", "bfloat16", [[0x1, 0x7f81, 0x3f80], [0x3f00, 0x0, 0x7f81]], [0x1a00, 0x7fc0, 0x7fc0]),
    ("sqrt", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x0, 0x8000, 0x0, 0x8000]),
    ("rsqrt", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x7f80, 0xff80, 0x7f80, 0xff80]),
    ("sign", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x0, 0x8000, 0x0, 0x8000]),
    ("floor", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x0, 0x8000, 0x0, 0x8000]),
    ("ceil", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x0, 0x8000, 0x0, 0x8000]),
    ("square", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x0, 0x0, 0x0, 0x0]),
    # neg and abs keep subnormals.
    ("neg", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x8001, 0x1, 0x807f, 0x7f]),
    ("abs", "bfloat16", [[0x1, 0x8001, 0x7f, 0x807f]], [0x1, 0x1, 0x7f, 0x7f]),
    # float16 (promoted to float32, nothing flushed): signed zeros of max/min/nextafter,
    # pow through float32 powf (a quiet NaN to the 0 is 1).
    ("max", "float16", [[0x8000, 0x0], [0x0, 0x8000]], [0x0, 0x0]),
    ("min", "float16", [[0x8000, 0x0], [0x0, 0x8000]], [0x8000, 0x8000]),
    ("nextafter", "float16", [[0x8000, 0x0], [0x0, 0x8000]], [0x0, 0x8000]),
    ("pow", "float16", [[0x1419, 0x7c01, 0x7e00], [0xb024, 0x0, 0x0]], [0x40e4, 0x3c00, 0x3c00]),
    # integer_pow: JAX's chain of products, each rounded (x**3 = (x*x)*x, x**-2 = 1/(x*x)).
    ("cube", "float16", [[0x1a5a, 0x9a5a, 0xd109]], [0x0, 0x8000, 0xfbfb]),
    ("inv_square", "float16", [[0x1c01, 0x9c01, 0xeda8]], [0x7bf8, 0x7bf8, 0x0]),
    ("cube", "bfloat16", [[0x2922, 0xa922, 0xd4ca]], [0x0, 0x8000, 0xff7b]),
    ("inv_square", "bfloat16", [[0x2003, 0xa003, 0xe0ff]], [0x7e75, 0x7e75, 0x0]),
]


def _fn(lax, op):
    if op == "cube":
        return lambda x: lax.integer_pow(x, 3)
    if op == "inv_square":
        return lambda x: lax.integer_pow(x, -2)
    return getattr(lax, op)


@pytest.mark.parametrize("op,dtype,args,want", PINNED,
                         ids=[f"{p[0]}-{p[1]}" for p in PINNED])
def test_pinned_values(op, dtype, args, want):
    dt = BF if dtype == "bfloat16" else F16
    xs = [_bits(dt, a) for a in args]
    f = _fn(klax, op)
    for what, got in (("eager", f(*xs)), ("jit", kiln.jit(f)(*xs))):
        assert _out_bits(got) == want, (what, [hex(v) for v in _out_bits(got)])


def test_bfloat16_broadcast_divisor_takes_a_flushed_reciprocal():
    """``x / c`` for a rank-0 ``c``: XLA multiplies by ``1 / c`` computed in float32,
    which is subnormal (flushed to 0) for ``c = 2**127``; a true division gives 2**-30."""
    x = _bits(BF, [0x7000, 0x3f80])                  # 2**97, 1
    c = _bits(BF, [0x7f00])[0]                       # 2**127
    for got in (klax.div(x, c), kiln.jit(klax.div)(x, c)):
        assert _out_bits(got) == [0x0, 0x0]
    full = klax.div(x, np.full(2, c, BF))
    assert _out_bits(full) == [0x3080, 0x0]          # 2**-30; 2**-127 flushed


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_clamp_signed_zeros_and_subnormals(dtype):
    """``clamp(lo, x, hi)`` is XLA's ``min(max(x, lo), hi)``: ``-0`` below ``+0``,
    bfloat16 subnormals read as zeros (JAX 0.10.2's bits)."""
    dt = BF if dtype == "bfloat16" else F16
    x = _bits(dt, [0x0, 0x8000, 0x1, 0x8001, 0x3c00 if dt == F16 else 0x3f80])
    lo, hi = _bits(dt, [0x8000])[0], _bits(dt, [0x0])[0]          # -0, +0
    flushed = dt == BF
    want = [0x0, 0x8000, 0x0, 0x8000, 0x0]
    for got in (klax.clamp(lo, x, hi), kiln.jit(klax.clamp)(lo, x, hi)):
        assert _out_bits(got) == want, [hex(v) for v in _out_bits(got)]
    lo = _bits(dt, [0x0])[0]                                      # clamp(+0, x, 1)
    hi = _bits(dt, [0x3c00 if dt == F16 else 0x3f80])[0]
    want = [0x0, 0x0, 0x0 if flushed else 0x1, 0x0, int(hi.view(np.uint16))]
    for got in (klax.clamp(lo, x, hi), kiln.jit(klax.clamp)(lo, x, hi)):
        assert _out_bits(got) == want, [hex(v) for v in _out_bits(got)]


_BINARY = ["add", "sub", "mul", "div", "max", "min", "pow", "nextafter", "lt", "eq"]
_SWAPPED = ["sub", "div", "max", "min", "pow", "nextafter", "lt"]   # also as op(y, x)
_UNARY = ["sqrt", "rsqrt", "sign", "floor", "ceil", "square", "neg", "cube", "inv_square"]
_NAMES = [f"{op}(x,y)" for op in _BINARY] + [f"{op}(y,x)" for op in _SWAPPED] + _UNARY + \
    ["x/c"]


def _sweep(lax, x, y, c):
    out = [getattr(lax, op)(x, y) for op in _BINARY]
    out += [getattr(lax, op)(y, x) for op in _SWAPPED]
    out += [_fn(lax, op)(x) for op in _UNARY]
    out.append(lax.div(x, c))
    return out


def _both(lax, *args):
    return _sweep(lax, *args[:3]) + _sweep(lax, *args[3:])


def _mismatches(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == bool:
        return int((got != want).sum())
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    return int(((got.view(np.uint16) != want.view(np.uint16)) & ~nan).sum())


def _operands(dt):
    """Every value of ``dt`` against partners -0, 1, -2, a negative subnormal and the
    smallest normal (flattened), and a subnormal rank-0 divisor."""
    fi = ml_dtypes.finfo(dt)
    partners = np.array([-0.0, 1.0, -2.0, -3 * float(fi.smallest_subnormal),
                         float(fi.tiny)], dt)
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)
    return np.tile(every, partners.size), np.repeat(partners, every.size), partners[3]


def test_every_value_matches_jax():
    """float16 and bfloat16 in one JAX program (its compile is most of the time)."""
    jax = pytest.importorskip("jax")
    args = _operands(F16) + _operands(BF)
    want = jax.jit(lambda *a: _both(jax.lax, *a))(*args)
    names = [f"float16 {n}" for n in _NAMES] + [f"bfloat16 {n}" for n in _NAMES]
    for what, got in (("eager", _both(klax, *args)),
                      ("jit", kiln.jit(lambda *a: _both(klax, *a))(*args))):
        bad = {n: m for n, g, w in zip(names, got, want) if (m := _mismatches(g, w))}
        assert not bad, (what, bad)


@pytest.mark.parametrize("n", [4, 1 << 13])      # table look-up and flush-check paths
def test_eager_operators_flush_bfloat16(n):
    """The eager ``Array`` operators and ``jnp`` ufuncs (NumPy fast paths) give the
    primitives' bits: bfloat16 flushed, ``maximum``/``minimum`` with signed zeros."""
    import kiln.numpy as knp
    x = knp.asarray(np.resize(_bits(BF, [0x1, 0x80, 0x8001, 0x3f80]), n))
    y = knp.asarray(np.resize(_bits(BF, [0x3f80, 0x3f7f, 0x0, 0x1]), n))
    want = {"*": [0x0, 0x0, 0x8000, 0x0], "+": [0x3f80, 0x3f7f, 0x0, 0x3f80],
            "/": [0x0, 0x81, 0xffc0, 0x7f80], "<": [True, True, False, False]}  # JAX 0.10.2
    got = {"*": x * y, "+": x + y, "/": x / y, "<": x < y}
    for k, w in want.items():
        assert _out_bits(got[k])[:4] == w, (k, _out_bits(got[k])[:4])
        assert _out_bits(got[k]) == list(np.resize(np.array(w), n)), k
    a = knp.asarray(np.resize(np.array([-0.0, 0.0], np.float16), n))
    b = knp.asarray(np.resize(np.array([0.0, -0.0], np.float16), n))
    assert not np.signbit(np.asarray(knp.maximum(a, b))).any()
    assert np.signbit(np.asarray(knp.minimum(a, b))).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cummax_cummin_signed_zeros_and_subnormals(dtype):
    """XLA's ``reduce_window`` of ``max``/``min``: ``-0`` below ``+0`` and bfloat16
    subnormals read as zeros, every element (JAX 0.10.2's bits)."""
    dt = BF if dtype == "bfloat16" else F16
    x = _bits(dt, [0x8000, 0x1, 0x0, 0x8001, 0x8000])
    sub = 0x0 if dt == BF else 0x1
    want = {"cummax": [0x8000, sub, sub, sub, sub],
            "cummin": [0x8000, 0x8000, 0x8000, 0x8000 if dt == BF else 0x8001,
                       0x8000 if dt == BF else 0x8001]}
    for op, w in want.items():
        f = getattr(klax, op)
        for got in (f(x), kiln.jit(f)(x)):
            assert _out_bits(got) == w, (op, [hex(v) for v in _out_bits(got)])
    rev = [sub, sub, 0x0, 0x8000, 0x8000]
    for got in (klax.cummax(x, reverse=True), kiln.jit(lambda v: klax.cummax(v, reverse=True))(x)):
        assert _out_bits(got) == rev, [hex(v) for v in _out_bits(got)]
