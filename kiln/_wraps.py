"""``wraps``: make a transformation's returned function describe the function it wraps.

Like ``functools.wraps`` (name, qualified name, module, docstring, annotations,
``__dict__``, ``__wrapped__``), but as JAX's helper it never fails: a callable whose
``__name__`` is not a string (an Equinox module whose fields make one) or that has no
such attributes is wrapped all the same, keeping whatever could be copied.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

_ATTRS = ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__")


def wraps(wrapped: Callable) -> Callable[[F], F]:
    """Decorator: copy ``wrapped``'s description onto the decorated function."""
    def deco(fun: F) -> F:
        for attr in _ATTRS:
            try:
                value = getattr(wrapped, attr)
            except AttributeError:
                continue
            try:
                setattr(fun, attr, value)
            except (AttributeError, TypeError):
                pass
        try:
            fun.__dict__.update(getattr(wrapped, "__dict__", {}))
        except (AttributeError, TypeError):
            pass
        fun.__wrapped__ = wrapped
        return fun
    return deco


def check_callable(fun) -> None:
    """JAX's argument check for transformations (``jit``, ``grad``, ``vmap``, ...):
    ``fun`` must be callable and not a generator function (whose body would never run
    under the trace: calling it only makes a generator object)."""
    import inspect
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun}")
    if inspect.isgeneratorfunction(fun):
        raise TypeError(f"Expected a function, got a generator function: {fun}")
