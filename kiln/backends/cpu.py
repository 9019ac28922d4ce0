"""The cpu backend: jitted programs run as native code built by kiln's compiler.

``run(closed, args)`` is what the ``jit`` primitive's implementation calls. The
first call of a program starts its compilation (passes, lowering, C rendering,
the C compiler: ``kiln.compiler``); until the library is ready, calls run on the
reference backend (same results), so a first call never waits for ``cc``, unless the
program would run long there (loops whose estimated work passes ``SYNC_BUILD_STEPS``:
then the first call builds it and waits).
``config.kiln_compile = "sync"`` (env ``KILN_COMPILE=sync``) waits instead; the
test suite uses it. ``config.kiln_backend = "reference"`` (env
``KILN_BACKEND=reference``) turns the compiler off.

With no C compiler on the machine, one warning says what to install and every
program runs on the reference backend.

At most ``kiln.compiler.build.loaded.max_loaded()`` programs stay loaded (env
``KILN_MAX_LOADED_PROGRAMS``, default 256): an LRU of the cache entries drops the
executable of the least recently called one (state ``evicted``), whose library is closed
once nothing refers to it; its next call loads it again (a disk cache hit). In a child
made by ``fork``, builds the parent had pending start again on the child's own pool.

What it must not hold: compiler internals (``kiln/compiler/``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kiln.backends import reference
from kiln.compiler.build import fork as _fork  # noqa: F401 - its at-fork hooks
from kiln.compiler.build import loaded as _loaded
from kiln.config import config, with_overrides
from kiln.core.jaxpr import check_lowerable
from kiln.core.trace import _debug_checks
from kiln.interpreters import pjit as _pjit
from kiln.profiler import _recorder as _profiler

logger = logging.getLogger("kiln")

_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_disabled_reason: list = []
# Entries whose executable is loaded, least recently called first (the LRU bound).
_lru: OrderedDict = OrderedDict()


class _Entry:
    __slots__ = ("exe", "state", "error", "future", "ref")

    def __init__(self):
        self.exe = None
        self.state = "pending"      # pending | ready | reference | failed | evicted
        self.error = None
        self.future = None
        self.ref = None             # the jaxpr the reference backend runs ("reference")


def _reference_form(closed):
    """What the reference backend runs for a program with nothing native: the program
    after the compiler's passes, so its bits are those compiled code would give (the
    passes rewrite divisions as XLA does, kiln/compiler/passes/xla_divide.py). Programs
    with extended dtypes (keys) run as written."""
    from kiln.compiler.passes.common import is_numpy_aval
    from kiln.compiler.passes.passes import optimize
    j = closed.jaxpr
    avals = [v.aval for v in (*j.invars, *j.constvars)] + [
        v.aval for e in j.eqns for v in e.outvars]
    if not all(is_numpy_aval(a) for a in avals):
        return closed
    try:
        return optimize(closed)
    except Exception:       # noqa: BLE001 - a pass bug must not stop the program
        return closed


def _admit(entry: _Entry) -> None:
    """``entry`` has a loaded executable: make it the most recent, evict the oldest
    above the bound, and close the libraries nothing uses any more."""
    limit = _loaded.max_loaded()
    with _lock:
        _lru[entry] = None
        _lru.move_to_end(entry)
        while len(_lru) > limit:
            old, _ = _lru.popitem(last=False)
            if old.exe is not None:
                old.exe = None
                old.state = "evicted"
    _loaded.sweep()


def _touch(entry: _Entry) -> None:
    try:
        _lru.move_to_end(entry)
    except KeyError:        # evicted meanwhile (its caller still holds the executable)
        pass


def _reload(entry: _Entry, closed, name):
    """Load an evicted program again (its library is normally in the disk cache)."""
    try:
        exe = compile_closed(closed, name)
    except BaseException as e:
        if not _is_fault(e):    # Ctrl-C, or a kiln bug: still evicted, the next call retries
            raise
        entry.error = e
        entry.state = "failed"  # a machine fault: reported, then the reference runs
        _report_failure(e)
        return None
    entry.exe = exe
    entry.state = "ready" if exe is not None else "reference"
    if exe is not None:
        _admit(entry)
    return exe


@_profiler.compile_span
def compile_closed(closed, name: str = "jit"):
    """Compile a ClosedJaxpr (``kiln.compiler.pipeline``); returns an Executable, or None
    when nothing in it is native. A program with guards falls back to the reference
    backend when a guard has changed."""
    from kiln.compiler.pipeline import compile_program
    exe = compile_program(closed, name)
    if exe is not None and exe.prog.guards:
        from kiln.core.physical import physical_closed
        phys = physical_closed(closed)  # the executable's arguments are storage arrays
        exe.fallback = lambda args: reference.run_jaxpr(phys.jaxpr, phys.consts, args)
    return exe


def _compile_into(entry: _Entry, closed, name):
    from kiln.compiler.build.build import serial_units
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
    if exe is not None:
        _admit(entry)


_warned_faults: set = set()


def _is_fault(e: BaseException) -> bool:
    """Whether ``e`` is a fault of the machine (compiler, cache, disk) rather than of
    kiln: those degrade to the reference backend in every compile mode."""
    from kiln.compiler.build.build import BuildError, CompilerNotFound
    return isinstance(e, (BuildError, CompilerNotFound, OSError))


def _report_failure(e):
    """One warning per kind of fault, naming its cause and fix. No compiler, an unusable
    one, or one that hangs turns compilation off for the process."""
    from kiln.compiler.build.build import BuildCancelled, BuildTimeout, CacheError, CompilerNotFound
    if isinstance(e, BuildCancelled):      # the interpreter is exiting: nothing to say
        return
    if isinstance(e, (CompilerNotFound, BuildTimeout)):
        if not _disabled_reason:
            _disabled_reason.append(str(e))
            if isinstance(e, BuildTimeout):
                msg = (f"{e} jitted code runs on the NumPy reference backend from now on "
                       "(same results, slower).")
            else:
                msg = (f"kiln: no usable C compiler ({e}); jitted code runs on the NumPy "
                       "reference backend. Install gcc or clang (or set CC) for compiled "
                       "kernels.")
            warnings.warn(msg, RuntimeWarning, stacklevel=4)
        return
    if not _is_fault(e):        # a kiln bug, met on the background thread
        logger.warning("kiln: compiling a program failed, running it on the reference "
                       "backend: %s: %s", type(e).__name__, e)
        return
    kind = type(e).__name__
    first = kind not in _warned_faults
    if isinstance(e, CacheError):
        text = f"{e} This program runs on the NumPy reference backend (same results)."
    elif isinstance(e, OSError):
        text = (f"kiln: compiling a program failed ({kind}: {e}); it runs on the NumPy "
                "reference backend (same results). Fix: check that the cache directory "
                "(KILN_CACHE_DIR) is writable and the disk has room.")
    else:
        text = (f"{e}\nThis program runs on the NumPy reference backend (same results). "
                "Fix: check that $CC works; if it does, please report this as a kiln bug "
                "with the saved source.")
    if first:
        warnings.warn(text, RuntimeWarning, stacklevel=4)
        _warned_faults.add(kind)     # after: a test suite's warnings-as-errors see each
    else:
        logger.warning("%s", text)


# Above this many estimated reference steps (~2-5 µs each), a first call waits for the
# build instead of running on the reference backend meanwhile: a loop-heavy program (an MCMC
# chain: a scan over a while loop) runs for seconds there, longer than building it.
SYNC_BUILD_STEPS = 200_000


def _long_on_reference(closed) -> bool:
    return (_has_long_loop(closed.jaxpr)
            or reference.estimated_steps(closed.jaxpr) > SYNC_BUILD_STEPS)


def _entry_for(closed, name, sync: bool = False) -> _Entry:
    entry = _cache.get(closed)
    if entry is not None:
        return entry
    check_lowerable(closed.jaxpr)
    with _lock:
        entry = _cache.get(closed)
        if entry is not None:
            return entry
        entry = _Entry()
        _cache[closed] = entry
    if _disabled_reason:
        entry.state = "reference"
    elif sync or config.kiln_compile == "sync" or _long_on_reference(closed):
        try:
            entry.exe = compile_closed(closed, name)
        except BaseException as e:
            if not _is_fault(e):    # Ctrl-C, or a kiln bug: the next call builds again
                with _lock:
                    _cache.pop(closed, None)
                raise
            _report_failure(e)
            entry.state = "reference"
            return entry
        entry.state = "ready" if entry.exe is not None else "reference"
        if entry.exe is not None:
            _admit(entry)
    else:
        global _pool
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-compile")
        # The build runs in this thread's config context and with its named axes (both
        # are per thread).
        overrides = config.thread_overrides()
        from kiln.interpreters import batching
        axes = batching.axis_env.snapshot()

        def build():
            with with_overrides(overrides), batching.bound_axes(axes):
                return _compile_into(entry, closed, name)
        entry.future = _pool.submit(build)
    return entry


# A scan at least this long (or any while loop, whose trip count is unknown) makes the
# first call wait for the C build: the reference backend runs a loop body equation by
# equation in Python, which for long loops costs far more than the build.
LONG_LOOP = 64


def _has_long_loop(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "while" or (name == "scan" and eqn.params.get("length", 0) >= LONG_LOOP):
            return True
        for p in eqn.params.values():
            for j in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(j, "jaxpr", j)
                if isinstance(getattr(inner, "eqns", None), list) and _has_long_loop(inner):
                    return True
    return False


def run(closed, args, name: str = "jit", reuse=None):
    """Run a closed jaxpr on NumPy arrays; returns the list of output arrays.

    ``reuse``: ``(input, output)`` pairs whose output may be written into the input's
    memory (donated buffers nothing else holds; the compiled program decides which it
    can take, see ``Executable.__call__``).

    Under ``jax_debug_nans``/``jax_debug_infs`` the outputs are checked with NumPy after
    the call (nothing else changes, so the flags cost nothing when off); see
    ``_check_outputs``.

    A program that uses mutable references (``Ref`` arguments, or references it creates)
    goes through the state handler (``kiln.state.discharge.run``): it runs the discharged,
    pure program and writes the references' final values back."""
    if config.jax_no_execution:
        raise RuntimeError(f"JAX tried to execute function {name}, but the no_execution "
                           "config option is set")
    if state_handler[0] is not None and state_handler[0][0](closed):
        return state_handler[0][1](closed, args, name, _run_pure)
    return _distinct(_run_pure(closed, args, name, reuse))


