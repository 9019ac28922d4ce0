"""The profiler's recording state: one session at a time, events appended as tuples.

While a trace is active (:data:`active`), instrumented code appends events to the
session: ``(thread ident, start_ns, end_ns, name, category, args)`` with times from
``time.perf_counter_ns()``. Recording is a tuple and one ``list.append`` (atomic in
CPython, so threads need no lock). When no trace is active the hooks cost one boolean
test: :func:`span` returns a shared do-nothing context manager, and the executable's
call path reads a module-level flag that :func:`set_active` flips
(``kiln.compiler.build.executable.PROFILING``).

It also remembers where each traced program came from (:func:`note_source`): the user's
function, its file and first line, so that kernels can be attributed to source lines.

What it must not hold: file formats (``_xplane``, ``_perfetto``) or public API.
"""
from __future__ import annotations

import sys
import threading
import time
import weakref
from contextlib import nullcontext

#: True while a trace is being recorded (read by the hooks; flipped by set_active).
active = False

# Modules whose own ``PROFILING`` global mirrors ``active`` (hot paths read a global).
_FLAG_MODULES = ("kiln.compiler.build.executable",)

_perf_ns = perf_ns = time.perf_counter_ns
_get_ident = threading.get_ident
_NULL = nullcontext()


class Session:
    """The events of one trace (see the module docstring)."""

    def __init__(self, log_dir: str, options=None):
        self.log_dir = log_dir
        self.options = options
        self.events: list = []
        # thread ident -> (native thread id, thread name), filled on first sight.
        self.threads: dict = {}
        self.start_epoch_ns = time.time_ns()
        self.start_ns = _perf_ns()
        self.stop_ns = None
        self.stop_epoch_ns = None

    def note_thread(self, ident: int) -> None:
        if ident not in self.threads:
            t = threading.current_thread()
            self.threads[ident] = (threading.get_native_id(), t.name)


session: Session | None = None


def set_active(value: bool) -> None:
    """Turn recording on or off, in this module and in every hook module loaded."""
    global active
    active = bool(value)
    for name in _FLAG_MODULES:
        mod = sys.modules.get(name)
        if mod is not None:
            mod.PROFILING = active


def record(name: str, cat: str, start_ns: int, end_ns: int, args=None) -> None:
    """Append one complete event (``perf_counter_ns`` times) to the active session."""
    s = session
    if s is None:
        return
    ident = _get_ident()
    if ident not in s.threads:
        s.note_thread(ident)
    s.events.append((ident, start_ns, end_ns, name, cat, args))


class _Span:
    __slots__ = ("name", "cat", "args", "t0")

    def __init__(self, name, cat, args):
        self.name = name
        self.cat = cat
        self.args = args

    def __enter__(self):
        self.t0 = _perf_ns()
        return self

    def __exit__(self, *exc):
        record(self.name, self.cat, self.t0, _perf_ns(), self.args)
        return False


def span(name: str, cat: str = "host", **args):
    """A context manager recording ``name`` over its body while a trace is active (a shared
    no-op otherwise)."""
    if not active:
        return _NULL
    return _Span(name, cat, args or None)


# ---- where programs come from --------------------------------------------------------
# ClosedJaxpr -> (file, line, qualified name) of the user's function that was traced;
# by name as well, for programs made from it by transformations (jvp/transpose of a jit).
_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SOURCES_BY_NAME: dict = {}


def _function_source(fun):
    seen = 0
    while hasattr(fun, "__wrapped__") and seen < 16:
        fun = fun.__wrapped__
        seen += 1
    while hasattr(fun, "func") and seen < 32:      # functools.partial
        fun = fun.func
        seen += 1
    code = getattr(fun, "__code__", None)
    if code is None:
        return None
    return (code.co_filename, code.co_firstlineno,
            getattr(fun, "__qualname__", code.co_name))


def note_source(closed, fun, name: str | None = None) -> None:
    """Remember that ``closed`` was traced from ``fun`` (called when ``jit`` traces)."""
    src = _function_source(fun)
    if src is None:
        return
    try:
        _SOURCES[closed] = src
    except TypeError:
        pass
    if name:
        _SOURCES_BY_NAME[name] = src


def source_of(closed, name: str | None = None):
    """``(file, line, function)`` of the user's function behind ``closed``, or None."""
    try:
        src = _SOURCES.get(closed)
    except TypeError:
        src = None
    if src is None and name:
        src = _SOURCES_BY_NAME.get(name)
    return src


def compile_span(fn):
    """Decorator of ``kiln.backends.cpu.compile_closed(closed, name)``: one ``compile``
    span per program while a trace is active."""
    import functools

    @functools.wraps(fn)
    def wrapper(closed, name: str = "jit", *args, **kwargs):
        if not active:
            return fn(closed, name, *args, **kwargs)
        with _Span(f"compile jit({name})", "compile", {"program": name}):
            return fn(closed, name, *args, **kwargs)

    return wrapper


def run_reference(run_jaxpr, closed, args, name: str):
    """``run_jaxpr(closed.jaxpr, closed.consts, args)`` inside a ``reference`` span (the
    cpu backend's runs on the reference backend, while a trace is active)."""
    with _Span(f"jit({name}) on the reference backend", "reference", {"program": name}):
        return run_jaxpr(closed.jaxpr, closed.consts, args)
