"""Python array API standard metadata: ``__array_api_version__`` and
``__array_namespace_info__()`` (the inspection namespace), as in ``jax.numpy``."""
from __future__ import annotations

import numpy as np

from kiln import dtypes
from kiln.config import config

__array_api_version__ = "2024.12"

# The standard's dtypes, per kind; the 64-bit ones only when x64 is enabled.
_KINDS = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"),
}
_KINDS["integral"] = _KINDS["signed integer"] + _KINDS["unsigned integer"]
_KINDS["numeric"] = (_KINDS["integral"] + _KINDS["real floating"]
                     + _KINDS["complex floating"])
_WIDE = frozenset({"int64", "uint64", "float64", "complex128"})


def __array_namespace_info__() -> ArrayNamespaceInfo:
    """The array API inspection namespace of ``kiln.numpy``."""
    return ArrayNamespaceInfo()


class ArrayNamespaceInfo:
    """Capabilities, devices and dtypes of ``kiln.numpy`` (array API inspection)."""

    def capabilities(self) -> dict:
        # As in JAX: no boolean-mask indexing or data-dependent output shapes under
        # transformations, and XLA's limit on the rank.
        return {"boolean indexing": False, "data-dependent shapes": False,
                "max dimensions": 64}

    def default_device(self):
        # Arrays are uncommitted: no device is chosen until one is needed.
        return None

    def devices(self) -> list:
        from kiln.devices import devices
        return [None, *devices()]

    def default_dtypes(self, *, device=None) -> dict:
        del device  # the same on every device
        return {"real floating": dtypes.default_float_dtype(),
                "complex floating": dtypes.default_complex_dtype(),
                "integral": dtypes.default_int_dtype(),
                "indexing": dtypes.default_int_dtype()}

    def dtypes(self, *, device=None, kind=None) -> dict:
        del device  # the same on every device
        if kind is None:
            names = _KINDS["bool"] + _KINDS["numeric"]
        elif isinstance(kind, tuple):
            names = tuple(n for k in kind for n in _KINDS[k])
        else:
            names = _KINDS[kind]  # KeyError for an unknown kind, as in JAX
        x64 = config.jax_enable_x64
        return {n: np.dtype(n) for n in names if x64 or n not in _WIDE}
