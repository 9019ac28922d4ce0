"""Runtime error checks that do not stop the program: JAX's ``jax._src.error_check``.

``set_error_if(pred, msg)`` records ``msg`` (and where it was called) when it is traced,
and at run time sets a global *error code* when any element of ``pred`` is True; the
program goes on. ``raise_if_error()``, called afterwards outside any transformation,
raises :class:`JaxValueError` with the first recorded message whose check fired, then
clears the code.

How it works: the error code is a ``uint32`` held in a mutable array reference
(:func:`kiln.new_ref`, one per thread; ``0xFFFFFFFF`` means "no error"). Each call of
``set_error_if`` reads the ref and writes ``where(code == NO_ERROR & any(pred), k, code)``,
``k`` being the message's index in a global list. Everything else is kiln's reference
machinery: eagerly that is an immediate update; under ``jit`` the closed-over ref becomes
an operand of the program and the update is part of it; in ``cond``/``while_loop``/``scan``
bodies the ref is threaded through as any closed-over ref. Under ``vmap`` the predicate is
reduced over the batch too (:func:`_any_element`, a ``custom_vmap`` function), so the
unbatched error code stays unbatched: the check fires when any batch element fails (JAX
0.10.2 raises "Move the array reference to be an argument to the vmapped function?"
there).

Within a ``set_mesh`` context, :class:`error_checking_context` makes an error state for
the mesh: one code per device (an array of the mesh's shape), as JAX's. kiln sets every
device's code when the check fires on any of them (JAX sets each device's code from its
own shard of ``pred``): ``raise_if_error`` reports the first error either way, and the
codes are read in one process, so no communication is saved by per-device codes. As in
JAX, a predicate typed on another mesh is a ``ValueError`` and one on a mesh with
automatic axes gives a ``RuntimeWarning`` (JAX's reduction communicates between devices
there).

``wrap_for_export``/``unwrap_from_import`` make the error state a value (an
:class:`_ErrorClass` output, with the messages as metadata) so that a function can carry
its checks across a process boundary (``jax.export``; kiln has no serialized export, but
the two wrappers compose as in JAX).

The traceback kept for each message is a lightweight copy of the user's frames (file,
function and line only; kiln's own frames left out): it does not keep the frames' locals
(tracers, arrays) alive.
"""
from __future__ import annotations

import dataclasses
import itertools
import sys
import threading
import traceback as tb_lib
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln import _compile_log, _traceback_util, lax, tree_util
from kiln.array import Array
from kiln.core.trace import Tracer, eval_trace, get_aval, set_current_trace
from kiln.custom_batching import custom_vmap

__all__ = ["JaxValueError", "error_checking_context", "raise_if_error", "set_error_if",
           "unwrap_from_import", "wrap_for_export"]

_traceback_util.register_exclusion(__file__)


class JaxValueError(ValueError):
    """Exception raised for runtime errors detected within JAX computations."""


#: The error code meaning "no error": the largest ``uint32``, so that the minimum over
#: several codes (per-device codes) is the first error.
_NO_ERROR = np.uint32(np.iinfo(np.uint32).max)

_INVALID_ERROR_CODE_MSG = (
    "An unknown error occurred during execution of an AOT-imported function. This may "
    "indicate data corruption during AOT serialization/deserialization, or a version "
    "mismatch between the exporting and importing JAX versions.")
_INVALID_ERROR_CODE_TRACEBACK = "Traceback not available for corrupted error codes."

_error_list_lock = threading.RLock()
#: ``(message, traceback)`` for each error code; the traceback is a string for the
#: messages of imported functions (``unwrap_from_import``).
_error_list: list[tuple[str, types.TracebackType | str | None]] = []


class _ErrorStorage(threading.local):
    """This thread's error-code ref, and the key that ``jit``'s cache sees for it."""

    def __init__(self):
        self.ref = None
        self.mesh = None        # the mesh the error state was made for (None: no mesh)
        # 0: the thread's default ref; error_checking_context and wrap_for_export install
        # refs with keys of their own, so a jit trace made with one is not reused with
        # another (the trace holds the ref it closed over).
        self.key = 0