def _distinct(outs):
    """Each output in its own buffer, as JAX's: an output the program returns twice (``jit(
    lambda x: (x, x))``) is copied for its second place."""
    if len(outs) > 1:
        outs = list(outs)
        seen = set()
        for i, o in enumerate(outs):
            if id(o) in seen and isinstance(o, np.ndarray):
                outs[i] = o.copy()
            seen.add(id(o))
    return outs


#: ``(has_refs(closed), run(closed, args, name, run_pure))``, installed by ``kiln.state``.
state_handler: list = [None]


def _run_pure(closed, args, name: str = "jit", reuse=None):
    if config.kiln_backend == "reference":
        outs = (_profiler.run_reference(reference.run_jaxpr, closed, args, name)
                if _profiler.active
                else reference.run_jaxpr(closed.jaxpr, closed.consts, args))
    else:
        entry = _cache.get(closed)
        if entry is None:
            entry = _entry_for(closed, name)
        exe = entry.exe
        if exe is None and entry.state == "evicted":
            exe = _reload(entry, closed, name)
        if exe is not None:
            _touch(entry)
            outs = exe(args, reuse) if reuse else exe(args)
        else:
            run = closed
            if entry.state == "reference":
                if entry.ref is None:
                    entry.ref = _reference_form(closed)
                run = entry.ref
            # A tiered call while its program builds never waits for a compiler: an
            # eager kernel not loaded yet runs NumPy's math this time (_xla_eager).
            if entry.state == "pending":
                from kiln.lax._xla_eager import no_build_waits as waits
            else:
                waits = contextlib.nullcontext
            with waits():
                outs = (_profiler.run_reference(reference.run_jaxpr, run, args, name)
                        if _profiler.active
                        else reference.run_jaxpr(run.jaxpr, run.consts, args))
    if _debug_checks[0]:
        _check_outputs(closed, args, outs, name)
    return outs


