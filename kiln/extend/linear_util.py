"""``jax.extend.linear_util``: functions wrapped together with the transformations to apply.

A :class:`WrappedFun` holds a function ``f`` and a stack of transformations. Each
transformation is a function ``gen(inner, *static_args, *args, **kwargs)`` that calls
``inner`` (the function below it) at most once; one *with aux* also receives a
:class:`Store` for an auxiliary result (an output pytree structure, say) that its caller
reads after the call. :meth:`WrappedFun.call_wrapped` runs the whole stack.

The generator-style transformations of older JAX (``transformation``,
``transformation_with_aux``: a generator yielding ``(args, kwargs)`` once and then the
answer) are accepted as well.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

__all__ = [
    "DebugInfo", "EqualStore", "Store", "StoreException", "WrappedFun", "cache",
    "merge_linear_aux", "transformation", "transformation2", "transformation_with_aux",
    "transformation_with_aux2", "wrap_init",
]


class StoreException(Exception):
    """A :class:`Store` was read while empty or written twice."""


_EMPTY = object()


class Store:
    """Holds one value, written once (a second write or an empty read raises)."""

    __slots__ = ("_val",)

    def __init__(self):
        self._val = _EMPTY

    def store(self, val) -> None:
        if self._val is not _EMPTY:
            raise StoreException("Store occupied")
        self._val = val

    def reset(self) -> None:
        self._val = _EMPTY

    @property
    def val(self):
        if self._val is _EMPTY:
            raise StoreException("Store empty")
        return self._val

    def __bool__(self):
        return self._val is not _EMPTY


class EqualStore(Store):
    """A :class:`Store` that accepts a second write of an equal value."""

    __slots__ = ()

    def store(self, val) -> None:
        if self._val is _EMPTY:
            self._val = val
            return
        try:
            same = bool(self._val == val)
        except Exception:
            raise StoreException("Store occupied") from None
        if not same:
            raise StoreException("Store occupied with not-equal value")


class DebugInfo(NamedTuple):
    """What a traced function was: for what (``"jit"``, ``"scan"`` ...), where it is
    defined, the names of its flattened arguments and the paths of its flattened results
    (each ``None`` when unknown)."""

    traced_for: str
    func_src_info: str
    arg_names: tuple[str, ...] | None
    result_paths: tuple[str, ...] | Callable[[], tuple[str, ...]] | None

    @property
    def func_name(self) -> str:
        return self.func_src_info.split(" ")[0]

    def resolve_result_paths(self) -> DebugInfo:
        """This debug info with ``result_paths`` computed if it is still a thunk."""
        if callable(self.result_paths):
            return self._replace(result_paths=tuple(self.result_paths()))
        return self

    def replace_func_name(self, name: str) -> DebugInfo:
        rest = self.func_src_info.split(" ", 1)
        return self._replace(func_src_info=" ".join([name, *rest[1:]]))

    def safe_arg_names(self, expected_count: int) -> tuple[str, ...]:
        if self.arg_names is not None and len(self.arg_names) == expected_count:
            return self.arg_names
        return ("",) * expected_count

    def safe_result_paths(self, expected_count: int) -> tuple[str, ...]:
        paths = self.resolve_result_paths().result_paths
        if paths is not None and len(paths) == expected_count:
            return paths
        return ("",) * expected_count


def _fun_name(f) -> str:
    while isinstance(f, functools.partial):
        f = f.func
    return getattr(f, "__name__", type(f).__name__)


def _missing_debug_info(what: str) -> DebugInfo:
    return DebugInfo("missing_debug_info", f"<{what}>", None, None)


class WrappedFun:
    """A function ``f`` with the transformations (innermost last in ``transforms``) to
    apply to it. Call it with :meth:`call_wrapped`."""

    __slots__ = ("f", "f_transformed", "transforms", "stores", "params", "in_type",
                 "debug_info")

    def __init__(self, f: Callable, f_transformed: Callable,
                 transforms: tuple[tuple[Callable, tuple[Hashable, ...]], ...],
                 stores: tuple[Store | None, ...], params: tuple[tuple[str, Any], ...],
                 in_type: Any, debug_info: DebugInfo):
        self.f = f
        self.f_transformed = f_transformed
        self.transforms = transforms
        self.stores = stores
        self.params = params
        self.in_type = in_type
        self.debug_info = debug_info

    @property
    def __name__(self) -> str:
        return _fun_name(self.f)

    def wrap(self, gen: Callable, gen_static_args: tuple, out_store: Store | None
             ) -> WrappedFun:
        """This function with one more transformation ``gen`` on top."""
        if out_store is None:
            outer = functools.partial(gen, self.f_transformed, *gen_static_args)
        else:
            outer = functools.partial(gen, self.f_transformed, out_store, *gen_static_args)
        return WrappedFun(self.f, outer, ((gen, gen_static_args), *self.transforms),
                          (out_store, *self.stores), self.params, None, self.debug_info)

    def populate_stores(self, stores) -> None:
        """Copy the values of ``stores`` (of an equal WrappedFun) into this one's."""
        for mine, other in zip(self.stores, stores):
            if mine is not None:
                mine.store(other.val)

    def call_wrapped(self, *args, **kwargs):
        """Run ``f`` under all the transformations."""
        return self.f_transformed(*args, **kwargs)

    def replace_debug_info(self, debug_info: DebugInfo) -> WrappedFun:
        return WrappedFun(self.f, self.f_transformed, self.transforms, self.stores,
                          self.params, self.in_type, debug_info)

    def __repr__(self):
        lines = [f"{i}   : {_fun_name(g)}   {a}" for i, (g, a) in enumerate(self.transforms)]
        return "Wrapped function:\n" + "\n".join(lines) + f"\nCore: {_fun_name(self.f)}\n"

    def __hash__(self):
        return hash((self.f, self.transforms, self.params, self.in_type))

    def __eq__(self, other):
        return (isinstance(other, WrappedFun) and self.f == other.f
                and self.transforms == other.transforms and self.params == other.params
                and self.in_type == other.in_type)


