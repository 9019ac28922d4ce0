"""The reference backend: interpret a jaxpr with each primitive's NumPy ``impl``.

Always available, and the oracle the compiler is tested against. Values in the
environment are raw NumPy arrays; weak types live only in the avals.
"""
from __future__ import annotations

import numpy as np

from kiln.config import config
from kiln.core.jaxpr import Jaxpr, Literal
from kiln.core.trace import apply_impl
from kiln.interpreters.mlir import eqn_lowering


def _raw(x):
    v = getattr(x, "_value", None)
    return v if v is not None else np.asarray(x)


def run_jaxpr(jaxpr: Jaxpr, consts, args):
    """Evaluate ``jaxpr`` on NumPy values; returns a list of NumPy values.

    Floating-point warnings are silenced for the whole program (XLA gives inf/nan
    silently), once per call rather than per operation."""
    with np.errstate(all="ignore"):
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
