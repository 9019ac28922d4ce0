"""Building C source with the system C compiler, cached on disk.

What it holds: finding the compiler (``$CC``, then ``cc``, ``gcc``, ``clang``), the
default flags, a disk cache of shared libraries keyed by everything that decides their
bytes, loading them (``ctypes`` or as a CPython extension module), and build statistics.

* :func:`build_shared` turns C source into the path of a shared library. The key is the
  SHA-256 of the compiler's identity, the flags, the CPU, the include directories, the
  libraries and the source; the library lives in ``cache_dir()/so`` as
  ``{name}-{key[:32]}.so`` beside ``{name}-{key[:32]}.json``, which records the SHA-256
  of the library's bytes. A library is returned only when that hash matches the bytes
  on disk and both files are owned by the current user and not writable by group or
  others; anything else (a truncated, tampered or planted file) is rebuilt, never
  returned. One that matches but does not load is deleted and rebuilt once.
* The cache root and every directory under it must be owned by the current user and
  not writable by group or others; when one is not (or cannot be written: read-only,
  full disk) one warning names it, the cause and the fix, and libraries go to a private
  ``mkdtemp`` directory removed at exit. Files are opened relative to descriptors of the
  checked directories (``O_NOFOLLOW``), the compiler writes through them
  (``/proc/<pid>/fd``) and libraries are loaded through them, so nothing can be
  swapped between a check and its use (threat model: ``docs/compiler.md``).
* Compilers run in their own session and are killed with their process group after
  ``$KILN_BUILD_TIMEOUT`` seconds (default 120; :class:`BuildTimeout`), on Ctrl-C
  (the exception propagates, nothing half-written stays), and at interpreter exit (a
  pending background build never delays exit).
* Builds are atomic: the compiler writes a temporary file in the same directory, which
  is then renamed over the final name. Builders of one key take an ``flock`` on
  ``{name}-{key[:32]}.lock``, so two processes (or threads) needing the same library
  compile it once; the second finds it built.
* The cache is capped at ``$KILN_CACHE_MAX_BYTES`` (default 1 GiB): after each build,
  if the entries managed here (``so/`` and ``failed/``) are over the cap, the least
  recently used ones (by the library's mtime, touched on each cache hit) are deleted
  until they are under 80% of it.
* :func:`load_library` and :func:`build_extension` add an in-process cache, so one
  source is compiled and loaded once per process, with a lock per key.

Default flags: ``-O3 -march=native`` (replaced by ``$KILN_CFLAGS``; on AVX-512
processors also ``-mprefer-vector-width=512``), ``-fno-math-errno``
(lets ``sqrt`` become one instruction and vectorize; results unchanged),
``-fno-trapping-math`` (floating-point operations may be computed speculatively, so both
sides of a select run and branch-free loops vectorize; values unchanged, only the
floating-point exception flags, which nothing reads, may differ),
``-ffp-contract=off`` (no silent fusing of ``a * b + c``, so every operation is rounded
as IEEE and NumPy round it; generated code calls ``fma`` explicitly where it wants one),
``-fPIC -shared`` and ``-fopenmp``, and ``-fuse-ld=gold`` when the toolchain has GNU
gold (a faster link). Never ``-ffast-math``. ``-march=native`` and
``-fopenmp`` are dropped when a probe build shows the compiler rejects them
(:func:`openmp_available` tells which).

With ``KILN_DUMP`` containing ``c`` (e.g. ``KILN_DUMP=c,passes``) each source given to
:func:`build_shared` is printed to stderr under a header line, followed by the compile
time in milliseconds or ``cache hit``.

What it must not hold: code generation (``render_c.py``), calling conventions
(``runtime.py``).
"""
from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 - its exit hook is registered before ours
import ctypes
import errno
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import platform
import queue
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import types
import warnings
from collections.abc import Sequence

from kiln.compiler import csrc
from kiln.profiler._recorder import span as _profile_span

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: builds still atomic, not serialized
    fcntl = None

__all__ = [
    "BuildCancelled",
    "BuildError",
    "BuildTimeout",
    "CacheError",
    "CompilerNotFound",
    "build_extension",
    "build_shared",
    "cache_dir",
    "compiler_identity",
    "cpu_features",
    "default_flags",
    "find_compiler",
    "last_build_seconds",
    "load_library",
    "openmp_available",
    "stats",
]

#: Bumped when the layout of the cache or the meaning of a key changes.
_FORMAT = 1
_DEFAULT_OPT = ("-O3", "-march=native")
_SEMANTICS = ("-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off")
_DEFAULT_MAX_BYTES = 1 << 30
_DEFAULT_TIMEOUT_S = 120.0
_STALE_TMP_S = 3600.0
_ERROR_LINES = 40


class CompilerNotFound(RuntimeError):
    """No usable C compiler: ``$CC`` names none, and none of cc, gcc, clang is on PATH."""


class BuildError(RuntimeError):
    """The C compiler failed; the message holds its stderr and where the source was saved.

    Attributes:
      source_path: the saved copy of the source that failed.
      stderr: the compiler's complete stderr.
    """

    def __init__(self, message: str, source_path: pathlib.Path | None = None,
                 stderr: str = ""):
        super().__init__(message)
        self.source_path = source_path
        self.stderr = stderr


class BuildTimeout(BuildError):
    """The C compiler ran over ``$KILN_BUILD_TIMEOUT`` seconds (default 120) and was
    killed."""


class BuildCancelled(BuildError):
    """The interpreter is exiting: the build was stopped (or not started)."""


class CacheError(BuildError):
    """No directory could take compiled libraries: the cache and the private temporary
    directory used instead were both unwritable (read-only, full disk)."""


def _build_timeout() -> float:
    """Seconds one compiler run may take: ``$KILN_BUILD_TIMEOUT``, default 120."""
    try:
        value = float(os.environ.get("KILN_BUILD_TIMEOUT", _DEFAULT_TIMEOUT_S))
    except ValueError:
        return _DEFAULT_TIMEOUT_S
    return value if value > 0 else _DEFAULT_TIMEOUT_S


# --------------------------------------------------------------------------- processes
#
# Compilers run in their own session (a terminal's Ctrl-C reaches Python, not them: an
# interrupted build is cancelled by us, not half-done by them), are killed with their
# whole process group on a timeout or an interrupt, and at interpreter exit: a thread's
# hook kills every running compiler before threads are joined, and no new one starts,
# so a pending background build never delays exit.

_live: set = set()
_exiting = False


class _SpawnRequest:
    """One compiler start handed from the main thread to the spawner thread."""

    __slots__ = ("cmd", "result", "cancelled", "lock", "done")

    def __init__(self, cmd: list[str]):
        self.cmd, self.result, self.cancelled = cmd, None, False
        self.lock, self.done = threading.Lock(), threading.Event()

    def serve(self) -> None:                    # on the spawner thread
        try:
            result = _spawn_here(self.cmd)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            result = e
        with self.lock:
            self.result, cancelled = result, self.cancelled
        self.done.set()
        if cancelled:
            _reap_started(result)

    def cancel(self) -> None:                   # on the main thread, interrupted
        with self.lock:
            self.cancelled, result = True, self.result
        _reap_started(result)


def _reap_started(result) -> None:
    if isinstance(result, subprocess.Popen):
        _kill(result)
        try:
            _finish(result, None, time.monotonic() + 5)
        except BaseException:  # noqa: BLE001 - it was killed; nothing to report
            pass


