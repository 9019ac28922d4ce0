"""``jax._src.lax.lax``: :mod:`kiln.lax`, plus the private helpers of JAX's module that
JAX's tests and libraries call (``asarray``)."""
from kiln.lax import *  # noqa: F401,F403
from kiln.lax.structural import asarray  # noqa: F401


def __getattr__(name: str):
    # the rest of kiln.lax (its private names, e.g. ``_convert_element_type``)
    import kiln.lax as _lax
    try:
        return getattr(_lax, name)
    except AttributeError:
        raise AttributeError(f"module 'jax._src.lax.lax' (kiln) has no attribute {name!r}") \
            from None
