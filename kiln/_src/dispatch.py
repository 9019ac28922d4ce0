"""``jax._src.dispatch``: the one name libraries read from JAX's dispatch module.

``wait_for_tokens`` blocks until every effect issued so far has run. kiln runs effects
(``debug.print``, ``io_callback``, callbacks of ``error_if``) synchronously, in program
order, while the program executes, so when it is called there is nothing left to wait
for. Equinox registers it at exit.
"""
from __future__ import annotations

__all__ = ["wait_for_tokens"]


def wait_for_tokens() -> None:
    """Wait for pending effects: kiln has none pending (effects run synchronously)."""
    return None