def _call_with_params(f, params, *args, **kwargs):
    return f(*args, **dict(params), **kwargs)


def wrap_init(f: Callable, params=None, *, debug_info: DebugInfo | None = None
              ) -> WrappedFun:
    """Wrap ``f`` (called with ``params`` as extra keyword arguments) for transformation."""
    params = () if params is None else tuple(sorted(dict(params).items()))
    debug_info = debug_info or _missing_debug_info("linear_util.wrap_init")
    inner = functools.partial(_call_with_params, f, params) if params else f
    return WrappedFun(f, inner, (), (), params, None, debug_info)


def _curried(f: Callable) -> Callable:
    """``f`` curried as JAX curries its ``lu.transformation*`` functions: a call with any
    arguments returns ``functools.partial(f, *args, **kwargs)``. So ``@transformation2``
    makes a generator a function ``(fun, *static_args) -> WrappedFun``, and a direct
    ``transformation2(gen, fun, *static_args)`` is a thunk that returns it."""
    @functools.wraps(f)
    def curried(*args, **kwargs):
        return functools.partial(f, *args, **kwargs)
    return curried


@_curried
def transformation2(gen: Callable, fun: WrappedFun, *gen_static_args) -> WrappedFun:
    """Add the transformation ``gen(inner, *gen_static_args, *args, **kwargs)`` to ``fun``
    (curried: ``@transformation2`` on ``gen``, then ``gen(fun, *static_args)``)."""
    return fun.wrap(gen, gen_static_args, None)


@_curried
def transformation_with_aux2(gen: Callable, fun: WrappedFun, *gen_static_args,
                             use_eq_store: bool = False):
    """Add ``gen(inner, store, *gen_static_args, *args, **kwargs)``, which writes an
    auxiliary result to ``store``. Returns ``(wrapped, aux_thunk)``; ``aux_thunk()`` reads
    the auxiliary result after a call. Curried as :func:`transformation2`."""
    store = EqualStore() if use_eq_store else Store()
    return fun.wrap(gen, gen_static_args, store), lambda: store.val


def _run_generator(gen, inner, *args, **kwargs):
    g = gen(*args, **kwargs)
    call_args, call_kwargs = next(g)
    return g.send(inner(*call_args, **call_kwargs))


def _generator_adapter(gen):
    @functools.wraps(gen)
    def run(inner, *args, **kwargs):
        return _run_generator(gen, inner, *args, **kwargs)
    return run


def _generator_aux_adapter(gen):
    @functools.wraps(gen)
    def run(inner, store, *args, **kwargs):
        ans, aux = _run_generator(gen, inner, *args, **kwargs)
        store.store(aux)
        return ans
    return run


@_curried
def transformation(gen: Callable, fun: WrappedFun, *gen_static_args) -> WrappedFun:
    """Generator-style :func:`transformation2`: ``gen(*static_args, *args, **kwargs)``
    yields ``(args, kwargs)`` for the inner call, receives its answer and yields the
    result."""
    return fun.wrap(_generator_adapter(gen), gen_static_args, None)


@_curried
def transformation_with_aux(gen: Callable, fun: WrappedFun, *gen_static_args):
    """Generator-style :func:`transformation_with_aux2`: the generator's final yield is
    ``(answer, aux)``."""
    store = Store()
    return fun.wrap(_generator_aux_adapter(gen), gen_static_args, store), lambda: store.val


def merge_linear_aux(aux1: Callable[[], Any], aux2: Callable[[], Any]):
    """Of two aux thunks of which exactly one was filled, the value and which one:
    ``(False, value)`` for the first, ``(True, value)`` for the second."""
    try:
        out1 = aux1()
    except StoreException:
        try:
            out2 = aux2()
        except StoreException:
            raise StoreException("neither store occupied") from None
        return True, out2
    try:
        aux2()
    except StoreException:
        return False, out1
    raise StoreException("both stores occupied")


def cache(call: Callable) -> Callable:
    """Memoize ``call(fun: WrappedFun, *args)`` on ``fun`` (its function, transformations
    and parameters) and ``args`` (hashable). A hit re-fills ``fun``'s stores from the
    first call's, so aux thunks work as if ``call`` had run."""
    tables: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    strong: dict = {}

    @functools.wraps(call)
    def memoized(fun: WrappedFun, *args):
        key = (fun.transforms, fun.params, fun.in_type, args)
        try:
            table = tables.setdefault(fun.f, {})
        except TypeError:           # not weak-referenceable
            table = strong.setdefault(fun.f, {})
        hit = table.get(key)
        if hit is not None:
            ans, stores = hit
            fun.populate_stores(stores)
            return ans
        ans = call(fun, *args)
        table[key] = (ans, fun.stores)
        return ans

    def clear():
        tables.clear()
        strong.clear()

    memoized.cache_clear = clear
    return memoized
