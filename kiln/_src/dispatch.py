"""``jax._src.dispatch``: the one name libraries read from JAX's dispatch module.

``wait_for_tokens`` blocks until every effect issued so far has run. kiln runs effects
(``debug.print``, ``io_callback``, callbacks of ``error_if``) synchronously, in program
order, while the program executes, so when it is called there is nothing left to wait
for. Equinox registers it at exit.
"""
from __future__ import annotations

__all__ = ["apply_primitive", "runtime_tokens", "wait_for_tokens"]


def wait_for_tokens() -> None:
    """Wait for pending effects: kiln has none pending (effects run synchronously)."""
    return None


def apply_primitive(prim, *args, **params):
    """Evaluate ``prim`` on concrete operands, eagerly (JAX's ``dispatch.apply_primitive``,
    the default ``impl`` of a primitive); returns its output (a list for a primitive with
    multiple results)."""
    from kiln.core.trace import eval_trace, set_current_trace
    with set_current_trace(eval_trace):
        return prim.bind(*args, **params)


class _RuntimeTokens:
    """JAX's set of runtime tokens that order effects across computations
    (``dispatch.runtime_tokens``). kiln runs effects synchronously in program order and
    keeps no tokens: there is never anything to block on or clear."""

    def clear(self) -> None:
        """Drop the tokens (kiln holds none)."""

    def block_until_ready(self) -> None:
        """Wait for pending effects (kiln has none pending)."""


runtime_tokens = _RuntimeTokens()