_error_storage = _ErrorStorage()
_keys = itertools.count(1)

_compile_log.register_trace_context("error_check", lambda: _error_storage.key)


# ----------------------------------------------------------------------------------------------
# The error-code ref


def _context_mesh():
    from kiln.sharding import context_mesh
    return context_mesh()


def _new_error_state() -> tuple:
    """``(ref, mesh)``: a ref holding "no error", a scalar or, in a ``set_mesh`` context,
    one code per device of the mesh (an array of its shape); and that mesh (or None)."""
    from kiln.state.primitives import new_ref
    mesh = _context_mesh()
    if mesh is None or not mesh.axis_names:
        return new_ref(np.uint32(_NO_ERROR)), None
    return new_ref(np.full(tuple(mesh.axis_sizes), _NO_ERROR, np.uint32)), mesh


def _install(state: tuple, key: int) -> None:
    _error_storage.ref, _error_storage.mesh = state
    _error_storage.key = key


def _saved() -> tuple:
    return (_error_storage.ref, _error_storage.mesh), _error_storage.key


def _ensure_ref():
    if _error_storage.ref is None:
        with set_current_trace(eval_trace):
            _error_storage.ref, _error_storage.mesh = _new_error_state()
    return _error_storage.ref


class error_checking_context:
    """Redefine the internal error state based on the mesh in the context.

    In a multi-device program (inside ``jax.set_mesh``), the error state must match the
    device mesh: entering this context creates a new error state, one error code per
    device of the current mesh (a scalar when there is no mesh); leaving it restores the
    previous state. Use it when starting a multi-device computation or when switching
    between meshes.
    """

    __slots__ = ("old",)

    def __init__(self):
        self.old = None

    def __enter__(self) -> error_checking_context:
        self.old = _saved()
        with set_current_trace(eval_trace):
            _install(_new_error_state(), next(_keys))
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _install(*self.old)


# ----------------------------------------------------------------------------------------------
# Recording where a check was made


class _FrameMarker(Exception):
    pass


_frame_cache: dict[tuple[str, str, int], types.FrameType] = {}


def _stand_in_frame(filename: str, name: str, lineno: int, module: str) -> types.FrameType:
    """A finished frame whose code is at ``filename:lineno`` in function ``name`` and
    holds no locals: what the recorded traceback shows for one user frame (the source
    line is read from the file when it is printed)."""
    key = (filename, name, lineno)
    frame = _frame_cache.get(key)
    if frame is None:
        code = compile("\n" * (lineno - 1) + "raise _FrameMarker", filename, "exec")
        code = code.replace(co_name=name, **({"co_qualname": name}
                                             if sys.version_info >= (3, 11) else {}))
        try:
            exec(code, {"__name__": module, "_FrameMarker": _FrameMarker})
        except _FrameMarker as e:
            frame = e.__traceback__.tb_next.tb_frame
            del e
        _frame_cache[key] = frame
    return frame


def _user_traceback(depth: int) -> types.TracebackType | None:
    """The traceback of the caller ``depth`` frames up, outermost frame first, with
    kiln's frames left out (JAX's filtered ``source_info_util.current().traceback``)."""
    tb = None
    frame = sys._getframe(depth + 1)
    while frame is not None:
        if _traceback_util.include_frame(frame):
            code = frame.f_code
            stand_in = _stand_in_frame(code.co_filename, code.co_name, frame.f_lineno,
                                       frame.f_globals.get("__name__", "__main__"))
            # tb_lasti -1: no column markers (the stand-in's code is not the real one).
            tb = types.TracebackType(tb, stand_in, -1, frame.f_lineno)
        frame = frame.f_back
    return tb


def _record_error(msg: str, traceback) -> np.uint32:
    with _error_list_lock:
        code = np.uint32(len(_error_list))
        _error_list.append((msg, traceback))
    return code


# ----------------------------------------------------------------------------------------------
# set_error_if


@custom_vmap
def _any_element(pred):
    """Whether any element of the boolean array ``pred`` is True (a boolean scalar)."""
    return lax.reduce_or(pred, tuple(range(pred.ndim)))


