"""Traceback filtering: kiln's own frames are taken out of errors raised through its API.

An error raised by the user's function under ``jit``/``grad``/``vmap``/``lax.scan``/...
unwinds through many kiln frames (tracing, interpreters, staging). At each public entry
point ("API boundary") kiln catches ``Exception`` on its way out and, only at the outermost
boundary of the current stack, rewrites its traceback so that the frames of kiln's package
directory (and of paths given to :func:`register_exclusion`) are left out. What happens
depends on the ``jax_traceback_filtering`` flag (env ``JAX_TRACEBACK_FILTERING`` or
``KILN_TRACEBACK_FILTERING``, read at import; ``kiln.config.update`` at run time):

* ``"off"``: nothing is changed.
* ``"tracebackhide"``: the traceback is kept whole; each hidden frame gets a
  ``__tracebackhide__ = True`` local, which IPython and pytest honour when printing.
* ``"remove_frames"``: hidden frames are removed; the original traceback stays reachable
  as ``e.__cause__.__traceback__``, an :class:`UnfilteredStackTrace` whose message says so.
* ``"quiet_remove_frames"``: hidden frames are removed and a note (``e.__notes__``) says
  how to get them back.
* ``"auto"`` (default): ``"tracebackhide"`` under IPython 7.17 or newer, otherwise
  ``"quiet_remove_frames"``, as JAX 0.10 resolves it.

``KeyboardInterrupt``, ``SystemExit`` and other non-``Exception`` errors are never touched.

The success path of a boundary costs one ``try`` (free in CPython 3.11+): all the work above
happens in :func:`filter_exception`, in the ``except`` clause. On Python 3.10 the filtered
exception must be re-raised with ``raise e``, which puts the boundary's own frame back at the
top of the traceback (one kiln frame stays), and notes are stored but not printed.
"""
from __future__ import annotations

import builtins
import functools
import os
import sys
import traceback
import types
from collections.abc import Callable
from typing import TypeVar

from kiln import errors
from kiln.config import config

__all__ = ["UnfilteredStackTrace", "api_boundary", "filter_exception", "register_boundary",
           "register_exclusion"]

F = TypeVar("F", bound=Callable)

_KILN_DIR = os.path.dirname(os.path.abspath(__file__))

#: Files and folders whose frames are hidden: kiln's package, then registered paths.
_exclude_paths: list[str] = [_KILN_DIR]

#: Code objects of the frames that are API boundaries (the decorator's wrapper, and methods
#: that catch inline, such as ``jit``'s ``__call__``): how a boundary sees an outer one.
_boundary_codes: set[types.CodeType] = set()

# Python 3.10's bare ``raise`` restores the traceback saved when the ``except`` clause was
# entered, so the filtered one must be raised explicitly there.
_BARE_RAISE_KEEPS_OLD_TB = sys.version_info < (3, 11)

_OFF_HINT = ("Set JAX_TRACEBACK_FILTERING=off (or KILN_TRACEBACK_FILTERING=off) in the "
             "environment, or call kiln.config.update('jax_traceback_filtering', 'off'), "
             "to see every frame.")

_NOTE = ("--------------------\n"
         "kiln left its own internal frames out of the traceback of this exception. "
         + _OFF_HINT)

_UNFILTERED_TAIL = ("The traceback above is the original one, kiln's internal frames included; "
                    "the exception itself is unchanged. Below, the same exception is shown "
                    "again with those frames left out. " + _OFF_HINT +
                    "\n\n--------------------")


class UnfilteredStackTrace(Exception):
    """The ``__cause__`` that ``remove_frames`` filtering gives an exception: its traceback
    is the exception's original one, with kiln's frames (as ``jax``'s class of this name)."""


def register_exclusion(path: str) -> None:
    """Hide the frames of ``path`` (a file, or a folder and everything below it) from
    filtered tracebacks, as kiln's own frames are.

    Libraries built on kiln (Flax does) call this with their own files so that errors point
    at their users' code. The path is also skipped when kiln names the user's line in
    error messages and in jaxprs' source info.

    Args:
      path: a file or directory name; relative names are taken from the current directory.
    """
    path = os.path.abspath(path)
    if path not in _exclude_paths:
        _exclude_paths.append(path)
    if path not in errors._excluded_paths:
        errors._excluded_paths.append(path)


def _under(filename: str, prefix: str) -> bool:
    return filename == prefix or filename.startswith(prefix.rstrip(os.sep) + os.sep)


def include_filename(filename: str) -> bool:
    """Whether a frame of ``filename`` is kept by filtering (is the user's)."""
    filename = os.path.abspath(filename)
    return not any(_under(filename, os.path.abspath(p)) for p in _exclude_paths)


def include_frame(frame: types.FrameType) -> bool:
    """Whether ``frame`` is kept by filtering (its file is not excluded)."""
    return include_filename(frame.f_code.co_filename)


def _filtering_mode() -> str:
    mode = config.jax_traceback_filtering
    if mode is None or mode == "auto":
        return "tracebackhide" if _ipython_hides_frames() else "quiet_remove_frames"
    return mode