_spawner_queue = None       # queue.SimpleQueue served by the spawner thread, or None


def _spawner():
    global _spawner_queue
    with _state_lock:
        if _spawner_queue is None:
            q = queue.SimpleQueue()
            # Not a daemon: the interpreter joins it after _at_exit, so a start it has
            # begun finishes (and is killed as late) before the process ends.
            threading.Thread(target=_serve_spawns, args=(q,), name="kiln-spawner").start()
            _spawner_queue = q
        return _spawner_queue


def _serve_spawns(q) -> None:
    while (req := q.get()) is not None:
        req.serve()


def _spawn(cmd: list[str]) -> subprocess.Popen:
    """Start ``cmd`` in its own session and register it in ``_live``.

    On the main thread a Ctrl-C can raise KeyboardInterrupt at any bytecode, also
    inside ``Popen`` after the process exists (waiting for its exec) or before it is
    registered: that process would be known to nobody and outlive us. So the main thread
    has the spawner thread start it (signals are raised only on the main thread) and,
    when interrupted, cancels the request: whichever side sees the process kills it."""
    if threading.current_thread() is not threading.main_thread() or _exiting:
        return _spawn_here(cmd)
    req = _SpawnRequest(cmd)
    try:
        _spawner().put(req)
        req.done.wait()
    except BaseException:
        req.cancel()
        raise
    if isinstance(req.result, BaseException):
        raise req.result
    return req.result


def _spawn_here(cmd: list[str]) -> subprocess.Popen:
    if _exiting:
        raise BuildCancelled("kiln: the interpreter is exiting; build cancelled")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    with _state_lock:
        _live.add(p)
        # The exit hook sets _exiting before it snapshots _live under this lock: a process
        # added after that snapshot sees _exiting here and is killed by us.
        late = _exiting
    if late:
        _kill(p)
        with _state_lock:
            _live.discard(p)
        raise BuildCancelled("kiln: the interpreter is exiting; build cancelled")
    return p


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (OSError, AttributeError):
        try:
            p.kill()
        except OSError:
            pass


