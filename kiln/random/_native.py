"""Optional native kernels for kiln.random, built with the system C compiler.

Small C functions (``kiln/compiler/csrc/kiln_random.c``), built by
``kiln.compiler.build.build`` with its flags and cached on disk in its checked cache
(``cache_dir()/so``: ``$KILN_CACHE_DIR``, ``$XDG_CACHE_HOME/kiln`` or ``~/.cache/kiln``)
once per (source, compiler, flags, CPU), loaded with ``ctypes``:

* ``threefry2x32``: the Threefry-2x32 hash, vectorized by the C compiler. The
  NumPy implementation in ``_threefry`` computes the same bits; this one is faster.
* ``rsqrt_f32`` / ``rsqrt_f64``: XLA's CPU reciprocal square root: the processor's
  estimate (``rsqrtss``; AVX-512's ``rsqrt14`` for float64) refined by Newton
  steps ``r = fma(r * -0.5, fma(x * r, r, -1), r)``. Its last bit depends on the
  processor, which is why it needs the instruction itself (x86 only); elsewhere the
  correctly rounded ``1 / sqrt(x)`` is used.

Everything here is optional: with no compiler, ``KILN_DISABLE_NATIVE=1``, or a failed
build, ``lib()`` returns None (once, with a warning) and callers use NumPy.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading
import warnings

import numpy as np


def __getattr__(name: str) -> str:
    # The C text, read on first use from kiln/compiler/csrc (``import kiln`` imports this
    # module and need not read files): THREEFRY_C (the Threefry-2x32 block function),
    # XLA_MATH_C (XLA's CPU float math; needs <stdint.h> and <math.h> first), _SOURCE
    # (the whole library, kiln_random.c with both included).
    files = {"THREEFRY_C": "threefry.h", "XLA_MATH_C": "xla_math.h",
             "_SOURCE": "kiln_random.c"}
    if name in files:
        from kiln.compiler import csrc
        return csrc.source(files[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


UNARY_FUNCS = ("kiln_log_f32", "kiln_log1p_f32", "kiln_exp_f32", "kiln_erf_inv_f32",
               "kiln_erf_f32", "kiln_log1p_f64", "kiln_exp_f64", "kiln_erf_inv_f64",
               "kiln_log_f64", "kiln_tan_f32", "kiln_tan_f64")

#: The eager-math ops with JAX's bits (``kiln_eager_<op>_<f32|f64>``, x -> y, n).
EAGER_UNARY = ("exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "logistic", "erf",
               "erfc", "erf_inv", "lgamma", "digamma", "bessel_i0e", "bessel_i1e",
               "cbrt", "rsqrt", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
               "atanh")
EAGER_BINARY = ("pow", "atan2", "rem", "zeta", "polygamma", "polygammas",
                "igamma", "igammac", "igamma_grad_a", "random_gamma_grad")
#: The complex ops with JAX's bits (``kiln_eager_c<op>_<f32|f64>`` over interleaved
#: complex64/complex128 parts, ``xla_complex.h``): z -> w, n (``cabs``: z -> |z|).
COMPLEX_UNARY = ("cexp", "clog", "csqrt", "cexpm1", "clog1p", "ctanh", "ctan", "csin", "ccos",
                 "csinh", "ccosh", "clogistic", "csign", "casin", "cacos", "catan", "casinh",
                 "cacosh", "catanh", "cabs")
#: ... and a, b -> w (``cmul``, ``cdiv``), and ``cipow`` (z -> w, n, k).
COMPLEX_BINARY = ("cmul", "cdiv")

_lock = threading.Lock()
_state: dict = {}

#: Splits kiln_random.c into the text every piece shares and kiln.random's part.
PART_MARK = "/* @kiln-part */"
# One eager kernel: a macro line (two for betainc) naming kiln_eager_<op>_<f32|f64>.
_EAGER_LINE = re.compile(r"^(?:EAGER1|EAGER2|EAGER_ATAN|EAGER_SCALAR_TAIL|EAGER_IPOW|"
                         r"KILN_BETAINC|CEAGER1|CEAGER_ABS|CEAGER2|CEAGER_IPOW|"
                         r"CEAGER_PASS)\(kiln_eager_([a-z0-9_]+?)_(f32|f64),[^)]*\)",
                         re.M)


def _pieces() -> tuple[str, str, dict]:
    """(shared text, kiln.random's part, {(op, width): that eager kernel's macro line})."""
    if "pieces" not in _state:
        from kiln.compiler import csrc
        common, rest = csrc.source("kiln_random.c").split(PART_MARK)
        lines = {(m.group(1), m.group(2)): m.group(0) for m in _EAGER_LINE.finditer(rest)}
        _state["pieces"] = (common, _EAGER_LINE.sub("", rest), lines)
    return _state["pieces"]


def _load(body: str, name: str):
    """Build (or load from the disk cache) the shared text plus ``body`` as library
    ``name``; None without a compiler or when it fails (with a warning)."""
    if os.environ.get("KILN_DISABLE_NATIVE", "").lower() in ("1", "true", "yes"):
        return None
    # Imported here, on the first use of the kernels: ``import kiln`` need not pay for them.
    from kiln.compiler import csrc
    from kiln.compiler.build import build
    # Built and cached by kiln's compiler (kiln.compiler.build.build) like every other library:
    # its flags, its checked cache (owner and mode of every directory and file, hash of
    # what it loads), its timeout. A fault of the machine (no compiler, a failing one, an
    # unusable cache) means the NumPy implementations.
    common, _, _ = _pieces()
    try:
        return build.load_library(csrc.cpu_defines() + common + body, name=name)
    except (build.CompilerNotFound, build.BuildCancelled):   # (exiting: a background build)
        return None
    except (build.BuildError, OSError) as e:
        warnings.warn("kiln.random: building the native kernels failed; using the NumPy "
                      f"implementations.\n{str(e)[-2000:]}", RuntimeWarning, stacklevel=4)
        return None


def _declare_common(lib) -> None:
    lib.kiln_array_data.argtypes = [ctypes.c_void_p]
    lib.kiln_array_data.restype = ctypes.c_void_p
    lib.kiln_set_data_offset.argtypes = [ctypes.c_int64]
    lib.kiln_set_data_offset.restype = None


def _build():
    """kiln.random's kernels (Threefry, its float formulas, rsqrt, pow, fma)."""
    lib = _load(_pieces()[1], "kiln_random")
    if lib is None:
        return None
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    _declare_common(lib)
    lib.kiln_threefry2x32.argtypes = [p, p, i64, p, p, p, p, i64]
    lib.kiln_threefry2x32.restype = None
    lib.kiln_rsqrt_f32.argtypes = [p, p, i64]
    lib.kiln_rsqrt_f32.restype = None
    lib.kiln_have_rsqrtps.restype = ctypes.c_int
    lib.kiln_rsqrt_f64.argtypes = [p, p, i64]
    lib.kiln_rsqrt_f64.restype = None
    lib.kiln_have_rsqrt14.restype = ctypes.c_int
    for name in UNARY_FUNCS:
        fn = getattr(lib, name)
        fn.argtypes = [p, p, i64]
        fn.restype = None
    for name in ("kiln_pow_f32", "kiln_pow_f64"):
        fn = getattr(lib, name)
        fn.argtypes = [p, i64, p, i64, p, i64]
        fn.restype = None
    for name in ("kiln_fma_f32", "kiln_fma_f64"):
        fn = getattr(lib, name)
        fn.argtypes = [p, i64, p, i64, p, i64, p, i64]
        fn.restype = None
    return lib


