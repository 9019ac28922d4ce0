"""``jax.interpreters.mlir``: how primitives defined through JAX's API are compiled.

JAX compiles a primitive with the lowering rule registered for it
(``mlir.register_lowering(prim, rule)``). kiln does not build MLIR; it understands the one
kind of rule that says what to compute in terms of other operations,
``mlir.lower_fun(fn)``: ``jit`` traces ``fn`` at the equation's operands and parameters
and compiles the resulting jaxpr in place of the equation (fused like any other code).

A primitive whose rule emits MLIR itself (it calls ``ctx``/``ir`` APIs) cannot be
compiled that way: under ``jit`` it runs its ``impl`` as a host island (the impl gets kiln
Arrays). A primitive with neither an impl nor a ``lower_fun`` rule raises JAX's error,
``NotImplementedError: MLIR translation rule for primitive '...' not found``, when a
program using it runs.
"""
from __future__ import annotations

from collections.abc import Callable

from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import Primitive

__all__ = ["LoweredFun", "emit_python_callback", "lower_fun", "lowering_jaxpr",
           "register_lowering"]

# prim -> rule registered for the CPU (or for every platform). Rules for other platforms
# (``platform="cuda"``/``"tpu"``/``"rocm"``) are kept apart: kiln runs on CPUs.
_lowerings: dict = {}
_platform_lowerings: dict = {}


class LoweredFun:
    """The rule made by :func:`lower_fun`: lower a primitive as ``fun(*args, **params)``."""

    __slots__ = ("fun", "multiple_results")

    def __init__(self, fun: Callable, multiple_results: bool):
        self.fun = fun
        self.multiple_results = multiple_results

    def __call__(self, ctx, *args, **params):
        raise TypeError(
            "kiln does not build MLIR: a rule made by mlir.lower_fun is applied by kiln's "
            "compiler (it traces the function), not called with a lowering context")

    def __repr__(self):
        name = getattr(self.fun, "__name__", repr(self.fun))
        return f"lower_fun({name}, multiple_results={self.multiple_results})"


def lower_fun(fun: Callable, multiple_results: bool = True) -> LoweredFun:
    """A lowering rule computing a primitive as ``fun(*operands, **params)``, a function
    of kiln operations (JAX's ``mlir.lower_fun``).

    Args:
      fun: called with the equation's operands (tracers) and parameters.
      multiple_results: whether ``fun`` returns a sequence of arrays (else one array).
    """
    return LoweredFun(fun, bool(multiple_results))


def register_lowering(prim: Primitive, rule: Callable, platform: str | None = None,
                      **_options) -> Callable:
    """Register ``rule`` as the way to compile ``prim`` (``platform`` None or ``"cpu"``:
    kiln's; other platforms' rules are kept but unused). JAX's keyword options
    (``inline``, ``cacheable``) are accepted and have no effect. Returns ``rule``."""
    if platform in (None, "cpu"):
        _lowerings[prim] = rule
    else:
        _platform_lowerings.setdefault(platform, {})[prim] = rule
    return rule


def lowering_jaxpr(prim: Primitive, in_avals, params) -> ClosedJaxpr | None:
    """The jaxpr computing one equation of ``prim`` by its :func:`lower_fun` rule, or None
    when it has no such rule. Traced anew for each equation (operands and parameters
    decide what the function does)."""
    rule = _lowerings.get(prim)
    if type(rule) is not LoweredFun:
        return None
    from kiln.interpreters.staging import trace_to_jaxpr

    def flat(*args):
        out = rule.fun(*args, **params)
        return list(out) if rule.multiple_results else [out]

    jaxpr, consts = trace_to_jaxpr(flat, list(in_avals))
    return ClosedJaxpr(jaxpr, consts)


def emit_python_callback(*_args, **_kwargs):
    """JAX's MLIR helper for calling Python from compiled code. kiln never runs MLIR
    lowering rules (a primitive whose rule uses this runs its impl as a host island), so
    calling it means code is driving JAX's lowering machinery directly."""
    raise NotImplementedError(
        "mlir.emit_python_callback: kiln does not build MLIR. A primitive whose lowering "
        "rule emits MLIR runs its impl (as a host island) under kiln's jit instead.")


def __getattr__(name):
    raise AttributeError(
        f"module 'jax.interpreters.mlir' (kiln.interpreters.mlir) has no attribute {name!r}: "
        "kiln does not build MLIR; it provides register_lowering and lower_fun")
