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
* absl integration as JAX's: ``config.config_with_absl()`` defines an absl flag per
  option (applied by ``absl.app.run``) and ``config.parse_flags_with_absl()`` parses the
  ``--jax*``/``--kiln*`` command-line arguments directly; both need ``absl-py`` (without
  it they raise ``ModuleNotFoundError``, as JAX does). absl is imported only then.
* Context managers that set a flag and restore it on exit: ``disable_jit``,
  ``enable_x64``, ``debug_nans``, ``debug_infs``, ``explain_cache_misses``,
  ``log_compiles`` and
  the generic ``config_context(**flags)``. Each also works as a decorator.

What it must not hold: anything that imports the rest of kiln. Every other
module imports this one, so it depends on the standard library only.

As JAX's, ``config.update`` sets a flag's global value and the context managers set a
*thread-local* value: a ``with enable_x64():`` block in one thread is not seen by the
others (nor by threads started inside it). While some thread holds a context value for a
flag, reads of that flag go through a descriptor on :class:`Config` that looks up the
reading thread's value (:class:`_ThreadValue`); when no thread does, the descriptor is
removed and reads are plain attribute reads again. Callbacks (``on_change``) run in the
thread whose value changed; state derived from a flag must be kept per thread or hold
for every thread's value (``values_in_use``). ``thread_overrides()`` /
``with_overrides(...)`` carry one thread's context values to worker threads that act for
it (device threads of an SPMD program, the compile pool).
"""

from __future__ import annotations

import contextlib
import operator
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "Config",
    "config",
    "config_context",
    "debug_infs",
    "debug_nans",
    "default_matmul_precision",
    "disable_jit",
    "enable_x64",
    "enable_checks",
    "explain_cache_misses",
    "log_compiles",
    "default_prng_impl",
    "numpy_dtype_promotion",
    "numpy_rank_promotion",
    "threefry_partitionable",
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

    parse.choices = choices  # type: ignore[attr-defined]  # read by config_with_absl
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


def _parse_key_reuse(value: Any, name: str) -> bool:
    on = _parse_bool(value, name)
    if on:
        raise NotImplementedError(
            f"{name}=True: kiln does not implement JAX's key-reuse checker (tracking the "
            "consumption of typed PRNG keys through jaxprs and raising KeyReuseError); "
            "only False is supported")
    return on


_TRANSFER_LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")


def _parse_transfer_guard(value: Any, name: str) -> str | None:
    if value is not None and value not in _TRANSFER_LEVELS:
        raise ValueError(f"Invalid value '{value}' for {name}; expected one of "
                         f"{', '.join(_TRANSFER_LEVELS)} or None")
    return value


def _parse_default_device(value: Any, name: str) -> Any:
    """None, a platform name, or a Device; kiln puts new arrays on its first CPU device,
    so another device is refused rather than ignored."""
    if value is None:
        return None
    if isinstance(value, str):
        if value.lower() != "cpu":
            raise ValueError(f"{name}: unknown platform {value!r}; kiln has only 'cpu'")
        return value
    from kiln.devices import Device, devices
    if not isinstance(value, Device):
        raise TypeError(f"{name} expects a Device, a platform name or None, got {value!r}")
    if value != devices()[0]:
        raise NotImplementedError(
            f"{name}={value}: kiln places uncommitted arrays on its first device "
            f"({devices()[0]}); another default device is not supported (use "
            "jax.device_put(x, device) to place an array)")
    return value


def _parse_explicit_x64(value: Any, name: str) -> str:
    """``'warn'``, ``'error'`` or ``'allow'``; also JAX's ``ExplicitX64Mode`` members (an
    int enum: 1, 2, 3) and their names in any case."""
    choices = ("warn", "error", "allow")
    if isinstance(value, str) and value.lower() in choices:
        return value.lower()
    if not isinstance(value, (str, bool)) and isinstance(value, int) and 1 <= value <= 3:
        return choices[int(value) - 1]
    raise ValueError(f"config option {name!r} must be one of {list(choices)} (or JAX's "
                     f"ExplicitX64Mode), got {value!r}")


_parse_explicit_x64.choices = ("warn", "error", "allow")  # type: ignore[attr-defined]


# name -> (default, parser). The order is the order of `config.values`.
_FLAGS: dict[str, tuple[Any, Callable[[Any, str], Any]]] = {
    "jax_enable_x64": (False, _parse_bool),
    "jax_disable_jit": (False, _parse_bool),
    "jax_debug_nans": (False, _parse_bool),
    "jax_debug_infs": (False, _parse_bool),
    "jax_num_cpu_devices": (-1, _parse_int),
    "jax_cpu_enable_async_dispatch": (True, _parse_bool),
    "jax_explain_cache_misses": (False, _parse_bool),
    "jax_threefry_partitionable": (True, _parse_bool),
    "jax_default_matmul_precision": (None, _parse_precision),
    "jax_numpy_rank_promotion": ("allow", _enum("allow", "warn", "raise")),
    "jax_numpy_dtype_promotion": ("standard", _enum("standard", "strict")),
    "jax_explicit_x64_dtypes": ("warn", _parse_explicit_x64),
    "jax_platforms": (None, _optional_str),
    "jax_platform_name": ("", _str),
    "jax_default_prng_impl": ("threefry2x32", _enum("threefry2x32", "threefry4x32", "rbg",
                                                     "unsafe_rbg", "philox2x32", "philox4x32")),
    "jax_enable_custom_prng": (False, _parse_bool),
    "jax_legacy_prng_key": ("allow", _enum("allow", "warn", "error")),
    "jax_log_compiles": (False, _parse_bool),
    "jax_check_tracer_leaks": (False, _parse_bool),
    "jax_enable_checks": (False, _parse_bool),
    "jax_disable_bwd_checks": (False, _parse_bool),
    "jax_traceback_filtering": (
        "auto",
        _enum("off", "tracebackhide", "remove_frames", "quiet_remove_frames", "auto"),
    ),
    "jax_dynamic_shapes": (False, _parse_bool),
    "jax_check_static_indices": (False, _parse_bool),
    "jax_ragged_dot_use_ragged_dot_instruction": (True, _parse_bool),
    "jax_random_seed_offset": (0, _parse_int),
    "jax_debug_key_reuse": (False, _parse_key_reuse),
    "jax_no_execution": (False, _parse_bool),
    "jax_default_device": (None, _parse_default_device),
    "jax_transfer_guard": (None, _parse_transfer_guard),
    "jax_transfer_guard_host_to_device": (None, _parse_transfer_guard),
    "jax_transfer_guard_device_to_device": (None, _parse_transfer_guard),
    "jax_transfer_guard_device_to_host": (None, _parse_transfer_guard),
    "jax_remove_size_one_mesh_axis_from_type": (False, _parse_bool),
    "jax_auto_pcast": (True, _parse_bool),
    # jax.numpy's runtime error checks (kiln/numpy/_error.py), raised by error_check.
    "jax_error_checking_behavior_nan": ("ignore", _enum("ignore", "raise")),
    "jax_error_checking_behavior_divide": ("ignore", _enum("ignore", "raise")),
    "jax_error_checking_behavior_oob": ("ignore", _enum("ignore", "raise")),
    # kiln's own: which backend runs jitted programs, and when the C build happens.
    # env KILN_BACKEND / KILN_COMPILE.
    "kiln_backend": ("cpu", _enum("cpu", "reference")),
    "kiln_compile": ("sync", _enum("sync", "async")),
    # Opt-in (JAX has no such warning): warn when one jitted function has been traced more
    # than kiln_retrace_warning_threshold times (0: never). env KILN_WARN_RETRACE.
    "kiln_warn_retrace": (False, _parse_bool),
    "kiln_retrace_warning_threshold": (10, _parse_int),
}


# One line of help per flag: the text of the absl flags that ``config_with_absl`` defines.
_HELP: dict[str, str] = {
    "jax_auto_pcast": "If True, automatically insert `pvary` to match VMAs on simple ops.",
    "jax_remove_size_one_mesh_axis_from_type": "Mesh axes of size 1 are left out of the "
                                               "varying manual axes of types; collectives "
                                               "and pcasts over them are no-ops.",
    "jax_enable_x64": "Enable 64-bit types to be used",
    "jax_disable_jit": "Disable JIT compilation and just call original Python.",
    "jax_debug_nans": "Add nan checks to every operation. When a nan is detected on the "
                      "output of a jit-compiled computation, call into the un-compiled "
                      "version in an attempt to more precisely identify the operation "
                      "which produced the nan.",
    "jax_debug_infs": "Add inf checks to every operation. When an inf is detected on the "
                      "output of a jit-compiled computation, call into the un-compiled "
                      "version in an attempt to more precisely identify the operation "
                      "which produced the inf.",
    "jax_num_cpu_devices": "Number of CPU devices to use.",
    "jax_cpu_enable_async_dispatch": "Only applies to non-parallel computations. If False, "
                                     "run computations inline without async dispatch.",
    "jax_explain_cache_misses": "Each time there is a miss on one of the main caches (e.g. "
                                "the tracing cache), log an explanation.",
    "jax_threefry_partitionable": "Enables internal threefry PRNG implementation changes "
                                  "that render it automatically partitionable.",
    "jax_default_matmul_precision": "Control the default matmul and conv precision for "
                                    "32bit inputs (a lax.Precision name or the name of a "
                                    "lax.DotAlgorithmPreset).",
    "jax_numpy_rank_promotion": "Control NumPy-style automatic rank promotion "
                                "broadcasting ('allow', 'warn', or 'raise').",
    "jax_numpy_dtype_promotion": "Specify the rules used for implicit type promotion in "
                                 "operations between arrays ('standard' or 'strict').",
    "jax_explicit_x64_dtypes": "What an explicitly requested 64-bit dtype does while "
                               "jax_enable_x64 is off: 'warn' (truncate it to 32 bits, with "
                               "a warning), 'error' (raise ValueError) or 'allow' (respect "
                               "it).",
    "jax_platforms": "Comma-separated list of platform names specifying which platforms "
                     "jax should initialize.",
    "jax_platform_name": "Deprecated, please use --jax_platforms instead.",
    "jax_default_prng_impl": "Select the default PRNG implementation, used when one is "
                             "not explicitly provided at seeding time.",
    "jax_enable_custom_prng": "Enables an internal upgrade that allows one to define custom "
                              "pseudo-random number generator implementations.",
    "jax_legacy_prng_key": "Specify the behavior when raw PRNG keys are passed to "
                           "jax.random APIs.",
    "jax_log_compiles": "Log a message each time `jit` or `pmap` compiles an XLA "
                        "computation.",
    "jax_check_tracer_leaks": "Turn on checking for leaked tracers as soon as a trace "
                              "completes.",
    "jax_enable_checks": "Turn on invariant checking for JAX internals. Makes things "
                         "slower.",
    "jax_disable_bwd_checks": "Disable the shape check of the cotangents a custom_vjp's bwd "
                              "rule returns (JAX's temporary escape hatch).",
    "jax_traceback_filtering": "Controls how JAX filters internal frames out of "
                               "tracebacks.",
    "jax_ragged_dot_use_ragged_dot_instruction": "(TPU only in JAX) Lower ragged_dot to one "
                                                 "instruction rather than a rewrite. kiln has "
                                                 "one implementation: accepted, results the "
                                                 "same either way.",
    "jax_check_static_indices": "Turn on bounds checks for static indices during array "
                                "indexing operations. These will only be checked when "
                                "indexing mode is PROMISE_IN_BOUNDS, which is the default "
                                "for gather-type operations.",
    "jax_dynamic_shapes": "Enables experimental features for staging out computations "
                          "with dynamic shapes.",
    "jax_random_seed_offset": "Offset added to every random seed (the argument of "
                              "jax.random.key() and PRNGKey()).",
    "jax_debug_key_reuse": "Key-reuse checking of typed PRNG keys (kiln: only False).",
    "jax_no_execution": "Disallow running jitted programs (RuntimeError); tracing and "
                        "compiling still work.",
    "jax_default_device": "The device new uncommitted arrays are placed on (kiln: None, "
                          "'cpu' or its first device).",
    "jax_transfer_guard": "The transfer guard level for all transfers ('allow', 'log', "
                          "'disallow', 'log_explicit', 'disallow_explicit').",
    "jax_transfer_guard_host_to_device": "The transfer guard level for host-to-device "
                                         "transfers (overrides jax_transfer_guard).",
    "jax_transfer_guard_device_to_device": "The transfer guard level for device-to-device "
                                           "transfers (none on kiln's CPU devices).",
    "jax_transfer_guard_device_to_host": "The transfer guard level for device-to-host "
                                         "transfers (none on kiln's CPU devices).",
    "jax_error_checking_behavior_nan": "Specify the behavior when a NaN is encountered. "
                                       "Options are \"ignore\" or \"raise\".",
    "jax_error_checking_behavior_divide": "Specify the behavior when a divide by zero is "
                                          "encountered. Options are \"ignore\" or "
                                          "\"raise\".",
    "jax_error_checking_behavior_oob": "Specify the behavior when an out of bounds access "
                                       "is encountered. Options are \"ignore\" or "
                                       "\"raise\".",
    "kiln_backend": "Which backend runs jitted programs: 'cpu' (compiled C) or "
                    "'reference' (NumPy).",
    "kiln_compile": "When the C build of a jitted program happens: 'sync' (the default: "
                    "the first call waits for it, as JAX's compiles) or 'async' (tiered: "
                    "calls run on the reference backend until the build is ready).",
    "kiln_warn_retrace": "Warn (kiln._compile_log.RetraceWarning) when one jitted function "
                         "has been traced more than kiln_retrace_warning_threshold times, "
                         "naming it and the argument that changed. Off by default (JAX "
                         "emits no such warning).",
    "kiln_retrace_warning_threshold": "With kiln_warn_retrace on: how many traces of one "
                                      "jitted function are allowed before the warning; 0 "
                                      "turns the warning off.",
}

# Set by the first ``parse_flags_with_absl`` call (as JAX's module-level flag).
_already_configured_with_absl = False


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


#: name -> reader of the JAX-only options that ``config.<name>`` reads (filled by
#: ``kiln._src.config``: options kiln fixes, and JAX's implementation selectors).
external_options: dict[str, Callable[[], Any]] = {}


_override_lock = threading.RLock()
#: flag -> how many (Config instance, thread, nesting level) context values exist: the
#: flag's descriptor is on :class:`Config` while it is not zero.
_desc_count: dict[str, int] = {}


class _ThreadValue:
    """The data descriptor a flag has on :class:`Config` while some thread has a context
    value for it: the reading thread's value, else the global one (the instance's)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        d = obj.__dict__
        o = getattr(d["_tl"], "o", None)
        if o and self.name in o:
            return o[self.name]
        return d[self.name]

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value


