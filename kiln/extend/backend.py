"""``jax.extend.backend``: the backend queries of JAX's extension API, over kiln's one CPU
backend (:mod:`kiln._src.xla_bridge`; the same objects as ``jax._src.xla_bridge``'s and
``jax._src.api.clear_backends``). ``register_backend_factory`` and
``get_compile_options`` raise ``NotImplementedError``: kiln has no XLA backends to plug in
or configure."""
from kiln._src.xla_bridge import (  # noqa: F401
    backend_xla_version,
    backends,
    clear_backends,
    clear_in_memory_compilation_cache,
    get_backend,
    get_compile_options,
    get_default_device,
    register_backend_cache,
    register_backend_factory,
)

__all__ = ["backend_xla_version", "backends", "clear_backends",
           "clear_in_memory_compilation_cache", "get_backend", "get_compile_options",
           "get_default_device", "register_backend_cache", "register_backend_factory"]
