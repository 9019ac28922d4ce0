"""``jax._src.lax.eval_jaxpr``: ``eval_jaxpr_p``, a call of a ``ClosedJaxpr`` on arguments
(``eval_jaxpr_p.bind(*args, jaxpr=closed)`` returns the list of its outputs). kiln's
call primitive for that is ``closed_call`` (``kiln.interpreters.calls``), with its eager,
JVP, transpose, batching, staging and compiler rules; binding ``eval_jaxpr_p`` binds it,
so every transformation applies."""
from __future__ import annotations

from kiln.core.jaxpr import ClosedJaxpr
from kiln.interpreters.calls import closed_call_p

__all__ = ["eval_jaxpr_p"]


class _EvalJaxprPrimitive:
    """JAX's ``eval_jaxpr_p`` under its name; ``bind`` calls ``closed_call``."""

    name = "eval_jaxpr"
    multiple_results = True

    def bind(self, *args, jaxpr: ClosedJaxpr):
        if not isinstance(jaxpr, ClosedJaxpr):
            raise TypeError(f"eval_jaxpr_p needs a ClosedJaxpr, got {type(jaxpr).__name__}")
        return list(closed_call_p.bind(*args, call_jaxpr=jaxpr))

    def __repr__(self):
        return self.name


eval_jaxpr_p = _EvalJaxprPrimitive()
