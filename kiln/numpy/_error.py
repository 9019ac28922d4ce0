"""``jax.numpy``'s runtime error checks (JAX's ``jax._src.numpy.error``), built on
:mod:`kiln._error_check`.

Three config flags, each ``"ignore"`` (the default) or ``"raise"``, switch on checks
inside ``jax.numpy`` functions:

* ``jax_error_checking_behavior_nan``: the result of ``add``, ``subtract``, ``true_divide``,
  ``power``, ``float_power``, ``remainder``, ``fmod``, ``sqrt``, ``log``/``log1p``/``log2``/
  ``log10``, ``sin``/``cos``/``tan``, ``arcsin``/``arccos``/``arccosh``/``arctanh`` (and the
  intermediate sums of float ``divmod``/``floor_divide``) holds a NaN;
* ``jax_error_checking_behavior_divide``: the divisor of ``true_divide``,
  ``floor_divide``, ``divmod`` or ``remainder`` has a zero;
* ``jax_error_checking_behavior_oob``: an integer-array index of ``x[idx]`` is out of
  bounds.

A check that fires sets the error state (``set_error_if``); ``raise_if_error()`` raises
it afterwards. :class:`error_checking_behavior` sets the flags for a block. The flags are
part of ``jit``'s tracing context (``kiln._compile_log.CONTEXT_FLAGS``: a trace made with
checks is not reused without them), and
while any is ``"raise"`` the eager operator fast paths (which bypass these functions) are
off.
"""
from __future__ import annotations

import contextlib
from typing import Literal

import numpy as np

from kiln import dtypes, lax
from kiln._error_check import set_error_if
from kiln.array import Array
from kiln.config import config, config_context
from kiln.core.trace import Tracer, get_aval

Category = Literal["nan", "divide", "oob"]
Behavior = Literal["ignore", "raise"]

_FLAG = {"nan": "jax_error_checking_behavior_nan",
         "divide": "jax_error_checking_behavior_divide",
         "oob": "jax_error_checking_behavior_oob"}

def any_raise() -> bool:
    """Whether some thread has one of the three flags at ``"raise"``."""
    return any(v == "raise" for name in _FLAG.values() for v in config.values_in_use(name))


def _is_category_disabled(category: Category | None) -> bool:
    """Whether the checks of ``category`` are off (``None``: never)."""
    if category is None:
        return False
    if category == "nan":
        raise ValueError("nan is deprecated. Use `_set_error_if_nan` instead.")
    if category == "divide":
        raise ValueError("divide is deprecated. Use `_set_error_if_divide_by_zero` instead.")
    if category == "oob":
        return config.jax_error_checking_behavior_oob == "ignore"
    raise ValueError(f"Invalid category: {category}")


def _set_error_if_with_category(pred, /, msg: str, category: Category | None = None) -> None:
    """``set_error_if(pred, msg)`` unless the checks of ``category`` are off.

    Args:
      pred: a boolean array; the error is set if any element is True.
      msg: the error message.
      category: ``"oob"`` (gated by ``jax_error_checking_behavior_oob``) or None (always).
    """
    if _is_category_disabled(category):
        return
    set_error_if(pred, msg)


def _set_error_if_nan(x, /) -> None:
    """Set the error state if a floating-point ``x`` has a NaN (when
    ``jax_error_checking_behavior_nan`` is ``"raise"``)."""
    if config.jax_error_checking_behavior_nan == "ignore":
        return
    dt = get_aval(x).dtype
    if not dtypes.issubdtype(dt, np.floating):
        return
    set_error_if(lax.ne(x, x), "NaN encountered")


def _set_error_if_divide_by_zero(x, /) -> None:
    """Set the error state if the divisor ``x`` has a zero (when
    ``jax_error_checking_behavior_divide`` is ``"raise"``)."""
    if config.jax_error_checking_behavior_divide == "ignore":
        return
    if not isinstance(x, (Array, Tracer)):
        x = np.asarray(x)
    aval = get_aval(x)
    zero = lax.full(aval.shape, 0, aval.dtype)
    set_error_if(lax.eq(x, zero), "Division by zero encountered")


def _check_precondition_oob_gather(shape: tuple, indices: list, normalize: bool = True) -> None:
    """Set the error state if an index is out of bounds before a gather (when
    ``jax_error_checking_behavior_oob`` is ``"raise"``).

    Args:
      shape: the sizes of the indexed axes.
      indices: one integer index (an array or scalar) per entry of ``shape``.
      normalize: whether negative indices count from the end: an index ``i`` into an axis
        of size ``n`` is in bounds when ``-n <= i < n`` (else ``0 <= i < n``).
    """
    if config.jax_error_checking_behavior_oob == "ignore":
        return
    pred = None
    for n, idx in zip(shape, indices):
        if not isinstance(idx, (Array, Tracer)):
            idx = np.asarray(idx)
        aval = get_aval(idx)
        if aval.size == 0:
            continue
        info = np.iinfo(aval.dtype)
        lo = -n if normalize else 0
        checks = []
        if lo > info.min:         # (an index of this dtype can be below ``lo``)
            checks.append(lax.lt(idx, lax.full(aval.shape, lo, aval.dtype)))
        if n <= info.max:         # (... or at least ``n``)
            checks.append(lax.ge(idx, lax.full(aval.shape, n, aval.dtype)))
        for c in checks:
            p = lax.reduce_or(c, tuple(range(aval.ndim)))
            pred = p if pred is None else lax.bitwise_or(pred, p)
    if pred is not None:
        set_error_if(pred, "Out of bounds encountered before calling `lax.gather`")


class error_checking_behavior:
    """A context manager to set the error checking behavior.

    ``"ignore"`` turns the checks off; with ``"raise"`` errors are detected and recorded
    but no exception is raised at once: call ``raise_if_error()`` at the end of the
    computation. A category given with ``all`` overrides ``all`` for that category.

    Args:
      all: the behavior of every category.
      nan: for NaN results.
      divide: for division by zero.
      oob: for out-of-bounds indices.
    """

    def __init__(self, *, all: Behavior | None = None, nan: Behavior | None = None,  # noqa: A002
                 divide: Behavior | None = None, oob: Behavior | None = None) -> None:
        settings: dict[str, str] = {}
        if all is not None:
            settings = dict.fromkeys(_FLAG, all)
        for key, value in (("nan", nan), ("divide", divide), ("oob", oob)):
            if value is not None:
                settings[key] = value
        self.new_settings = settings
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> error_checking_behavior:
        for key, value in self.new_settings.items():
            self.stack.enter_context(config_context(**{_FLAG[key]: value}))
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        self.stack.close()