class Config:
    """The set of flags; see the module docstring.

    Flags are plain attributes for fast reads. Assigning one directly
    (``config.jax_enable_x64 = True``) goes through :meth:`update`, so callbacks
    still run.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_callbacks", {name: [] for name in _FLAGS})
        # This thread's context values (``.o``: {flag: value}), and every thread's, by flag
        # (one entry per thread and nesting level).
        object.__setattr__(self, "_tl", threading.local())
        object.__setattr__(self, "_active", {})
        # Flags whose callbacks keep per-thread state: they run on every context enter/exit
        # (``keep_per_thread``), not only when the thread's value changes.
        object.__setattr__(self, "_per_thread", set())
        object.__setattr__(self, "use_absl", False)
        object.__setattr__(self, "absl_flags", None)
        for name, (default, _) in _FLAGS.items():
            object.__setattr__(self, name, default)

    # -- reading -------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Only for names that are not flags: JAX-only options registered by
        # ``kiln._src.config`` (``config.jax_custom_vjp3``), read from their state.
        reader = external_options.get(name)
        if reader is None:
            raise AttributeError(f"'Config' object has no attribute {name!r}")
        return reader()

    @property
    def flag_names(self) -> tuple[str, ...]:
        return tuple(_FLAGS)

    def read(self, name: str) -> Any:
        self._check_name(name)
        return getattr(self, name)

    #: JAX's private spelling of :meth:`read` (JAX's tests call ``jax.config._read``).
    _read = read

    @property
    def x64_enabled(self) -> bool:
        """Whether 64-bit dtypes are enabled (``jax_enable_x64``)."""
        return self.jax_enable_x64

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
        # The callbacks see this thread's value (a context value, if any, still wins).
        self._run_callbacks(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FLAGS:
            self.update(name, value)
        else:
            raise AttributeError(f"Unrecognized config option: {name}")

    def global_value(self, name: str) -> Any:
        """The flag's global value (what ``update`` set), whatever this thread's context."""
        self._check_name(name)
        return self.__dict__[name]

    def has_override(self, name: str) -> bool:
        """Whether this thread has a context value for flag ``name``."""
        o = getattr(self._tl, "o", None)
        return bool(o) and name in o

    def values_in_use(self, name: str) -> list:
        """The global value of flag ``name`` and every thread's context values for it."""
        with _override_lock:
            return [self.__dict__[name], *self._active.get(name, ())]

    def overrides_any(self, names) -> bool:
        """Whether this thread has a context value for any of the flags ``names``."""
        o = getattr(self._tl, "o", None)
        return bool(o) and any(n in o for n in names)

    def thread_overrides(self) -> dict:
        """This thread's context values ``{flag: value}`` (a snapshot)."""
        return dict(getattr(self._tl, "o", None) or {})

    def _thread_values(self) -> dict:
        o = getattr(self._tl, "o", None)
        if o is None:
            o = self._tl.o = {}
        return o

    def _push(self, name: str, value: Any):
        """Give this thread ``value`` for flag ``name``; returns what :meth:`_pop` needs."""
        o = self._thread_values()
        had = name in o
        prev = o.get(name)
        with _override_lock:
            if not _desc_count.get(name):
                setattr(Config, name, _ThreadValue(name))
            _desc_count[name] = _desc_count.get(name, 0) + 1
            self._active.setdefault(name, []).append(value)
        o[name] = value
        return (name, had, prev, value)

    def _pop(self, token) -> None:
        name, had, prev, value = token
        o = self._thread_values()
        if had:
            o[name] = prev
        else:
            o.pop(name, None)
        with _override_lock:
            vals = self._active[name]
            vals.remove(value)
            if not vals:
                del self._active[name]
            _desc_count[name] -= 1
            if not _desc_count[name]:
                del _desc_count[name]
                if isinstance(Config.__dict__.get(name), _ThreadValue):
                    delattr(Config, name)

    def keep_per_thread(self, name: str) -> None:
        """Run flag ``name``'s callbacks on every context enter and exit (in that thread),
        also when its value does not change: for callbacks that keep per-thread state."""
        self._check_name(name)
        self._per_thread.add(name)

    def _run_callbacks(self, name: str) -> None:
        value = getattr(self, name)
        for fn in tuple(self._callbacks[name]):
            fn(value)

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

    # -- absl flags (as ``jax.config``) ----------------------------------------

    def config_with_absl(self) -> None:
        """Register an absl flag for every config option (``jax.config.config_with_absl``).

        Each option gets an absl flag of the same name (``--jax_enable_x64``,
        ``--jax_numpy_rank_promotion=raise``, ...: booleans, integers, enums and strings
        as the option's type), with the option's current value as the default. The flags
        given on the command line are applied when ``absl.app.run`` has parsed it.
        Call it before ``app.run(main)``::

            from absl import app
            import kiln

            if __name__ == "__main__":
                kiln.config.config_with_absl()
                app.run(main)

        Raises ``ModuleNotFoundError`` when ``absl`` (the ``absl-py`` package) is not
        installed, as JAX does; defining the flags twice raises absl's
        ``DuplicateFlagError``.
        """
        # ModuleNotFoundError here without absl-py, as in JAX.
        from absl import app
        from absl import flags as absl_flags

        object.__setattr__(self, "use_absl", True)
        object.__setattr__(self, "absl_flags", absl_flags)
        for name, (_, parser) in _FLAGS.items():
            value = getattr(self, name)
            help_text = _HELP.get(name, name)
            if parser is _parse_bool or parser is _parse_key_reuse:
                absl_flags.DEFINE_bool(name, value, help_text)
            elif parser is _parse_int:
                absl_flags.DEFINE_integer(name, value, help_text)
            elif hasattr(parser, "choices"):
                absl_flags.DEFINE_enum(name, value, list(parser.choices), help_text)
            else:    # (a Device as jax_default_device is given by its name)
                absl_flags.DEFINE_string(name, value if value is None or isinstance(
                    value, str) else str(value), help_text)
        app.call_after_init(lambda: self.complete_absl_config(absl_flags))

    def complete_absl_config(self, absl_flags: Any) -> None:
        """Apply every absl flag given on the command line to its config option (run by
        ``absl.app`` after parsing; see :meth:`config_with_absl`)."""
        for name in _FLAGS:
            try:
                flag = absl_flags.FLAGS[name]
            except KeyError:
                continue
            if flag.present:
                self.update(name, flag.value)

    def parse_flags_with_absl(self) -> None:
        """Parse the ``--jax*`` (and kiln's ``--kiln*``) command-line arguments with absl,
        without ``absl.app`` (``jax.config.parse_flags_with_absl``).

        Only the arguments before a ``--`` are read; the flags are defined (as by
        :meth:`config_with_absl`) and applied on the first call only.
        """
        global _already_configured_with_absl
        if _already_configured_with_absl:
            return
        import itertools
        import sys

        args = itertools.takewhile(lambda a: a != "--", sys.argv)
        own_argv = ["", *(a for a in args if a.startswith(("--jax", "--kiln")))]
        import absl.flags
        self.config_with_absl()
        absl.flags.FLAGS(own_argv, known_only=True)
        self.complete_absl_config(absl.flags)
        _already_configured_with_absl = True

    def __repr__(self) -> str:
        changed = {
            k: v for k, v in self.values.items() if v != _FLAGS[k][0]
        }
        return f"Config({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


