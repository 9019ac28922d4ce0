"""Loaded program libraries: which are in use, and unloading those nothing uses.

Every compiled program is a shared library mapped into the process (three or four
memory mappings and its pages). The cpu backend keeps at most ``max_loaded()`` programs
loaded (an LRU of its cache entries, ``kiln.backends.cpu``); an evicted program's
:class:`~kiln.compiler.build.executable.Executable` is dropped, and once nothing refers to it
any more its library is closed here (``dlclose``), so that thousands of distinct
programs keep the number of mappings bounded.

The rules that make closing safe:

* :func:`hold` counts one user of a library per live executable; it refuses (returns
  False) a library already closed, and the caller loads it again (``load_library``
  then opens a fresh handle).
* An executable's death only queues its library (:func:`release_when_dead`, a
  ``weakref.finalize`` that takes no lock); :func:`sweep`, called where no lock is held,
  closes libraries whose count reached zero, after removing them from ``load_library``'s
  in-memory table so that nobody is handed a closed handle.
* A running call holds its executable, so a library is never closed under a native call.

What it must not hold: the LRU policy (the cpu backend) or building (``build``).
"""
from __future__ import annotations

import os
import threading
import weakref

#: Default bound on loaded programs (env ``KILN_MAX_LOADED_PROGRAMS``).
DEFAULT_MAX_LOADED = 256

_lock = threading.Lock()
_users: dict[int, list] = {}        # id(lib) -> [lib, live executables using it]
_dead: list = []                    # libraries of executables that died, to count down
_closed_count = [0]


def max_loaded() -> int:
    """How many compiled programs the cpu backend keeps loaded at most
    (``KILN_MAX_LOADED_PROGRAMS``, default 256; at least 1)."""
    raw = os.environ.get("KILN_MAX_LOADED_PROGRAMS", "")
    try:
        n = int(raw) if raw.strip() else DEFAULT_MAX_LOADED
    except ValueError:
        n = DEFAULT_MAX_LOADED
    return max(1, n)


def hold(lib) -> bool:
    """Count one more user of ``lib``; False when it was closed meanwhile (load again)."""
    with _lock:
        if getattr(lib, "_kiln_closed", False):
            return False
        rec = _users.get(id(lib))
        if rec is None:
            _users[id(lib)] = [lib, 1]
        else:
            rec[1] += 1
        return True


def release_when_dead(owner, lib) -> None:
    """Give up ``owner``'s hold on ``lib`` when ``owner`` is garbage collected."""
    weakref.finalize(owner, _dead.append, lib)


def release(lib) -> None:
    """Give up one hold on ``lib`` now (closed by the next :func:`sweep` if unused)."""
    _dead.append(lib)


def sweep() -> int:
    """Close the libraries no live executable uses any more; returns how many."""
    if not _dead:
        return 0
    closing = []
    with _lock:
        while _dead:
            lib = _dead.pop()
            rec = _users.get(id(lib))
            if rec is None or rec[0] is not lib:
                continue
            rec[1] -= 1
            if rec[1] > 0:
                continue
            del _users[id(lib)]
            lib._kiln_closed = True
            _forget(lib)
            closing.append(lib)
    for lib in closing:
        _dlclose(lib)
    _closed_count[0] += len(closing)
    return len(closing)


def stats() -> dict:
    """``{"loaded": libraries held by live executables, "closed": closed so far}``."""
    return {"loaded": len(_users), "closed": _closed_count[0]}


def _forget(lib) -> None:
    """Remove ``lib`` from ``build.load_library``'s table (so it is opened afresh)."""
    from kiln.compiler.build import build
    for key, value in list(build._libraries.items()):
        if value is lib:
            build._libraries.pop(key, None)


def _dlclose(lib) -> None:
    handle = getattr(lib, "_handle", None)
    if not handle:
        return
    try:
        import _ctypes
        close = getattr(_ctypes, "dlclose", None)
        if close is not None:   # POSIX; elsewhere the library stays mapped
            close(handle)
    except OSError:
        pass


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