def _finish(p: subprocess.Popen, cmd, deadline: float | None) -> subprocess.CompletedProcess:
    """Wait for ``p`` until ``deadline`` (monotonic); past it, or on any exception
    (KeyboardInterrupt), kill its process group and re-raise."""
    try:
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            out, err = p.communicate(timeout=timeout)
        except BaseException:
            _kill(p)
            try:
                p.communicate(timeout=5)
            except BaseException:  # noqa: BLE001 - a grandchild holds the pipes: leave it
                pass
            raise
    finally:
        with _state_lock:
            _live.discard(p)
    if _exiting and p.returncode and p.returncode < 0:
        raise BuildCancelled("kiln: the interpreter is exiting; build cancelled")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _run(cmd: list[str], deadline: float | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` to completion within ``$KILN_BUILD_TIMEOUT`` (or ``deadline``).

    Raises:
      subprocess.TimeoutExpired: past the limit (the process group was killed).
      CompilerNotFound: when the program does not run.
    """
    if deadline is None:
        deadline = time.monotonic() + _build_timeout()
    try:
        p = _spawn(cmd)
    except OSError as e:
        raise CompilerNotFound(f"the C compiler {cmd[0]!r} does not run: {e}") from e
    return _finish(p, cmd, deadline)


def _at_exit() -> None:
    global _exiting
    _exiting = True
    with _state_lock:
        procs = list(_live)
        if _spawner_queue is not None:
            _spawner_queue.put(None)        # the spawner ends; the interpreter joins it
    for p in procs:
        _kill(p)


def _after_fork_in_child() -> None:
    global _exiting, _spawner_queue
    _live.clear()           # the parent's compilers: not ours to kill
    _spawner_queue = None   # the parent's spawner thread does not exist here
    _exiting = False


try:    # runs before threads (the background builder) are joined at exit
    threading._register_atexit(_at_exit)
except (AttributeError, RuntimeError):  # pragma: no cover
    atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --------------------------------------------------------------------------- state

_state_lock = threading.Lock()
_compiler_cache: dict[tuple[str | None, str | None], str | None] = {}
_identity_cache: dict[str, str] = {}
_flags_cache: dict[tuple[str, str | None], tuple[tuple[str, ...], bool]] = {}
_cpu_cache: list[str] = []
_key_locks: dict[str, threading.RLock] = {}
_libraries: dict[str, ctypes.CDLL] = {}
_modules: dict[str, types.ModuleType] = {}
_stats: dict[str, float] = {"builds": 0, "hits": 0, "memory_hits": 0, "seconds": 0.0,
                            "last_seconds": 0.0, "failures": 0, "evictions": 0}


def stats() -> dict:
    """Counters of this process's builds.

    Returns:
      A new dict: ``builds`` (compiler runs that produced a library), ``hits`` (libraries
      found in the disk cache), ``memory_hits`` (:func:`load_library` /
      :func:`build_extension` calls answered by the in-process cache), ``seconds``
      (total time spent in the compiler), ``last_seconds`` (the latest build's),
      ``failures`` (failed builds) and ``evictions`` (cache entries deleted by the size
      cap).
    """
    with _state_lock:
        return dict(_stats)


def last_build_seconds() -> float:
    """Seconds the latest compiler run of this process took (0.0 when none ran)."""
    with _state_lock:
        return float(_stats["last_seconds"])


def _count(name: str, amount: float = 1) -> None:
    with _state_lock:
        _stats[name] += amount


# --------------------------------------------------------------------------- compiler

def _resolve(argv: list[str]) -> list[str] | None:
    if not argv:
        return None
    prog = shutil.which(argv[0])
    return None if prog is None else [prog, *argv[1:]]


def find_compiler() -> str | None:
    """The C compiler command: ``$CC`` when set, else the first of cc, gcc, clang on PATH.

    ``$CC`` may hold arguments (``"ccache gcc"``); its program is resolved on PATH. When
    ``$CC`` is set but names no program, there is no compiler (it is not second-guessed).
    The answer is cached per value of ``$CC`` and ``$PATH``.

    Returns:
      A shell-quoted command line whose first word is an absolute path, or None.
    """
    env_cc = os.environ.get("CC")
    cache_key = (env_cc, os.environ.get("PATH"))
    with _state_lock:
        if cache_key in _compiler_cache:
            return _compiler_cache[cache_key]
    found: list[str] | None = None
    if env_cc and env_cc.strip():
        try:
            found = _resolve(shlex.split(env_cc))
        except ValueError:
            found = None
    else:
        for cand in ("cc", "gcc", "clang"):
            found = _resolve([cand])
            if found:
                break
    result = shlex.join(found) if found else None
    with _state_lock:
        _compiler_cache[cache_key] = result
    return result


def _compiler_argv() -> list[str]:
    cc = find_compiler()
    if cc is None:
        env_cc = os.environ.get("CC")
        where = f"$CC={env_cc!r} names no program on PATH" if env_cc else \
            "none of cc, gcc, clang is on PATH"
        raise CompilerNotFound(f"kiln needs a C compiler: {where}.")
    return shlex.split(cc)


def compiler_identity() -> str:
    """The compiler's command and the first line of its ``--version`` output (cached).

    Part of every cache key, so upgrading the compiler rebuilds everything.

    Raises:
      CompilerNotFound: when there is no compiler or it does not run.
    """
    argv = _compiler_argv()
    cc = shlex.join(argv)
    with _state_lock:
        ident = _identity_cache.get(cc)
    if ident is not None:
        return ident
    try:
        proc = _run([*argv, "--version"])
    except subprocess.TimeoutExpired as e:
        raise CompilerNotFound(
            f"`{cc} --version` ran over {_build_timeout():g} s and was killed (the limit "
            "is KILN_BUILD_TIMEOUT, in seconds)") from e
    except (OSError, subprocess.SubprocessError) as e:
        raise CompilerNotFound(f"the C compiler {cc!r} does not run: {e}") from e
    out = (proc.stdout or proc.stderr).strip()
    if proc.returncode != 0 and not out:
        raise CompilerNotFound(f"`{cc} --version` failed with status {proc.returncode}")
    ident = f"{cc}\n{out.splitlines()[0] if out else ''}"
    with _state_lock:
        _identity_cache[cc] = ident
    return ident


def cpu_features() -> str:
    """A string naming this CPU: the machine and a hash of its model and feature flags.

    Part of every cache key, since ``-march=native`` makes code for this CPU only. Read
    once per process from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere).
    """
    with _state_lock:
        if _cpu_cache:
            return _cpu_cache[0]
    parts: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            seen: set[str] = set()
            for line in f:
                field, _, value = line.partition(":")
                field = field.strip().lower()
                if field in ("vendor_id", "model name", "cpu family", "model", "flags",
                             "features", "cpu implementer", "cpu architecture",
                             "cpu variant", "cpu part", "isa") and field not in seen:
                    seen.add(field)
                    parts.append(f"{field}={' '.join(value.split())}")
    except OSError:
        pass
    if not parts:
        parts.append(platform.processor())
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    result = f"{platform.machine()}-{digest}"
    with _state_lock:
        _cpu_cache[:] = [result]
    return result


def _probe(argv: list[str], flags: Sequence[str]) -> bool:
    """Whether the compiler builds a small OpenMP shared library with ``flags``."""
    return _probe_detail(argv, flags)[0]


def _probe_detail(argv: list[str], flags: Sequence[str]) -> tuple[bool, str]:
    """:func:`_probe` and the compiler's stderr.

    Raises:
      CompilerNotFound: when the compiler hangs (killed after ``$KILN_BUILD_TIMEOUT``).
    """
    with tempfile.TemporaryDirectory(prefix="kiln-probe-") as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(csrc.text("probe.c"))
        try:
            proc = _run([*argv, *flags, src, "-o", os.path.join(tmp, "probe.so"), "-lm"])
        except subprocess.TimeoutExpired as e:
            raise CompilerNotFound(
                f"the C compiler {shlex.join(argv)!r} ran over {_build_timeout():g} s "
                "building a 6-line test library and was killed (the limit is "
                "KILN_BUILD_TIMEOUT, in seconds)") from e
        except (OSError, subprocess.SubprocessError, CompilerNotFound) as e:
            return False, str(e)
        return proc.returncode == 0, proc.stderr or ""


_WIDE = ("-mprefer-vector-width=512",)
_GOLD = ("-fuse-ld=gold",)


def _has_avx512() -> bool:
    """Whether this processor has AVX-512F and AVX-512VL (Linux ``/proc/cpuinfo``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {"avx512f", "avx512vl"} <= flags
    except OSError:
        pass
    return False


def intel_avx512() -> bool:
    """Whether this is an Intel processor with AVX-512F/VL (``/proc/cpuinfo``), where
    kiln's default builds use 512-bit vectors: the renderer's "auto" prefetches
    (``CRenderer.skew_prefetch``, ``cheap_prefetch``) are on there only. Read once per
    process."""
    with _state_lock:
        if _intel_cache:
            return _intel_cache[0]
    result = csrc.cpu_vendor() == "GenuineIntel" and _has_avx512()
    with _state_lock:
        _intel_cache[:] = [result]
    return result


_intel_cache: list = []


def _flags_and_openmp() -> tuple[tuple[str, ...], bool]:
    argv = _compiler_argv()
    env_flags = os.environ.get("KILN_CFLAGS")
    cache_key = (shlex.join(argv), env_flags)
    with _state_lock:
        hit = _flags_cache.get(cache_key)
    if hit is not None:
        return hit
    opt = tuple(shlex.split(env_flags)) if env_flags is not None else _DEFAULT_OPT
    ident = compiler_identity()
    record_name = "flags-" + hashlib.sha256(
        "\0".join([str(_FORMAT), ident, cpu_features(), repr(opt)]).encode()
    ).hexdigest()[:32] + ".json"
    with _open_cache() as cache:
        record = _read_json(cache.so_fd, record_name)
    if record is not None and all(isinstance(record.get(k), bool)
                                  for k in ("march", "openmp", "wide", "gold")):
        march, omp, wide, gold = (record[k] for k in ("march", "openmp", "wide", "gold"))
    else:
        march_choices = (True, False) if env_flags is None else (False,)
        march, omp = march_choices[-1], False
        # Most compilers take everything: one probe. Else prefer -march=native to OpenMP.
        errors = ""
        for m in march_choices:
            for o in (True, False):
                base = [f for f in opt if m or env_flags is not None or f != "-march=native"]
                works, errors = _probe_detail(argv, [*_SEMANTICS, *base, "-fPIC", "-shared",
                                                     *(["-fopenmp"] if o else [])])
                if works:
                    march, omp = m, o
                    break
            else:
                continue
            break
        else:       # not even plain C builds: no compiler to speak of (never recorded)
            shown = "\n".join(errors.strip().splitlines()[:_ERROR_LINES])
            raise CompilerNotFound(
                f"the C compiler {shlex.join(argv)!r} fails to build a 6-line test library"
                + (f" with KILN_CFLAGS={env_flags!r}" if env_flags is not None else "")
                + (f":\n{shown}" if shown else ""))
        # On AVX-512 processors, 512-bit vectors: gcc's tunings prefer 256 bits, which
        # left exp-heavy loops (random.normal, logsumexp) 1.2-1.7x slower here
        # (benchmarks/NOTES.md). Default flags only; kept if the compiler takes it.
        wide = False
        if env_flags is None and march and _has_avx512():
            base = [f for f in opt if march or f != "-march=native"]
            wide = _probe(argv, [*_SEMANTICS, *base, *_WIDE, "-fPIC", "-shared",
                                 *(["-fopenmp"] if omp else [])])
        # GNU gold links a program's units in ~16 ms where ld.bfd takes ~24 (the link is
        # the serial end of every build). Kept if the toolchain has it (binutils may not).
        base = [f for f in opt if march or env_flags is not None or f != "-march=native"]
        gold = _probe(argv, [*_SEMANTICS, *base, *(_WIDE if wide else ()), "-fPIC",
                             "-shared", *(["-fopenmp"] if omp else []), *_GOLD])
        try:    # a cache we cannot write only costs the probes again next time
            with _open_cache() as cache:
                _write_json(cache.so_fd, record_name, {"march": march, "openmp": omp,
                                                       "wide": wide, "gold": gold,
                                                       "compiler": ident})
        except OSError:
            pass
    base = tuple(f for f in opt if march or env_flags is not None or f != "-march=native")
    if wide:
        base += _WIDE
    result = ((*_SEMANTICS, *base, "-fPIC", "-shared", *(("-fopenmp",) if omp else ()),
               *(_GOLD if gold else ())), omp)
    with _state_lock:
        _flags_cache[cache_key] = result
    return result


def default_flags() -> list[str]:
    """The flags every build uses, before ``extra_flags``.

    ``-fno-math-errno -ffp-contract=off``, then ``-O3 -march=native`` (plus
    ``-mprefer-vector-width=512`` on AVX-512 processors) or the words of
    ``$KILN_CFLAGS`` when set (so those may override the former), then
    ``-fPIC -shared -fopenmp``. ``-march=native`` (default only) and ``-fopenmp`` are
    left out when a probe build with them fails; the probe's verdict is cached in
    memory and on disk, per compiler, CPU and ``$KILN_CFLAGS``.

    Raises:
      CompilerNotFound: when there is no compiler.
    """
    return list(_flags_and_openmp()[0])


def openmp_available() -> bool:
    """Whether :func:`default_flags` holds ``-fopenmp`` (the compiler can build OpenMP)."""
    return _flags_and_openmp()[1]


# --------------------------------------------------------------------------- cache dir
#
# Threat model (docs/compiler.md): another local user must not be able to make this
# process load a library they wrote. So the root and every directory under it must be
# owned by us and not writable by group or others (else: one warning, then a private
# temporary directory), and every file is opened relative to a directory descriptor
# of a checked directory, without following symbolic links, checked on that open
# descriptor, and loaded from it (``/proc/self/fd``) -- no name is looked up twice.

_O_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

_fallback: dict[str, pathlib.Path] = {}   # refused/unusable root -> private directory
_private: list = []                       # [path, pid that removes it at exit]
_warned: set[str] = set()


class _Unsafe(Exception):
    """A cache directory someone else could write into."""

    def __init__(self, path, cause: str):
        super().__init__(f"{path}: {cause}")
        self.path, self.cause = path, cause


def _warn_once(tag: str, message: str) -> None:
    with _state_lock:
        if tag in _warned:
            return
        _warned.add(tag)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _configured_root() -> pathlib.Path:
    env = os.environ.get("KILN_CACHE_DIR")
    if env:
        return pathlib.Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg and os.path.isabs(xdg) else pathlib.Path.home() / ".cache"
    return base / "kiln"


def _check_dir_fd(fd: int, shown) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise _Unsafe(shown, "it is not a directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise _Unsafe(shown, f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _Unsafe(shown, f"it is writable by group or others (mode "
                             f"{stat.S_IMODE(st.st_mode):04o})")


def _mkdir_at(name: str, dir_fd: int | None) -> None:
    """``mkdir name`` (mode 0700) relative to ``dir_fd``; an existing one is kept."""
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        pass


def _open_dir_at(name, dir_fd: int | None, shown) -> int:
    """Create (0700) and open the directory ``name`` (not a link) and check it is ours."""
    _mkdir_at(name, dir_fd)
    try:
        fd = os.open(name, _O_DIR | (_O_NOFOLLOW if dir_fd is not None else 0),
                     dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Unsafe(shown, "it is a symbolic link or not a directory") from e
        raise
    try:
        _check_dir_fd(fd, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fd_path(fd: int) -> str | None:
    """A path naming exactly the open file or directory ``fd`` (Linux), else None."""
    p = f"/proc/{os.getpid()}/fd/{fd}"
    return p if os.path.exists(p) else None


class _Cache:
    """The open, checked directories of one cache root: ``root_fd``, ``so_fd``,
    ``failed_fd`` (and their paths, for messages). Close with :meth:`close`."""

    def __init__(self, root: pathlib.Path, private: bool):
        self.root, self.private = root, private
        self.so, self.failed = root / "so", root / "failed"
        self.root_fd = self.so_fd = self.failed_fd = None

    def open(self) -> _Cache:
        try:
            os.makedirs(self.root.parent, exist_ok=True)
            self.root_fd = _open_dir_at(str(self.root), None, self.root)
            self.so_fd = _open_dir_at("so", self.root_fd, self.so)
            self.failed_fd = _open_dir_at("failed", self.root_fd, self.failed)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for name in ("failed_fd", "so_fd", "root_fd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)

    def __enter__(self) -> _Cache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _private_root() -> pathlib.Path:
    """This process's private cache (``mkdtemp``, mode 0700), removed at exit."""
    with _state_lock:
        if _private and _private[1] == os.getpid() and os.path.isdir(_private[0]):
            return _private[0]
        path = pathlib.Path(tempfile.mkdtemp(prefix="kiln-cache-"))
        _private[:] = [path, os.getpid()]
    atexit.register(_remove_private, path, os.getpid())
    return path


def _remove_private(path: pathlib.Path, pid: int) -> None:
    if os.getpid() == pid:          # not in a forked child: the parent still uses it
        shutil.rmtree(path, ignore_errors=True)


def _use_private(root: pathlib.Path, cause: str, fix: str) -> pathlib.Path:
    private = _private_root()
    with _state_lock:
        _fallback[str(root)] = private
    _warn_once(f"root:{root}", f"kiln: not using the cache directory {root}: {cause}. "
               f"Compiled libraries go to a private temporary directory ({private}, "
               f"removed at exit) instead, so nothing is reused across runs. Fix: {fix}.")
    return private


def _unsafe_fix(e: _Unsafe) -> str:
    return (f"use a directory only you can write: `chown $(id -un) {e.path} && chmod 700 "
            f"{e.path}`, or set KILN_CACHE_DIR to another directory")


