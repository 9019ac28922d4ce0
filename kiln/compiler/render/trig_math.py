"""Vectorizable float32 ``sin``/``cos``/``tan`` with the C library's bits: ``ksin32``,
``kcos32``, ``ktan32``.

Why: JAX's CPU backend computes float32 sin, cos and tan with the C library's ``sinf``,
``cosf`` and ``tanf`` (on glibc machines kiln's eager and jit results equal JAX's because
both call them), but a call of a scalar library function keeps gcc from vectorizing
the loop it sits in. ``kiln/compiler/csrc/libm_trig.h`` reproduces glibc's (2.28 and later)
algorithm bit for bit in branch-free C that gcc vectorizes: the float is widened to
double; below 2^-12 the result is the argument (sin) or 1 (cos); below 120 the argument
is reduced by ``n = rint(y * 2/pi)``, ``r = y - n pi/2`` in one step; above, a window of
4/pi in 64-bit fixed point, chosen by the exponent, gives ``y * 4/pi mod 8`` exactly as
glibc's integer reduction does; then the sine polynomial (degree 7) or the cosine one
(degree 8) in double, with the quadrant's sign, rounded once to float; infinities and
NaNs give ``y - y``. Lanes compute both polynomials, then select. ``tanf`` (glibc 2.36:
no FMA build) reduces the same way (unfused), splits the double remainder into a float
head and tail and runs fdlibm's float kernel (odd polynomial, ``pi/4 - |x|`` above
0.6744, ``-1/tan`` computed from split halves in odd quadrants); ``ktan32`` computes
every case of that kernel and selects.

With gcc on x86-64 the three are declared SIMD functions (the x86 vector
function ABI, as glibc's libmvec): a vectorized loop calls a clone on 4, 8 or 16 lanes,
which runs the |y| < 120 code on all of them and the large reduction (~as many
instructions again) only when some lane needs it; the scalar symbol, for a loop's
remainder, is ``sinf``/``cosf``/``tanf`` itself. Elsewhere they are inline and
branch-free over the whole range. On the development machine (AVX-512, 16 lanes): sin
~2.1 ns a value against 4-7 ns for ``sinf`` on values below 120, ~3.8 against ~13
above; tan ~3 ns against 6-24 (benchmarks/NOTES.md, session 16).

glibc builds sinf/cosf twice on x86-64 and picks one at load time: with FMA (every
``a * b + c`` of the polynomials and of the reduction fused) on processors that have it,
without elsewhere. ``KTRIG_MA`` selects which of the two the header reproduces, and
other C libraries (musl, macOS, other glibc versions) use other algorithms altogether.
So before the renderer uses these functions, :func:`usable` runs a probe once per
process (``kiln/compiler/csrc/trig_probe.c``, built per machine and cached like every
library): each variant's results, through vectorized loops so that the clones run,
against this process's own ``sinf``/``cosf`` (and ``ktan32``'s against ``tanf``,
decided apart) on every 16411th float32 bit pattern (all exponents, NaNs and
infinities), on the 65 patterns around each boundary of the algorithms and around each
input where the two variants differ (``DISCRIMINATING``), with denormals flushed (as
kernels run) and without: 10-25 ms for sin/cos, as much for tan (each probed on its
first use), plus a build (~0.4 s) on a machine's first use. The verdict is kept in the
cache directory (``trig/``), keyed by the math library's file (path, inode, size,
mtime), the compiler, flags, CPU and the probe itself, so later processes read it (~1
ms); an upgraded library or compiler probes again. The
first variant with no mismatch is used; when neither matches, generated code keeps
calling ``sinf``/``cosf`` (slower, the same bits as before), and ``tanf`` when ``ktan32``
does not match. ``KILN_LIBM_TRIG=1`` forces the library calls. All 2^32 inputs were
compared on the development machine (glibc 2.36; the FMA variant for sin/cos), with and
without the flush: ``tests/compiler/test_libm_trig.py`` with ``KILN_EXHAUSTIVE=1``.

Float64 ``sin``/``cos`` (``ksin64``/``kcos64``, ``kiln/compiler/csrc/libm_sincos64.h``):
glibc's IBM routines since 2.28 (below 2^-26/2^-27 the argument or 1; below 0.855469 the
argument itself, below 2.426265 pi/2 - |x| in two parts, else x - n pi/2 to 136 bits by a
three-part pi/2; then the sine kernel (a Taylor polynomial below 0.126, else the sin/cos
table at the nearest k/128 corrected by polynomials) or the cosine kernel, with the
quadrant's sign), every lane through one argument and both kernels, selected; glibc's
FMA build contracted exactly as gcc contracts its C (a product whose only users are
additions is fused into each). Only as SIMD clones with gcc on x86-64: a clone hands any
lane at or above 105414350 (and non-finite ones) to the library's ``sin``/``cos`` (its
``__branred`` reduction is not reproduced), and the scalar symbol is the library's
function; elsewhere ``usable64`` is false. Their own probe (``trig64_probe.c``: every
16411th high word with a pseudo-random low word, dense runs around EDGES64, both MXCSR
modes; ~0.1 s under load) and cached verdict (``sincos64``). On the development machine:
the FMA variant matches (0 mismatches over every 61st high word, 70M patterns, per
MXCSR mode; the plain one differs), ~4 ns a value against ~8.4 for ``sin`` (values in
[-10, 10]).
Float64 ``tan`` keeps the library's function.

What this module must not hold: the C text (``csrc``), the renderer's choice of names
(``c_expr.ExprMixin.math_fn``).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import pathlib
import tempfile
import threading

from kiln.compiler import csrc

__all__ = ["DISCRIMINATING", "FUNCTIONS", "FUNCTIONS64", "KEEP_LOOP", "KEEP_LOOP_MAX",
           "SIMD_FUNCTIONS", "VARIANTS", "VARIANTS64", "chosen_variant", "chosen_variant64",
           "keep_loop", "prelude", "prelude64", "probe64_mismatches", "probe_mismatches",
           "usable", "usable64"]

#: The C functions for float32 ``sin``, ``cos`` and ``tan`` when the probe passes.
FUNCTIONS = {"sin": "ksin32", "cos": "kcos32", "tan": "ktan32"}

#: ``KTRIG_MA`` definitions tried in order: glibc's FMA build, then its plain one.
VARIANTS = {"fma": "#define KTRIG_MA(a, b, c) fma(a, b, c)\n",
            "plain": "#define KTRIG_MA(a, b, c) ((a) * (b) + (c))\n"}

#: The probe's sample: every STEP-th bit pattern, and DENSE patterns either side of
#: each of EDGES (the thresholds 2^-126, 2^-12, 0.75, 120 and the top of the finite
#: floats, pi/4 multiples where the quadrant changes, tanf's 2^-13, 0.6744 and pi/4)
#: and of DISCRIMINATING.
STEP = 16411
DENSE = 32
EDGES = (0x00800000, 0x39800000, 0x3F400000, 0x3F490FDB, 0x3FC90FDB, 0x4016CBE4,
         0x40490FDB, 0x42F00000, 0x7F7FFFFF, 0x7F800000, 0x4B000000, 0x5F000000,
         0x39000000, 0x3F2CA140, 0x3F490FDA)

#: The positive float32 patterns (their negatives too) where the two variants differ:
#: all of them, found by comparing both over the 2^32 inputs (near multiples of pi/2
#: below 120, where the reduction cancels). The fused variant gives glibc 2.36's FMA
#: ``sinf``/``cosf`` on all of them; the probe includes them, so it tells the builds
#: apart (a sparse sample would almost never hit one).
DISCRIMINATING = (0x418A3ADB, 0x418A3ADC, 0x418A3ADD, 0x418A3ADE, 0x41BC76D9, 0x4202EB4B,
                  0x4255B0A9, 0x42687A55, 0x4280CE28, 0x42870E40, 0x42A35C07, 0x42A35D44,
                  0x42A97360, 0x42C55FAA, 0x42CF5854, 0x42D8D23E, 0x42E87A55)

#: Put before an innermost loop of at most KEEP_LOOP_MAX iterations that calls them
#: (``kernels._nest``): gcc unrolls such a loop completely before its vectorizer runs
#: and then calls the scalar function 16 times (the fori_loop of a f32[16] carry: 136
#: ns a step with sinf, 125 so, 44 with the loop kept and vectorized).
KEEP_LOOP = "#pragma GCC unroll 1"
KEEP_LOOP_MAX = 64

#: Float64 ``sin``/``cos`` (``libm_sincos64.h``): the C functions, the ``KSC_MA``
#: definitions tried (glibc's FMA build of sin/cos first), the probe's sample (every
#: STEP64-th high word with a pseudo-random low word; DENSE64 patterns either side of
#: each of EDGES64: the algorithm's thresholds 2^-27, 2^-26, 0.126, 0.85546875,
#: 2.426265, 105414350, infinity, and multiples of pi/2 up to 1e5 pi/2).
FUNCTIONS64 = {"sin": "ksin64", "cos": "kcos64"}
VARIANTS64 = {"fma": "#define KSC_MA(a, b, c) fma(a, b, c)\n",
              "plain": "#define KSC_MA(a, b, c) ((a) * (b) + (c))\n"}
STEP64 = 16411
DENSE64 = 32
EDGES64 = (0x3E40000000000000, 0x3E50000000000000, 0x3FC020C49BA5E354, 0x3FEB600000000000,
           0x400368FD00000000, 0x419921FB00000000, 0x7FF0000000000000, 0x3FF921FB54442D18,
           0x400921FB54442D18, 0x4012D97C7F3321D2, 0x401921FB54442D18, 0x4063A28C59D5433B,
           0x41032CBD0FBA43A7)

_lock = threading.Lock()
_FORMAT = 1     # of the cached verdicts


#: Every declared SIMD function of kiln's headers (``binary_math``'s ``kpow32`` too).
SIMD_FUNCTIONS = ("ksin32", "kcos32", "ktan32", "kpow32", "ksin64", "kcos64")


def keep_loop(lines) -> bool:
    """Whether C statements ``lines`` call one of SIMD_FUNCTIONS."""
    return any(f + "(" in t for t in lines for f in SIMD_FUNCTIONS)


def probe_mismatches(variant: str, flush: bool, step: int = STEP, first: int = 0,
                     dense: int = DENSE, tan: bool = False) -> int:
    """The number of mismatching results (sin and cos apart; tan's alone when ``tan``)
    of ``variant`` against this process's ``sinf``/``cosf``/``tanf`` over the probe's
    sample (``step``, ``first``, ``dense`` as in ``kiln_trig_probe``), denormals
    flushed when ``flush``.

    Raises:
      kiln.compiler.build.build.CompilerNotFound / BuildError: no working C compiler.
    """
    from kiln.compiler.build import build
    lib = build.load_library(VARIANTS[variant] + csrc.source("trig_probe.c"))
    fn = lib.kiln_trig_probe
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint32),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    points = EDGES + DISCRIMINATING
    edges = (ctypes.c_uint32 * len(points))(*points)
    return int(fn(first, step, edges, len(points), dense, int(flush), int(tan)))


def _passes(variant: str, tan: bool) -> bool:
    try:
        return all(probe_mismatches(variant, flush, tan=tan) == 0 for flush in (True, False))
    except Exception:   # no compiler, a failed build: the library calls stay
        return False


def probe64_mismatches(variant: str, flush: bool, step: int = STEP64, first: int = 0,
                       dense: int = DENSE64) -> int:
    """The number of mismatching results (sin and cos apart) of ``ksin64``/``kcos64``
    built as ``variant`` against this process's ``sin``/``cos`` over the probe's sample
    (as ``kiln_trig64_probe``'s arguments), denormals flushed when ``flush``.

    Raises:
      kiln.compiler.build.build.CompilerNotFound / BuildError: no working C compiler (or
      not gcc on x86-64: the header then defines no ksin64 and the link fails).
    """
    from kiln.compiler.build import build
    lib = build.load_library(VARIANTS64[variant] + csrc.source("trig64_probe.c"))
    fn = lib.kiln_trig64_probe
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int]
    edges = (ctypes.c_uint64 * len(EDGES64))(*EDGES64)
    return int(fn(first, step, edges, len(EDGES64), dense, int(flush)))


def _libm_identity() -> str | None:
    """The math library this process loaded (path, inode, size, mtime), or None where
    /proc/self/maps does not name exactly one."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = {ln.split()[-1] for ln in f if "/libm.so" in ln or "/libm-" in ln}
        if len(paths) != 1:
            return None
        path = paths.pop()
        st = os.stat(path)
    except (OSError, IndexError):
        return None
    return f"{path}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _verdict_path(what: str, extra: tuple = ()) -> pathlib.Path | None:
    """Where a probe's verdict is kept across processes: the cache directory's
    ``trig/``, named by a hash of everything the verdict depends on (the math library's
    file, the compiler, its flags, the CPU, the probe's C text and sample; ``extra``: a
    caller's own probe, ``binary_math``'s)."""
    libm = _libm_identity()
    if libm is None:
        return None
    from kiln.compiler.build import build
    parts = [_FORMAT, what, libm, build.compiler_identity(), build.cpu_features(),
             " ".join(build.default_flags()), csrc.source("trig_probe.c"),
             repr((VARIANTS, STEP, DENSE, EDGES, DISCRIMINATING)), *extra]
    key = hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()
    return build.cache_dir() / "trig" / f"{what}-{key[:32]}.json"


def _cached(what: str, compute, extra: tuple = ()):
    """``compute()``'s JSON-able verdict, read from the cache when a file of ours holds
    it (owned by this user, not writable by others), else computed and stored."""
    try:
        path = _verdict_path(what, extra)
    except Exception:     # no compiler, no cache directory: probe every process
        path = None
    if path is not None:
        try:
            st = path.stat()
            if st.st_uid == os.getuid() and not st.st_mode & 0o022:
                return json.loads(path.read_text())["verdict"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    verdict = compute()
    if path is not None:
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"verdict": verdict}, f)
            os.replace(tmp, path)
        except OSError:
            pass
    return verdict


def _forced() -> bool:
    return os.environ.get("KILN_LIBM_TRIG", "").lower() in ("1", "true", "yes")


@functools.cache
def _variant() -> str | None:
    """The variant whose sin/cos match this process's library, or None."""
    if _forced():
        return None
    return _cached("sincos", lambda: next((v for v in VARIANTS if _passes(v, False)), None))


@functools.cache
def _tan() -> bool:
    """Whether ktan32 matches this process's tanf (its kernel has no a * b + c to fuse:
    either build of the header serves)."""
    if _forced():
        return False
    return bool(_cached("tan", lambda: _passes("fma", True)))


@functools.cache
def _variant64() -> str | None:
    """The variant whose float64 sin/cos match this process's library, or None."""
    if _forced():
        return None

    def passes(v):
        try:
            return all(probe64_mismatches(v, flush) == 0 for flush in (True, False))
        except Exception:   # no compiler, a failed build, not gcc on x86-64
            return False
    extra = (csrc.source("trig64_probe.c"), repr((VARIANTS64, STEP64, DENSE64, EDGES64)))
    return _cached("sincos64", lambda: next((v for v in VARIANTS64 if passes(v)), None),
                   extra)


def usable64(name: str) -> bool:
    """Whether generated code may call ``FUNCTIONS64[name]`` for float64 sin/cos (their
    probe runs on the first such question in a process)."""
    with _lock:
        return name in FUNCTIONS64 and _variant64() is not None


def prelude64() -> str:
    """The C text defining ``ksin64``/``kcos64`` as their probe chose."""
    with _lock:
        variant = _variant64()
    return VARIANTS64[variant or "fma"] + csrc.text("libm_sincos64.h")


def chosen_variant64() -> str | None:
    """``"fma"``, ``"plain"`` or None: what the probe decided for float64 sin/cos."""
    with _lock:
        return _variant64()


def usable(name: str) -> bool:
    """Whether generated code may call ``FUNCTIONS[name]``: the probe for sin/cos, or
    for tan, runs on the first such question in a process."""
    with _lock:
        return _tan() if name == "tan" else _variant() is not None


def prelude(sincos: bool = True) -> str:
    """The C text defining ``ksin32``/``kcos32``/``ktan32`` (after ``xla_math.h``, which
    defines ``sel32``), for a program that calls the ones :func:`usable` allowed:
    ``KTRIG_MA`` as the sin/cos probe chose (as for the FMA build when the program
    calls only ``ktan32``, which does not use it: no probe then)."""
    with _lock:
        variant = _variant() if sincos else None
    return VARIANTS[variant or "fma"] + csrc.text("libm_trig.h")


def chosen_variant() -> str | None:
    """``"fma"``, ``"plain"`` or None (the library's functions): what the probe decided
    for sin/cos in this process."""
    with _lock:
        return _variant()
