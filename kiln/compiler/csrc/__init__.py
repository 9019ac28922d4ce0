"""kiln's hand-written C, kept in the ``.c``/``.h`` files of this package (package data).

What it holds: :func:`text` (a file's exact text) and :func:`source` (a file with its
quoted ``#include "x.h"`` lines replaced by those files' text), both read once per
process through ``importlib.resources`` (so they are found wherever kiln is installed).

The files, and who uses them:

* Preludes of every generated program (``kiln.compiler.render.render_c``): ``prelude.h``
  (includes, index and min/max helpers), ``int_helpers.h`` (XLA's integer division,
  remainder and shifts per integer type), ``stream.h`` (non-temporal stores),
  ``steal.h`` (work stealing over the blocks of parallel float sums),
  ``blas_program.h`` (the GEMM function pointers; ``blas.DEFINITIONS_MARK`` splits it).
* Included by generated code when it uses them (``kiln.compiler.lower.random``):
  ``threefry.h``/``threefry_ops.h`` (the Threefry-2x32 hash), ``xla_math.h`` (XLA's CPU
  float formulas), ``xla_asin_acos32.h`` (its float32 asin/acos, apart because they call
  atan2 through a macro a program may define after the precompiled part),
  ``xla_logistic.h``, ``fast_exp.h`` (``fexp32``,
  ``kiln.compiler.render.fast_math``), ``libm_trig.h`` (``ksin32``/``kcos32``/``ktan32``,
  the C library's float32 sin/cos/tan vectorized, ``kiln.compiler.render.trig_math``), ``libm_pow.h``/``libm_atan2.h`` (``kpow32``/
  ``katan2_32``, the C library's float32 pow/atan2 vectorized,
  ``kiln.compiler.render.binary_math``), ``libm_sincos64.h`` (``ksin64``/``kcos64``,
  float64 sin/cos, ``kiln.compiler.render.trig_math``).
* Libraries built once per machine by ``kiln.compiler.build.build``: ``runtime.c`` (the
  ``kiln_rt`` extension), ``dlpack.c`` (the ``kiln_dlpack`` extension: bfloat16 DLPack
  capsules, ``kiln._dlpack_capsules``), ``blas_glue.c`` (the row-major GEMM wrappers), ``kiln_random.c``
  (kiln.random's and eager math's kernels), ``spmd.c`` (the device threads' barrier and
  all-reduce), ``probe.c`` (the flag probe), ``trig_probe.c`` (``libm_trig.h`` against
  the host's ``sinf``/``cosf``/``tanf``, ``kiln.compiler.render.trig_math``),
  ``binary_probe.c`` (``libm_pow.h``/``libm_atan2.h`` against the host's ``powf``/
  ``atan2f``, ``kiln.compiler.render.binary_math``), ``trig64_probe.c``
  (``libm_sincos64.h`` against the host's ``sin``/``cos``).

The text of a prelude goes into generated programs verbatim (byte for byte what the
renderer printed when it held these as Python strings), so the preludes carry no file
header: any change to one changes every program's source, and so its cache key
(everything rebuilds once). The libraries' files start with a comment saying what they
are.

What it must not hold: C generated per program (``render_c.py`` and friends), building.
"""
from __future__ import annotations

import functools
import importlib.resources
import re

__all__ = ["cpu_defines", "cpu_vendor", "source", "text"]

_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_.]+)"\n', re.MULTILINE)


@functools.cache
def text(name: str) -> str:
    """The exact text of the C file ``name`` of this package (read once per process).

    Raises:
      FileNotFoundError: when there is no such file (a broken installation).
    """
    return importlib.resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def source(name: str) -> str:
    """The C file ``name`` with each line ``#include "x.h"`` replaced by ``x.h``'s own
    :func:`source`: one self-contained text, so a build's cache key (a hash of the
    source) changes when any file it includes changes."""
    return _INCLUDE.sub(lambda m: source(m.group(1)), text(name))


@functools.cache
def cpu_vendor() -> str:
    """The processor's vendor string (``/proc/cpuinfo``'s ``vendor_id``: "GenuineIntel",
    "AuthenticAMD", ...), "" when unknown. Read once per process."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@functools.cache
def cpu_defines() -> str:
    """``#define`` lines for what XLA's CPU code decides by the processor's vendor, put
    before ``xla_math.h`` wherever it is compiled (programs and ``kiln_random.c``).

    ``KILN_RSQRT_STEPS32``: XLA's float32 rsqrt refines the hardware estimate
    (``rsqrtps``) with one Newton-Raphson step on AMD processors (whose estimate is more
    accurate) and two elsewhere; JAX's bits differ accordingly (checked against JAX
    0.10.2 on an Intel Xeon with AVX-512 and an AMD EPYC: each matches only its count).
    Unknown vendors get XLA's default, two steps.
    """
    steps = 1 if cpu_vendor() == "AuthenticAMD" else 2
    return f"#define KILN_RSQRT_STEPS32 {steps}\n"