def _os_fix(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "free disk space, or set KILN_CACHE_DIR to a directory on another disk"
    return "make it writable by you, or set KILN_CACHE_DIR to a writable directory"


def _open_cache() -> _Cache:
    """The cache to use now: the configured root when it is safe and usable, else (one
    warning) this process's private directory.

    Raises:
      CacheError: when the private directory cannot be used either.
    """
    root = _configured_root()
    with _state_lock:
        private = _fallback.get(str(root))
    if private is None:
        try:
            return _Cache(root, private=False).open()
        except _Unsafe as e:
            private = _use_private(root, f"{e.path}: {e.cause}", _unsafe_fix(e))
        except OSError as e:
            private = _use_private(root, f"{e.strerror or e} ({e.filename or root})",
                                   _os_fix(e))
    return _open_private(root, private)


def _open_private(root: pathlib.Path, private: pathlib.Path) -> _Cache:
    try:
        return _Cache(private, private=True).open()
    except (OSError, _Unsafe) as e:
        raise CacheError(
            f"kiln: no directory to build compiled libraries in: {root} is not usable and "
            f"neither is the private temporary directory {private} ({e}). Fix: free disk "
            "space, or set KILN_CACHE_DIR (or TMPDIR) to a writable directory of yours.",
        ) from e


def _cache_failed(cache: _Cache, e: OSError) -> _Cache:
    """After ``e`` writing into ``cache``: the private cache to retry in (one warning)."""
    cache.close()
    if cache.private:
        raise CacheError(
            f"kiln: writing compiled libraries to {cache.root} failed: {e.strerror or e}. "
            f"Fix: {_os_fix(e)} (or TMPDIR).") from e
    private = _use_private(_configured_root(), f"writing to it failed: {e.strerror or e} "
                           f"({e.filename or cache.so})", _os_fix(e))
    return _open_private(cache.root, private)


def cache_dir() -> pathlib.Path:
    """kiln's cache directory, created with mode 0700 when missing.

    ``$KILN_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/kiln``, else ``~/.cache/kiln``;
    read on every call. Libraries live in its ``so/`` subdirectory. The directory and
    every directory under it must be owned by the current user and not writable by
    group or others; when that one is not (or cannot be written), one warning says why
    and this returns a private temporary directory, removed at exit, used instead.
    """
    with _open_cache() as cache:
        return cache.root


def _safe_fd(dir_fd: int, name: str) -> int | None:
    """An open descriptor of ``name`` in ``dir_fd`` if it is a regular file (not a link)
    owned by us and not group/world writable, else None."""
    try:
        fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()) \
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        return None
    return fd


