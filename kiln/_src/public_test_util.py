"""``jax._src.public_test_util``: the checking helpers behind ``jax.test_util``
(``check_grads``, ``check_close``, tolerances) — kiln's :mod:`kiln.test_util`."""
from __future__ import annotations

from kiln.test_util import *  # noqa: F401,F403


def __getattr__(name: str):
    import kiln.test_util as _tu
    if hasattr(_tu, name):
        return getattr(_tu, name)
    raise AttributeError(f"module 'jax._src.public_test_util' (kiln) has no attribute {name!r}")