config = Config()
config._read_env()
parse_flags_with_absl = config.parse_flags_with_absl


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
            full = name if name.startswith(("jax_", "kiln_")) else "jax_" + name
            self._config._check_name(full)
            self._flags[full] = value
        self._saved: list[dict[str, Any]] = []

    def __enter__(self) -> config_context:
        cfg = self._config
        tokens: list = []
        self._saved.append(tokens)
        try:
            for name, value in self._flags.items():
                _, parser = _FLAGS[name]
                value = parser(value, name)
                before = getattr(cfg, name)
                tokens.append(cfg._push(name, value))
                if before != value or name in cfg._per_thread:
                    cfg._run_callbacks(name)
        except BaseException:
            self._restore(self._saved.pop())
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restore(self._saved.pop())

    def _restore(self, tokens: list) -> None:
        cfg = self._config
        for token in reversed(tokens):
            name = token[0]
            before = getattr(cfg, name)
            cfg._pop(token)
            if getattr(cfg, name) != before or name in cfg._per_thread:
                cfg._run_callbacks(name)


@contextlib.contextmanager
def with_overrides(overrides: Mapping[str, Any]):
    """Run the block with ``overrides`` (``config.thread_overrides()`` of another thread)
    as this thread's context values."""
    if not overrides:
        yield
        return
    with config_context(**overrides):
        yield


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


