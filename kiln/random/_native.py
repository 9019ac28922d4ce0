"""Optional native kernels for kiln.random, built with the system C compiler.

Two small C functions, compiled once per (source, compiler, flags, CPU) and cached
on disk (``$KILN_CACHE_DIR`` or ``~/.cache/kiln``), loaded with ``ctypes``:

* ``threefry2x32``: the Threefry-2x32 hash, vectorized by the C compiler. The
  NumPy implementation in ``_threefry`` computes the same bits; this one is faster.
* ``rsqrt_f32``: XLA's CPU float32 reciprocal square root: the processor's
  ``rsqrtps`` estimate refined by one Newton step
  ``fma(e * 0.5, fma(-(x * e), e, 1), e)``. Its last bit depends on the processor,
  which is why it needs the instruction itself (x86 only); elsewhere the
  correctly rounded ``1 / sqrt(x)`` is used.

Everything here is optional: with no compiler, ``KILN_DISABLE_NATIVE=1``, or a failed
build, ``lib()`` returns None (once, with a warning) and callers use NumPy.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
import warnings

import numpy as np

_SOURCE = r"""
#include <stdint.h>
#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_HAVE_RSQRTPS 1
#endif

static inline uint32_t rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

#define ROUND(a, b, r) do { a += b; b = rotl(b, r); b ^= a; } while (0)

static inline void tf(uint32_t a, uint32_t b, uint32_t v0, uint32_t v1,
                      uint32_t *o0, uint32_t *o1) {
  uint32_t c = a ^ b ^ 0x1BD11BDAu;
  v0 += a; v1 += b;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += b; v1 += c + 1u;
  ROUND(v0, v1, 17); ROUND(v0, v1, 29); ROUND(v0, v1, 16); ROUND(v0, v1, 24);
  v0 += c; v1 += a + 2u;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += a; v1 += b + 3u;
  ROUND(v0, v1, 17); ROUND(v0, v1, 29); ROUND(v0, v1, 16); ROUND(v0, v1, 24);
  v0 += b; v1 += c + 4u;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += c; v1 += a + 5u;
  *o0 = v0; *o1 = v1;
}

/* Threefry-2x32 (20 rounds) of n contiguous counter pairs. Keys are scalars when
   kstride == 0, else contiguous per element. */
void kiln_threefry2x32(const uint32_t *k0, const uint32_t *k1, int64_t kstride,
                       const uint32_t *x0, const uint32_t *x1,
                       uint32_t *y0, uint32_t *y1, int64_t n) {
  if (kstride == 0) {
    const uint32_t a = k0[0], b = k1[0];
    for (int64_t i = 0; i < n; i++) tf(a, b, x0[i], x1[i], y0 + i, y1 + i);
  } else {
    for (int64_t i = 0; i < n; i++) tf(k0[i], k1[i], x0[i], x1[i], y0 + i, y1 + i);
  }
}

int kiln_have_rsqrtps(void) {
#ifdef KILN_HAVE_RSQRTPS
  return 1;
#else
  return 0;
#endif
}

void kiln_rsqrt_f32(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
#ifdef KILN_HAVE_RSQRTPS
    float e = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x[i])));
    float r = fmaf(-(x[i] * e), e, 1.0f);
    y[i] = fmaf(e * 0.5f, r, e);
#else
    y[i] = 1.0f / sqrtf(x[i]);
#endif
  }
}
"""

_lock = threading.Lock()
_state: dict = {}


def _cache_dir() -> str:
    d = os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "kiln")
    return os.path.join(d, "random")


def _cpu_id() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
        return "\n".join(lines[:2])
    except OSError:
        return platform.processor()


def _build():
    if os.environ.get("KILN_DISABLE_NATIVE", "").lower() in ("1", "true", "yes"):
        return None
    cc = os.environ.get("CC", "cc")
    flags = ["-O3", "-fPIC", "-shared", "-ffp-contract=off"]
    if platform.machine() in ("x86_64", "AMD64", "i686", "i386"):
        flags += ["-mavx2", "-mfma"] if "avx2" in _cpu_id() and " fma" in _cpu_id() else []
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    key = hashlib.sha256("\0".join([_SOURCE, cc, version, " ".join(flags), _cpu_id(),
                                    platform.machine()]).encode()).hexdigest()[:20]
    path = os.path.join(_cache_dir(), f"kiln_random_{key}.so")
    if not os.path.exists(path):
        os.makedirs(_cache_dir(), exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "kiln_random.c")
            with open(src, "w") as fh:
                fh.write(_SOURCE)
            out = os.path.join(tmp, "kiln_random.so")
            proc = subprocess.run([cc, *flags, src, "-o", out, "-lm"], capture_output=True,
                                  text=True, timeout=120)
            if proc.returncode != 0:
                warnings.warn("kiln.random: building the native kernels failed; using the "
                              f"NumPy implementations.\n{proc.stderr[-2000:]}",
                              RuntimeWarning, stacklevel=3)
                return None
            tmp_final = path + f".{os.getpid()}.tmp"
            os.replace(out, tmp_final)
            os.replace(tmp_final, path)
    lib = ctypes.CDLL(path)
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    lib.kiln_threefry2x32.argtypes = [p, p, i64, p, p, p, p, i64]
    lib.kiln_threefry2x32.restype = None
    lib.kiln_rsqrt_f32.argtypes = [p, p, i64]
    lib.kiln_rsqrt_f32.restype = None
    lib.kiln_have_rsqrtps.restype = ctypes.c_int
    return lib


def lib():
    """The loaded native library, or None."""
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


def rsqrt_f32(x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    lib().kiln_rsqrt_f32(_ptr(x), _ptr(y), x.size)
    return y


def has_rsqrt_estimate() -> bool:
    lb = lib()
    return lb is not None and bool(lb.kiln_have_rsqrtps())
