"""What the lowering and the renderer need to know about BLAS, in one place.

``available()`` says whether generated code may call ``kiln_gemm_f32/f64``;
``declarations()`` is the C text that defines them; ``init(lib)`` hands a loaded
library the BLAS function addresses. All of it comes from ``blas.py``; without a
BLAS, matrix products become fused reductions (slower, still correct).
"""
from __future__ import annotations

import os


def _info():
    if os.environ.get("KILN_DISABLE_BLAS"):
        return None
    try:
        from kiln.compiler.build.blas import blas_info
    except ImportError:
        return None
    try:
        return blas_info()
    except ValueError:      # a bad KILN_BLAS / KILN_BLAS_THREADS setting: say so
        raise
    except Exception:
        return None


def available() -> bool:
    return _info() is not None


def declarations() -> str | None:
    info = _info()
    if info is None:
        return None
    from kiln.compiler.build.blas import c_declarations
    return c_declarations(info)


def init(lib) -> None:
    info = _info()
    if info is None:
        return
    try:
        lib.kiln_blas_init  # noqa: B018 - only libraries with a GEMM define it
    except AttributeError:
        return
    from kiln.compiler.build.blas import init_library
    init_library(lib, info)
