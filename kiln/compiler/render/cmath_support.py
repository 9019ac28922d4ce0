"""The vectorizable math library for generated code, if present (``cmath.py``).

``math()`` returns ``(C source, {primitive: (f32 function, f64 function)})``, or
``(None, {})`` when ``KILN_LIBM=1`` asks for the C library's functions instead.
"""
from __future__ import annotations

import os


def math() -> tuple[str | None, dict]:
    if os.environ.get("KILN_LIBM"):
        return None, {}
    try:
        from kiln.compiler.render.cmath import FUNCTIONS, MATH_SOURCE
    except ImportError:
        return None, {}
    return MATH_SOURCE, dict(FUNCTIONS)
