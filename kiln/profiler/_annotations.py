"""User annotations: ``TraceAnnotation``, ``StepTraceAnnotation``, ``annotate_function``.

Each records one span over its body while a trace is active; otherwise entering and
leaving cost a flag test each.

What it must not hold: file formats or session management (``_session``).
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable

from kiln.profiler import _recorder

_perf_ns = time.perf_counter_ns


class TraceAnnotation:
    """Context manager that generates a trace event in the profiler.

    The trace event spans the duration of the code enclosed by the context. Keyword
    arguments are recorded as the event's arguments (stats).

    For example:

    >>> import kiln, kiln.numpy as jnp
    >>> x = jnp.ones((100, 100))
    >>> with kiln.profiler.TraceAnnotation("my_label"):
    ...   result = jnp.dot(x, x.T).block_until_ready()

    This makes a "my_label" event show up on the trace timeline if it runs while the
    process is being traced (:func:`kiln.profiler.trace`).
    """

    __slots__ = ("_name", "_kwargs", "_t0")
    _category = "annotation"

    def __init__(self, name: str, /, **kwargs):
        self._name = name
        self._kwargs = kwargs
        self._t0 = None

    def __enter__(self):
        self._t0 = _perf_ns() if _recorder.active else None
        return self

    def __exit__(self, *exc_info):
        t0 = self._t0
        if t0 is not None:
            self._t0 = None
            _recorder.record(self._name, self._category, t0, _perf_ns(),
                             dict(self._kwargs) or None)
        return False

    def set_metadata(self, **kwargs) -> None:
        """Add arguments to the event (recorded when the context exits)."""
        self._kwargs.update(kwargs)

    @staticmethod
    def is_enabled() -> bool:
        """Whether a trace is being recorded now."""
        return _recorder.active


class StepTraceAnnotation(TraceAnnotation):
    """Context manager that generates a step trace event in the profiler.

    The step trace event spans the duration of the code enclosed by the context; pass the
    step number as ``step_num``. For example:

    >>> import kiln
    >>> for step in range(3):
    ...   with kiln.profiler.StepTraceAnnotation("train", step_num=step):
    ...     pass

    makes "train" events with the argument ``step_num`` show up on the trace timeline
    (and marks them as steps, ``_r=1``, as JAX does) while the process is being traced.
    """

    __slots__ = ()
    _category = "step"

    def __init__(self, name: str, **kwargs):
        super().__init__(name, _r=1, **kwargs)


def annotate_function(func: Callable, name: str | None = None, **decorator_kwargs):
    """Decorator that generates a trace event for the execution of a function.

    For example:

    >>> import kiln, kiln.numpy as jnp
    >>> @kiln.profiler.annotate_function
    ... def f(x):
    ...   return jnp.dot(x, x.T).block_until_ready()
    >>> result = f(jnp.ones((100, 100)))

    makes an "f" event show up on the trace timeline if the function runs while the
    process is being traced. Arguments can be passed with :func:`functools.partial`
    (``partial(annotate_function, name="event_name")``); extra keyword arguments become
    the event's arguments.

    Args:
      func: the function to annotate.
      name: the event's name (default: ``func.__qualname__``).
      **decorator_kwargs: arguments recorded with each event.

    Returns:
      A wrapper of ``func`` with the same signature.
    """
    name = name or getattr(func, "__qualname__", None) or func.__name__

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with TraceAnnotation(name, **decorator_kwargs):
            return func(*args, **kwargs)

    return wrapper
