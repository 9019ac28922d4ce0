"""The cpu backend: jitted programs run as native code built by kiln's compiler.

``run(closed, args)`` is what the ``jit`` primitive's implementation calls. The
first call of a program starts its compilation (passes, lowering, C rendering,
the C compiler: ``kiln.compiler``); until the library is ready, calls run on the
reference backend (same results), so a first call never waits for ``cc``.
``config.kiln_compile = "sync"`` (env ``KILN_COMPILE=sync``) waits instead; the
test suite uses it. ``config.kiln_backend = "reference"`` (env
``KILN_BACKEND=reference``) turns the compiler off.

With no C compiler on the machine, one warning says what to install and every
program runs on the reference backend.

What it must not hold: compiler internals (``kiln/compiler/``).
"""
from __future__ import annotations

import logging
import threading
import time
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor

from kiln.backends import reference
from kiln.config import config

logger = logging.getLogger("kiln")

_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_disabled_reason: list = []


class _Entry:
    __slots__ = ("exe", "state", "error", "future")

    def __init__(self):
        self.exe = None
        self.state = "pending"      # pending | ready | reference | failed
        self.error = None
        self.future = None


def compile_closed(closed, name: str = "jit"):
    """Compile a ClosedJaxpr; returns an Executable, or None when nothing in it is native."""
    from kiln.compiler import blas_support, cmath_support
    from kiln.compiler.build import load_library
    from kiln.compiler.executable import Executable
    from kiln.compiler.lower import lower
    from kiln.compiler.passes import optimize
    from kiln.compiler.render_c import CRenderer

    t0 = time.perf_counter()
    opt = optimize(closed)
    prog = lower(opt)
    if prog.native_steps == 0:
        return None
    from kiln.compiler.plan_buffers import plan
    plan(prog)
    src_math, fns = cmath_support.math()
    renderer = CRenderer(src_math, fns, blas_support.declarations())
    source, segments = renderer.render(prog)
    t1 = time.perf_counter()
    lib = load_library(source, extra_flags=["-fwrapv"], name="kiln")
    t2 = time.perf_counter()
    blas_support.init(lib)
    exe = Executable(prog, lib, segments, source, build_seconds=t2 - t1)
    if prog.guards:
        exe.fallback = lambda args: reference.run_jaxpr(closed.jaxpr, closed.consts, args)
    if config.jax_log_compiles:
        logger.warning("Compiled %s: lowering %.1f ms, C build %.1f ms (%d native steps)",
                       name, (t1 - t0) * 1e3, (t2 - t1) * 1e3, prog.native_steps)
    return exe


def _compile_into(entry: _Entry, closed, name):
    from kiln.compiler.build import serial_units
    try:
        with serial_units():    # in the background: leave a core to the caller
            exe = compile_closed(closed, name)
    except Exception as e:           # noqa: BLE001 - reported, then the reference runs
        entry.error = e
        entry.state = "failed"
        _report_failure(e)
        return
    entry.exe = exe
    entry.state = "ready" if exe is not None else "reference"


def _report_failure(e):
    from kiln.compiler.build import CompilerNotFound
    if isinstance(e, CompilerNotFound):
        if not _disabled_reason:
            _disabled_reason.append(str(e))
            warnings.warn(f"kiln: no C compiler found ({e}); jitted code runs on the NumPy "
                          "reference backend. Install gcc or clang (or set CC) for compiled "
                          "kernels.", RuntimeWarning, stacklevel=4)
        return
    logger.warning("kiln: compiling a program failed, running it on the reference backend: "
                   "%s: %s", type(e).__name__, e)


def _entry_for(closed, name, sync: bool = False) -> _Entry:
    entry = _cache.get(closed)
    if entry is not None:
        return entry
    with _lock:
        entry = _cache.get(closed)
        if entry is not None:
            return entry
        entry = _Entry()
        _cache[closed] = entry
    if _disabled_reason:
        entry.state = "reference"
    elif sync or config.kiln_compile == "sync":
        try:
            entry.exe = compile_closed(closed, name)
        except Exception as e:
            from kiln.compiler.build import CompilerNotFound
            if not isinstance(e, CompilerNotFound):
                with _lock:
                    _cache.pop(closed, None)
                raise
            _report_failure(e)
            entry.state = "reference"
            return entry
        entry.state = "ready" if entry.exe is not None else "reference"
    else:
        global _pool
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-compile")
        entry.future = _pool.submit(_compile_into, entry, closed, name)
    return entry


def run(closed, args, name: str = "jit"):
    """Run a closed jaxpr on NumPy arrays; returns the list of output arrays."""
    if config.kiln_backend == "reference" or config.jax_debug_nans or config.jax_debug_infs:
        return reference.run_jaxpr(closed.jaxpr, closed.consts, args)
    entry = _cache.get(closed)
    if entry is None:
        entry = _entry_for(closed, name)
    exe = entry.exe
    if exe is not None:
        return exe(args)
    return reference.run_jaxpr(closed.jaxpr, closed.consts, args)


def prepare(closed, name: str = "jit") -> None:
    """Compile ``closed`` now, on the calling thread, so that later ``run`` calls from
    other threads find it ready (SPMD programs: ``kiln.parallel.spmd``)."""
    if _cache.get(closed) is None:
        _entry_for(closed, name, sync=True)


def plain_mode() -> bool:
    """True when jitted programs run compiled code (no reference backend, no NaN checks)."""
    return (config.kiln_backend == "cpu" and not config.jax_debug_nans
            and not config.jax_debug_infs)


def ready_executable(closed):
    """The executable of ``closed`` if its compilation has finished, else None."""
    entry = _cache.get(closed)
    return entry.exe if entry is not None else None


def executable_for(closed, name: str = "jit"):
    """The compiled executable of ``closed`` (compiling now if needed), or None."""
    entry = _cache.get(closed)
    if entry is None or entry.state == "pending":
        if entry is not None and entry.future is not None:
            entry.future.result()
        else:
            entry = _Entry()
            entry.exe = compile_closed(closed, name)
            entry.state = "ready" if entry.exe is not None else "reference"
            _cache[closed] = entry
    return entry.exe


def wait_for_compiles():
    """Block until every background compilation started so far has finished."""
    for entry in list(_cache.values()):
        if entry.future is not None:
            entry.future.result()
