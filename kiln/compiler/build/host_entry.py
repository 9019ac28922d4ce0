"""The call back into Python from native loop and branch bodies (``Island`` steps with a
``host_id``, see ``kiln.compiler.lower.host_calls``).

Every program library with such calls has a function pointer ``kiln_host_fn`` (set
once when the library is loaded: :func:`install`) and calls ``kiln_host_fn(k)`` where
the body runs island ``k``. The one callback here finds the running call on the calling
thread (:func:`frame`, entered by the executable around its native code: the program
and its buffer list), runs the island's ``impl`` on the buffers' arrays and writes the
results into the island's output buffers, whose memory the C code reads next.

A failing island (an exception in its impl) makes the callback return 1: the C code
sets its thread's ``kiln_host_failed``, every loop of the program stops at its next
iteration, the executable runs no further segment, and the exception is raised when
the native code returns. After a failure the remaining callbacks of the call return 1
at once.

What it must not hold: lowering decisions (``lower/host_calls.py``) or C text.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from contextlib import contextmanager

import numpy as np

#: The C prototype of the callback: ``int (*)(int island)``.
HOST_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)

_local = threading.local()


class Frame:
    """One native call in progress on this thread: the executable, its buffers and the
    first exception an island raised."""

    __slots__ = ("executable", "bufs", "error")

    def __init__(self, executable, bufs):
        self.executable = executable
        self.bufs = bufs
        self.error = None


def _run(k: int) -> int:
    stack = getattr(_local, "stack", None)
    if not stack:       # not from an executable's call: nothing to run it on
        sys.stderr.write(f"kiln: native code called back for island {k} outside a call\n")
        return 1
    fr = stack[-1]
    if fr.error is not None:
        return 1
    try:
        fr.executable.run_host_call(fr.bufs, k)
    except BaseException as e:      # raised by the executable once the native code returns
        fr.error = e
        return 1
    return 0


_ENTRY = HOST_FN(_run)
_ENTRY_ADDR = ctypes.cast(_ENTRY, ctypes.c_void_p).value


def install(lib) -> None:
    """Point ``lib``'s ``kiln_host_fn`` at the callback (libraries without host calls
    have no setter: nothing to do)."""
    try:
        setter = lib.kiln_set_host_fn
    except AttributeError:
        return
    setter.argtypes = [ctypes.c_void_p]
    setter.restype = None
    setter(_ENTRY_ADDR)


@contextmanager
def frame(executable, bufs):
    """Run native code of ``executable`` on ``bufs`` inside this context: its host calls
    find them here. Raises the first exception an island raised."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    fr = Frame(executable, bufs)
    stack.append(fr)
    try:
        yield fr
    finally:
        stack.pop()
    if fr.error is not None:
        raise fr.error


def write_results(bufs, outs, res) -> None:
    """Copy an island's results into its output buffers' memory (the native code holds
    their addresses)."""
    for b, r in zip(outs, res):
        dst = bufs[b.id]
        if type(r) is not np.ndarray:
            r = np.asarray(r)
        if r.shape != dst.shape:
            r = r.reshape(dst.shape)
        if r.dtype == dst.dtype:
            dst[...] = r
        else:
            np.copyto(dst, r, casting="unsafe")
