"""``jax._src.config``: JAX's config module surface over kiln's one set of flags.

JAX's private config module exposes each option as a *state object* (``enable_x64``,
``numpy_rank_promotion``, ...): ``state.value`` reads the option, ``state(new)`` is a
context manager (and decorator) that sets it for a block. JAX's own test helpers
(``jax._src.test_util``) and many of JAX's tests use these directly. Here every state
reads and writes kiln's :data:`kiln.config.config`, so a change made through this module is
the change kiln's code sees.

Also here: ``config_states`` (option name -> state), ``_read``/``update``, the absl-style
flag definers that test helpers use to declare their own settings (``bool_flag``,
``int_flag``, ``string_flag``, ``enum_flag``, ``float_flag``: plain holders with a
``.value``, settable from the command line as ``--name=value``), ``bool_env``/``int_env``,
and the few JAX-only options that JAX's tests read (:data:`JAX_ONLY_OPTIONS`): each
reports kiln's fixed behaviour and refuses any other value with NotImplementedError.
Options that only choose between two internal implementations of one JAX API
(:data:`JAX_IMPL_SELECTORS`) can be set, and kiln's behaviour does not depend on them.
"""
from __future__ import annotations

import contextlib
import enum
import os
import sys
import threading
from typing import Any

from kiln.config import (  # noqa: F401
    _FLAGS,
    Config,
    config,
    config_context,
    external_options,
    parse_flags_with_absl,
)

_NO_DEFAULT = object()


class State:
    """One of kiln's config options, as JAX's ``config.State``.

    ``value`` is the current value; calling the state (``enable_x64(True)``) returns a
    context manager / decorator that sets the option for its extent (with no argument, a
    boolean option is set to True, as JAX's).
    """

    def __init__(self, name: str):
        self.name = name

    @property
    def value(self) -> Any:
        return getattr(config, self.name)

    def get_global(self) -> Any:
        return config.global_value(self.name)

    def get_local(self) -> Any:
        return self.value

    def _set(self, value: Any) -> None:
        config.update(self.name, value)

    def __call__(self, new_val: Any = _NO_DEFAULT) -> config_context:
        if new_val is _NO_DEFAULT:
            if not isinstance(_FLAGS[self.name][0], bool):
                raise TypeError(f"Context manager for {self.name} config option requires "
                                "an argument representing the new value for the config "
                                "option.")
            new_val = True
        return config_context(**{self.name: new_val})

    def __bool__(self):
        raise TypeError(f"bool() not supported for instances of type '{type(self).__name__}' "
                        f"(did you mean to use '{type(self).__name__}.value' instead?)")

    def __repr__(self):
        return f"State({self.name}={self.value!r})"


class ExplicitX64Mode(enum.IntEnum):
    """What an explicit 64-bit dtype request does with x64 off (JAX's enum)."""

    WARN = 1
    ERROR = 2
    ALLOW = 3


class EffortLevel(enum.IntEnum):
    """XLA's optimization effort levels (JAX's enum; kiln's C compiler has none)."""

    UNKNOWN = 0
    O0 = 9
    O1 = 19
    O2 = 29
    O3 = 39


class FixedState:
    """A JAX option that kiln does not have: it reports kiln's fixed behaviour. Setting it
    to that value is a no-op; any other value raises NotImplementedError."""

    def __init__(self, name: str, value: Any, why: str):
        self.name, self._value, self.why = name, value, why

    @property
    def value(self) -> Any:
        return self._value

    def _check(self, new_val: Any) -> None:
        if isinstance(self._value, enum.Enum) and isinstance(new_val, str):
            new_val = type(self._value).__members__.get(new_val.upper(), new_val)
        if new_val != self._value:
            raise NotImplementedError(
                f"config option {self.name}={new_val!r}: kiln has only {self._value!r} "
                f"({self.why})")

    def _set(self, value: Any) -> None:
        self._check(value)

    def __call__(self, new_val: Any = True):
        # The check runs when the block is entered (a decorated test fails, not the
        # module that defines it).
        state = self

        class _Context(contextlib.ContextDecorator):
            def __enter__(self):
                state._check(new_val)
                return self

            def __exit__(self, *exc):
                return False
        return _Context()

    def __bool__(self):
        raise TypeError(f"bool() not supported for instances of type '{type(self).__name__}'")

    def __repr__(self):
        return f"FixedState({self.name}={self._value!r})"


