"""The public transformations, gathered in one place (as ``jax``'s top level).

Each lives in a module named by its subject:

- ``kiln.transformations``: ``jvp``, ``linearize``, ``vjp``, ``grad``, ``value_and_grad``,
  ``jacfwd``, ``jacrev``, ``hessian``, ``linear_transpose``, ``vmap``;
- ``kiln.jitting``: ``jit`` (``JitWrapped``, its trace caches, ``clear_caches``) and
  ``make_jaxpr``;
- ``kiln.stages``: ``Traced``, ``Lowered``, ``Compiled``, ``ArgInfo``;
- ``kiln.shape_eval``: ``ShapeDtypeStruct``, ``eval_shape``;
- ``kiln.transfer``: ``device_put``, ``device_get``, ``block_until_ready``,
  ``effects_barrier``;
- ``kiln.scopes``: ``ensure_compile_time_eval``, ``named_scope``, ``named_call``.

The work itself is done by the interpreters in ``kiln.interpreters``.
"""
from __future__ import annotations

from kiln.jitting import JitWrapped, clear_caches, jit, make_jaxpr
from kiln.scopes import ensure_compile_time_eval, named_call, named_scope
from kiln.shape_eval import ShapeDtypeStruct, eval_shape
from kiln.stages import ArgInfo, Compiled, Lowered, Traced
from kiln.transfer import block_until_ready, device_get, device_put, effects_barrier
from kiln.transformations import (
    grad,
    hessian,
    jacfwd,
    jacobian,
    jacrev,
    jvp,
    linear_transpose,
    linearize,
    value_and_grad,
    vjp,
    vmap,
)

__all__ = [
    "ArgInfo", "Compiled", "JitWrapped", "Lowered", "ShapeDtypeStruct", "Traced",
    "block_until_ready", "clear_caches", "device_get", "device_put", "effects_barrier",
    "ensure_compile_time_eval", "eval_shape", "grad", "hessian", "jacfwd", "jacobian",
    "jacrev", "jit", "jvp", "linear_transpose", "linearize", "make_jaxpr", "named_call",
    "named_scope", "value_and_grad", "vjp", "vmap",
]
