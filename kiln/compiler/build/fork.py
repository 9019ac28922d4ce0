"""What a child process made by ``fork`` needs so that native code still runs in it.

Generated kernels run parallel loops with OpenMP. GNU libgomp keeps a pool of worker
threads per thread that started a parallel region; ``fork`` copies that bookkeeping into
the child but not the threads, so the child's first parallel region in the thread that
forked waits forever for workers that do not exist (libgomp has no fork handler; LLVM's
libomp has one and needs nothing).

The ``os.register_at_fork`` hooks here:

* before a fork, find the loaded libgomp (``dlopen`` with ``RTLD_NOLOAD``: nothing is
  loaded that was not already);
* in the child, set the forking thread's OpenMP thread count to 1
  (``omp_set_num_threads(1)``), so its kernels run single-threaded and never touch the
  stale pool. Threads the child starts later have no pool yet and run in parallel as
  usual. (Reductions over float data may differ in the last bits from a parallel run,
  as they do between machines with different core counts.)
* in the child, re-create the compiler's and kiln.random's native-library locks (a
  lock held by a parent thread that was building would never be released in the
  child).

The cpu backend's own hook (``kiln.backends.cpu``) resets its build pool and the
builds that were pending in the parent.

What it must not hold: build or cache policy.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading

#: Sonames of the GNU OpenMP runtime (the one without a fork handler).
_GOMP_NAMES = ("libgomp.so.1", "libgomp.so")

_omp: list = []         # [omp_set_num_threads] once the runtime is found loaded


def _find_runtime() -> None:
    if _omp:
        return
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0)
    if not getattr(os, "RTLD_NOLOAD", 0):
        return
    for name in _GOMP_NAMES:
        try:
            lib = ctypes.CDLL(name, mode=mode)     # only if already loaded; pins it
        except OSError:
            continue
        fn = getattr(lib, "omp_set_num_threads", None)
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_int], None
            _omp.append(fn)
            return


def _before_fork() -> None:
    try:
        _find_runtime()
    except Exception:       # noqa: BLE001 - a fork must never fail because of kiln
        pass


def _after_fork_in_child() -> None:
    if _omp:
        _omp[0](1)
    build = sys.modules.get("kiln.compiler.build.build")
    if build is not None:
        build._state_lock = threading.Lock()
        build._key_locks = {}
    runtime = sys.modules.get("kiln.compiler.build.runtime")
    if runtime is not None:
        runtime._lock = threading.Lock()
    # kiln.random's native libraries: a build on another thread (a background eager
    # build of a tiered call) held its lock at the fork; no builds in flight here.
    native = sys.modules.get("kiln.random._native")
    if native is not None:
        native._lock = threading.Lock()
        native._later_lock = threading.Lock()
        native._later.clear()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
