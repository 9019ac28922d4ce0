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
  returned.
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

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import platform
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import types
from collections.abc import Sequence

from kiln.profiler._recorder import span as _profile_span

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: builds still atomic, not serialized
    fcntl = None

__all__ = [
    "BuildError",
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
_COMPILE_TIMEOUT_S = 900.0
_STALE_TMP_S = 3600.0
_ERROR_LINES = 40

_PROBE_SOURCE = r"""
#include <math.h>
double kiln_probe(const double *x, int n) {
  double s = 0.0;
#pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += sqrt(x[i]);
  return s;
}
"""


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
        proc = subprocess.run([*argv, "--version"], capture_output=True, text=True,
                              timeout=60)
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
    with tempfile.TemporaryDirectory(prefix="kiln-probe-") as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(_PROBE_SOURCE)
        try:
            proc = subprocess.run([*argv, *flags, src, "-o", os.path.join(tmp, "probe.so"),
                                   "-lm"], capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0


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
    record = _read_json(_so_dir() / record_name)
    if record is not None and all(isinstance(record.get(k), bool)
                                  for k in ("march", "openmp", "wide", "gold")):
        march, omp, wide, gold = (record[k] for k in ("march", "openmp", "wide", "gold"))
    else:
        march_choices = (True, False) if env_flags is None else (False,)
        march, omp = march_choices[-1], False
        # Most compilers take everything: one probe. Else prefer -march=native to OpenMP.
        for m in march_choices:
            for o in (True, False):
                base = [f for f in opt if m or env_flags is not None or f != "-march=native"]
                if _probe(argv, [*_SEMANTICS, *base, "-fPIC", "-shared",
                                 *(["-fopenmp"] if o else [])]):
                    march, omp = m, o
                    break
            else:
                continue
            break
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
        _write_json(_so_dir() / record_name, {"march": march, "openmp": omp, "wide": wide,
                                              "gold": gold, "compiler": ident})
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

def _secure_dir(path: pathlib.Path, *, enforce: bool) -> pathlib.Path:
    """Create ``path`` with mode 0700 if missing; with ``enforce``, require it be ours."""
    try:
        os.makedirs(path.parent, exist_ok=True)
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)
    except FileExistsError:
        pass
    if enforce:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise RuntimeError(f"kiln: the cache directory {path} is not a directory owned "
                               "by the current user; refusing to use it.")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)
    return path


def cache_dir() -> pathlib.Path:
    """kiln's cache directory, created with mode 0700 when missing.

    ``$KILN_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/kiln``, else ``~/.cache/kiln``;
    read on every call. Libraries live in its ``so/`` subdirectory, which must be owned by
    the current user and is kept at mode 0700.
    """
    env = os.environ.get("KILN_CACHE_DIR")
    if env:
        path = pathlib.Path(env).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = pathlib.Path(xdg) if xdg and os.path.isabs(xdg) else \
            pathlib.Path.home() / ".cache"
        path = base / "kiln"
    return _secure_dir(path, enforce=False)


def _so_dir() -> pathlib.Path:
    return _secure_dir(cache_dir() / "so", enforce=True)


def _failed_dir() -> pathlib.Path:
    return _secure_dir(cache_dir() / "failed", enforce=True)


def _safe_file(path: pathlib.Path) -> os.stat_result | None:
    """``path``'s stat if it is a regular file owned by us and not group/world writable."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or \
            st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return st


def _read_json(path: pathlib.Path) -> dict | None:
    if _safe_file(path) is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: pathlib.Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _valid_entry(lib: pathlib.Path, meta: pathlib.Path, key: str) -> bool:
    """Whether ``lib`` is a library built for ``key`` whose bytes match its metadata."""
    if _safe_file(lib) is None:
        return False
    record = _read_json(meta)
    if record is None or record.get("key") != key or not isinstance(record.get("sha256"), str):
        return False
    try:
        return _sha256_file(lib) == record["sha256"]
    except OSError:
        return False


class _FileLock:
    """An exclusive ``flock`` on ``path`` (a no-op where there is no ``fcntl``)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> _FileLock:
        if fcntl is not None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                              0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

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