def _build_eager(op: str, width: str):
    """The eager-math kernel of ``op`` on ``width`` (``kiln_eager_<op>_<width>[_obj]``)."""
    line = _pieces()[2].get((op, width))
    if line is None:
        return None
    lib = _load(line + "\n", f"kiln_eager_{op}_{width}")
    if lib is None:
        return None
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    _declare_common(lib)
    if op == "betainc":        # a whole-array kernel (a, b, x -> y, n)
        fn = getattr(lib, f"kiln_eager_betainc_{width}")
        fn.argtypes, fn.restype = [p, p, p, p, i64], None
        return lib
    for sfx in ("", "_obj"):
        fn = getattr(lib, f"kiln_eager_{op}_{width}{sfx}")
        fn.restype = None
        if op in ("ipow", "cipow"):
            fn.argtypes = [p, p, i64, i64]
        elif op in EAGER_BINARY or op in COMPLEX_BINARY:
            fn.argtypes = [p, i64, p, i64, p, i64]
        else:
            fn.argtypes = [p, p, i64]
    return lib


def eager_lib(op: str, width: str):
    """The loaded library holding ``op``'s eager-math kernel for ``width`` (``"f32"`` or
    ``"f64"``; built on first use), or None (no compiler, a failed build, no such
    kernel)."""
    key = ("eager", op, width)
    if key not in _state:
        with _lock:
            if key not in _state:
                try:
                    _state[key] = _build_eager(op, width)
                except Exception as e:  # any failure: fall back to NumPy
                    warnings.warn(f"kiln: native eager math unavailable ({e}); using NumPy.",
                                  RuntimeWarning, stacklevel=2)
                    _state[key] = None
    return _state[key]


#: What :func:`eager_lib_later` returns while the library is being built.
PENDING = object()
_later_lock = threading.Lock()
_later: set = set()



def eager_lib_later(op: str, width: str):
    """:func:`eager_lib` if that library is loaded already; else :data:`PENDING`, having
    started its build (or its load from the disk cache) on a background thread, once.
    For callers that must not wait for a compiler (the reference tier of a tiered
    ``jit`` while its program builds: it uses the NumPy implementation meanwhile)."""
    key = ("eager", op, width)
    if key in _state:
        return _state[key]
    with _later_lock:
        if key not in _later:
            _later.add(key)
            # Not a daemon: at exit the interpreter joins it after kiln's exit hook has
            # cancelled its compiler, so the build's temporary directory is removed (a
            # daemon thread would just stop, leaving it in the cache).
            threading.Thread(target=eager_lib, args=(op, width), daemon=False,
                             name=f"kiln-eager-{op}-{width}").start()
    return PENDING


