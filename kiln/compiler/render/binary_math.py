"""Vectorizable float32 ``pow`` and ``atan2`` with the C library's bits: ``kpow32``,
``katan2_32``.

Why: JAX's CPU backend computes float32 ``pow`` and ``atan2`` with the C library's
``powf`` and ``atan2f`` (checked against JAX 0.10.2 with MXCSR DAZ+FTZ set, as both run:
``tests/parity/test_binary_jax_bits.py``), and a call of a scalar library function keeps
gcc from vectorizing the loop it sits in (the same reason as ``trig_math``'s).

``kiln/compiler/csrc/libm_pow.h`` reproduces glibc's ``powf`` (2.28 and later: log2 of the
mantissa from a 16-entry table of 1/c and log2(c) and a degree-5 polynomial in double,
``y * log2|x|`` in double, 2^that from a 32-entry table of 2^(i/32) and a cubic, rounded
once to float; subnormal x normalized by a float multiply by 2^23, overflow, underflow
and the near-underflow case ``0x1.4p-75f * 0x1.4p-75f`` as the library, x < 0 with
integer y signed, every zero/infinity/NaN case by its rules) in branch-free C: every
lane computes the main path and the special cases are selected over it. The tables are
read by trees of selects on the index bits (gcc's tuning here makes no gathers, and its
emulated ones are scalar loads), or, in the 16-lane SIMD clone, by permutes
(``__builtin_shuffle`` of two 8-lane vectors, one ``vpermt2q``) between three lane loops.
With gcc on x86-64 ``kpow32`` is a declared SIMD function as ``ksin32`` is (clones on 4,
8, 16 lanes; the scalar symbol is ``powf`` itself); elsewhere inline.

``kiln/compiler/csrc/libm_atan2.h`` reproduces glibc 2.36's ``atan2f`` (fdlibm's: the
quadrant from the signs, ``|y / x|`` (``|y|`` itself when x == 1, as the library's
``atanf(y)``), fdlibm's float ``atanf`` kernel whose four argument reductions become one
division of selected operands, pi's head and tail for the left half-plane, |y/x| beyond
2^60 and below 2^-60 and every zero/infinity/NaN case by its rules): inline and
branch-free (two divisions a lane), no tables.

Both depend on how the library was compiled (glibc builds ``powf`` with and without FMA
and picks one at load time; its ``atanf`` kernel is float arithmetic, compiled unfused on
x86-64) and on the library itself (other glibc versions, musl, macOS differ). So, as for
sin/cos, :func:`usable` runs a probe once per function and process
(``kiln/compiler/csrc/binary_probe.c``, built per machine and cached): each variant of
``KPOW_MA``/``KATAN_MA`` against this process's ``powf``/``atan2f`` over 2^17 pairs of
float32 patterns from a fixed seed (uniform bits; exponents where the result is neither
0, 1 nor infinite; integer and half-integer exponents; x near +-1) and every pair of
SPECIALS, MXCSR flush bits on and off. The first variant with no mismatch is used; when
none matches, generated code keeps calling ``powf``/``atan2f``. The verdict is kept in the
cache directory as ``trig_math``'s (``trig/pow-*.json``, ``trig/atan2-*.json``, keyed by
the math library's file, compiler, flags, CPU and this probe). ``KILN_LIBM_TRIG=1``
forces the library calls for these too.

Only float32: float64 ``pow``/``atan2`` keep the library's functions.

What this module must not hold: the C text (``csrc``), the renderer's choice of names
(``c_expr.ExprMixin.math_fn``).
"""
from __future__ import annotations

import ctypes
import functools
import threading

from kiln.compiler import csrc
from kiln.compiler.render import trig_math

__all__ = ["FUNCTIONS", "HEADERS", "SPECIALS", "VARIANTS", "chosen_variant", "prelude",
           "probe_mismatches", "usable"]

#: The C functions for float32 ``pow`` and ``atan2`` when the probe passes.
FUNCTIONS = {"pow": "kpow32", "atan2": "katan2_32"}

#: Each function's header (package ``kiln.compiler.csrc``).
HEADERS = {"pow": "libm_pow.h", "atan2": "libm_atan2.h"}

