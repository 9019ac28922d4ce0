"""Native synchronization for device threads: a futex barrier and an in-place all-reduce.

A Python ``threading.Barrier`` costs 100-200 µs per crossing with 8 threads on 2 cores
(condition variables, one lock per waiter, the GIL on every wake). The barrier here is an
atomic counter and a generation word: the last arrival bumps the generation and wakes
the others with one ``futex`` call; waiters spin briefly, then sleep on the word. It runs
with the GIL released (a ``ctypes`` call), so a crossing costs a few µs plus the wakes.

``kiln_allreduce`` is the local part of ``psum``/``pmax``/``pmin``: every participant
publishes its operand's address, crosses the barrier, reduces its share of the elements
of all operands (device order: the same bits every run) into the shared output, and
crosses again. The C is ``kiln/compiler/csrc/spmd.c``, built once per machine by
``kiln.compiler.build.build`` (its flags, its checked disk cache); without a C compiler
(``available()`` is False) the Python fallbacks in ``spmd``/``collectives`` run.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2,
          np.dtype(np.int64): 3, np.dtype(np.uint32): 4, np.dtype(np.uint64): 5}
OPS = {"SUM": 0, "MAX": 1, "MIN": 2}

def _cores() -> int:
    import os
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover
        return os.cpu_count() or 1


_lib: list = []
_lock = threading.Lock()


def _load():
    if _lib:
        return _lib[0]
    with _lock:
        if not _lib:
            lib = None
            try:
                import platform

                from kiln.compiler import csrc
                from kiln.compiler.build.build import load_library
                if platform.machine() in ("x86_64", "AMD64") and \
                        platform.system() == "Linux":
                    lib = load_library(csrc.source("spmd.c"), name="kiln_spmd")
                    lib.kiln_barrier.argtypes = [ctypes.c_void_p]
                    lib.kiln_barrier.restype = ctypes.c_int
                    lib.kiln_barrier_abort.argtypes = [ctypes.c_void_p]
                    lib.kiln_barrier_abort.restype = None
                    lib.kiln_allreduce.argtypes = [
                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
                    lib.kiln_allreduce.restype = ctypes.c_int
            except Exception:        # noqa: BLE001 - no compiler: the Python fallbacks
                lib = None
            _lib.append(lib)
    return _lib[0]


def available() -> bool:
    return _load() is not None


class NativeBarrier:
    """A barrier of ``n`` threads with ``threading.Barrier``'s ``wait``/``abort``
    (``wait`` returns 0 for exactly one participant; ``BrokenBarrierError`` once
    aborted)."""

    def __init__(self, n: int):
        self.n = n
        self.word = np.zeros(8, np.int32)
        self.word[2] = n
        self.word[4] = 2000 if n <= _cores() else 0
        self.addr = self.word.ctypes.data
        self._lib = _load()

    def wait(self) -> int:
        r = self._lib.kiln_barrier(self.addr)
        if r < 0:
            raise threading.BrokenBarrierError
        return 0 if r == 1 else 1

    def abort(self) -> None:
        self._lib.kiln_barrier_abort(self.addr)

    def allreduce(self, slots_addr: int, outp_addr: int, size: int, k: int, m: int,
                  dtype: int, op: int) -> None:
        if self._lib.kiln_allreduce(self.addr, slots_addr, outp_addr, size, k, m, dtype,
                                    op) < 0:
            raise threading.BrokenBarrierError


def make_barrier(n: int):
    """A :class:`NativeBarrier` where the native library builds, else ``threading.Barrier``."""
    return NativeBarrier(n) if n > 1 and available() else threading.Barrier(n)
