"""``kiln.scipy.sparse``: as ``jax.scipy.sparse``, the sparse iterative solvers of
:mod:`kiln.scipy.sparse.linalg` (``cg``, ``bicgstab``, ``gmres``)."""

# The submodule is imported on first attribute access, as ``kiln.scipy``'s own.
_LAZY_SUBMODULES = {"linalg"}


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        import importlib
        return importlib.import_module(f"kiln.scipy.sparse.{name}")
    raise AttributeError(f"module 'kiln.scipy.sparse' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY_SUBMODULES)