def _evict(protect: str) -> None:
    """Delete least recently used entries until under 80% of the cap, if over it.

    An entry is every file of one stem (``{name}-{key[:32]}``) in ``so/`` and ``failed/``;
    its age is the newest mtime among its files. Temporary files and build directories
    older than an hour (left by killed builds) go too. ``protect`` is never deleted.
    """
    cap = _max_bytes()
    now = time.time()
    entries: dict[str, list[tuple[pathlib.Path, os.stat_result]]] = {}
    total = 0
    for d in (_so_dir(), _failed_dir()):
        for p in d.iterdir():
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if p.name.startswith("."):  # in-progress work of some build
                if now - st.st_mtime > _STALE_TMP_S:
                    if stat.S_ISDIR(st.st_mode):
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        _unlink(p)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    continue
            total += st.st_size
            if not p.name.startswith("."):
                entries.setdefault(_entry_stem(p.name), []).append((p, st))
    if total <= cap:
        return
    target = 0.8 * cap
    order = sorted((max(st.st_mtime for _, st in files), stem)
                   for stem, files in entries.items() if stem != protect)
    for _, stem in order:
        if total <= target:
            break
        for p, st in entries[stem]:
            try:
                os.unlink(p)
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


def _build(source: str, *, extra_flags: Sequence[str], include_dirs: Sequence[str],
           libraries: Sequence[str], name: str, suffix: str, key_extra: Sequence[str],
           ) -> tuple[pathlib.Path, str]:
    """Build (or find) one library; return its path and its full key."""
    if not name:
        raise ValueError("build: name must not be empty")
    argv = _compiler_argv()
    flags = [*default_flags(), *extra_flags]
    include_dirs = [str(d) for d in include_dirs]
    libraries = [str(lib) for lib in libraries]
    key = _key(source, flags, include_dirs, libraries, key_extra)
    stem = f"{_NAME_RE.sub('_', name)}-{key[:32]}"
    dump = _dump_enabled()
    if dump:
        print(f"// ===== kiln: C source of {stem}{suffix} ({source.count(chr(10)) + 1} "
              "lines) =====", file=sys.stderr)
        print(source, file=sys.stderr)
    d = _so_dir()
    lib, meta = d / f"{stem}{suffix}", d / f"{stem}.json"

    def hit() -> bool:
        if not _valid_entry(lib, meta, key):
            return False
        try:
            os.utime(lib)
        except OSError:
            pass
        _count("hits")
        if dump:
            print(f"// ===== kiln: {stem}: cache hit =====", file=sys.stderr)
        return True

    with _key_lock(key):
        if hit():
            return lib, key
        with _FileLock(d / f"{stem}.lock"):
            if hit():  # another process built it while we waited
                return lib, key
            with _profile_span("cc", "compile", library=stem):
                seconds = _compile(source, argv, flags, include_dirs, libraries, d, stem,
                                   suffix, lib, meta, key)
        if dump:
            print(f"// ===== kiln: {stem}: compiled in {seconds * 1e3:.1f} ms =====",
                  file=sys.stderr)
        _evict(protect=stem)
    return lib, key


def _compile(source: str, argv: list[str], flags: Sequence[str], include_dirs: list[str],
             libraries: list[str], d: pathlib.Path, stem: str, suffix: str,
             lib: pathlib.Path, meta: pathlib.Path, key: str) -> float:
    tmp = pathlib.Path(tempfile.mkdtemp(dir=d, prefix=f".{stem}.build-"))
    try:
        src = tmp / f"{stem}.c"
        src.write_text(source)
        out = tmp / f"{stem}{suffix}"
        incs = [f"-I{i}" for i in include_dirs]
        cmd = [*argv, *flags, *incs, str(src), "-o", str(out),
               *_library_args(libraries), "-lm"]
        t0 = time.perf_counter()
        try:
            if UNIT_MARK in source and not getattr(_units_tls, "serial", False):
                proc, cmd = _compile_units(source, argv, flags, incs, libraries, tmp, stem,
                                           out)
            else:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=_COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            _count("failures")
            raise BuildError(f"kiln: the C compiler ran over {_COMPILE_TIMEOUT_S:.0f} s "
                             f"building {stem}", _save_failed(source, stem)) from e
        except OSError as e:
            raise CompilerNotFound(f"the C compiler {argv[0]!r} does not run: {e}") from e
        seconds = time.perf_counter() - t0
        with _state_lock:
            _stats["seconds"] += seconds
            _stats["last_seconds"] = seconds
        if proc.returncode != 0 or not out.is_file():
            _count("failures")
            saved = _save_failed(source, stem)
            stderr = proc.stderr.replace(str(src), str(saved))
            lines = stderr.splitlines()
            shown = "\n".join(lines[:_ERROR_LINES])
            if len(lines) > _ERROR_LINES:
                shown += f"\n... ({len(lines) - _ERROR_LINES} more lines)"
            raise BuildError(
                f"kiln: the C compiler failed (status {proc.returncode}) building {stem}.\n"
                f"command: {shlex.join(cmd)}\nsource saved at: {saved}\n{shown}",
                saved, stderr)
        os.chmod(out, 0o700)
        digest = _sha256_file(out)
        meta_tmp = tmp / f"{stem}.json"
        with open(meta_tmp, "w", encoding="utf-8") as f:
            json.dump({"key": key, "sha256": digest, "size": out.stat().st_size,
                       "compiler": compiler_identity(), "flags": list(flags),
                       "cpu": cpu_features(), "built": time.time()}, f, indent=1)
        os.chmod(meta_tmp, 0o600)
        # Library first: a reader that sees a new library beside old metadata (or the
        # reverse) finds the hashes differ, takes the lock and waits for us.
        os.replace(out, lib)
        os.replace(meta_tmp, meta)
        _count("builds")
        return seconds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# A line splitting a source into translation units (kiln.compiler.render_c writes it):
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