def _ipython_hides_frames() -> bool:
    """Whether we run under an IPython that honours ``__tracebackhide__`` (7.17+)."""
    if not hasattr(builtins, "get_ipython"):
        return False
    try:
        import IPython
    except ImportError:
        return False
    return tuple(IPython.version_info[:2]) >= (7, 17)


def _filter_tb(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A new traceback chain made of the included entries of ``tb``."""
    out = None
    for frame, lineno in reversed(list(traceback.walk_tb(tb))):
        if include_frame(frame):
            out = types.TracebackType(out, frame, frame.f_lasti, lineno)
    return out


def _with_callers(tb: types.TracebackType) -> types.TracebackType:
    """``tb`` preceded by the user's frames that called the boundary (the exception has not
    reached them yet), up to the first run of module-level frames (a script, or the cell a
    REPL executes)."""
    out = tb
    at_module_level = False
    for frame, lineno in traceback.walk_stack(tb.tb_frame.f_back):
        if "importlib._bootstrap" in frame.f_code.co_filename:
            continue
        is_module = frame.f_code.co_name == "<module>"
        if at_module_level and not is_module:
            break
        if include_frame(frame):
            out = types.TracebackType(out, frame, frame.f_lasti, lineno)
        at_module_level = at_module_level or is_module
    return out


def _inside_outer_boundary(frame: types.FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code in _boundary_codes:
            return True
        frame = frame.f_back
    return False


def _hide_frames(tb: types.TracebackType | None) -> None:
    for frame, _ in traceback.walk_tb(tb):
        if not include_frame(frame):
            frame.f_locals["__tracebackhide__"] = True


def _add_note(e: BaseException, note: str) -> None:
    notes = getattr(e, "__notes__", None)
    if notes is not None and note in notes:
        return  # already filtered once (e.g. by a boundary on another thread)
    if hasattr(e, "add_note"):
        e.add_note(note)
    else:  # Python 3.10: kept for programs that read it; 3.10's printer ignores notes
        e.__notes__ = [*(notes or []), note]


def filter_exception(e: BaseException) -> None:
    """Filter the traceback of ``e``, which is leaving the API boundary that calls this.

    Called from the ``except Exception as e`` clause of a boundary, which then re-raises
    ``e`` (a bare ``raise``; ``raise e`` on Python 3.10, see
    ``_BARE_RAISE_KEEPS_OLD_TB``). Does nothing when filtering is off or when an outer
    boundary is on the stack (that one filters).
    """
    boundary = sys._getframe(1)
    mode = _filtering_mode()
    if mode == "off" or _inside_outer_boundary(boundary.f_back):
        return
    tb = e.__traceback__
    if tb is None:
        return
    if mode == "tracebackhide":
        _hide_frames(tb)
        return
    if mode == "remove_frames":
        if not isinstance(e.__cause__, UnfilteredStackTrace):
            summary = "".join(traceback.format_exception_only(type(e), e)).strip()
            unfiltered = UnfilteredStackTrace(f"{summary}\n\n{_UNFILTERED_TAIL}")
            unfiltered.with_traceback(_with_callers(tb))
            unfiltered.__cause__ = e.__cause__
            unfiltered.__context__ = e.__context__
            unfiltered.__suppress_context__ = e.__suppress_context__
            e.__cause__ = unfiltered
            e.__context__ = None
    elif mode == "quiet_remove_frames":
        _add_note(e, _NOTE)
    else:  # the flag's parser admits no other value
        raise ValueError(f"jax_traceback_filtering={mode!r} is not a valid value; use one of "
                         "'off', 'tracebackhide', 'remove_frames', 'quiet_remove_frames', "
                         "'auto'.") from e
    e.with_traceback(_filter_tb(tb))


def register_boundary(fun: Callable) -> None:
    """Declare that ``fun`` (a function or method) catches and filters errors inline, as
    ``try: ... except Exception as e: filter_exception(e); raise``: boundaries below it
    then leave the filtering to it."""
    _boundary_codes.add(fun.__code__)


def api_boundary(fun: F) -> F:
    """Make ``fun`` an API boundary: errors leaving it have kiln's frames filtered out of
    their traceback, as described in this module's docstring.

    Boundaries compose: only the outermost one on the stack filters, so that
    ``api_boundary(f)`` calling ``api_boundary(g)`` shows the traceback that ``f`` calling
    plain ``g`` would.

    Args:
      fun: the public entry point to wrap.

    Returns:
      A wrapper of ``fun`` (``functools.wraps``) that costs one ``try`` when no error is
      raised.
    """

    @functools.wraps(fun)
    def kiln_api_boundary(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841  (read by IPython and pytest)
        try:
            return fun(*args, **kwargs)
        except Exception as e:
            filter_exception(e)
            if _BARE_RAISE_KEEPS_OLD_TB:
                raise e  # noqa: B904  (Python 3.10: re-raise with the filtered traceback)
            raise

    return kiln_api_boundary  # type: ignore[return-value]


register_boundary(api_boundary(lambda: None))
