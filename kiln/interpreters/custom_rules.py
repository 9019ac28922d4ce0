"""How kiln's staging, batching and JVP traces process custom-derivative calls.

The rules (staging a ``custom_jvp_call``/``custom_vjp_call`` equation, batching one, the
``custom_lin`` equation of a JVP of a ``custom_vjp``) live in
:mod:`kiln.interpreters.custom_calls` beside the primitives; that module sits above the
traces (it uses all three) and installs them here when imported (``import kiln`` and
every user of custom derivatives import it).
"""
from __future__ import annotations

from collections.abc import Callable

_rules: dict[str, Callable] = {}


def install(**rules: Callable) -> None:
    """Install rules by name: ``stage_custom_jvp``, ``stage_custom_vjp``,
    ``batch_custom_jvp``, ``batch_custom_vjp``, ``bind_custom_lin``."""
    _rules.update(rules)


def rule(name: str) -> Callable:
    """The installed rule ``name`` (a clear error before ``custom_calls`` is imported)."""
    f = _rules.get(name)
    if f is None:
        raise RuntimeError(f"the custom-call rule {name} is not installed: import kiln "
                           f"(kiln.interpreters.custom_calls installs it)")
    return f
