"""Keep NumPy's floating-point warnings inside kiln: JAX computes inf and nan silently.

kiln's NumPy kernels would warn ("overflow encountered in multiply", "divide by zero
encountered in divide", ...). Two mechanisms, chosen by how hot the path is:

* **NumPy's error state**, set to ``ignore`` where kiln hands control to NumPy: around each
  eager primitive's ``impl`` (``EvalTrace.process_primitive``; loop bodies, ``cond`` branches
  and nested calls run inside it), around a program on the reference backend
  (``run_jaxpr``) and around compiled programs with host islands. NumPy 2 keeps that state
  in a context variable, so :func:`enter`/:func:`leave` cost one ``ContextVar.set``/``reset``
  (~0.1 µs, against the ~2 µs of ``np.errstate``). It silences the warning at its source,
  whatever the user's warnings filters are (``pytest -W error``,
  ``warnings.simplefilter("always")``) and whichever module's frame raised it.
* **A warnings filter** that ignores these RuntimeWarnings when raised from a frame in one of
  kiln's own modules. The hottest eager paths (``Array`` operators, ``jnp.sum``/``mean``/
  ``dot``/``where``) call a NumPy ufunc straight from a kiln frame; they rely on the filter
  while it is the first one in ``warnings.filters`` (a check cheaper than setting the state,
  :func:`filter_in_front`) and set the error state otherwise.

User code that kiln calls (``pure_callback``, ``io_callback``, ``debug.callback``) runs under
the user's own error state (:func:`as_user`): its NumPy warnings are the user's.
"""
from __future__ import annotations

import contextvars
import warnings

import numpy as np

warnings.filterwarnings(
    "ignore", message=r"(invalid value|divide by zero|overflow|underflow) encountered",
    category=RuntimeWarning, module=r"kiln(\..*)?$")
FILTER = warnings.filters[0]
NO_FILTER = (None,)     # stands for an empty filter list in ``(filters or NO_FILTER)[0]``


def filter_in_front() -> bool:
    """True while kiln's filter is the first of ``warnings.filters`` (no later filter can
    override it), so warnings raised from kiln's frames are certainly ignored. Hot paths
    inline this test."""
    return (warnings.filters or NO_FILTER)[0] is FILTER


try:  # NumPy >= 2: the ufunc error state is a context variable.
    from numpy._core.umath import _extobj_contextvar as _state
    from numpy._core.umath import _make_extobj

    IGNORE = _make_extobj(all="ignore")
    enter = _state.set          # enter(IGNORE) -> token
    leave = _state.reset        # leave(token)
    _current = _state.get

    def _is_quiet(state) -> bool:
        return state is IGNORE
except ImportError:  # pragma: no cover - NumPy 1.x: a per-thread state set by np.seterr
    IGNORE = {"divide": "ignore", "over": "ignore", "under": "ignore", "invalid": "ignore"}

    def enter(state):  # type: ignore[misc]
        return np.seterr(**state)

    def leave(token):  # type: ignore[misc]
        np.seterr(**token)

    _current = np.geterr

    def _is_quiet(state) -> bool:
        return state == IGNORE

# The error state the user had when kiln entered a quiet region (for callbacks).
_user_state: contextvars.ContextVar = contextvars.ContextVar("kiln_user_fp_state")
_import_state = _current()


def call_quietly(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with NumPy's floating-point warnings off."""
    tok = enter(IGNORE)
    try:
        return fn(*args, **kwargs)
    finally:
        leave(tok)


class quiet:
    """``with quiet():`` runs a region of kiln with NumPy's floating-point warnings off and
    remembers the user's error state for the callbacks inside it. For coarse regions (a
    program, a host island); per-operation paths use :func:`enter`/:func:`leave`."""

    __slots__ = ("_tok", "_utok")

    def __enter__(self):
        old = _current()
        self._utok = None if _is_quiet(old) else _user_state.set(old)
        self._tok = enter(IGNORE)
        return self

    def __exit__(self, *exc):
        leave(self._tok)
        if self._utok is not None:
            _user_state.reset(self._utok)
        return False


def as_user(fn, *args, **kwargs):
    """Call user code ``fn`` from inside a quiet region under the user's error state (the
    state when kiln's outermost quiet region was entered; for a callback bound eagerly, the
    state NumPy had when kiln was imported)."""
    if not _is_quiet(_current()):
        return fn(*args, **kwargs)
    tok = enter(_user_state.get(_import_state))
    try:
        return fn(*args, **kwargs)
    finally:
        leave(tok)