def _check_outputs(closed, args, outs, name):
    """``jax_debug_nans``/``jax_debug_infs`` after a call: when an output holds a NaN/Inf,
    run the program again op by op on the reference backend, whose per-equation check
    raises ``FloatingPointError`` naming the primitive (and the user's line that staged
    it). When no operation produces one there (a NaN argument returned as is, or code
    the compiler changed), raise JAX's "de-optimized function did not produce invalid
    values" error."""
    if not (config.jax_debug_nans or config.jax_debug_infs):
        return      # on in another thread only (the switch is for every thread's values)
    for o in outs:
        kind = reference.special_kind(o)
        if kind is not None:
            break
    else:
        return
    reference.run_jaxpr(closed.jaxpr, closed.consts, args)
    raise FloatingPointError(
        f"{(f'jit({name})', kind)}. Because jax_config.debug_nans.value and/or "
        "config.jax_debug_infs is set, the de-optimized function (i.e., the function as if "
        "the `jit` decorator were removed) was called in an attempt to get a more precise "
        "error message. However, the de-optimized function did not produce invalid values "
        "during its execution. This behavior can result from `jit` optimizations causing "
        "the invalid value to be produced. It may also arise from having nan/inf literals "
        "as inputs or outputs, like `jax.jit(lambda ...: jax.numpy.nan)(...)`. \n\n"
        "It may be possible to avoid the invalid value by removing the `jit` decorator, at "
        "the cost of losing optimizations. \n\nIf you see this error, consider opening a "
        "bug report at https://github.com/jax-ml/jax.")