def _compile_units(source: str, argv, flags, incs, libraries, tmp: pathlib.Path, stem: str,
                   out: pathlib.Path):
    """Compile the units of ``source`` side by side (``-c``), then link them. Returns
    the first failing process (or the link's) and its command."""
    common, *units = source.split(UNIT_MARK)
    procs = []
    objs = []
    for k, unit in enumerate(units):
        src = tmp / f"{stem}.u{k}.c"
        src.write_text(common + unit)
        obj = tmp / f"{stem}.u{k}.o"
        cmd = [*argv, *flags, *incs, "-c", str(src), "-o", str(obj)]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True), cmd))
        objs.append(str(obj))
    deadline = time.monotonic() + _COMPILE_TIMEOUT_S
    failed = None
    for p, cmd in procs:
        try:
            stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            raise
        if p.returncode != 0 and failed is None:
            failed = (subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr), cmd)
    if failed is not None:
        return failed
    cmd = [*argv, *flags, *objs, "-o", str(out), *_library_args(libraries), "-lm"]
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=_COMPILE_TIMEOUT_S), cmd


def _save_failed(source: str, stem: str) -> pathlib.Path:
    path = _failed_dir() / f"{stem}.c"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{stem}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp, path)
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
      CompilerNotFound: when there is no C compiler.
      BuildError: when the compiler fails; the message holds its stderr (first 40 lines)
        and the path of a saved copy of the source.
    """
    return _build(source, extra_flags=extra_flags, include_dirs=include_dirs,
                  libraries=libraries, name=name, suffix=".so", key_extra=())[0]


def load_library(source: str, **kw) -> ctypes.CDLL:
    """:func:`build_shared`, then ``ctypes.CDLL(path, mode=RTLD_LOCAL)``, once per process.

    Args:
      source: C source text.
      **kw: the keyword arguments of :func:`build_shared`.

    Returns:
      The loaded library; the same object for the same source, flags and compiler in one
      process. Threads asking for the same library at once build and load it once.
    """
    extra_flags = tuple(kw.pop("extra_flags", ()))
    include_dirs = tuple(str(d) for d in kw.pop("include_dirs", ()))
    libraries = tuple(kw.pop("libraries", ()))
    name = kw.pop("name", "kiln")
    if kw:
        raise TypeError(f"load_library: unexpected arguments {sorted(kw)}")
    flags = [*default_flags(), *extra_flags]
    key = _key(source, flags, include_dirs, libraries)
    with _key_lock(key):
        lib = _libraries.get(key)
        if lib is not None:
            _count("memory_hits")
            return lib
        for attempt in range(2):
            path = build_shared(source, extra_flags=extra_flags, include_dirs=include_dirs,
                                libraries=libraries, name=name)
            try:
                lib = ctypes.CDLL(str(path), mode=getattr(ctypes, "RTLD_LOCAL", 0))
                break
            except OSError:
                if attempt or path.exists():  # not just evicted by another process
                    raise
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
    version), and loaded with ``importlib.machinery.ExtensionFileLoader``. The module is
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
        path, _ = _build(source, extra_flags=extra_flags, include_dirs=include_dirs,
                         libraries=(), name=module_name, suffix=suffix, key_extra=key_extra)
        loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
        spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
        if spec is None:  # pragma: no cover
            raise ImportError(f"cannot load the extension {module_name} from {path}")
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        _modules[key] = mod
        return mod
