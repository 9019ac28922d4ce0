"""``jax._src.xla_bridge``: whether kiln's (CPU) backend is initialized.

``_backends`` is ``{"cpu": <backend>}`` once the device count is fixed (by the first use of
devices), else ``{}``, as JAX's: ``chex.set_n_cpu_devices`` reads it to refuse changing the
device count too late (kiln reads ``XLA_FLAGS=--xla_force_host_platform_device_count`` at
that first use, as JAX does).
"""
from __future__ import annotations

import importlib


def _devices_module():
    # ``kiln.devices`` the attribute is the function; the module is in sys.modules.
    return importlib.import_module("kiln.devices")


class _CpuBackend:
    """The CPU backend: its platform and devices."""

    platform = "cpu"
    #: What XLA's CPU client reports (JAX's tests look for 'cuda'/'rocm' in it).
    platform_version = "cpu"

    def devices(self):
        from kiln.devices import devices
        return devices()

    def device_count(self) -> int:
        return len(self.devices())

    def __repr__(self):
        return "<kiln cpu backend>"


_CPU = _CpuBackend()


def backends() -> dict:
    """The initialized backends by platform name."""
    return {"cpu": _CPU} if _devices_module()._frozen_count else {}


def get_backend(platform=None):
    """The backend for ``platform`` (only ``"cpu"``)."""
    if platform not in (None, "cpu"):
        raise RuntimeError(f"Unknown backend {platform}. Available: ['cpu']")
    _devices_module().local_count()
    return _CPU


def backend_xla_version(platform=None):
    """The XLA version of the backend: kiln compiles with its own compiler, so None (what
    JAX's CPU backend reports too)."""
    get_backend(platform)
    return None


_caches: list = []


def register_backend_cache(cache, for_what: str) -> None:
    """Clear ``cache`` (anything with ``cache_clear()``) with :func:`clear_backends` and the
    in-memory compilation cache."""
    del for_what
    _caches.append(cache)


def clear_in_memory_compilation_cache() -> None:
    """Forget every compiled program and trace held in memory (``kiln.clear_caches``) and
    the registered backend caches."""
    import kiln
    kiln.clear_caches()
    for cache in _caches:
        cache.cache_clear()


def clear_backends(_crash: bool = False) -> None:
    """JAX recreates its backend clients; kiln's CPU backend holds no state, so this clears
    the in-memory caches."""
    del _crash
    clear_in_memory_compilation_cache()


def get_default_device():
    """The device new arrays go to: ``jax_default_device``, else the first device."""
    import kiln
    from kiln.config import config
    dev = config.jax_default_device
    return dev if dev is not None and not isinstance(dev, str) else kiln.devices()[0]


def register_backend_factory(name: str, factory, *, priority: int = 0,
                             fail_quietly: bool = True, experimental: bool = False,
                             make_topology=None, c_api=None) -> None:
    """JAX's plugin hook for XLA backends: kiln runs only its own CPU backend."""
    raise NotImplementedError(
        f"jax.extend.backend.register_backend_factory({name!r}): kiln has no pluggable XLA "
        "backends (it compiles to C for the CPU itself)")


def get_compile_options(num_replicas, num_partitions, device_assignment=None,
                        env_options_overrides=None, fdo_profile=None, detailed_logging=True,
                        backend=None):
    """XLA's compile options: kiln does not compile with XLA."""
    raise NotImplementedError("jax.extend.backend.get_compile_options: kiln does not compile "
                              "with XLA, so there are no XLA compile options")


def __getattr__(name: str):
    if name == "_backends":
        return backends()
    if name in ("devices", "local_devices", "device_count", "local_device_count",
                "process_index", "process_count"):
        import kiln
        return getattr(kiln, name)
    # JAX's ``xla_bridge.num_cpu_devices`` is the ``jax_num_cpu_devices`` config state.
    if name == "num_cpu_devices":
        from kiln._src.config import num_cpu_devices
        return num_cpu_devices
    raise AttributeError(f"module 'kiln._src.xla_bridge' has no attribute {name!r}")


def _no_cache_to_clear() -> None:
    """kiln does not cache the backend object (JAX's ``get_backend`` is an lru_cache)."""


get_backend.cache_clear = _no_cache_to_clear