def default_matmul_precision(new_val: Any) -> config_context:
    """Set the default precision of matrix products inside the block
    (``jax.default_matmul_precision``): a ``lax.Precision`` name such as ``'highest'``,
    the name of a ``lax.DotAlgorithmPreset`` such as ``'F16_F16_F16'``, or None."""
    return config_context(jax_default_matmul_precision=new_val)


def log_compiles(new_val: bool = True) -> config_context:
    """Log each trace and compilation of a jitted function inside the block, with its time
    (``jax.log_compiles``; the ``kiln`` logger, at WARNING level)."""
    return config_context(jax_log_compiles=new_val)


def explain_cache_misses(new_val: bool = True) -> config_context:
    """Explain ``jit`` cache misses inside the block (``jax.explain_cache_misses``)."""
    return config_context(jax_explain_cache_misses=new_val)


def numpy_dtype_promotion(new_val: str) -> config_context:
    """Use the ``'standard'`` or ``'strict'`` promotion rules inside the block
    (``jax.numpy_dtype_promotion``)."""
    return config_context(jax_numpy_dtype_promotion=new_val)


def numpy_rank_promotion(new_val: str) -> config_context:
    """``'allow'``, ``'warn'`` or ``'raise'`` on implicit rank promotion inside the block
    (``jax.numpy_rank_promotion``)."""
    return config_context(jax_numpy_rank_promotion=new_val)


