"""``jax._src.deprecations``: deprecation ids and their warnings, as JAX's registry.

``warn(id, message)`` issues a ``DeprecationWarning``, or raises ``ValueError`` once the id
has been *accelerated* (``accelerate(id)``; JAX's tests use ``is_accelerated`` to decide
whether to expect the warning or the error)."""
from __future__ import annotations

import warnings

_registered: set[str] = set()
_accelerated: set[str] = set()


def register(deprecation_id: str) -> None:
    """Declare a deprecation id."""
    _registered.add(deprecation_id)


def accelerate(deprecation_id: str) -> None:
    """Turn ``deprecation_id``'s warning into an error."""
    _accelerated.add(deprecation_id)


def unaccelerate(deprecation_id: str) -> None:
    """Turn ``deprecation_id``'s error back into a warning."""
    _accelerated.discard(deprecation_id)


def is_accelerated(deprecation_id: str) -> bool:
    """Whether ``deprecation_id`` raises instead of warning."""
    return deprecation_id in _accelerated


def warn(deprecation_id: str, message: str, stacklevel: int = 1,
         error_class: type[Exception] = ValueError) -> None:
    """Warn (``DeprecationWarning``) or, when accelerated, raise ``error_class``."""
    if deprecation_id in _accelerated:
        raise error_class(message)
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)
