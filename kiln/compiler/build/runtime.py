"""The call into native code: a small CPython extension, built once per machine.

``run(fnptr, *arrays)`` takes the address of a generated segment function
(``void seg(void **b)``) and NumPy arrays; it reads each array's data pointer (no
Python objects are created), releases the GIL and calls the segment. This costs
about 0.2 µs plus 30 ns per array, against ~1 µs per array for ``ctypes``.

``alloc(shape, dtype)`` returns an uninitialized array for large outputs, backed by
anonymous ``mmap`` with ``madvise(MADV_HUGEPAGE)`` (page faults on a fresh 100 MB
buffer cost a fifth of what small pages cost), and recycled through a small pool when
the array dies (a reused block costs no page faults at all).

``make_plan``/``run_plan`` run several segments in one call, the GIL released once;
``submit_plan`` queues a plan for the extension's native dispatch thread (asynchronous
dispatch), which never takes the GIL.

``tree_sig(tree, ...)`` is the key of a cached ``jit`` call with pytree arguments (dicts
of parameters): one C walk instead of Python's flattening (see ``kiln.jitting``).

If the extension cannot be built (no Python headers), the same calls go through
``ctypes``.

The extension's C is ``kiln/compiler/csrc/runtime.c``.

What it must not hold: program logic.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import threading

import numpy as np

_lock = threading.Lock()
_state: dict = {}


def _ctypes_run(fnptr, *arrays):
    n = len(arrays)
    ptrs = (ctypes.c_void_p * max(n, 1))(*[a.ctypes.data for a in arrays])
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fnptr)(ptrs)


def get_run():
    """The fastest available ``run(fnptr, *arrays)``."""
    fn = _state.get("run")
    if fn is not None:
        return fn
    with _lock:
        fn = _state.get("run")
        if fn is None:
            try:
                from kiln.compiler import csrc
                from kiln.compiler.build.build import build_extension
                mod = build_extension(csrc.source("runtime.c"), "kiln_rt")
                fn = mod.run
                _state["alloc_large"] = mod.alloc_large
                _state["pool_stats"] = mod.pool_stats
                _state["tree_sig"] = mod.tree_sig
                _state["place"] = mod.place
                _state["plan"] = (mod.make_plan, mod.run_plan)
                _state["queue"] = mod
            except Exception:        # no headers or no compiler: ctypes still works
                fn = _ctypes_run
            _state["run"] = fn
    return fn


HUGE_THRESHOLD = 1 << 22     # 4 MiB


def tree_sig():
    """``kiln_rt.tree_sig`` once the extension is loaded (by the first native program),
    else None: the jit fast path then keys calls in Python."""
    return _state.get("tree_sig")


def runtime_plan():
    """``(make_plan, run_plan)`` of the extension after :func:`get_run` has loaded it, else
    None (the ctypes fallback calls segments one by one). ``make_plan([(fnptr, ids),
    ...])`` packs segments; ``run_plan(plan, bufs)`` runs them all with the GIL released
    once (see ``kiln.compiler.build.executable``)."""
    get_run()
    return _state.get("plan")


def native_queue():
    """The extension module (``submit_plan``, ``completed``, ``submitted``, ``wait``,
    ``after_fork``: its native dispatch thread, used by ``kiln._async_dispatch``) once
    loaded, else None."""
    return _state.get("queue")


def runtime_place():
    """``kiln_rt.place(bufs, ids, args, dtypes)`` (an executable's input checks in one
    call) after :func:`get_run` has loaded the extension, else None."""
    get_run()
    return _state.get("place")


def pool_stats() -> dict:
    """The large-buffer pool: blocks and bytes held, allocations served from it (hits)
    and fresh mappings (maps). Empty when the extension is not built."""
    f = _state.get("pool_stats")
    return f() if f is not None else {}


def alloc(shape, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array; huge-page backed when large, and recycled:
    the memory of dead large arrays is kept (a few blocks) for the next of that size.

    Raises:
      MemoryError: the memory cannot be had; the message names the bytes, shape and dtype.
    """
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n < HUGE_THRESHOLD:
        return np.empty(shape, dtype)
    fast = _state.get("alloc_large")
    try:
        if fast is not None and dtype.kind in "biufc":
            return fast(tuple(shape), dtype)
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (MemoryError, OSError) as e:
        if isinstance(e, OSError) and e.errno != errno.ENOMEM:
            raise
        raise MemoryError(out_of_memory_message(n, shape, dtype)) from None
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            m.madvise(advice)
        except OSError:
            pass
    return np.frombuffer(m, dtype, count=n // dtype.itemsize).reshape(shape)


def out_of_memory_message(nbytes: int, shape, dtype) -> str:
    """NumPy's wording for a failed allocation: size (human and in bytes), shape, dtype."""
    size, unit = float(nbytes), "bytes"
    for u in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024:
            break
        size, unit = size / 1024, u
    human = f"{size:.3g} {unit}" if unit != "bytes" else f"{nbytes} bytes"
    return (f"Unable to allocate {human} ({nbytes} bytes) for an array with shape "
            f"{tuple(int(d) for d in shape)} and data type {np.dtype(dtype).name}")
