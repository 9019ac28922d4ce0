"""``jax_check_tracer_leaks`` (``kiln.checking_leaks()``): find tracers that outlive their
trace.

When a trace of ``jit``, ``make_jaxpr``, a control-flow body or ``vmap`` ends with the flag
on, the code that owns the trace drops its own references to it and to its tracers and
calls :func:`check_leaks` with a weak reference to the trace. If the trace is still alive,
something still refers to it: every tracer among its referrers (after a garbage
collection, so that unreachable cycles do not count) was kept by user code, in a global, a
list, an attribute or a closure, and an ``UnexpectedTracerError`` names each one, where it
was created (the user's line that staged it, for tracers of jaxpr traces) and the chain of
references that keeps it alive. With the flag off nothing runs.
"""
from __future__ import annotations

import gc
import sys
import types
import weakref

from kiln.config import config
from kiln.errors import UnexpectedTracerError

_MAX_CHAIN = 12


def enabled() -> bool:
    """Whether the leak checker is on (``jax_check_tracer_leaks``)."""
    return bool(config.jax_check_tracer_leaks)


def check_leaks(trace_ref: weakref.ref) -> None:
    """Raise ``UnexpectedTracerError`` if tracers of the ended trace ``trace_ref()`` are
    still referenced. The caller must hold no reference to the trace or its tracers."""
    from kiln.core.trace import Tracer
    trace = trace_ref()
    if trace is None:
        return
    gc.collect()
    leaked = [r for r in gc.get_referrers(trace) if isinstance(r, Tracer)]
    if not leaked:
        return
    ignore = {id(leaked), id(sys._getframe())}
    parts = []
    for t in leaked:
        text = f"{t}"
        origin = _origin(t)
        if origin:
            text += f"\n{origin}"
        chain = _why_alive(t, ignore)
        if chain:
            text += "\n" + chain
        parts.append(text)
    name = type(trace).__name__
    del trace, leaked
    raise UnexpectedTracerError(
        f"Leaked trace {name}. Leaked tracer(s):\n\n" + "\n\n".join(parts) + "\n")


def _origin(tracer) -> str:
    """Where ``tracer`` was created, for tracers of jaxpr traces (from the source line of
    the equation that produced it), or ''."""
    var = getattr(tracer, "_var", None)
    trace = tracer._trace
    if var is None:
        return ""
    if var in getattr(trace, "invars", ()):
        return (f"This {type(tracer).__name__} with object id {id(tracer)} is an argument "
                "of the traced function.")
    for eqn in getattr(trace, "eqns", ()):
        if any(v is var for v in eqn.outvars):
            src = eqn.source_info
            where = f" on line:\n  {src}" if src is not None else ""
            return (f"This {type(tracer).__name__} with object id {id(tracer)} was created "
                    f"by {eqn.primitive.name}{where}")
    return ""


def _referrers(x, ignore: set) -> list:
    return [r for r in gc.get_referrers(x)
            if id(r) not in ignore and not isinstance(r, types.FrameType)]


def _describe(container, child_id: int) -> str:
    """How ``container`` holds the object of id ``child_id``."""
    name = f"<{type(container).__name__} {id(container)}>"
    if isinstance(container, types.ModuleType):
        keys = [k for k, v in vars(container).items() if id(v) == child_id]
        return f"{container.__name__}.{keys[0]}" if keys else container.__name__
    if isinstance(container, (list, tuple)):
        idx = [i for i, v in enumerate(container) if id(v) == child_id]
        return f"{name}[{idx[0]}]" if len(idx) == 1 else f"{name} at indices {idx}"
    if isinstance(container, dict):
        keys = [k for k, v in container.items() if id(v) == child_id]
        return f"{name}[{keys[0]!r}]" if len(keys) == 1 else f"{name} at keys {keys}"
    if isinstance(container, types.FunctionType):
        names = [n for n, c in zip(container.__code__.co_freevars, container.__closure__ or ())
                 if id(c.cell_contents) == child_id]
        var = f" {names[0]}" if names else ""
        return f"{name} ({container.__qualname__}) closed-over variable{var}"
    attrs = [k for k, v in getattr(container, "__dict__", {}).items() if id(v) == child_id]
    if attrs:
        return f"{name}.{attrs[0]}"
    return name


def _collapse(parent, ignore: set):
    """Skip the plumbing between a holder and its value: a module's or an instance's
    ``__dict__``, a closure cell."""
    if isinstance(parent, dict):
        for owner in _referrers(parent, ignore):
            if getattr(owner, "__dict__", None) is parent:
                return owner
    if isinstance(parent, types.CellType):
        for holder in _referrers(parent, ignore):
            if isinstance(holder, tuple):
                for fn in _referrers(holder, ignore):
                    if isinstance(fn, types.FunctionType):
                        return fn
    return parent


def _why_alive(x, ignore: set) -> str:
    """The chain of references that keeps ``x`` alive, one line per link."""
    lines, seen, child = [], set(), x
    ignore = set(ignore)
    for _ in range(_MAX_CHAIN):
        if id(child) in seen or isinstance(child, types.ModuleType):
            break
        parents = _referrers(child, ignore | {id(lines), id(seen)})
        if not parents:
            break
        first = parents[0]
        del parents  # (else it is a referrer of ``first`` in the next step)
        parent = _collapse(first, ignore)
        del first
        lines.append(f"<{type(child).__name__} {id(child)}> is referred to by "
                     f"{_describe(parent, id(child))}")
        seen.add(id(child))
        child = parent
    return "\n".join(lines)
