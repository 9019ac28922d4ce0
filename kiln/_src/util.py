"""``jax._src.util``: the small list and function helpers that JAX's test helpers and
tests import from JAX's private ``util`` module (``safe_map``, ``safe_zip``, ``unzip2``,
``split_list``, ...), written for kiln with the same behaviour.

``test_event_listener`` is the hook JAX's internals call with named events (cache misses,
lowerings); JAX's ``test_util`` installs its counter there. kiln's internals do not emit
those events, so tests that count them are not meaningful on kiln (the JAX-suite harness
reports them as skipped).
"""
from __future__ import annotations

import faulthandler
import functools
import itertools
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

#: Called by JAX's internals with ``(event_name, *args)``; kiln emits no such events.
test_event_listener: Callable[..., Any] | None = None


def safe_zip(*args: Iterable) -> list[tuple]:
    """``zip`` that raises ValueError when the arguments' lengths differ."""
    lists = [list(a) for a in args]
    n = len(lists[0]) if lists else 0
    for i, a in enumerate(lists[1:], 1):
        if len(a) != n:
            raise ValueError(f"safe_zip() argument {i + 1} is length {len(a)}, "
                             f"but argument 1 is length {n}")
    return list(zip(*lists))


def safe_map(f: Callable, *args: Iterable) -> list:
    """``map`` returning a list, raising ValueError when the arguments' lengths differ."""
    return [f(*xs) for xs in safe_zip(*args)]


def foreach(f: Callable, *args: Iterable) -> None:
    """``safe_map`` for its side effects: calls ``f`` on each tuple, returns None."""
    for xs in safe_zip(*args):
        f(*xs)


def unzip2(pairs: Iterable) -> tuple[tuple, tuple]:
    """Split pairs into two tuples."""
    a, b = [], []
    for x, y in pairs:
        a.append(x)
        b.append(y)
    return tuple(a), tuple(b)


def unzip3(triples: Iterable) -> tuple[tuple, tuple, tuple]:
    """Split triples into three tuples."""
    a, b, c = [], [], []
    for x, y, z in triples:
        a.append(x)
        b.append(y)
        c.append(z)
    return tuple(a), tuple(b), tuple(c)


def unzip(items: Iterable, n: int | None = None) -> tuple:
    """Split tuples of length ``n`` into ``n`` tuples (``zip(*items)``)."""
    items = list(items)
    if not items:
        return tuple(() for _ in range(n or 0))
    return tuple(tuple(col) for col in zip(*items))


def split_list(args: Sequence, ns: Sequence[int]) -> list[list]:
    """Cut ``args`` into consecutive pieces of lengths ``ns`` plus the rest."""
    args = list(args)
    out = []
    for n in ns:
        out.append(args[:n])
        args = args[n:]
    out.append(args)
    return out


def partition_list(bs: Sequence[bool], items: Sequence) -> tuple[list, list]:
    """Items where ``bs`` is False, and where it is True."""
    lists: tuple[list, list] = ([], [])
    for b, x in safe_zip(bs, items):
        lists[bool(b)].append(x)
    return lists


def merge_lists(bs: Sequence[bool], l0: Sequence, l1: Sequence) -> list:
    """Inverse of :func:`partition_list`."""
    i0, i1 = iter(l0), iter(l1)
    out = [next(i1) if b else next(i0) for b in bs]
    for rest in (i0, i1):
        if next(rest, None) is not None:
            raise ValueError("merge_lists: leftover items")
    return out


def tuple_update(t: tuple, idx: int, val: Any) -> tuple:
    """``t`` with element ``idx`` replaced by ``val``."""
    return t[:idx] + (val,) + t[idx + 1:]


def curry(f: Callable) -> Callable:
    """``curry(f)(*a)(*b)`` is ``f(*a, *b)`` (JAX's ``util.curry``)."""
    return functools.partial(functools.partial, f)


def subvals(lst: Sequence, replace: Iterable[tuple[int, Any]]) -> tuple:
    """``lst`` as a tuple with the ``(position, value)`` pairs of ``replace`` put in."""
    out = list(lst)
    for i, v in replace:
        out[i] = v
    return tuple(out)


def tuple_insert(t: tuple, idx: int, val: Any) -> tuple:
    """``t`` with ``val`` inserted before position ``idx``."""
    return t[:idx] + (val,) + t[idx:]


def tuple_delete(t: tuple, idx: int) -> tuple:
    """``t`` without element ``idx``."""
    return t[:idx] + t[idx + 1:]


def concatenate(xs: Iterable[Iterable]) -> list:
    """The items of every iterable in ``xs``, in order."""
    return list(itertools.chain.from_iterable(xs))


def prod(xs: Iterable[int]) -> int:
    """The product of integers (1 for none)."""
    out = 1
    for x in xs:
        out *= int(x)
    return out


def canonicalize_axis(axis: int, num_dims: int) -> int:
    """``axis`` in ``[0, num_dims)``; ValueError when out of range."""
    axis = int(axis)
    if not -num_dims <= axis < num_dims:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {num_dims}")
    return axis + num_dims if axis < 0 else axis


def cache(max_size: int = 4096, trace_context_in_key: bool = True):
    """An LRU cache decorator (JAX's also keys on the trace context; kiln's flags are
    process-global, read when the function runs)."""
    return functools.lru_cache(maxsize=max_size)


memoize = functools.cache


class Mutex:
    """A lock usable as a context manager (JAX's ``util.Mutex``)."""

    def __init__(self):
        self._lock = threading.Lock()

    def lock(self) -> None:
        self._lock.acquire()

    def unlock(self) -> None:
        self._lock.release()

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()


def install_failure_signal_handler() -> None:
    """Dump Python tracebacks on a fatal signal (JAX installs its own handler)."""
    if not faulthandler.is_enabled():
        try:
            faulthandler.enable()
        except (RuntimeError, ValueError, OSError):
            pass