@_any_element.def_vmap
def _any_element_vmap(axis_size, in_batched, pred):
    # Any element of any batch member: the result is not batched.
    del axis_size, in_batched
    return _any_element(pred), False


def _as_bool_array(pred):
    """``pred`` as a boolean array (a number is True where it is not zero, as ``any``)."""
    if not isinstance(pred, (Array, Tracer)):
        pred = np.asarray(pred)
    aval = get_aval(pred)
    if aval.dtype != np.bool_:
        pred = lax.ne(pred, np.zeros(aval.shape, aval.dtype))
    return pred


def _check_pred_mesh(pred) -> None:
    """JAX's checks of a predicate against a multi-device error state."""
    from kiln.parallel.placement import typeof
    from kiln.sharding import AxisType
    pred_mesh = getattr(getattr(typeof(pred), "sharding", None), "mesh", None)
    if pred_mesh is None or not pred_mesh.axis_names:     # not typed on a mesh
        return
    if AxisType.Auto in tuple(pred_mesh.axis_types):
        warnings.warn(
            "When at least one mesh axis of `pred` is in auto mode, calling `set_error_if` "
            "will cause implicit communication between devices. To avoid this, consider "
            "converting the mesh axis in auto mode to explicit mode.", RuntimeWarning,
            stacklevel=3)
        return
    mesh = _error_storage.mesh
    if _abstract(mesh) != _abstract(pred_mesh):
        raise ValueError(
            "The error code state and the predicate must be on the same mesh, but got "
            f"{_abstract(mesh)} and {pred_mesh} respectively. Please use "
            "`with error_checking_context()` to redefine the error code state based on "
            "the mesh.")


def _abstract(mesh):
    return getattr(mesh, "abstract_mesh", mesh)


def set_error_if(pred, /, msg: str) -> None:
    """Set the internal error state if any element of ``pred`` is ``True``.

    Used inside JAX computations to detect runtime errors without halting execution.
    When it is traced (e.g. inside :func:`jax.jit`) the message and the traceback of
    the call are recorded; at execution time, if ``pred`` has a ``True`` element the
    error state is set and execution continues. :func:`raise_if_error` raises the
    recorded error later. Once the error state is set, later errors are ignored until it
    is raised.

    Works eagerly, under ``jit``, ``grad``, ``vmap`` (the check fires when any batch
    member's ``pred`` does) and in control flow. In a multi-device program with explicit
    mesh axes, enter :class:`error_checking_context` first so that the error state
    matches the mesh. When exporting a function, wrap it with :func:`wrap_for_export`
    before export and :func:`unwrap_from_import` after import.

    Args:
      pred: a boolean array; if any element is ``True`` the error state is set.
      msg: the error message to raise later.
    """
    ref = _ensure_ref()
    code = _record_error(msg, _user_traceback(1))
    pred = _as_bool_array(pred)
    if _error_storage.mesh is not None:
        _check_pred_mesh(pred)
    hit = _any_element(pred)
    current = ref[...]
    update = lax.bitwise_and(lax.eq(current, _codes(_NO_ERROR, current)),
                             _broadcast(hit, current))
    ref[...] = lax.select(update, _codes(code, current), current)


def _codes(code, like):
    """The error code ``code`` in the shape of the error state ``like`` (a constant)."""
    return np.full(get_aval(like).shape, code, np.uint32)


def _broadcast(x, like):
    shape = get_aval(like).shape
    if get_aval(x).shape == shape:
        return x
    return lax.broadcast_in_dim(x, shape, ())


# ----------------------------------------------------------------------------------------------
# raise_if_error


def _first_code(ref) -> Any:
    code = ref[...]
    if get_aval(code).ndim:
        code = lax.reduce_min(code, tuple(range(get_aval(code).ndim)))
    return code


