"""``kiln.scipy``: SciPy-style functions built on ``kiln.lax``/``kiln.numpy``, as ``jax.scipy``."""

# Every submodule is imported on first attribute access (as JAX's lazy loader), so that
# ``import kiln`` does not pay for them.
_LAZY_SUBMODULES = {"cluster", "fft", "integrate", "interpolate", "linalg", "ndimage", "optimize", "signal", "sparse",
                    "spatial", "special", "stats"}


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        import importlib
        return importlib.import_module(f"kiln.scipy.{name}")
    raise AttributeError(f"module 'kiln.scipy' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY_SUBMODULES)