#: JAX options kiln lacks, read by JAX's tests: (kiln's fixed value, why).
JAX_ONLY_OPTIONS: dict[str, tuple[Any, str]] = {
    "jax_use_shardy_partitioner": (False, "kiln partitions with its own SPMD partitioner"),
    "jax_use_simplified_jaxpr_constants": (False, "kiln's jaxprs keep constants as "
                                           "constvars"),
    "jax_enable_compilation_cache": (False, "kiln has no persistent XLA cache"),
    "jax_threefry_gpu_kernel_lowering": (False, "kiln has no GPU"),
    "jax_softmax_custom_jvp": (False, "kiln's softmax is differentiated as JAX's default"),
    "jax_use_direct_linearize": (True, "kiln's linearize is JAX's default direct one"),
    "jax_disable_vmap_shmap_error": (False, "JAX's default"),
    "jax_pprint_use_color": (False, "kiln prints jaxprs without color"),
}

class SelectorState(FixedState):
    """A JAX option that selects between two internal implementations
    (``jax_custom_vjp3``, ``jax_remat3``). kiln has one implementation: the option can be
    set (and reads back what was set); with ``jax_custom_vjp3`` on, ``custom_vjp`` raises
    that implementation's errors (a closure over a tracer, its fwd output type text). As
    JAX's options, a context value is thread-local."""

    def __init__(self, name: str, value: Any, why: str):
        super().__init__(name, value, why)
        self._tl = threading.local()

    @property
    def value(self) -> Any:
        stack = getattr(self._tl, "stack", None)
        return stack[-1] if stack else self._value

    def _check(self, new_val: Any) -> None:
        pass

    def _set(self, value: Any) -> None:
        self._value = bool(value)

    def __call__(self, new_val: Any = True):
        state = self

        class _Context(contextlib.ContextDecorator):
            def __enter__(self):
                stack = getattr(state._tl, "stack", None)
                if stack is None:
                    stack = state._tl.stack = []
                stack.append(bool(new_val))
                return self

            def __exit__(self, *exc):
                state._tl.stack.pop()
                return False
        return _Context()


#: JAX options that pick one of two internal implementations of the same API.
JAX_IMPL_SELECTORS: dict[str, tuple[Any, str]] = {
    "jax_custom_vjp3": (False, "JAX's rewrite of custom_vjp; kiln has one implementation"),
    "jax_remat3": (False, "JAX's rewrite of remat; kiln has one implementation"),
}

class EnumState(State):
    """An option kiln stores as a lowercase string that JAX exposes as an enum
    (``explicit_x64_dtypes``: ``ExplicitX64Mode``): ``value`` is the enum member."""

    def __init__(self, name: str, enum_class: type):
        super().__init__(name)
        self.enum_class = enum_class

    @property
    def value(self) -> Any:
        return self.enum_class[getattr(config, self.name).upper()]


_ENUM_OPTIONS = {"jax_explicit_x64_dtypes": ExplicitX64Mode}

config_states: dict[str, State | FixedState] = {}
for _name in _FLAGS:
    config_states[_name] = (EnumState(_name, _ENUM_OPTIONS[_name]) if _name in _ENUM_OPTIONS
                            else State(_name))
    _short = _name[4:] if _name.startswith("jax_") else _name
    globals()[_short] = config_states[_name]
for _name, (_value, _why) in JAX_ONLY_OPTIONS.items():
    globals()[_name[4:]] = FixedState(_name, _value, _why)
    config_states[_name] = globals()[_name[4:]]