def prepare(closed, name: str = "jit") -> None:
    """Compile ``closed`` now, on the calling thread, so that later ``run`` calls from
    other threads find it ready (SPMD programs: ``kiln.parallel.spmd``)."""
    if _cache.get(closed) is None:
        _entry_for(closed, name, sync=True)


def plain_mode() -> bool:
    """True when jitted programs run compiled code (no reference backend, no NaN checks)."""
    return (config.kiln_backend == "cpu" and not config.jax_debug_nans
            and not config.jax_debug_infs and not config.jax_no_execution)


def ready_executable(closed):
    """The executable of ``closed`` if its compilation has finished, else None."""
    entry = _cache.get(closed)
    return entry.exe if entry is not None else None


def ready_entry(closed):
    """The cache entry of ``closed`` if its executable is loaded, else None: what a caller
    keeps to call it again through :func:`run_ready` (holding the executable itself
    would keep its library loaded past the LRU bound)."""
    entry = _cache.get(closed)
    return entry if entry is not None and entry.exe is not None else None


def owned(args: list, borrowed) -> list:
    """``args`` with the caller's arrays at the indices ``borrowed`` copied (the jit fast
    path's NumPy leaves: the caller may change them once the call has returned). Large
    copies go to the runtime's recycled huge-page blocks (``runtime.alloc``): a fresh
    64 MiB copy costs three times the memcpy in page faults."""
    from kiln.compiler.build.runtime import alloc
    args = list(args)
    for i in borrowed:
        a = args[i]
        c = alloc(a.shape, a.dtype)
        np.copyto(c, a)
        args[i] = c
    return args