def lib():
    """The loaded native library of kiln.random (part 0), or None."""
    if "lib" not in _state:
        with _lock:
            if "lib" not in _state:
                try:
                    _state["lib"] = _build()
                except Exception as e:  # any failure: fall back to NumPy
                    warnings.warn(f"kiln.random: native kernels unavailable ({e}); using "
                                  "NumPy.", RuntimeWarning, stacklevel=2)
                    _state["lib"] = None
    return _state["lib"]


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def threefry2x32(k0, k1, x0, x1, y0, y1):
    """Hash contiguous uint32 ``x0``/``x1`` (length n) into ``y0``/``y1``. Keys are 0-d
    or contiguous of length n. Releases the GIL while it runs."""
    n = y0.size
    ks = 0 if k0.ndim == 0 else 1
    lib().kiln_threefry2x32(_ptr(k0), _ptr(k1), ks, _ptr(x0), _ptr(x1), _ptr(y0), _ptr(y1), n)


_CHUNK = 1 << 16


def _spans(n):
    from kiln.random._threefry import _THREADS
    k = _THREADS if n >= 4 * _CHUNK else 1
    step = -(-n // k)
    return [(s, min(s + step, n)) for s in range(0, n, step)] if n else []


def _parallel(fn, n):
    spans = _spans(n)
    if len(spans) <= 1:
        for s, e in spans:
            fn(s, e)
        return
    from kiln.random._threefry import _get_pool
    list(_get_pool().map(lambda se: fn(*se), spans))


def unary(name, x):
    """Apply the native elementwise function ``name`` (float32 or float64) to ``x``."""
    f = getattr(lib(), name)
    dt = np.float64 if name.endswith("f64") else np.float32
    x = np.ascontiguousarray(x, dt)
    flat = x.reshape(-1)
    y = np.empty_like(flat)
    isz = flat.itemsize

    def run(s, e):
        f(ctypes.c_void_p(flat.ctypes.data + s * isz), ctypes.c_void_p(y.ctypes.data + s * isz),
          e - s)
    _parallel(run, flat.size)
    return y.reshape(x.shape)


def fma(a, b, c, dt):
    """Exact ``a * b + c`` (float32 or float64 ``dt``), operands broadcast."""
    dt = np.dtype(dt)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    n = int(np.prod(shape, dtype=np.int64))
    ops = []
    for v in (a, b, c):
        v = np.asarray(v, dt)
        if v.size == 1:
            ops.append((np.ascontiguousarray(v.reshape(1)), 0))
        else:
            ops.append((np.ascontiguousarray(np.broadcast_to(v, shape)).reshape(-1), 1))
    y = np.empty(n, dt)
    f = lib().kiln_fma_f64 if dt == np.float64 else lib().kiln_fma_f32
    isz = dt.itemsize

    def run(s, e):
        args = []
        for o, st in ops:
            args += [ctypes.c_void_p(o.ctypes.data + s * isz * st), st]
        f(*args, ctypes.c_void_p(y.ctypes.data + s * isz), e - s)
    _parallel(run, n)
    return y.reshape(shape)


def power(a, b, dt):
    """The C library's ``pow(a, b)`` (float32 or float64 ``dt``), operands broadcast."""
    dt = np.dtype(dt)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    n = int(np.prod(shape, dtype=np.int64))
    ops = []
    for v in (a, b):
        v = np.asarray(v, dt)
        if v.size == 1:
            ops.append((np.ascontiguousarray(v.reshape(1)), 0))
        else:
            ops.append((np.ascontiguousarray(np.broadcast_to(v, shape)).reshape(-1), 1))
    y = np.empty(n, dt)
    f = lib().kiln_pow_f64 if dt == np.float64 else lib().kiln_pow_f32
    isz = dt.itemsize

    def run(s, e):
        args = []
        for o, st in ops:
            args += [ctypes.c_void_p(o.ctypes.data + s * isz * st), st]
        f(*args, ctypes.c_void_p(y.ctypes.data + s * isz), e - s)
    _parallel(run, n)
    return y.reshape(shape)


def rsqrt_f32(x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    lib().kiln_rsqrt_f32(_ptr(x), _ptr(y), x.size)
    return y


def rsqrt_f64(x):
    x = np.ascontiguousarray(x, np.float64)
    y = np.empty_like(x)
    lib().kiln_rsqrt_f64(_ptr(x), _ptr(y), x.size)
    return y


def has_rsqrt14() -> bool:
    """Whether XLA's float64 rsqrt (AVX-512's ``rsqrt14`` estimate) can be reproduced."""
    lb = lib()
    return lb is not None and bool(lb.kiln_have_rsqrt14())


def has_rsqrt_estimate() -> bool:
    lb = lib()
    return lb is not None and bool(lb.kiln_have_rsqrtps())


def _install() -> None:
    """lax's eager XLA-math impls run this module's kernels (lax sits below kiln.random)."""
    import sys

    from kiln.lax._xla_eager import set_native
    set_native(sys.modules[__name__])


_install()
