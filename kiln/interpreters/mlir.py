"""``jax.interpreters.mlir``: how primitives defined through JAX's API are compiled.

JAX compiles a primitive with the lowering rule registered for it
(``mlir.register_lowering(prim, rule)``). kiln does not build MLIR; it understands the one
kind of rule that says what to compute in terms of other operations,
``mlir.lower_fun(fn)``: ``jit`` traces ``fn`` at the equation's operands and parameters
and compiles the resulting jaxpr in place of the equation (fused like any other code).

A rule that emits MLIR only through ``mlir.emit_python_callback`` (Equinox's
``noinline``) is run once per compiled equation with a kiln lowering context: the callback
it emits becomes a host callback in the compiled program, called with NumPy arrays as XLA
calls it. A primitive whose rule emits other MLIR (``ir`` APIs) cannot be compiled: under
``jit`` it runs its ``impl`` as a host island (the impl gets kiln Arrays). A primitive with neither an impl nor a ``lower_fun`` rule raises JAX's error,
``NotImplementedError: MLIR translation rule for primitive '...' not found``, when a
program using it runs.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.trace import Primitive

__all__ = ["LoweredFun", "LoweringRuleContext", "ModuleContext", "emit_python_callback",
           "eqn_lowering", "lower_fun", "lowering_jaxpr", "register_lowering"]

# eqn -> its lowering jaxpr (or None): each equation is lowered once, whether the
# compiler inlines it or the reference backend runs it while a build is pending.
_eqn_lowerings: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_eqn_lock = threading.RLock()

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


#: The platforms JAX 0.10.2 knows (its own and its plugins' names): a lowering rule for any
#: other is JAX's NotImplementedError (libraries register rules for cuda/rocm/tpu freely).
KNOWN_PLATFORMS = frozenset({"cpu", "cuda", "gpu", "oneapi", "rocm", "tpu"})


def register_lowering(prim: Primitive, rule: Callable, platform: str | None = None,
                      **_options) -> Callable:
    """Register ``rule`` as the way to compile ``prim`` (``platform`` None or ``"cpu"``:
    kiln's; other platforms' rules are kept but unused). JAX's keyword options
    (``inline``, ``cacheable``) are accepted and have no effect. Returns ``rule``."""
    if platform in (None, "cpu"):
        _lowerings[prim] = rule
    elif platform not in KNOWN_PLATFORMS:
        raise NotImplementedError(
            f"Registering an MLIR lowering rule for primitive {prim} for an unknown "
            f"platform {platform}. Known platforms are: {', '.join(sorted(KNOWN_PLATFORMS))}.")
    else:
        _platform_lowerings.setdefault(platform, {})[prim] = rule
    return rule


def lowering_jaxpr(prim: Primitive, in_avals, params) -> ClosedJaxpr | None:
    """The jaxpr computing one equation of ``prim`` by its :func:`lower_fun` rule (or by
    the host callback its rule emits), or None when it has no such rule. Traced anew for
    each equation (operands and parameters decide what the function does)."""
    rule = _lowerings.get(prim)
    if rule is None:
        return None
    if type(rule) is not LoweredFun:
        return _callback_lowering(prim, rule, list(in_avals), params)
    from kiln.interpreters.staging import trace_to_jaxpr

    def flat(*args):
        out = rule.fun(*args, **params)
        return list(out) if rule.multiple_results else [out]

    jaxpr, consts = trace_to_jaxpr(flat, list(in_avals))
    return ClosedJaxpr(jaxpr, consts)


class ModuleContext:
    """What a lowering rule sees of the module being built: objects to keep alive."""

    def __init__(self):
        self.keepalives: list = []

    def add_keepalive(self, keepalive) -> None:
        self.keepalives.append(keepalive)


class LoweringRuleContext:
    """The ``ctx`` kiln passes to a lowering rule (``avals_in``, ``avals_out``,
    ``module_context``); it records the host callbacks the rule emits."""

    def __init__(self, primitive: Primitive, avals_in, avals_out):
        self.primitive = primitive
        self.avals_in = list(avals_in)
        self.avals_out = list(avals_out)
        self.module_context = ModuleContext()
        self.tokens_in = None
        self.tokens_out = None
        self.callbacks: list = []   # (callback, operands, result_avals, has_side_effect)


class _Value:
    """A value inside a lowering rule: an operand of the equation or a callback result."""

    __slots__ = ("source", "index")

    def __init__(self, source, index: int):
        self.source = source        # "in", or the index of the callback that made it
        self.index = index


# Set by kiln.callbacks: bind(callback, args, result_avals, has_side_effect) -> outputs.
_callback_binder: list = []


def eqn_lowering(eqn) -> ClosedJaxpr | None:
    """:func:`lowering_jaxpr` of one equation of a primitive defined through JAX's API,
    computed once per equation (a rule with side effects at lowering time, such as
    Equinox's ``announce_transform``, then runs once per lowered equation, as in JAX)."""
    try:
        return _eqn_lowerings[eqn]
    except KeyError:
        pass
    with _eqn_lock:     # the background compiler and a pending call may ask at once
        if eqn not in _eqn_lowerings:
            _eqn_lowerings[eqn] = lowering_jaxpr(eqn.primitive, [v.aval for v in eqn.invars],
                                                 eqn.params)
        return _eqn_lowerings[eqn]


def emit_python_callback(ctx, callback, token, operands, operand_avals, result_avals, *,
                         has_side_effect: bool = False, sharding=None, **_kwargs):
    """JAX's helper for calling Python from compiled code: ``callback`` is called with
    NumPy arrays (one per operand) and returns a sequence of arrays (one per result aval).
    Returns ``(results, token, keepalive)``. Inside a rule run by kiln the results stand
    for the callback's outputs in the compiled program."""
    if not isinstance(ctx, LoweringRuleContext):
        raise NotImplementedError(
            "mlir.emit_python_callback: kiln does not build MLIR; it is available to "
            "lowering rules that kiln's jit runs (with its own lowering context)")
    for x in operands:
        if not isinstance(x, _Value):
            raise NotImplementedError("mlir.emit_python_callback: operands must be values "
                                      "of the lowering rule")
    k = len(ctx.callbacks)
    ctx.callbacks.append((callback, list(operands), list(result_avals), bool(has_side_effect)))
    return [_Value(k, i) for i in range(len(result_avals))], token, None


def _callback_lowering(prim, rule, in_avals, params) -> ClosedJaxpr | None:
    """Run ``rule`` with a kiln context; if it only emitted Python callbacks, the jaxpr
    calling them; else None (the primitive then runs as a host island)."""
    if not _callback_binder or not prim.array_impl or prim.abstract_eval is None:
        return None
    out = prim.abstract_eval(*in_avals, **params)
    avals_out = list(out) if prim.multiple_results else [out]
    ctx = LoweringRuleContext(prim, in_avals, avals_out)
    try:
        res = rule(ctx, *[_Value("in", i) for i in range(len(in_avals))], **params)
    except Exception:       # the rule needs MLIR that kiln does not build
        return None
    res = list(res) if isinstance(res, (list, tuple)) else [res]
    if (not ctx.callbacks or len(res) != len(avals_out)
            or not all(isinstance(r, _Value) for r in res)):
        return None
    from kiln.interpreters.staging import trace_to_jaxpr
    bind = _callback_binder[0]

    def flat(*args):
        made: list = []

        def read(v):
            return args[v.index] if v.source == "in" else made[v.source][v.index]
        for callback, operands, r_avals, effect in ctx.callbacks:
            made.append(bind(callback, [read(v) for v in operands], r_avals, effect))
        return [read(v) for v in res]

    jaxpr, consts = trace_to_jaxpr(flat, in_avals)
    return ClosedJaxpr(jaxpr, consts)


#: The platforms on which ``jit(..., donate_argnums=...)`` donates (JAX's list, read by its
#: test helper ``device_supports_buffer_donation``): kiln's one platform, ``cpu``, does
#: (``kiln/donation.py``), as JAX's CPU backend.
_platforms_with_donation = ["cpu"]


def __getattr__(name):
    raise AttributeError(
        f"module 'jax.interpreters.mlir' (kiln.interpreters.mlir) has no attribute {name!r}: "
        "kiln does not build MLIR; it provides register_lowering and lower_fun")
