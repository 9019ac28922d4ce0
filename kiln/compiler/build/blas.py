"""The BLAS that generated code calls for matrix products, and how many threads it gets.

Where the functions come from: the ``scipy-openblas32`` wheel (a kiln dependency: the
OpenBLAS SciPy's own wheels are built from, a newer release, with LP64 integers and
``scipy_``-prefixed symbols, so it coexists with NumPy's and SciPy's copies), loaded
with ``dlopen`` and used by kiln alone: its global thread count is set to one once.
Measured on a 2-core Zen 3 VM, OpenBLAS 0.3.34 from the wheel ran the MLP's GEMMs
5-9% faster than the 0.3.30 inside SciPy (benchmarks/NOTES.md, session 9).
``KILN_BLAS=scipy`` (or the wheel missing) uses SciPy's BLAS instead: SciPy exports its
BLAS as Cython capsules, ``scipy.linalg.cython_blas.__pyx_capi__``; each holds the address of a function
with the Fortran LP64 ABI (every argument a pointer, ``int`` dimensions, no hidden string
lengths). That works for any SciPy build, whichever BLAS it was linked against. The
row-major wrappers ``kiln_gemm_f32/f64`` live in a small glue library (built once per
machine, :func:`glue_library`) that gets the addresses of ``sgemm``/``dgemm``; each compiled
program gets the wrappers' addresses (``kiln_blas_init``) and calls them directly: no
Python, no ctypes on the hot path.

Threads: on a small shared machine a multi-threaded GEMM of modest size is *slower* than a
single-threaded one (spinning worker threads fight for the cores; measured 31 ms vs 3.2 ms
for 128x1024 @ 1024x1024 f32 under load), and BLAS worker threads that spin after a call
slow the OpenMP kernels that follow (measured: a 0.1 ms kernel took 8 ms after a
2-thread OpenBLAS call). So every BLAS call is single-threaded, and a large product
(``threads_for``) is split into row or column blocks over OpenMP threads, one BLAS call
each: one thread pool for everything. How "single-threaded" is made: the wheel's copy
is kiln's alone, so its one global thread count is set to 1 once, at load. SciPy's
copy (the fallback) is shared with the user's own SciPy calls, so each GEMM sets
``openblas_set_num_threads_local(1)`` (OpenBLAS's per-calling-thread setting, exported
by SciPy's wheels; it returns the previous setting, which is put back after the GEMM).
With another BLAS (no such symbol) the library's own setting stands.

kiln's own kernel: on Intel AVX-512 processors the glue runs float32 blocks of the
shapes it takes (M <= 512, 32 <= K <= 800, N >= 64) on ``csrc/kiln_sgemm.h`` instead,
3-16% faster than the wheel's SkylakeX sgemm on the MLP's and the transformer's blocks,
with the same bits (``own_sgemm_enabled``); on AVX2 processors whose wheel runs its
Haswell kernels (AMD Zen, Intel AVX2), ``csrc/kiln_sgemm_avx2.h``, about as fast as that
sgemm per block and with its bits, there for the split below. Where it is on, a product split over two
threads is cut into blocks (4-8 on the own kernel; exactly the OpenMP halves, for their
bits, on the BLAS) that the calling thread starts on at once while one helper thread
(``csrc/gemm_split.h``) takes blocks when it gets a core: the product never waits for
a thread that has not been scheduled yet (``KILN_GEMM_SPLIT=0``: OpenMP's static
halves; ``2``: the same blocks, claimed by the kernels' OpenMP worker instead of the
helper thread).

Row-major to column-major: BLAS is column-major and a row-major ``X`` (r x c, leading
dimension ``ld``) is the column-major ``X^T``. So ``C = op(A) @ op(B)`` in row-major is
``C^T = op(B)^T @ op(A)^T`` in column-major: swap the operands and M with N; each
operand's transpose flag stays as is.

What it must not hold: when to use a GEMM (``lower.py``), rendering (``render_c.py``).
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from dataclasses import dataclass

# A GEMM with fewer multiply-adds than this runs on one thread. The split runs on the
# OpenMP threads the kernels already use (each block a single-threaded BLAS call), so
# waking them costs microseconds; the MLP step at batch 128 (GEMMs of 2**25-2**26 MACs)
# went from 3.9 to 2.2 ms when the bar came down from 2**27 to 2**24, and at batch 1024
# its three products with a side of 10 (2**22.3 MACs: OpenBLAS is slow on such skinny
# shapes) from ~285 to ~150 us each at 2**22 (benchmarks/NOTES.md, "BLAS threads").
PARALLEL_MIN_MACS = 1 << 22


@dataclass(frozen=True)
class BlasInfo:
    """Addresses of the BLAS functions generated code calls, and what library they are."""

    sgemm: int
    dgemm: int
    set_threads_local: int      # 0 when the library has no per-thread setter
    library: str                # path of the shared object that holds sgemm
    max_threads: int            # threads a large GEMM may use


def _capsule_address(capsule) -> int:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype = ctypes.c_void_p
    get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get_ptr(capsule, get_name(capsule)))


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _library_of(address: int) -> str | None:
    """The shared object holding ``address`` (the BLAS SciPy's capsule wraps)."""
    try:
        libc = ctypes.CDLL(None)
        dladdr = libc.dladdr
    except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int
    info = _DlInfo()
    if not dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def _thread_setter(module_path: str) -> int:
    """Address of ``openblas_set_num_threads_local`` in the BLAS behind ``module_path``.

    ``dlsym`` on a library's handle searches that library and then its dependencies, so
    this finds the symbol in the BLAS SciPy's Cython module links against, not in another
    BLAS the process also loaded (NumPy's ILP64 OpenBLAS has the same symbol name).
    """
    try:
        lib = ctypes.CDLL(module_path)
        fn = lib.openblas_set_num_threads_local
    except (OSError, AttributeError):
        return 0
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


# The wheel's library, kept loaded for the life of the process.
_wheel_lib: list = []


def _wheel_blas() -> tuple[int, int, str] | None:
    """``(sgemm, dgemm, path)`` of the ``scipy-openblas32`` wheel's OpenBLAS, set to one
    thread, or None (not installed, or ``KILN_BLAS=scipy``). Found without importing the
    package (its ``__init__`` reads package metadata: milliseconds of a first call)."""
    choice = os.environ.get("KILN_BLAS", "").strip().lower()
    if choice == "scipy":
        return None
    if choice not in ("", "openblas32"):
        raise ValueError(f"KILN_BLAS must be 'openblas32' or 'scipy', got {choice!r}")
    import glob
    import importlib.util
    try:
        spec = importlib.util.find_spec("scipy_openblas32")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    here = list(spec.submodule_search_locations)[0]
    found = sorted(p for pattern in ("libscipy_openblas*.so*", "libscipy_openblas*.dylib",
                                     "libscipy_openblas*.dll")
                   for p in glob.glob(os.path.join(here, "lib", pattern)))
    if not found:
        return None
    # OpenBLAS reads its thread count when it is loaded and starts that many workers,
    # which spin for ~0.1 s of CPU after loading (measured): beside the tiered first
    # call's reference run and the gcc build on two cores that tripled the first call.
    # One thread from the start: no workers at all.
    old = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        lib = ctypes.CDLL(found[0])
        sgemm, dgemm = lib.scipy_sgemm_, lib.scipy_dgemm_
        set_threads = lib.scipy_openblas_set_num_threads
    except (OSError, AttributeError):
        return None
    finally:
        if old is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = old
    # kiln splits large products over its own OpenMP threads, one BLAS call each; the
    # library's workers would spin against them (module docstring). Nobody else calls
    # this copy, so its one global setting is ours.
    set_threads.argtypes = [ctypes.c_int]
    set_threads.restype = None
    set_threads(1)
    _wheel_lib.append(lib)
    return (ctypes.cast(sgemm, ctypes.c_void_p).value,
            ctypes.cast(dgemm, ctypes.c_void_p).value, found[0])


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover
        return max(1, os.cpu_count() or 1)


def _max_threads() -> int:
    env = os.environ.get("KILN_BLAS_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"KILN_BLAS_THREADS must be a positive integer, got {env!r}") \
                from None
    return _cpu_count()


def _cython_blas_module():
    """``scipy.linalg.cython_blas``, loaded from its file when ``scipy.linalg`` is not yet
    imported: importing that package costs ~50 ms (docstring processing), a large part
    of a first ``jit`` call; the extension module alone needs nothing from it."""
    import sys
    mod = sys.modules.get("scipy.linalg.cython_blas")
    if mod is not None:
        return mod
    try:
        import glob
        import importlib.machinery
        import importlib.util

        import scipy
        here = os.path.join(os.path.dirname(scipy.__file__), "linalg")
        suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
        files = [f for f in glob.glob(os.path.join(here, "cython_blas*"))
                 if f.endswith(suffixes)]
        if files:
            name = "scipy.linalg.cython_blas"
            loader = importlib.machinery.ExtensionFileLoader(name, files[0])
            spec = importlib.util.spec_from_file_location(name, files[0], loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
            return mod
    except Exception:  # noqa: BLE001 - an unusual layout: the normal import below
        pass
    from scipy.linalg import cython_blas
    return cython_blas


@functools.cache
def blas_info() -> BlasInfo:
    """Find the BLAS: the ``scipy-openblas32`` wheel's ``sgemm``/``dgemm``, else SciPy's
    with its per-thread thread setter.

    Raises:
      ImportError: when neither the wheel nor SciPy's Cython BLAS is importable.
    """
    wheel = _wheel_blas()
    if wheel is not None:
        return BlasInfo(sgemm=wheel[0], dgemm=wheel[1], set_threads_local=0,
                        library=wheel[2], max_threads=_max_threads())
    cython_blas = _cython_blas_module()
    caps = cython_blas.__pyx_capi__
    sgemm = _capsule_address(caps["sgemm"])
    dgemm = _capsule_address(caps["dgemm"])
    module_path = _library_of(sgemm) or getattr(cython_blas, "__file__", "")
    setter = _thread_setter(module_path)
    return BlasInfo(sgemm=sgemm, dgemm=dgemm, set_threads_local=setter,
                    library=module_path, max_threads=_max_threads())


def wheel_corename() -> str:
    """The ``scipy-openblas32`` wheel's kernel family for this processor
    (``scipy_openblas_get_corename``, lower case: "skylakex", "haswell", ...), "" when
    the BLAS in use is not the wheel."""
    info = blas_info()
    if not _wheel_lib or "scipy_openblas" not in os.path.basename(info.library):
        return ""
    fn = getattr(_wheel_lib[0], "scipy_openblas_get_corename", None)
    if fn is None:
        return ""
    fn.restype = ctypes.c_char_p
    return (fn() or b"").decode(errors="replace").strip().lower()


# Wheel kernel families whose sgemm kiln_sgemm_avx2.h reproduces bit for bit (checked:
# tests/compiler/test_own_sgemm.py). This wheel has no Zen kernels of its own: AMD Zen
# processors get its Haswell ones (OPENBLAS_CORETYPE=Zen reports "Haswell").
_AVX2_BITS_OF = ("haswell",)


def own_sgemm_enabled(kind: int | None = None) -> bool:
    """Whether float32 products may run on kiln's own kernel (for the shapes it takes)
    instead of the BLAS: ``csrc/kiln_sgemm.h`` (AVX-512, ``kind`` 512) or
    ``csrc/kiln_sgemm_avx2.h`` (AVX2+FMA without AVX-512, ``kind`` 256), whichever the
    glue was built with (``kind`` None: ask the loaded glue).

    ``KILN_OWN_SGEMM``: unset, the AVX-512 kernel on Intel processors with AVX-512
    (where it was measured faster: an Emerald Rapids Xeon; on AMD's double-pumped
    AVX-512 it is not measured), the AVX2 kernel where the BLAS is the wheel with its
    Haswell kernels (the bits it reproduces: AMD Zen 2/3 and Intel AVX2 processors);
    ``1``, wherever the glue has a kernel; ``0``, never. Read when the glue library is
    loaded (once per process)."""
    value = os.environ.get("KILN_OWN_SGEMM", "").strip().lower()
    if value not in ("", "auto", "0", "1"):
        raise ValueError(f"KILN_OWN_SGEMM must be 0 or 1, got {value!r}")
    if value in ("0", "1"):
        return value == "1"
    if kind is None:
        kind = own_sgemm_kind()
    if kind == 512:
        from kiln.compiler.build.build import intel_avx512
        return intel_avx512()
    if kind == 256:
        return wheel_corename() in _AVX2_BITS_OF
    return False


def own_sgemm_kind() -> int:
    """Which own float32 kernel the glue was built with: 512 (AVX-512), 256 (AVX2+FMA)
    or 0 (none: another processor, or flags without AVX2)."""
    lib = glue_library(blas_info())
    fn = lib.kiln_blas_own_sgemm_kind
    fn.argtypes = []
    fn.restype = ctypes.c_int
    return int(fn())


def own_sgemm_active() -> bool:
    """Whether the loaded glue runs float32 products on kiln's own kernel (built and
    enabled)."""
    lib = glue_library(blas_info())
    fn = lib.kiln_blas_own_sgemm
    fn.argtypes = []
    fn.restype = ctypes.c_int
    return bool(fn())


def split_mode() -> int:
    """``KILN_GEMM_SPLIT``: 1 (default) the claimed blocks with a helper thread, 2 the
    same blocks claimed by the kernels' OpenMP worker, 0 OpenMP's static halves."""
    value = os.environ.get("KILN_GEMM_SPLIT", "1").strip() or "1"
    if value not in ("0", "1", "2"):
        raise ValueError(f"KILN_GEMM_SPLIT must be 0, 1 or 2, got {value!r}")
    return int(value)


def threads_for(m: int, n: int, k: int, max_threads: int | None = None) -> int:
    """Threads one ``m x k @ k x n`` GEMM gets: one unless it is large (``PARALLEL_MIN_MACS``)."""
    top = _max_threads() if max_threads is None else max_threads
    return top if m * n * k >= PARALLEL_MIN_MACS else 1


def c_declarations(info: BlasInfo | None = None) -> str:
    """C text a generated library includes to call ``kiln_gemm_f32/f64`` (row-major).

    They are pointers into the BLAS glue library (:func:`glue_library`), set by
    ``kiln_blas_init`` (:func:`init_library`). The text before ``DEFINITIONS_MARK``
    declares them; the text after it defines them and ``kiln_blas_init``
    (``kiln/compiler/csrc/blas_program.h``)."""
    from kiln.compiler import csrc
    return csrc.text("blas_program.h")


def init_library(lib: ctypes.CDLL, info: BlasInfo) -> None:
    """Point a compiled library's ``kiln_gemm_f32/f64`` at the BLAS glue."""
    glue = glue_library(info)
    fn = lib.kiln_blas_init
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = None
    fn(ctypes.cast(glue.kiln_gemm_f32, ctypes.c_void_p),
       ctypes.cast(glue.kiln_gemm_f64, ctypes.c_void_p))


_glue_lock = threading.Lock()
_glue: dict = {}


def glue_library(info: BlasInfo) -> ctypes.CDLL:
    """The shared library holding the GEMM wrappers, built once per machine (disk cache)
    and loaded once per process, with the BLAS addresses and thread budget handed in.

    The wrappers live here rather than in each program: compiled into every program they
    cost ~110 ms of gcc time (their OpenMP regions and zero-fill loops), a third of the
    build of an MLP's gradient."""
    with _glue_lock:
        lib = _glue.get(info)
        if lib is None:
            from kiln.compiler import csrc
            from kiln.compiler.build.build import load_library
            src = (f"#define KILN_PARALLEL_MIN_MACS {PARALLEL_MIN_MACS}\n"
                   + csrc.source("blas_glue.c"))
            lib = load_library(src, name="kiln_blas")
            fn = lib.kiln_blas_init
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                           ctypes.c_int, ctypes.c_int]
            fn.restype = None
            kind = lib.kiln_blas_own_sgemm_kind
            kind.argtypes = []
            kind.restype = ctypes.c_int
            fn(info.sgemm, info.dgemm, info.set_threads_local or None, info.max_threads,
               int(own_sgemm_enabled(int(kind()))),
               split_mode())
            _glue[info] = lib
        return lib


# Between the declarations and the definitions: a source split into translation units
# (render_c) puts the declarations in the shared part, so every unit may call a GEMM, and
# the definitions in the first unit only.
DEFINITIONS_MARK = "/* @kiln-blas-definitions */"
