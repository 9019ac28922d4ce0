"""``kiln.experimental``: APIs that JAX keeps under ``jax.experimental``."""
from kiln.dtypes import primal_tangent_dtype  # noqa: F401
from kiln.experimental.io_callback import io_callback  # noqa: F401


def __getattr__(name):
    # ``jax.experimental.cur_qdd`` (hijax); the submodule loads on first use.
    if name == "cur_qdd":
        from kiln.experimental.hijax import cur_qdd
        return cur_qdd
    if name == "random":    # ``jax.experimental.random``: the stateful PRNG
        import importlib
        return importlib.import_module("kiln.experimental.random")
    raise AttributeError(f"module 'kiln.experimental' has no attribute {name!r}")


__all__ = ["io_callback", "primal_tangent_dtype"]
