"""The reference backend: interpret a jaxpr with each primitive's NumPy ``impl``.

Always available, and the oracle the compiler is tested against. Values in the
environment are raw NumPy arrays; weak types live only in the avals.
"""
from __future__ import annotations

import numpy as np

from kiln._extended import EValue
from kiln._fp_warnings import quiet
from kiln.config import config
from kiln.core.jaxpr import Jaxpr, Literal, set_reference_runner
from kiln.core.physical import physical_jaxpr
from kiln.core.ref import Ref
from kiln.core.trace import apply_impl
from kiln.interpreters.mlir import eqn_lowering


def _raw(x):
    v = getattr(x, "_value", None)
    if v is None:
        return x if type(x) is Ref else np.asarray(x)
    return v.data if type(v) is EValue else v


def run_jaxpr(jaxpr: Jaxpr, consts, args):
    """Evaluate ``jaxpr`` on NumPy values; returns a list of NumPy values.

    Floating-point warnings are silenced for the whole program (XLA gives inf/nan
    silently), once per call rather than per operation (``kiln._fp_warnings.quiet``)."""
    jaxpr = physical_jaxpr(jaxpr)      # extended dtypes run on their storage dtypes
    with quiet():
        return _run(jaxpr, consts, args)


def _run(jaxpr: Jaxpr, consts, args):
    env = {}
    for v, x in zip(jaxpr.constvars, consts):
        env[v] = _raw(x)
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    check = config.jax_debug_nans or config.jax_debug_infs
    for eqn in jaxpr.eqns:
        ins = [v.val._value if type(v) is Literal else env[v] for v in eqn.invars]
        body = eqn_lowering(eqn) if eqn.primitive.array_impl else None
        if body is None and hasattr(eqn.primitive, "expand"):
            body = eqn.primitive.expand(eqn)       # ``shard_map``: its expansion
        if body is not None:
            # A library's primitive inside a program runs as its lowering rule says (as
            # the compiled program does, and as JAX always does under jit), not its impl.
            out = _run(body.jaxpr, body.consts, ins)
            if not eqn.primitive.multiple_results:
                out = out[0]
        else:
            out = apply_impl(eqn.primitive, ins, eqn.params)
        if eqn.primitive.multiple_results:
            for v, o in zip(eqn.outvars, out):
                env[v] = o
            if check:
                for o in out:
                    _check_nans(eqn, o)
        else:
            env[eqn.outvars[0]] = out
            if check:
                _check_nans(eqn, out)
    return [v.val._value if type(v) is Literal else env[v] for v in jaxpr.outvars]


def special_kind(value) -> str | None:
    """``'nan'``/``'inf'`` when ``value`` (a NumPy value) holds one that the
    ``jax_debug_nans``/``jax_debug_infs`` flags ask to catch, else None."""
    v = np.asarray(value)
    if v.dtype.kind not in "fc":
        return None
    if config.jax_debug_nans and np.isnan(v).any():
        return "nan"
    if config.jax_debug_infs and np.isinf(v).any():
        return "inf"
    return None


def _check_nans(eqn, value):
    """JAX's ``FloatingPointError`` for a NaN/Inf output of ``eqn``, with a note naming
    the user's line that staged it (when known). A ``jit`` that sees it calls the Python
    function again un-jitted, to raise it again with the user's frames (as JAX does)."""
    kind = special_kind(value)
    if kind is None:
        return
    err = FloatingPointError(f"invalid value ({kind}) encountered in {eqn.primitive.name}")
    src = getattr(eqn, "source_info", None)
    if src is not None:
        err.add_note(f"The {kind} was produced by `{eqn.primitive.name}` at {src}.")
    raise err


# A while loop's trip count is unknown before it runs: assume this many iterations.
WHILE_TRIPS_GUESS = 100


def estimated_steps(jaxpr: Jaxpr) -> int:
    """How many equations running ``jaxpr`` here executes, roughly: loop bodies count once
    per iteration (a scan's ``length``; a while loop's guessed at ``WHILE_TRIPS_GUESS``),
    a ``cond`` its largest branch. Each step costs a few microseconds of Python, so this
    is what the cpu backend weighs against waiting for a build (``kiln.backends.cpu``)."""
    return _steps(jaxpr, {})


def _steps(jaxpr, memo) -> int:
    key = id(jaxpr)
    hit = memo.get(key)
    if hit is not None:
        return hit
    total = 0
    for eqn in jaxpr.eqns:
        subs = [_steps(j.jaxpr if hasattr(j, "consts") else j, memo)
                for j in _sub_jaxprs(eqn.params)]
        name = eqn.primitive.name
        if not subs:
            total += 1
        elif name == "scan":
            total += 1 + int(eqn.params.get("length", 1)) * sum(subs)
        elif name == "while":
            total += 1 + WHILE_TRIPS_GUESS * sum(subs)
        elif name == "cond":
            total += 1 + max(subs)
        else:
            total += 1 + sum(subs)
    memo[key] = total
    return total


def _sub_jaxprs(params):
    for p in params.values():
        for s in (p if isinstance(p, (tuple, list)) else (p,)):
            if isinstance(s, Jaxpr) or (hasattr(s, "jaxpr") and hasattr(s, "consts")
                                        and isinstance(s.jaxpr, Jaxpr)):
                yield s


# The eager impls of primitives with sub-jaxprs (cond, custom calls, checkpoint) run here.
set_reference_runner(lambda jaxpr, consts, args: run_jaxpr(jaxpr, consts, args))