for _name, (_value, _why) in JAX_IMPL_SELECTORS.items():
    globals()[_name[4:]] = SelectorState(_name, _value, _why)
    config_states[_name] = globals()[_name[4:]]
del _name, _short, _value, _why
# A few of JAX's module-level states carry the option's full name (``jax_`` prefix).
for _name in ("jax_ragged_dot_use_ragged_dot_instruction",):
    globals()[_name] = config_states[_name]
for _name in (*JAX_ONLY_OPTIONS, *JAX_IMPL_SELECTORS):
    # ``jax.config.jax_custom_vjp3`` reads as in JAX (the Config object's attribute)
    external_options[_name] = (lambda st: lambda: st.value)(config_states[_name])
del _name


def _read(name: str) -> Any:
    """The value of option ``name`` (JAX's ``config._read``), also of a setting declared
    with ``bool_flag``/``int_flag``/...."""
    if name in _declared:
        return _declared[name].value
    if name in JAX_ONLY_OPTIONS or name in JAX_IMPL_SELECTORS:
        return globals()[name[4:]].value
    return config.read(name)


def update(name: str, value: Any) -> None:
    """Set option ``name`` (as ``jax.config.update``)."""
    if name in JAX_ONLY_OPTIONS or name in JAX_IMPL_SELECTORS:
        globals()[name[4:]]._set(value)
        return
    config.update(name, value)


# -- flags declared by other modules (JAX's absl-style definers) ---------------------------


#: Settings declared with the flag definers: name -> holder.
_declared: dict[str, FlagHolder] = {}


class FlagHolder:
    """A setting declared with ``bool_flag``/``int_flag``/...: ``.value`` is its value (the
    default, or ``--name=value`` from the command line)."""

    def __init__(self, name: str, default: Any, parse, help: str = ""):
        self.name, self.help, self._parse = name, help, parse
        self.value = default
        _declared[name] = self
        prefix = f"--{name}="
        for arg in sys.argv:
            if arg == "--":
                break
            if arg.startswith(prefix):
                self.value = parse(arg[len(prefix):])

    def _set(self, value: Any) -> None:
        self.value = value

    def __repr__(self):
        return f"FlagHolder({self.name}={self.value!r})"


def _to_bool(text: str) -> bool:
    low = str(text).strip().lower()
    if low in ("y", "yes", "t", "true", "on", "1"):
        return True
    if low in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {text!r}")


def bool_flag(name: str, default: bool, help: str = "", **_: Any) -> FlagHolder:
    """Declare a boolean setting (JAX: an absl flag)."""
    return FlagHolder(name, bool(default), _to_bool, help)


def int_flag(name: str, default: int, help: str = "", **_: Any) -> FlagHolder:
    """Declare an integer setting (JAX: an absl flag)."""
    return FlagHolder(name, default, int, help)


def float_flag(name: str, default: float, help: str = "", **_: Any) -> FlagHolder:
    """Declare a float setting (JAX: an absl flag)."""
    return FlagHolder(name, default, float, help)


def string_flag(name: str, default: str | None, help: str = "", **_: Any) -> FlagHolder:
    """Declare a string setting (JAX: an absl flag)."""
    return FlagHolder(name, default, str, help)


def enum_flag(name: str, default: str, enum_values: list[str], help: str = "",
              **_: Any) -> FlagHolder:
    """Declare a setting taking one of ``enum_values`` (JAX: an absl flag)."""
    def parse(text: str) -> str:
        if text not in enum_values:
            raise ValueError(f"--{name}: expected one of {enum_values}, got {text!r}")
        return text
    return FlagHolder(name, default, parse, help)


def bool_env(varname: str, default: bool) -> bool:
    """The truth value of environment variable ``varname`` (``default`` when unset)."""
    raw = os.environ.get(varname)
    return default if raw is None else _to_bool(raw)


def int_env(varname: str, default: int) -> int:
    """The integer value of environment variable ``varname`` (``default`` when unset)."""
    raw = os.environ.get(varname)
    return default if raw is None else int(raw)