def _read_json(dir_fd: int, name: str) -> dict | None:
    fd = _safe_fd(dir_fd, name)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _create_at(dir_fd: int, name: str) -> int:
    """Create the new file ``name`` (mode 0600) in ``dir_fd``, open for writing."""
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                   0o600, dir_fd=dir_fd)


def _write_at(dir_fd: int, name: str, data: bytes) -> None:
    """Write ``name`` in ``dir_fd`` atomically (a temporary file renamed over it)."""
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    fd = _create_at(dir_fd, tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _unlink(tmp, dir_fd)
        raise


def _write_json(dir_fd: int, name: str, data: dict) -> None:
    _write_at(dir_fd, name, json.dumps(data, indent=1, sort_keys=True).encode())


def _unlink(path: str | os.PathLike, dir_fd: int | None = None) -> None:
    try:
        os.unlink(path, dir_fd=dir_fd)
    except OSError:
        pass


def _rmtree_at(name: str, dir_fd: int) -> None:
    """Remove the directory ``name`` in ``dir_fd`` and everything in it, never following
    a link (``shutil.rmtree(dir_fd=...)`` needs Python 3.11); errors are ignored."""
    try:
        fd = os.open(name, _O_DIR | _O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        _unlink(name, dir_fd)
        return
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for entry, is_dir in entries:
            if is_dir:
                _rmtree_at(entry, fd)
            else:
                _unlink(entry, fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError:
        pass


def _sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return h.hexdigest()
        h.update(chunk)


def _valid_entry(dir_fd: int, lib: str, meta: str, key: str) -> int | None:
    """An open descriptor of the library ``lib`` in ``dir_fd`` when it was built for
    ``key`` and its bytes match its metadata ``meta``; else None."""
    record = _read_json(dir_fd, meta)
    if record is None or record.get("key") != key or not isinstance(record.get("sha256"), str):
        return None
    fd = _safe_fd(dir_fd, lib)
    if fd is None:
        return None
    try:
        if _sha256_fd(fd) == record["sha256"]:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


class _FileLock:
    """An exclusive ``flock`` on ``name`` in ``dir_fd`` (a no-op where there is no
    ``fcntl``). Waits at most the build timeout: past it (a builder elsewhere hangs),
    or when the lock file cannot be created, it goes on unlocked -- builds are atomic,
    the lock only saves doing one twice."""

    def __init__(self, dir_fd: int, name: str):
        self.dir_fd, self.name = dir_fd, name
        self.fd: int | None = None

    def __enter__(self) -> _FileLock:
        if fcntl is None:
            return self
        try:
            fd = os.open(self.name, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, 0o600,
                         dir_fd=self.dir_fd)
        except OSError:
            return self
        deadline = time.monotonic() + _build_timeout()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                return self
            except BlockingIOError:
                if time.monotonic() > deadline or _exiting:
                    os.close(fd)
                    return self
                time.sleep(0.02)
            except BaseException:
                os.close(fd)
                raise

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------------- eviction

def _max_bytes() -> int:
    try:
        return int(os.environ.get("KILN_CACHE_MAX_BYTES", _DEFAULT_MAX_BYTES))
    except ValueError:
        return _DEFAULT_MAX_BYTES


def _entry_stem(filename: str) -> str:
    return filename.lstrip(".").split(".", 1)[0]


def _evict(cache: _Cache, protect: str) -> None:
    """Delete least recently used entries until under 80% of the cap, if over it.

    An entry is every file of one stem (``{name}-{key[:32]}``) in ``so/`` and ``failed/``;
    its age is the newest mtime among its files. Temporary files and build directories
    older than an hour (left by killed builds) go too. ``protect`` is never deleted.
    """
    cap = _max_bytes()
    now = time.time()
    entries: dict[str, list[tuple[int, str, os.stat_result]]] = {}
    total = 0
    for dfd in (cache.so_fd, cache.failed_fd):
        with os.scandir(dfd) as it:
            names = [e.name for e in it]
        for name in names:
            try:
                st = os.lstat(name, dir_fd=dfd)
            except OSError:
                continue
            if name.startswith("."):  # in-progress work of some build
                if now - st.st_mtime > _STALE_TMP_S:
                    if stat.S_ISDIR(st.st_mode):
                        _rmtree_at(name, dfd)
                    else:
                        _unlink(name, dfd)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    continue
            total += st.st_size
            if not name.startswith("."):
                entries.setdefault(_entry_stem(name), []).append((dfd, name, st))
    if total <= cap:
        return
    target = 0.8 * cap
    order = sorted((max(st.st_mtime for _, _, st in files), stem)
                   for stem, files in entries.items() if stem != protect)
    for _, stem in order:
        if total <= target:
            break
        for dfd, name, st in entries[stem]:
            try:
                os.unlink(name, dir_fd=dfd)
                total -= st.st_size
            except OSError:
                pass
        _count("evictions")


# --------------------------------------------------------------------------- building

_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")


def _key(source: str, flags: Sequence[str], include_dirs: Sequence[str],
         libraries: Sequence[str], extra: Sequence[str] = ()) -> str:
    text = json.dumps({"format": _FORMAT, "compiler": compiler_identity(),
                       "flags": list(flags), "cpu": cpu_features(),
                       "include_dirs": [str(d) for d in include_dirs],
                       "libraries": list(libraries), "extra": list(extra),
                       "source": source}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _key_lock(key: str) -> threading.RLock:
    with _state_lock:
        lock = _key_locks.get(key)
        if lock is None:
            lock = _key_locks[key] = threading.RLock()
        return lock


def _dump_enabled() -> bool:
    return "c" in {s.strip() for s in os.environ.get("KILN_DUMP", "").split(",")}


def _library_args(libraries: Sequence[str]) -> list[str]:
    return [lib if lib.startswith("-") or os.sep in lib else f"-l{lib}" for lib in libraries]


class _Built:
    """A library found or built: its ``path`` in the cache, its full ``key``, and
    ``dir_fd``, a descriptor of the checked directory holding it (None once closed)."""

    __slots__ = ("path", "key", "dir_fd", "stem")

    def __init__(self, path: pathlib.Path, key: str, dir_fd: int, stem: str):
        self.path, self.key, self.stem = path, key, stem
        self.dir_fd: int | None = os.dup(dir_fd)

    def load_path(self) -> str:
        """A name ``dlopen`` resolves through the checked directory's descriptor (so a
        directory swapped in above it since the check is never looked at); unique per
        library, as glibc reuses a loaded object whose name matches."""
        fd_path = _fd_path(self.dir_fd) if self.dir_fd is not None else None
        return f"{fd_path}/{self.path.name}" if fd_path else str(self.path)

    def close(self) -> None:
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None


def _build(source: str, *, extra_flags: Sequence[str], include_dirs: Sequence[str],
           libraries: Sequence[str], name: str, suffix: str, key_extra: Sequence[str],
           flags: Sequence[str] | None = None) -> _Built:
    """Build (or find) one library. When the cache cannot be written (read-only, full),
    one warning, then the build is redone in this process's private directory."""
    if not name:
        raise ValueError("build: name must not be empty")
    argv = _compiler_argv()
    flags = [*default_flags(), *extra_flags] if flags is None else [*flags, *extra_flags]
    include_dirs = [str(d) for d in include_dirs]
    libraries = [str(lib) for lib in libraries]
    key = _key(source, flags, include_dirs, libraries, key_extra)
    stem = f"{_NAME_RE.sub('_', name)}-{key[:32]}"
    dump = _dump_enabled()
    if dump:
        print(f"// ===== kiln: C source of {stem}{suffix} ({source.count(chr(10)) + 1} "
              "lines) =====", file=sys.stderr)
        print(source, file=sys.stderr)
    with _key_lock(key):
        cache = _open_cache()
        try:
            try:
                return _build_in(cache, source, argv, flags, include_dirs, libraries, stem,
                                 suffix, key, dump)
            except OSError as e:
                cache = _cache_failed(cache, e)
                try:
                    return _build_in(cache, source, argv, flags, include_dirs, libraries,
                                     stem, suffix, key, dump)
                except OSError as e2:
                    cache = _cache_failed(cache, e2)     # raises CacheError
                    raise AssertionError("unreachable") from e2
        finally:
            cache.close()


def _build_in(cache: _Cache, source: str, argv: list[str], flags: list[str],
              include_dirs: list[str], libraries: list[str], stem: str, suffix: str,
              key: str, dump: bool) -> _Built:
    lib, meta = f"{stem}{suffix}", f"{stem}.json"

    def hit() -> _Built | None:
        fd = _valid_entry(cache.so_fd, lib, meta, key)
        if fd is None:
            return None
        try:
            os.utime(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
        _count("hits")
        if dump:
            print(f"// ===== kiln: {stem}: cache hit =====", file=sys.stderr)
        return _Built(cache.so / lib, key, cache.so_fd, stem)

    found = hit()
    if found is not None:
        return found
    with _FileLock(cache.so_fd, f"{stem}.lock"):
        found = hit()       # another process built it while we waited
        if found is not None:
            return found
        with _profile_span("cc", "compile", library=stem):
            seconds = _compile(cache, source, argv, flags, include_dirs, libraries,
                                   stem, suffix, lib, meta, key)
    if dump:
        print(f"// ===== kiln: {stem}: compiled in {seconds * 1e3:.1f} ms =====",
              file=sys.stderr)
    try:
        _evict(cache, protect=stem)
    except OSError:
        pass
    return _Built(cache.so / lib, key, cache.so_fd, stem)


def _output_fd(dir_fd: int, name: str) -> int | None:
    """The compiler's output ``name`` in our private build directory, opened (not a
    link), a regular file of ours, set to mode 0700 (the compiler follows the umask)."""
    try:
        fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and (not hasattr(os, "getuid") or st.st_uid == os.getuid()):
            os.fchmod(fd, 0o700)
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _compile(cache: _Cache, source: str, argv: list[str], flags: Sequence[str],
             include_dirs: list[str], libraries: list[str], stem: str, suffix: str,
             lib: str, meta: str, key: str) -> float:
    """Compile into a fresh directory under ``so/``, then rename the library and its
    metadata into place. Returns the compile time."""
    d = cache.so_fd
    tmp = f".{stem}.build-{os.urandom(6).hex()}"
    _mkdir_at(tmp, d)
    tmp_fd = None
    try:
        tmp_fd = _open_dir_at(tmp, d, cache.so / tmp)
        # The compiler is given the directory through our descriptor where /proc has it,
        # so what it writes lands in the directory checked above whatever its path does.
        where = _fd_path(tmp_fd) or str(cache.so / tmp)
        src = f"{where}/{stem}.c"
        out_name = f"{stem}{suffix}"
        out = f"{where}/{out_name}"
        incs = [f"-I{i}" for i in include_dirs]
        t0 = time.perf_counter()

        def compile_as(text: str, incs: list[str]):
            # (the second attempt, without the precompiled header, writes the source
            # again: the first one's file would make the exclusive create fail, which
            # read as an unwritable cache and moved the process to a private one)
            _unlink(f"{stem}.c", tmp_fd)
            with os.fdopen(_create_at(tmp_fd, f"{stem}.c"), "w") as f:
                f.write(text)
            if UNIT_MARK in text and not getattr(_units_tls, "serial", False):
                return _compile_units(text, argv, flags, incs, libraries, tmp_fd, where,
                                      stem, out)
            cmd = [*argv, *flags, *incs, src, "-o", out, *_library_args(libraries), "-lm"]
            return _run(cmd), cmd

        pch = _Pch.of(cache, source, argv, flags, tmp_fd, where)
        try:
            try:
                proc, cmd = compile_as(pch.text, incs + pch.incs)
                if proc.returncode != 0 and pch.incs:
                    # A precompiled header gcc could not use (damaged): without it, and
                    # it goes (the next build makes it again).
                    pch.discard()
                    proc, cmd = compile_as(source, incs)
            except BaseException:
                pch.abandon()           # a timeout, an interrupt: its build goes too
                raise
            pch.finish()
        except subprocess.TimeoutExpired as e:
            _count("failures")
            raise BuildTimeout(
                f"kiln: the C compiler ran over {_build_timeout():g} s building {stem} and "
                "was killed. Fix: check that $CC works, or raise the limit with "
                "KILN_BUILD_TIMEOUT (seconds).", _save_failed(cache, source, stem)) from e
        seconds = time.perf_counter() - t0
        with _state_lock:
            _stats["seconds"] += seconds
            _stats["last_seconds"] = seconds
        out_fd = _output_fd(tmp_fd, out_name) if proc.returncode == 0 else None
        if out_fd is None and "No space left on device" in (proc.stderr or ""):
            # a full disk, not a bad program: the caller retries elsewhere
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cache.so))
        if out_fd is None:
            _count("failures")
            saved = _save_failed(cache, source, stem)
            shown_dir = str(cache.so / tmp)
            stderr = (proc.stderr or "").replace(src, str(saved)).replace(where, shown_dir)
            cmd = [c.replace(where, shown_dir) for c in cmd]
            lines = stderr.splitlines()
            shown = "\n".join(lines[:_ERROR_LINES])
            if len(lines) > _ERROR_LINES:
                shown += f"\n... ({len(lines) - _ERROR_LINES} more lines)"
            raise BuildError(
                f"kiln: the C compiler failed (status {proc.returncode}) building {stem}.\n"
                f"command: {shlex.join(cmd)}\nsource saved at: {saved}\n{shown}",
                saved, stderr)
        try:
            digest = _sha256_fd(out_fd)
            record = {"key": key, "sha256": digest, "size": os.fstat(out_fd).st_size,
                      "compiler": compiler_identity(), "flags": list(flags),
                      "cpu": cpu_features(), "built": time.time()}
            with os.fdopen(_create_at(tmp_fd, meta), "w", encoding="utf-8") as f:
                json.dump(record, f, indent=1)
            # Library first: a reader that sees a new library beside old metadata (or
            # the reverse) finds the hashes differ, takes the lock and waits for us.
            os.replace(out_name, lib, src_dir_fd=tmp_fd, dst_dir_fd=d)
            os.replace(meta, meta, src_dir_fd=tmp_fd, dst_dir_fd=d)
        finally:
            os.close(out_fd)
        _count("builds")
        return seconds
    finally:
        if tmp_fd is not None:
            os.close(tmp_fd)
        _rmtree_at(tmp, d)


# A line closing the part of a program's source that every program shares (kiln's prelude,
# its math functions: ~700 lines with <math.h>, whose parse took ~35 ms of each unit's
# gcc). That part is compiled once per machine, compiler and flags into a gcc precompiled
# header in the cache (``kiln_pch-{hash}.h`` and ``.h.gch``, built beside the first
# program's units); later programs include it instead. The library's key is the full
# source's, so a build with the header and one without make the same library (same text).
PCH_MARK = "/* @kiln-pch-end */"


def pch_enabled() -> bool:
    """Whether builds use the precompiled header (:data:`PCH_MARK`): gcc, unless
    ``KILN_PCH=0``. The renderer puts what every program may need before the mark then
    (parsed once per machine), and only what a program needs otherwise."""
    if os.environ.get("KILN_PCH", "1") == "0":
        return False
    return "clang" not in compiler_identity().lower()      # gcc's .gch format


class _Pch:
    """A program's use of the shared precompiled header: ``text`` to compile (the source,
    or its part after :data:`PCH_MARK` behind an ``#include`` of the header), ``incs``
    (the cache directory, when the header is used), and a build of the header started
    beside this one when the cache has none (:meth:`finish` waits for it and renames it
    into place)."""

    def __init__(self, text: str, incs: list[str] = (), cache=None, name: str = "",
                 job=None, tmp_fd: int | None = None):
        self.text, self.incs, self._cache, self._name = text, list(incs), cache, name
        self._job, self._tmp_fd = job, tmp_fd

    @classmethod
    def of(cls, cache: _Cache, source: str, argv, flags, tmp_fd: int, where: str) -> _Pch:
        head, mark, rest = source.partition(PCH_MARK)
        if not mark or not pch_enabled():
            return cls(source)
        name = "kiln_pch-" + hashlib.sha256("\0".join(
            [str(_FORMAT), compiler_identity(), cpu_features(), *argv, *flags, head]
        ).encode()).hexdigest()[:32]
        if _pch_ready(cache.so_fd, name, head):
            so_dir = _fd_path(cache.so_fd) or str(cache.so)
            return cls(f'#include "{name}.h"\n{mark}{rest}', [f"-I{so_dir}"], cache, name)
        if getattr(_units_tls, "serial", False):
            return cls(source)      # a background build takes one core: not a second
        try:
            with os.fdopen(_create_at(tmp_fd, f"{name}.h"), "w") as f:
                f.write(head)
            cmd = [*argv, *flags, "-x", "c-header", f"{where}/{name}.h", "-o",
                   f"{where}/{name}.h.gch"]
            return cls(source, (), cache, name, (_spawn(cmd), cmd), tmp_fd)
        except (OSError, BuildCancelled):
            return cls(source)

    def discard(self) -> None:
        _unlink(f"{self._name}.h.gch", self._cache.so_fd)
        self.incs = []

    def abandon(self) -> None:
        """Kill the header's build, if one is running (the program's build failed)."""
        if self._job is not None:
            p, _ = self._job
            self._job = None
            _kill(p)
            try:
                _finish(p, None, time.monotonic() + 5)
            except BaseException:  # noqa: BLE001 - it was killed; nothing to report
                pass

    def finish(self) -> None:
        """Wait for the header's build, if one was started, and put it into the cache
        (header text first, then the compiled header); any failure only leaves the
        cache without it."""
        if self._job is None:
            return
        p, cmd = self._job
        self._job = None
        try:
            done = _finish(p, cmd, time.monotonic() + _build_timeout())
        except (subprocess.TimeoutExpired, BuildCancelled):
            return
        if done.returncode != 0:
            return
        fd = _output_fd(self._tmp_fd, f"{self._name}.h.gch")
        if fd is None:
            return
        os.close(fd)
        try:
            for n in (f"{self._name}.h", f"{self._name}.h.gch"):
                os.replace(n, n, src_dir_fd=self._tmp_fd, dst_dir_fd=self._cache.so_fd)
        except OSError:
            pass


def _pch_ready(dir_fd: int, name: str, head: str) -> bool:
    """Whether ``name.h`` (holding exactly ``head``) and ``name.h.gch`` are in the cache,
    regular files of ours; marks the header used (for the cache's LRU eviction)."""
    fd = _safe_fd(dir_fd, f"{name}.h")
    if fd is None:
        return False
    try:
        with os.fdopen(fd, "rb") as f:
            if f.read() != head.encode():
                return False
    except OSError:
        return False
    fd = _safe_fd(dir_fd, f"{name}.h.gch")
    if fd is None:
        return False
    try:
        ok = os.fstat(fd).st_size > 0
        os.utime(fd)
    except OSError:
        ok = False
    finally:
        os.close(fd)
    return ok


# A line splitting a source into translation units (kiln.compiler.render.render_c writes it):
# the text before the first one is shared (static definitions only), each part after
# one is compiled with it, all in parallel, and the objects are linked together.
UNIT_MARK = "/* @kiln-unit */"


_units_tls = threading.local()


class serial_units:
    """Within this context (on this thread) a source with translation units is compiled
    as one: for builds in the background, which should not take every core from the
    program running meanwhile. The library is the same (same key)."""

    def __enter__(self):
        self._old = getattr(_units_tls, "serial", False)
        _units_tls.serial = True
        return self

    def __exit__(self, *exc):
        _units_tls.serial = self._old
        return False


def _compile_units(source: str, argv, flags, incs, libraries, tmp_fd: int, where: str,
                   stem: str, out: str):
    """Compile the units of ``source`` side by side (``-c``), then link them. Returns
    the first failing process (or the link's) and its command."""
    common, *units = source.split(UNIT_MARK)
    procs = []
    objs = []
    deadline = time.monotonic() + _build_timeout()
    try:
        for k, unit in enumerate(units):
            # (a retry without the precompiled header writes the units again)
            _unlink(f"{stem}.u{k}.c", tmp_fd)
            with os.fdopen(_create_at(tmp_fd, f"{stem}.u{k}.c"), "w") as f:
                f.write(common + unit)
            obj = f"{where}/{stem}.u{k}.o"
            cmd = [*argv, *flags, *incs, "-c", f"{where}/{stem}.u{k}.c", "-o", obj]
            procs.append((_spawn(cmd), cmd))
            objs.append(obj)
        failed = None
        for p, cmd in procs:
            done = _finish(p, cmd, deadline)
            if done.returncode != 0 and failed is None:
                failed = (done, cmd)
    finally:
        for p, _ in procs:          # on a timeout or an interrupt: none outlives us
            if p.returncode is None:
                _kill(p)
                _finish(p, None, time.monotonic() + 5)
    if failed is not None:
        return failed
    cmd = [*argv, *flags, *objs, "-o", out, *_library_args(libraries), "-lm"]
    return _run(cmd, deadline), cmd


def _save_failed(cache: _Cache, source: str, stem: str) -> pathlib.Path:
    path = cache.failed / f"{stem}.c"
    try:
        _write_at(cache.failed_fd, f"{stem}.c", source.encode())
    except OSError:
        pass
    return path


def build_shared(source: str, *, extra_flags: Sequence[str] = (),
                 include_dirs: Sequence[str | os.PathLike] = (),
                 libraries: Sequence[str] = (), name: str = "kiln") -> pathlib.Path:
    """Build C source into a shared library, or find it in the disk cache.

    Args:
      source: C source text.
      extra_flags: compiler flags after :func:`default_flags`.
      include_dirs: directories passed as ``-I``.
      libraries: names linked as ``-l{name}`` (verbatim when they start with ``-`` or
        hold a path separator); ``-lm`` is always linked.
      name: a label for the file name (``{name}-{key[:32]}.so``).

    Returns:
      The path of the library in ``cache_dir()/so``, whose bytes have been checked
      against their recorded SHA-256.

    Raises:
      CompilerNotFound: when there is no usable C compiler.
      BuildError: when the compiler fails; the message holds its stderr (first 40 lines)
        and the path of a saved copy of the source. ``BuildTimeout`` (a subclass) when
        it ran over ``$KILN_BUILD_TIMEOUT`` and was killed; ``CacheError`` (a subclass)
        when no directory could take the library.
    """
    built = _build(source, extra_flags=extra_flags, include_dirs=include_dirs,
                   libraries=libraries, name=name, suffix=".so", key_extra=())
    built.close()
    return built.path


def _discard(built: _Built, suffix: str) -> None:
    """Delete a cache entry that does not load, so the next build makes it anew."""
    try:
        with _open_cache() as cache:
            if cache.so == built.path.parent:
                _unlink(f"{built.stem}{suffix}", cache.so_fd)
                _unlink(f"{built.stem}.json", cache.so_fd)
    except (OSError, BuildError):
        pass


def _load_checked(build, load, what: str, suffix: str):
    """``load(built)`` of ``build()``; a library that matches its hash but does not
    load (a damaged toolchain, a file from another machine) is deleted and rebuilt
    once."""
    for attempt in range(2):
        built = build()
        try:
            return load(built)
        except (OSError, ImportError) as e:
            if attempt:
                raise BuildError(f"kiln: the {what} {built.path} does not load even after "
                                 f"a rebuild: {e}. Fix: check the C compiler ($CC) and "
                                 "its flags ($KILN_CFLAGS).") from e
            _discard(built, suffix)
        finally:
            built.close()
    raise AssertionError("unreachable")


def load_library(source: str, **kw) -> ctypes.CDLL:
    """:func:`build_shared`, then ``ctypes.CDLL(path, mode=RTLD_LOCAL)``, once per process.

    The file loaded is the one whose hash was checked (opened once, loaded through its
    descriptor). A library that fails to load is rebuilt once.

    Args:
      source: C source text.
      **kw: the keyword arguments of :func:`build_shared`, and ``flags``: when given,
        the complete flags (``-fPIC -shared`` included) instead of
        :func:`default_flags`, for code whose bits must not depend on ``-march=native``
        or ``$KILN_CFLAGS``; ``extra_flags`` still follow them.

    Returns:
      The loaded library; the same object for the same source, flags and compiler in one
      process. Threads asking for the same library at once build and load it once.
    """
    extra_flags = tuple(kw.pop("extra_flags", ()))
    include_dirs = tuple(str(d) for d in kw.pop("include_dirs", ()))
    libraries = tuple(kw.pop("libraries", ()))
    name = kw.pop("name", "kiln")
    base = kw.pop("flags", None)
    if kw:
        raise TypeError(f"load_library: unexpected arguments {sorted(kw)}")
    base = None if base is None else tuple(base)
    flags = [*default_flags(), *extra_flags] if base is None else [*base, *extra_flags]
    key = _key(source, flags, include_dirs, libraries)
    with _key_lock(key):
        lib = _libraries.get(key)
        if lib is not None:
            _count("memory_hits")
            return lib

        def build():
            return _build(source, extra_flags=extra_flags, include_dirs=include_dirs,
                          libraries=libraries, name=name, suffix=".so", key_extra=(),
                          flags=base)

        def load(built):
            return ctypes.CDLL(built.load_path(), mode=getattr(ctypes, "RTLD_LOCAL", 0))

        lib = _load_checked(build, load, "library", ".so")
        if "kiln_set_host_fn" in source:    # native bodies calling back into Python
            from kiln.compiler.build.host_entry import install
            install(lib)
        _libraries[key] = lib
        return lib


def _extension_key_extra() -> list[str]:
    import numpy as np
    return ["extension", sys.version, sys.implementation.cache_tag or "",
            sysconfig.get_config_var("EXT_SUFFIX") or "", sysconfig.get_config_var("SOABI")
            or "", np.__version__]


def build_extension(source: str, module_name: str) -> types.ModuleType:
    """Build C source into a CPython extension module and import it, once per process.

    The source is compiled with Python's and NumPy's include directories, cached on disk
    like :func:`build_shared` (the key also holds the Python version, ABI tag and NumPy
    version), and loaded with ``importlib.machinery.ExtensionFileLoader`` from the very
    file whose hash was checked; one that fails to load is rebuilt once. The module is
    not put in ``sys.modules``.

    Args:
      source: C source defining ``PyInit_{last part of module_name}``.
      module_name: the module's ``__name__``.

    Returns:
      The module; the same object for the same source and name in one process.

    Raises:
      CompilerNotFound: when there is no C compiler.
      BuildError: when the compiler fails.
    """
    import numpy as np
    if not module_name or not all(p.isidentifier() for p in module_name.split(".")):
        raise ValueError(f"build_extension: bad module name {module_name!r}")
    include_dirs = [sysconfig.get_paths()["include"], np.get_include()]
    plat_include = sysconfig.get_paths().get("platinclude")
    if plat_include and plat_include not in include_dirs:
        include_dirs.append(plat_include)
    extra_flags = ["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    flags = [*default_flags(), *extra_flags]
    key_extra = [*_extension_key_extra(), module_name]
    key = _key(source, flags, include_dirs, (), key_extra)
    with _key_lock(key):
        mod = _modules.get(key)
        if mod is not None:
            _count("memory_hits")
            return mod

        def build():
            return _build(source, extra_flags=extra_flags, include_dirs=include_dirs,
                          libraries=(), name=module_name, suffix=suffix,
                          key_extra=key_extra)

        def load(built):
            loader = importlib.machinery.ExtensionFileLoader(module_name, built.load_path())
            spec = importlib.util.spec_from_loader(module_name, loader)
            if spec is None:  # pragma: no cover
                raise ImportError(f"cannot load the extension {module_name} from "
                                  f"{built.path}")
            spec.origin = built.load_path()
            m = importlib.util.module_from_spec(spec)
            loader.exec_module(m)
            m.__file__ = str(built.path)
            return m

        mod = _load_checked(build, load, "extension module", suffix)
        _modules[key] = mod
        return mod