#: The definitions of ``a * b + c`` tried in order: the library's usual build first
#: (glibc's ``powf`` FMA build, which its ifunc picks on FMA processors; ``atanf``
#: unfused).
VARIANTS = {
    "pow": {"fma": "#define KPOW_MA(a, b, c) fma(a, b, c)\n",
            "plain": "#define KPOW_MA(a, b, c) ((a) * (b) + (c))\n"},
    "atan2": {"plain": "#define KATAN_MA(a, b, c) ((a) * (b) + (c))\n",
              "fma": "#define KATAN_MA(a, b, c) fmaf(a, b, c)\n"},
}

#: Float32 patterns paired with each other and with random ones: zeros, infinities,
#: quiet and signaling NaNs of both signs, +-1, +-2, +-3, 0.5, the least and greatest
#: subnormals and floats, integers around 2^23 and 2^24 (odd, even), 1 +- ulp.
SPECIALS = (0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
            0x7F800001, 0xFFA00000, 0x3F800000, 0xBF800000, 0x40000000, 0xC0000000,
            0x40400000, 0xC0400000, 0x3F000000, 0x00000001, 0x807FFFFF, 0x00800000,
            0x7F7FFFFF, 0xFF7FFFFF, 0x4AFFFFFE, 0x4B000001, 0xCB000001, 0x4B800000,
            0x3F7FFFFF, 0x3F800001, 0x42FE0000, 0xC3150000, 0x3EFFFFFF)

#: Random pairs per probe (two MXCSR modes each) and their seed.
PAIRS = 1 << 17
SEED = 0x9E3779B97F4A7C15

_lock = threading.Lock()


def probe_mismatches(name: str, variant: str, flush: bool, pairs: int = PAIRS,
                     seed: int = SEED) -> int:
    """The number of results of ``FUNCTIONS[name]`` built as ``variant`` that differ
    from this process's ``powf``/``atan2f`` over the probe's sample (``pairs`` random
    pairs from ``seed``, then SPECIALS x SPECIALS), denormals flushed when ``flush``.

    Raises:
      kiln.compiler.build.build.CompilerNotFound / BuildError: no working C compiler.
    """
    from kiln.compiler.build import build
    defines = "".join(VARIANTS[n][variant if n == name else next(iter(VARIANTS[n]))]
                      for n in VARIANTS)
    lib = build.load_library(defines + csrc.source("binary_probe.c"))
    fn = lib.kiln_binary_probe
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_int64,
                   ctypes.POINTER(ctypes.c_uint32), ctypes.c_int, ctypes.c_int]
    special = (ctypes.c_uint32 * len(SPECIALS))(*SPECIALS)
    which = list(FUNCTIONS).index(name)
    return int(fn(which, seed, pairs, special, len(SPECIALS), int(flush)))


def _passes(name: str, variant: str) -> bool:
    try:
        return all(probe_mismatches(name, variant, flush) == 0 for flush in (True, False))
    except Exception:   # no compiler, a failed build: the library calls stay
        return False


@functools.cache
def _variant(name: str) -> str | None:
    """The variant of ``FUNCTIONS[name]`` matching this process's library, or None."""
    if trig_math._forced():
        return None
    extra = (csrc.source("binary_probe.c"), repr((VARIANTS, SPECIALS, PAIRS, SEED)))
    return trig_math._cached(name, lambda: next(
        (v for v in VARIANTS[name] if _passes(name, v)), None), extra)


def usable(name: str) -> bool:
    """Whether generated code may call ``FUNCTIONS[name]`` (the probe runs on the first
    such question for ``name`` in a process)."""
    with _lock:
        return _variant(name) is not None


def chosen_variant(name: str) -> str | None:
    """``"fma"``, ``"plain"`` or None (the library's function): what the probe decided
    for ``name`` in this process."""
    with _lock:
        return _variant(name)


def prelude(names) -> str:
    """The C text defining the functions of ``names`` (``"pow"``, ``"atan2"``) that
    :func:`usable` allowed, each built as its probe chose (after ``xla_math.h``, which
    defines ``sel32``)."""
    out = []
    for name in FUNCTIONS:
        if name in names:
            with _lock:
                variant = _variant(name)
            out.append(VARIANTS[name][variant or next(iter(VARIANTS[name]))]
                       + csrc.text(HEADERS[name]))
    return "".join(out)