def _unaliased(outs, args, borrowed, which):
    """``outs`` with each output of the indices ``which`` (those that may be views of
    arguments) that shares memory with a borrowed argument copied (a program returning
    its NumPy argument, or a reshape of it): outputs are the program's own, as JAX's."""
    mine = [args[i] for i in borrowed]
    outs = list(outs)
    for k in which:
        o = outs[k]
        if isinstance(o, np.ndarray) and any(np.may_share_memory(o, a) for a in mine):
            outs[k] = o.copy()
    return outs


def run_ready(entry, closed, args, name: str = "jit", borrowed=None):
    """Run ``closed`` through the entry from :func:`ready_entry` (plain mode only).
    ``borrowed``: indices of arguments that are the caller's own arrays; they are read
    in place (no copy) by a native program without host islands, which reads them before
    returning, and copied otherwise (Python code such as a callback may keep them)."""
    exe = entry.exe
    if exe is None:
        if borrowed:
            args = owned(args, borrowed)
        return _distinct(_run_pure(closed, args, name))
    _touch(entry)
    if not borrowed:
        return _distinct(exe(args))
    if exe.has_host_code():
        return _distinct(exe(owned(args, borrowed)))
    outs = exe(args)
    if exe.aliasing_outputs:
        outs = _unaliased(outs, args, borrowed, exe.aliasing_outputs)
    return _distinct(outs)


def submit_ready(entry, closed, args, borrowed=None):
    """Queue ``closed`` on the dispatch thread (``kiln._async_dispatch``) through the
    entry from :func:`ready_entry`; returns the outputs' ``Pending`` values, or None when
    the program must run on the calling thread (see ``Executable.runs_off_thread``).
    The arguments at the indices ``borrowed`` (the caller's own arrays) are copied first:
    the program runs after the call has returned."""
    exe = entry.exe
    if exe is None or not exe.runs_off_thread():
        return None
    _touch(entry)
    if borrowed:
        args = owned(args, borrowed)
    return exe.dispatch(args, closed.out_avals)


def executable_for(closed, name: str = "jit"):
    """The compiled executable of ``closed`` (compiling now if needed), or None."""
    entry = _cache.get(closed)
    if entry is not None and entry.state == "evicted":
        return _reload(entry, closed, name)
    if entry is None or entry.state == "pending":
        if entry is not None and entry.future is not None:
            entry.future.result()
        elif _disabled_reason:
            return None
        else:
            entry = _Entry()
            try:
                entry.exe = compile_closed(closed, name)
            except Exception as e:
                if not _is_fault(e):
                    raise
                _report_failure(e)
            entry.state = "ready" if entry.exe is not None else "reference"
            _cache[closed] = entry
            if entry.exe is not None:
                _admit(entry)
    return entry.exe


def clear_cache() -> None:
    """Forget every compiled program (``kiln.clear_caches``); builds still running finish
    into entries nothing refers to any more."""
    with _lock:
        _cache.clear()
        for entry in _lru:      # entries still held elsewhere (jit fast paths) reload
            entry.exe = None
            entry.state = "evicted"
        _lru.clear()
    _loaded.sweep()


def wait_for_compiles():
    """Block until every background compilation started so far has finished."""
    for entry in list(_cache.values()):
        if entry.future is not None:
            entry.future.result()


def _after_fork_in_child() -> None:
    """In a child made by ``fork``: a fresh lock and build pool (the parent's threads do
    not exist here); builds the parent had pending are forgotten, so their programs
    build again on their next call and ``wait_for_compiles`` does not wait for them."""
    global _pool, _lock
    _lock = threading.Lock()
    _pool = None
    for closed, entry in list(_cache.items()):
        future = entry.future
        if future is not None and not future.done():
            entry.future = None
            if entry.state == "pending":
                _cache.pop(closed, None)


os.register_at_fork(after_in_child=_after_fork_in_child)


def _run_jit(closed, args, name):
    """``jit_p``'s eager impl: run the program, marked as running for host callbacks."""
    from kiln.callbacks import program_running
    with program_running():
        return run(closed, args, name)


_pjit.set_backend_runner(_run_jit)
