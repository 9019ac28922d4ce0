"""``jax._src.compilation_cache``: JAX's persistent compilation cache. kiln keeps its
compiled C programs in its own cache (``docs/compiler.md``) and has no persistent XLA
cache: it is never enabled and there is no cache object."""
from __future__ import annotations

#: The persistent cache object (JAX's ``_cache``); kiln has none.
_cache = None


def is_persistent_cache_enabled() -> bool:
    """Whether JAX's persistent compilation cache is on: never, on kiln."""
    return False


def reset_cache() -> None:
    """Forget the persistent cache object (there is none on kiln)."""
    global _cache
    _cache = None
