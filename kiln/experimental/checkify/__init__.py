"""``kiln.experimental.checkify`` (``jax.experimental.checkify``): functional run-time checks.

``checkify(f, errors=...)`` returns a function that gives ``(error, out)``: the ``Error``
value says whether a :func:`check` failed, or (with ``nan_checks``, ``div_checks``,
``index_checks``, ...) whether an operation produced a NaN, divided by zero or indexed out
of bounds. It works under ``jit``, ``vmap`` and ``grad`` and inside ``cond``,
``while_loop`` and ``scan``; see ``docs/debugging.md``.
"""
from kiln.experimental.checkify._core import (
    all_checks,
    automatic_checks,
    check,
    check_error,
    checkify,
    debug_check,
    div_checks,
    float_checks,
    index_checks,
    nan_checks,
    user_checks,
)
from kiln.experimental.checkify._errors import (
    Error,
    ErrorCategory,
    JaxRuntimeError,
    init_error,
)

__all__ = [
    "Error",
    "ErrorCategory",
    "JaxRuntimeError",
    "all_checks",
    "automatic_checks",
    "check",
    "check_error",
    "checkify",
    "debug_check",
    "div_checks",
    "float_checks",
    "index_checks",
    "init_error",
    "nan_checks",
    "user_checks",
]
