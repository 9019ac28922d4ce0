"""Global configuration flags, under JAX's names.

What this module holds:

* ``config``: the one :class:`Config` instance. Every flag is a *plain instance
  attribute* (``config.jax_enable_x64``), so the hot paths of the library (dtype
  canonicalization, ``bind``) read a flag at the cost of an attribute lookup.
* ``config.update(name, value)``: the only way a flag changes. It validates and
  coerces the value, stores it, then runs the callbacks registered with
  ``config.on_change(name, fn)``; modules that cache anything that depends on a
  flag (dtype tables, jit caches) clear their caches there.
* Environment variables, read once at import: ``JAX_<FLAG>`` and ``KILN_<FLAG>``
  (``KILN_`` wins), e.g. ``JAX_ENABLE_X64=1``, ``KILN_DEBUG_NANS=true``,
  ``JAX_NUM_CPU_DEVICES=4``.
* Context managers that set a flag and restore it on exit: ``disable_jit``,
  ``enable_x64``, ``debug_nans``, ``debug_infs``, ``explain_cache_misses`` and
  the generic ``config_context(**flags)``. Each also works as a decorator.

What it must not hold: anything that imports the rest of kiln. Every other
module imports this one, so it depends on the standard library only.

Unlike JAX, flags are process-global rather than thread-local: a context manager
in one thread is seen by all threads.
"""

from __future__ import annotations

import contextlib
import operator
import os
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "Config",
    "config",
    "config_context",
    "debug_infs",
    "debug_nans",
    "disable_jit",
    "enable_x64",
    "explain_cache_misses",
]

_TRUE_STRINGS = ("y", "yes", "t", "true", "on", "1")
_FALSE_STRINGS = ("n", "no", "f", "false", "off", "0")


def _parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE_STRINGS:
            return True
        if low in _FALSE_STRINGS:
            return False
        raise ValueError(f"invalid truth value {value!r} for config option {name!r}")
    if isinstance(value, bool):
        return value
    # numpy.bool is not a subclass of bool; accept it and the ints 0 and 1.
    if type(value).__name__ in ("bool", "bool_") or isinstance(value, int):
        if value in (0, 1):
            return bool(value)
    raise TypeError(f"config option {name!r} expects a bool, got {value!r} of type {type(value)}")


def _parse_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"config option {name!r} expects an int, got {value!r}")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ValueError(f"invalid integer value {value!r} for config option {name!r}") from None
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"config option {name!r} expects an int, got {value!r} of type {type(value)}"
        ) from None


def _enum(*choices: str, optional: bool = False) -> Callable[[Any, str], Any]:
    def parse(value: Any, name: str) -> Any:
        if value is None and optional:
            return None
        if isinstance(value, str) and value in choices:
            return value
        raise ValueError(
            f"config option {name!r} must be one of {list(choices)}"
            f"{' or None' if optional else ''}, got {value!r}"
        )

    return parse


def _optional_str(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"config option {name!r} expects a string or None, got {value!r}")


def _str(value: Any, name: str) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"config option {name!r} expects a string, got {value!r}")


def _parse_precision(value: Any, name: str) -> Any:
    # JAX accepts strings ('bfloat16', 'tensorfloat32', 'float32', 'default',
    # 'high', 'highest', 'fastest', dot-algorithm names, ...) or None. Matmul
    # precision does not change results on CPU, so the names are kept as given.
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"config option {name!r} expects a string or None, got {value!r}")


# name -> (default, parser). The order is the order of `config.values`.
_FLAGS: dict[str, tuple[Any, Callable[[Any, str], Any]]] = {
    "jax_enable_x64": (False, _parse_bool),
    "jax_disable_jit": (False, _parse_bool),
    "jax_debug_nans": (False, _parse_bool),
    "jax_debug_infs": (False, _parse_bool),
    "jax_num_cpu_devices": (1, _parse_int),
    "jax_explain_cache_misses": (False, _parse_bool),
    "jax_threefry_partitionable": (True, _parse_bool),
    "jax_default_matmul_precision": (None, _parse_precision),
    "jax_numpy_rank_promotion": ("allow", _enum("allow", "warn", "raise")),
    "jax_numpy_dtype_promotion": ("standard", _enum("standard", "strict")),
    "jax_platforms": (None, _optional_str),
    "jax_platform_name": ("", _str),
    "jax_default_prng_impl": ("threefry2x32", _enum("threefry2x32", "rbg", "unsafe_rbg")),
    "jax_log_compiles": (False, _parse_bool),
    "jax_check_tracer_leaks": (False, _parse_bool),
    "jax_enable_checks": (False, _parse_bool),
    "jax_traceback_filtering": (
        "auto",
        _enum("off", "tracebackhide", "remove_frames", "quiet_remove_frames", "auto"),
    ),
    "jax_dynamic_shapes": (False, _parse_bool),
    # kiln's own: which backend runs jitted programs, and when the C build happens.
    # env KILN_BACKEND / KILN_COMPILE.
    "kiln_backend": ("cpu", _enum("cpu", "reference")),
    "kiln_compile": ("async", _enum("async", "sync")),
}


