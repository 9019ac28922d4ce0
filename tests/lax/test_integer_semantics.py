"""Integer arithmetic against JAX (XLA's semantics) on eager, reference and compiled paths.

Every ordered pair of int8 and of uint8 values (65,536 pairs) goes through each binary
operation — truncating ``lax.div``/``lax.rem``, flooring ``//``/``%``/``divmod``,
``fmod``, the shifts, ``max``/``min``/``clamp``, wrapping ``+ - *`` — and every value
through the unary ones (``abs``/``neg`` of INT_MIN, ``sign``, ``population_count``,
``clz``, ``integer_pow`` overflow, conversions to every integer width). Wider types
(int16/32/64, uint16/32/64 with ``jax_enable_x64``) use edge-heavy samples: the
extremes, -1, 0, the bit width and its neighbours, and random values. Each program is
one array call per path; JAX computes the expected values live.
"""
from __future__ import annotations

import numpy as np
import pytest
from _int_paths import all_pairs, edge_values, jax_values, mismatches, run_kiln_paths

import kiln
import kiln.numpy as kjnp
from kiln.config import config_context

jax = pytest.importorskip("jax")

INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]

def _nonzero(m, b):
    return m.where(b == 0, m.ones_like(b), b)


# name -> f(numpy module, lax module, a, b); the same text runs on JAX and on kiln.
BINARY = {
    "lax.div": lambda m, l, a, b: l.div(a, b),
    "lax.rem": lambda m, l, a, b: l.rem(a, b),
    "floor_divide": lambda m, l, a, b: m.floor_divide(a, b),
    "remainder": lambda m, l, a, b: m.remainder(a, b),
    "a // b": lambda m, l, a, b: a // b,
    "a % b": lambda m, l, a, b: a % b,
    "fmod": lambda m, l, a, b: m.fmod(a, b),
    "divmod[0]": lambda m, l, a, b: m.divmod(a, b)[0],
    "divmod[1]": lambda m, l, a, b: m.divmod(a, b)[1],
    "shift_left": lambda m, l, a, b: l.shift_left(a, b),
    "shift_right_arithmetic": lambda m, l, a, b: l.shift_right_arithmetic(a, b),
    "shift_right_logical": lambda m, l, a, b: l.shift_right_logical(a, b),
    "a << b": lambda m, l, a, b: a << b,
    "a >> b": lambda m, l, a, b: a >> b,
    "lax.max": lambda m, l, a, b: l.max(a, b),
    "lax.min": lambda m, l, a, b: l.min(a, b),
    "maximum": lambda m, l, a, b: m.maximum(a, b),
    "minimum": lambda m, l, a, b: m.minimum(a, b),
    "clamp(b, a, rev b)": lambda m, l, a, b: l.clamp(b, a, l.rev(b, (0,))),
    "clip(a, b)": lambda m, l, a, b: m.clip(a, b),
    # Without zero divisors (eager takes NumPy's kernels directly then).
    "a // nz(b)": lambda m, l, a, b: a // _nonzero(m, b),
    "a % nz(b)": lambda m, l, a, b: a % _nonzero(m, b),
    "floor_divide(a, nz(b))": lambda m, l, a, b: m.floor_divide(a, _nonzero(m, b)),
    "fmod(a, nz(b))": lambda m, l, a, b: m.fmod(a, _nonzero(m, b)),
    "a + b": lambda m, l, a, b: a + b,
    "a - b": lambda m, l, a, b: a - b,
    "a * b": lambda m, l, a, b: a * b,
    "a & b ^ b | a": lambda m, l, a, b: (a & b) ^ b | a,
}


def _unary(dtype):
    dt = np.dtype(dtype)
    ops = {
        "neg": lambda m, l, a: l.neg(a),
        "-a": lambda m, l, a: -a,
        "sign": lambda m, l, a: m.sign(a),
        "lax.sign": lambda m, l, a: l.sign(a),
        "population_count": lambda m, l, a: l.population_count(a),
        "clz": lambda m, l, a: l.clz(a),
        "~a": lambda m, l, a: ~a,
        "square": lambda m, l, a: m.square(a),
        "abs (jnp)": lambda m, l, a: m.abs(a),
    }
    if dt.kind == "i":
        ops["lax.abs"] = lambda m, l, a: l.abs(a)
    for y in (2, 3, 4, 5, 7, 8, 13):
        ops[f"integer_pow {y}"] = lambda m, l, a, y=y: l.integer_pow(a, y)
    for other in INTS + ["bool", "float32", "float64"]:
        if other != dt.name:
            ops[f"-> {other}"] = lambda m, l, a, o=other: l.convert_element_type(a, o)
    return ops


def _program(ops):
    names = list(ops)

    def program(m, l, *args):
        return tuple(ops[n](m, l, *args) for n in names)
    return names, program