def default_prng_impl(new_val: str) -> config_context:
    """The PRNG implementation new keys use inside the block (``jax.default_prng_impl``)."""
    return config_context(jax_default_prng_impl=new_val)


def enable_custom_prng(new_val: bool = True) -> config_context:
    """``jax_enable_custom_prng`` inside the block (``jax.enable_custom_prng``): random
    functions given raw ``uint32`` keys warn and return typed keys."""
    return config_context(jax_enable_custom_prng=new_val)


def legacy_prng_key(new_val: str) -> config_context:
    """``'allow'``, ``'warn'`` or ``'error'`` on raw ``uint32`` keys given to random
    functions inside the block (``jax.legacy_prng_key``)."""
    return config_context(jax_legacy_prng_key=new_val)


def threefry_partitionable(new_val: bool = True) -> config_context:
    """Threefry's partitionable bit layout inside the block
    (``jax.threefry_partitionable``)."""
    return config_context(jax_threefry_partitionable=new_val)


def check_tracer_leaks(new_val: bool = True) -> config_context:
    """Check for leaked tracers when each trace of ``jit``, ``vmap``, ``make_jaxpr`` and
    control flow ends, inside the block (``jax.check_tracer_leaks``)."""
    return config_context(jax_check_tracer_leaks=new_val)


