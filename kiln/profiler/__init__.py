"""``kiln.profiler``: traces that open in TensorBoard and Perfetto, as ``jax.profiler``.

>>> import kiln, kiln.numpy as jnp
>>> f = kiln.jit(lambda x: jnp.tanh(x @ x).sum())
>>> with kiln.profiler.trace("/tmp/kiln-trace"):          # doctest: +SKIP
...     f(jnp.ones((64, 64))).block_until_ready()
>>> print(kiln.profiler.summary("/tmp/kiln-trace"))        # doctest: +SKIP

While a trace is active kiln records its host spans (tracing of ``jit`` functions, each
compiler pass, lowering, each C build, each execution of a compiled program,
reference-backend runs, user annotations) and the time of every native kernel and host
island of the compiled programs it runs. ``stop_trace`` writes
``log_dir/plugins/profile/<run>/<host>.xplane.pb`` (read by TensorBoard's profile
plugin, ``xprof``) and ``perfetto_trace.json.gz`` (Perfetto UI). ``summary`` (and
``python -m kiln.profiler LOG``) lists the top kernels with their source lines. See
``docs/profiling.md``.

With no trace active, nothing is recorded and the instrumented paths cost one flag test.
"""
from __future__ import annotations

# The public names load their modules on first use (``import kiln`` imports this package
# for its recorder only, which hot paths consult).
_LAZY = {
    "StepTraceAnnotation": "_annotations", "TraceAnnotation": "_annotations",
    "annotate_function": "_annotations",
    "device_memory_profile": "_memory", "save_device_memory_profile": "_memory",
    "ProfileOptions": "_session", "register_subprocess": "_session",
    "start_server": "_session", "start_trace": "_session", "stop_server": "_session",
    "stop_trace": "_session", "trace": "_session",
    "Summary": "_summary", "summary": "_summary",
    "ProfileData": "_xplane", "ProfileEvent": "_xplane", "ProfileLine": "_xplane",
    "ProfilePlane": "_xplane",
}

__all__ = sorted(_LAZY)


def live_arrays(platform: str | None = None) -> list:
    """Return all live arrays in the backend for ``platform`` (``kiln.live_arrays``).

    If ``platform`` is None, it is the default backend (kiln has one: ``"cpu"``). Deleted
    (donated) arrays are left out. The arrays are found by one pass over the garbage
    collector's objects (see ``kiln.profiler._memory``), so creating arrays costs nothing.

    Args:
      platform: a backend name (``"cpu"``) or None.

    Returns:
      A list of the concrete arrays that are alive now.
    """
    import gc

    from kiln.array import ArrayImpl
    from kiln.devices import devices
    from kiln.donation import Deleted
    devices(platform)           # JAX's RuntimeError for an unknown backend
    return [o for o in gc.get_objects()
            if type(o) is ArrayImpl and type(o._value) is not Deleted]


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kiln.profiler' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"kiln.profiler.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
