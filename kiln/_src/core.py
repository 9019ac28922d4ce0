"""``jax._src.core``: the abstract-value names libraries import from JAX's private core."""
from __future__ import annotations

from kiln.core.avals import (  # noqa: F401
    AbstractToken,
    AbstractValue,
    ManualAxisType,
    ShapedArray,
    ShardingTypeError,
)
from kiln.core.jaxpr import (  # noqa: F401
    ClosedJaxpr,
    Jaxpr,
    JaxprEqn,
    Literal,
    Var,
    check_jaxpr,
    eval_jaxpr,
    jaxpr_as_fun,
    sub_jaxprs,
)
from kiln.core.trace import Trace, Tracer, get_aval  # noqa: F401
from kiln.extend.core import (  # noqa: F401
    Primitive,  # noqa: F401
    concrete_or_error,
    eval_context,
    find_top_trace,
    get_opaque_trace_state,
    valid_jaxtype,
)
from kiln.sharding import modify_spec_for_auto_manual  # noqa: F401


def physical_aval(aval):
    """The abstract value of ``aval``'s storage: the same as ``aval`` for every kiln dtype
    (PRNG key arrays expose their ``uint32`` data through ``kiln.random.key_data``)."""
    if isinstance(aval, ShapedArray) and hasattr(aval.dtype, "_rules"):
        raise NotImplementedError(
            "physical_aval of an extended dtype with custom rules: kiln has no extended "
            "dtypes other than PRNG keys")
    return aval


def trace_state_clean() -> bool:
    """Whether no transformation is active: the current trace is the eager one and no
    named axis is bound (NumPyro checks it before caching functions)."""
    from kiln.core.trace import current_trace, eval_trace
    from kiln.interpreters.batching import axis_env
    return current_trace() is eval_trace and not axis_env


def reset_trace_state() -> bool:
    """Reset this thread's trace state to the eager one (no transformation active, no
    named axis bound) and return whether it already was (JAX's test helpers assert it after
    every test)."""
    from kiln.core.trace import _state, eval_trace
    from kiln.interpreters.batching import axis_env
    clean = trace_state_clean()
    if not clean:
        _state.trace = eval_trace
        del axis_env[:]
    return clean


from kiln.errors import ConcretizationTypeError  # noqa: E402,F401  (JAX's core re-exports it)
from kiln.extend.core import pytype_aval_mappings  # noqa: E402,F401


def subjaxprs(jaxpr):
    """The jaxprs in the parameters of ``jaxpr``'s equations (not recursively), as JAX's
    ``core.subjaxprs``."""
    for eqn in jaxpr.eqns:
        yield from sub_jaxprs(eqn.params)


from kiln.state.primitives import new_ref  # noqa: E402,F401  (JAX's core.new_ref)


def typeof(x):
    """JAX's ``core.typeof``: the abstract value of ``x`` (``kiln.typeof``)."""
    from kiln.parallel.placement import typeof as _typeof
    return _typeof(x)


def reduced_vary_cast(x, axis_name):
    """JAX's ``core.reduced_vary_cast``: a value reduced along the manual axes
    ``axis_name`` typed varying there (``lax.pcast(x, axis_name, to='varying')``)."""
    from kiln.lax import pcast
    return pcast(x, axis_name, to="varying")

from kiln.extend.core import (  # noqa: E402,F401  (jax.extend.core re-exports JAX's core's)
    TraceTag,
    mapped_aval,
    set_current_trace,
    take_current_trace,
    unmapped_aval,
)
from kiln.interpreters.calls import call_p, closed_call_p  # noqa: E402,F401  (JAX's core has them)