def checking_leaks() -> config_context:
    """``check_tracer_leaks(True)``: raise ``UnexpectedTracerError`` for a tracer still
    referenced (from a global, a list, an attribute ...) after its trace ended
    (``jax.checking_leaks``)."""
    return config_context(jax_check_tracer_leaks=True)


def enable_checks(new_val: bool = True) -> config_context:
    """Type-check every staged jaxpr inside the block (``jax.enable_checks``)."""
    return config_context(jax_enable_checks=new_val)


def default_device(new_val: Any) -> config_context:
    """The device new uncommitted arrays go to inside the block (``jax.default_device``):
    ``None``, ``'cpu'`` or kiln's first device (``jax.devices()[0]``); another device
    raises ``NotImplementedError``."""
    return config_context(jax_default_device=new_val)


def debug_key_reuse(new_val: bool = True) -> config_context:
    """``jax_debug_key_reuse`` inside the block (``jax.debug_key_reuse``). kiln has no
    key-reuse checker: ``True`` raises ``NotImplementedError``."""
    return config_context(jax_debug_key_reuse=new_val)


def no_execution(new_val: bool = True) -> config_context:
    """Inside the block running a jitted program raises ``RuntimeError`` (tracing,
    lowering and compiling still work; ``jax.no_execution``)."""
    return config_context(jax_no_execution=new_val)


def transfer_guard(new_val: str) -> config_context:
    """The transfer guard level of every direction inside the block
    (``jax.transfer_guard``): see ``kiln/_transfer_guard.py`` for what kiln counts as a
    host-to-device transfer (device-to-host and device-to-device copies are not transfers
    for kiln's CPU devices)."""
    return config_context(jax_transfer_guard_host_to_device=new_val,
                          jax_transfer_guard_device_to_device=new_val,
                          jax_transfer_guard_device_to_host=new_val)


def transfer_guard_host_to_device(new_val: str) -> config_context:
    """``jax.transfer_guard_host_to_device``: see :func:`transfer_guard`."""
    return config_context(jax_transfer_guard_host_to_device=new_val)


def transfer_guard_device_to_device(new_val: str) -> config_context:
    """``jax.transfer_guard_device_to_device``: see :func:`transfer_guard`."""
    return config_context(jax_transfer_guard_device_to_device=new_val)


def transfer_guard_device_to_host(new_val: str) -> config_context:
    """``jax.transfer_guard_device_to_host``: see :func:`transfer_guard`."""
    return config_context(jax_transfer_guard_device_to_host=new_val)