def raise_if_error() -> None:
    """Raise an exception if the internal error state is set.

    Call it after a computation completes to check for errors marked during execution by
    :func:`set_error_if`: it raises a :class:`JaxValueError` with the first error's
    message (its traceback is where that ``set_error_if`` was called) and clears the
    error state. It must not be called inside a traced function (e.g. under
    :func:`jax.jit`).

    Raises:
      JaxValueError: if the internal error state is set.
      ValueError: if called within a traced JAX function.
    """
    ref = _error_storage.ref
    if ref is None:           # no check has run
        return
    code = _first_code(ref)
    if isinstance(code, Tracer):
        raise ValueError("raise_if_error() should not be called within a traced context, "
                         "such as within a jitted function.")
    code = int(np.asarray(code))
    if code == int(_NO_ERROR):
        return
    with set_current_trace(eval_trace):
        ref[...] = _codes(_NO_ERROR, ref)
    with _error_list_lock:
        if 0 <= code < len(_error_list):
            msg, traceback = _error_list[code]
        else:        # a corrupted code from an imported function
            msg, traceback = _INVALID_ERROR_CODE_MSG, _INVALID_ERROR_CODE_TRACEBACK
    if isinstance(traceback, str):
        raise JaxValueError(f"{msg}\nThe original traceback is shown below:\n{traceback}")
    raise JaxValueError(msg).with_traceback(traceback)


# ----------------------------------------------------------------------------------------------
# Export: the error state as a value


@dataclasses.dataclass(frozen=True)
class _ErrorClass:
    """The error state of a function wrapped by :func:`wrap_for_export`.

    Attributes:
      error_code: the function's final error code (``uint32``; ``0xFFFFFFFF``: no error).
      error_list: ``(message, traceback text)`` for each of the function's own codes.
    """

    error_code: Any
    error_list: list


tree_util.register_dataclass(_ErrorClass, data_fields=("error_code",),
                             meta_fields=("error_list",))


def _traceback_to_str(traceback) -> str:
    if traceback is None:
        return ""
    return "".join(tb_lib.format_list(tb_lib.extract_tb(traceback))).rstrip("\n")


def wrap_for_export(f: Callable) -> Callable:
    """Wrap a function with error checking to make it compatible with AOT mode.

    Error checking relies on global state, which cannot be serialized. The wrapped
    function keeps its error state to itself and returns it: it returns
    ``(out, error)``, ``error`` an ``_ErrorClass`` holding the final error code and the
    messages of its checks. After import, wrap the imported function with
    :func:`unwrap_from_import`. Apply it once per function.

    Args:
      f: the function to wrap.

    Returns:
      The wrapped function.
    """
    def inner(*args, **kwargs):
        global _error_list
        old = _saved()
        with _error_list_lock:
            old_list, _error_list = _error_list, []
            try:
                # (made in the current trace: under jit, a ref local to the program)
                _install(_new_error_state(), next(_keys))
                out = f(*args, **kwargs)
                error_code = _first_code(_error_storage.ref)
            finally:
                _error_list, new_list = old_list, _error_list
                _install(*old)
        new_list = [(msg, _traceback_to_str(tb)) for msg, tb in new_list]
        return out, _ErrorClass(error_code, new_list)

    return inner


def unwrap_from_import(f: Callable) -> Callable:
    """Unwrap a function after AOT import to restore error checking.

    ``f`` returns ``(out, error)`` as a function wrapped by :func:`wrap_for_export`
    does; the returned function returns ``out`` and merges ``error`` into this process's
    error state (an error already set is kept), so that :func:`raise_if_error` reports
    it.

    Args:
      f: the imported function.

    Returns:
      The unwrapped function.
    """
    _ensure_ref()

    def inner(*args, **kwargs):
        out, error = f(*args, **kwargs)
        new_code, new_list = error.error_code, error.error_list
        with _error_list_lock:
            offset = len(_error_list)
            _error_list.extend(new_list)
        ref = _ensure_ref()
        current = ref[...]
        new_code = _broadcast(lax.convert_element_type(new_code, np.uint32), current)
        no_error = _codes(_NO_ERROR, current)
        update = lax.bitwise_and(lax.eq(current, no_error), lax.ne(new_code, no_error))
        ref[...] = lax.select(update, lax.add(new_code, _codes(offset, current)), current)
        return out

    return inner