def _parse_env_value(name: str, raw: str, env_var: str) -> Any:
    default, parser = _FLAGS[name]
    if parser is _parse_bool:
        low = raw.strip().lower()
        if low in _TRUE_STRINGS:
            return True
        if low in _FALSE_STRINGS:
            return False
        raise ValueError(f"invalid truth value {raw!r} for environment variable {env_var!r}")
    if parser is _parse_int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(
                f"invalid integer value {raw!r} for environment variable {env_var!r}"
            ) from None
    if default is None and raw.strip().lower() in ("", "none"):
        return None
    return raw.strip()


class Config:
    """The set of flags; see the module docstring.

    Flags are plain attributes for fast reads. Assigning one directly
    (``config.jax_enable_x64 = True``) goes through :meth:`update`, so callbacks
    still run.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_callbacks", {name: [] for name in _FLAGS})
        for name, (default, _) in _FLAGS.items():
            object.__setattr__(self, name, default)

    # -- reading -------------------------------------------------------------

    @property
    def flag_names(self) -> tuple[str, ...]:
        return tuple(_FLAGS)

    def read(self, name: str) -> Any:
        self._check_name(name)
        return getattr(self, name)

    @property
    def values(self) -> dict[str, Any]:
        """A snapshot ``{flag name: value}`` of every flag."""
        return {name: getattr(self, name) for name in _FLAGS}

    def defaults(self) -> dict[str, Any]:
        return {name: default for name, (default, _) in _FLAGS.items()}

    # -- writing -------------------------------------------------------------

    def update(self, name: str, value: Any) -> None:
        """Validate ``value``, set flag ``name`` to it, and run its callbacks."""
        self._check_name(name)
        _, parser = _FLAGS[name]
        value = parser(value, name)
        object.__setattr__(self, name, value)
        for fn in tuple(self._callbacks[name]):
            fn(value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FLAGS:
            self.update(name, value)
        else:
            raise AttributeError(f"Unrecognized config option: {name}")

    def on_change(self, name: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Call ``fn(new_value)`` after every ``update(name, ...)``. Returns ``fn``."""
        self._check_name(name)
        self._callbacks[name].append(fn)
        return fn

    def remove_on_change(self, name: str, fn: Callable[[Any], Any]) -> None:
        self._check_name(name)
        self._callbacks[name].remove(fn)

    def _check_name(self, name: str) -> None:
        if name not in _FLAGS:
            raise AttributeError(f"Unrecognized config option: {name}")

    def _read_env(self, environ: Mapping[str, str] | None = None) -> None:
        """Set flags from ``JAX_<FLAG>`` then ``KILN_<FLAG>`` environment variables."""
        env = os.environ if environ is None else environ
        for name in _FLAGS:
            if name.startswith("kiln_"):
                suffix = name[len("kiln_"):].upper()
                prefixes: tuple = ("KILN_",)
            else:
                suffix = name[len("jax_"):].upper()
                prefixes = ("JAX_", "KILN_")
            for prefix in prefixes:  # later wins: KILN_ overrides JAX_
                var = prefix + suffix
                raw = env.get(var)
                if raw is not None:
                    self.update(name, _parse_env_value(name, raw, var))

    def __repr__(self) -> str:
        changed = {
            k: v for k, v in self.values.items() if v != _FLAGS[k][0]
        }
        return f"Config({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


config = Config()
config._read_env()


# -- context managers --------------------------------------------------------


class config_context(contextlib.ContextDecorator):
    """Set flags for the duration of a ``with`` block (or a decorated call).

    ``config_context(jax_enable_x64=True, jax_debug_nans=True)``; flag names
    may also be given without the ``jax_`` prefix. On exit, every flag whose
    value differs from the saved one is restored through ``config.update`` (so
    callbacks see the restore too). Re-entrant, and usable as a decorator.
    """

    def __init__(self, _config: Config | None = None, **flags: Any) -> None:
        self._config = config if _config is None else _config
        self._flags = {}
        for name, value in flags.items():
            full = name if name.startswith("jax_") else "jax_" + name
            self._config._check_name(full)
            self._flags[full] = value
        self._saved: list[dict[str, Any]] = []

    def __enter__(self) -> config_context:
        cfg = self._config
        saved = {name: getattr(cfg, name) for name in self._flags}
        self._saved.append(saved)
        try:
            for name, value in self._flags.items():
                cfg.update(name, value)
        except BaseException:
            self._restore(self._saved.pop())
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restore(self._saved.pop())

    def _restore(self, saved: dict[str, Any]) -> None:
        for name, value in saved.items():
            if getattr(self._config, name) != value:
                self._config.update(name, value)


def disable_jit(disable: bool = True) -> config_context:
    """Run ``jit``-decorated functions eagerly inside the block (``jax.disable_jit``)."""
    return config_context(jax_disable_jit=disable)


def enable_x64(new_val: bool = True) -> config_context:
    """Enable (or disable) 64-bit types inside the block (``jax.enable_x64``)."""
    return config_context(jax_enable_x64=new_val)


def debug_nans(new_val: bool = True) -> config_context:
    """Raise on NaN outputs inside the block (``jax.debug_nans``)."""
    return config_context(jax_debug_nans=new_val)


def debug_infs(new_val: bool = True) -> config_context:
    """Raise on infinite outputs inside the block (``jax.debug_infs``)."""
    return config_context(jax_debug_infs=new_val)


def explain_cache_misses(new_val: bool = True) -> config_context:
    """Explain ``jit`` cache misses inside the block (``jax.explain_cache_misses``)."""
    return config_context(jax_explain_cache_misses=new_val)