def _check(ops, args, x64, native=True):
    names, program = _program(ops)
    want = jax_values(jax, program, args, x64)
    bad = mismatches(names, args, want, run_kiln_paths(program, args, x64, native))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("dtype", INTS)
def test_binary_ops_match_jax(dtype):
    a, b = all_pairs(edge_values(dtype))
    _check(BINARY, (a, b), x64=np.dtype(dtype).itemsize == 8)


@pytest.mark.parametrize("dtype", INTS)
def test_unary_ops_and_conversions_match_jax(dtype):
    _check(_unary(dtype), (edge_values(dtype),), x64=True)


FLOAT_SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 0.9999, -0.9999,
                  1.5, -1.5, 2.5, -2.5, 127.0, 127.5, 128.0, -128.0, -128.5, -129.0, 255.0,
                  255.5, 256.0, -1.0, 32767.0, 32768.0, 65535.0, 65536.0, -32768.0, -32769.0,
                  2.0 ** 31, 2.0 ** 31 - 1, -(2.0 ** 31), -(2.0 ** 31) - 1, 2.0 ** 32,
                  2.0 ** 32 - 1, 2.0 ** 53 + 2, 2.0 ** 62, 2.0 ** 63, -(2.0 ** 63), 2.0 ** 64,
                  -(2.0 ** 64), 1e20, -1e20, 3e38, -3e38, 1e300, -1e300]


@pytest.mark.parametrize("fdtype", ["float16", "bfloat16", "float32", "float64"])
def test_float_to_int_conversions_match_jax(fdtype):
    """NaN -> 0, +-inf and out-of-range values saturate, fractions truncate (XLA's CPU)."""
    fdt = kiln.dtypes.bfloat16 if fdtype == "bfloat16" else np.dtype(fdtype)
    with np.errstate(all="ignore"):
        x = np.unique(np.array(FLOAT_SPECIALS, np.float64).astype(fdt))
    ops = {f"-> {d}": (lambda m, l, a, d=d: l.convert_element_type(a, d)) for d in INTS}
    ops.update({f"astype {d}": (lambda m, l, a, d=d: a.astype(d)) for d in INTS})
    # float16/bfloat16 programs have no C rendering: they run on the reference backend.
    _check(ops, (x,), x64=True, native=fdtype in ("float32", "float64"))


def test_issue_example_int_min_division_on_every_backend():
    """``jit`` gives JAX's quotients whichever backend runs it (the reference backend
    used to overflow ``abs(INT_MIN)``: ``[-2 19 -1]`` for ``lax.div``)."""
    a = np.array([-128, -128, -7], np.int8)
    b = np.array([-127, 7, -128], np.int8)
    for fn, want in [(kiln.lax.div, [1, -18, 0]), (lambda x, y: x // y, [1, -19, 0])]:
        for backend in ("cpu", "reference"):
            with config_context(kiln_backend=backend):
                got = kiln.jit(lambda x, y, fn=fn: fn(x, y))(a, b)
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(fn(kjnp.asarray(a), kjnp.asarray(b)), want)
    np.testing.assert_array_equal(kiln.lax.div(kjnp.int8(-128), kjnp.int8(-1)), -128)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint32"])
def test_python_scalar_operands_match_jax(dtype):
    """Weakly typed Python ints on either side: ``x // 0``, ``x % -1``, ``1 << x``, ..."""
    info = np.iinfo(dtype)
    x = np.array(sorted({info.min, info.min + 1, 0, 1, 5, info.max, 3 if info.min == 0
                         else -1}), dtype)
    signed = info.min < 0
    dt = np.dtype(dtype).type
    ops = {}
    for s in [0, 1, 3, 100] + ([-1, -3] if signed else []):
        ops.update({
            f"x // {s}": lambda m, l, a, s=s: a // s,
            f"{s} // x": lambda m, l, a, s=s: s // a,
            f"x % {s}": lambda m, l, a, s=s: a % s,
            f"{s} % x": lambda m, l, a, s=s: s % a,
            f"fmod(x, {s})": lambda m, l, a, s=s: m.fmod(a, s),
            # lax takes no Python int for a non-default dtype (JAX raises): a NumPy scalar.
            f"lax.div(x, {s})": lambda m, l, a, s=s: l.div(a, dt(s)),
            f"lax.rem(x, {s})": lambda m, l, a, s=s: l.rem(a, dt(s)),
        })
    for s in [1, 7, 8, 9, 31, 32, 33] + ([-1] if signed else []):
        ops.update({
            f"x << {s}": lambda m, l, a, s=s: a << s,
            f"x >> {s}": lambda m, l, a, s=s: a >> s,
            f"{s} >> x": lambda m, l, a, s=s: s >> a,
        })
    _check(ops, (x,), x64=False)
