"""``jax._src.pjit``: ``pjit`` is kiln's ``jit`` (JAX's ``jit`` took over ``pjit``'s
``in_shardings``/``out_shardings``). JAX's lowering caches and C++ dispatch cache
(``_pjit_lower``, ``make_jit_cpp_cache``) have no kiln counterpart."""
from __future__ import annotations

from kiln.jitting import jit as pjit  # noqa: F401
