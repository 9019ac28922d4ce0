"""``lax.composite``: an operation with a name, a version, attributes and a decomposition.

``composite(decomposition, name, version)`` wraps a function; calling the wrapper traces
``decomposition`` to a jaxpr and binds the ``composite`` primitive with it, so the staged
program keeps the high-level operation as one equation::

    b:f32[3] = composite[
      attributes=()
      jaxpr={ lambda ; c:f32[3]. let ... in (f,) }
      name=my.tangent
      version=0
    ] a

Positional arguments are the operands; keyword arguments are the op's *attributes*
(static: they parameterize the decomposition and are recorded as
``(name, leaves, treedef)`` triples, NumPy arrays wrapped as ``HashableArray``).
Arrays the decomposition closes over become leading operands (as JAX's lowering passes
them); closed-over scalars stay constants of the decomposition; closing over a tracer, or passing one as an attribute, raises
``UnexpectedTracerError``.

Evaluation runs the decomposition (eagerly op by op; under ``jit`` the compiler inlines
it, as XLA falls back to the decomposition for composites it does not recognize).

As in JAX 0.10, a composite has no differentiation or batching rule: ``jvp``/``grad``
raise ``ValueError`` (use ``custom_jvp``/``custom_vjp`` around it) and ``vmap`` raises
``NotImplementedError``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, eval_jaxpr
from kiln.core.trace import Primitive, Tracer, get_aval
from kiln.errors import UnexpectedTracerError
from kiln.interpreters import ad, staging

__all__ = ["composite", "composite_p"]


class HashableArray:
    """A NumPy array attribute of a composite, hashable by value (JAX's ``HashableArray``)."""

    __slots__ = ("val",)

    def __init__(self, val):
        self.val = np.asarray(val)

    def __repr__(self):
        return f"HashableArray({self.val!r})"

    def __hash__(self):
        return hash((self.val.shape, self.val.dtype.str, self.val.tobytes()))

    def __eq__(self, other):
        return (isinstance(other, HashableArray) and self.val.shape == other.val.shape
                and self.val.dtype == other.val.dtype
                and bool(np.array_equal(self.val, other.val)))


composite_p = Primitive("composite")
composite_p.multiple_results = True


def _composite_impl(*args, name, attributes, version, jaxpr: ClosedJaxpr):
    from kiln.array import make_array
    outs = eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *[make_array(a) for a in args])
    return [np.asarray(o._value if hasattr(o, "_value") else o) for o in outs]


def _composite_abstract_eval(*avals, name, attributes, version, jaxpr: ClosedJaxpr):
    return list(jaxpr.out_avals)


composite_p.impl = _composite_impl
composite_p.abstract_eval = _composite_abstract_eval
composite_p.weak_type_rule = lambda *w, jaxpr, **_: [a.weak_type for a in jaxpr.out_avals]


def _composite_jvp(primals, tangents, **params):
    raise ValueError(
        "JVP rule for composite not implemented. You can use `jax.custom_jvp` to add "
        "support. See https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html")


def _composite_transpose(ct, *args, **params):
    raise ValueError(
        "Transpose rule for composite not implemented. You can use`jax.custom_jvp` or "
        "`jax.custom_vjp` to add support. See "
        "https://docs.jax.dev/en/latest/_autosummary/jax.custom_jvp.html")


ad.jvp_rules[composite_p] = _composite_jvp
ad.transpose_rules[composite_p] = _composite_transpose

_TRACER_HINT = ("This means that the decomposition function closes over a value that is "
                "involved in a JAX transformation. Any values that aren't explicitly known "
                "at compile time must be explicitly passed as arguments to the composite.")


def composite(decomposition: Callable, name: str, version: int = 0) -> Callable:
    """Composite with semantics defined by the decomposition function.

    A composite encapsulates an operation made up of other kiln operations. Its meaning
    is ``decomposition``: the composite can always be replaced by it. The staged program
    keeps it as one ``composite`` equation with a ``name``, a ``version`` and attributes,
    so that the abstraction is visible (e.g. for pattern matching); kiln always evaluates
    the decomposition.

    Args:
      decomposition: function that implements the semantics of the composite op.
      name: name of the encapsulated operation.
      version: optional int to indicate semantic changes to the composite.

    Returns:
      A function. Its positional arguments (pytrees of arrays) are the inputs of the op;
      its keyword arguments are attributes of the op (static values; NumPy arrays, not
      kiln arrays).

    Examples:
      >>> from functools import partial
      >>> @partial(lax.composite, name="my.tangent")
      ... def my_tangent_composite(x):
      ...   return lax.sin(x) / lax.cos(x)
      >>> my_tangent_composite(jnp.array([0.0, 1.0]))
      Array([0.       , 1.5574077], dtype=float32)
    """

    @functools.wraps(decomposition)
    def _decorator(*args, **kwargs):
        from kiln._physical_tree import tree_flatten, tree_unflatten
        flat_args, in_tree = tree_flatten(args)
        in_avals = [get_aval(x) for x in flat_args]
        if any(isinstance(v, Tracer) for v in kwargs.values()):
            raise UnexpectedTracerError(
                "Found a JAX Tracer as an attribute in the decomposition for the composite "
                f"op '{name}'. {_TRACER_HINT}\n\nNote: If you are passing jax arrays as "
                "attributes, use numpy arrays instead.")
        fun = functools.partial(decomposition, **kwargs)
        store = {}

        def flat_fun(*xs):
            out = fun(*tree_unflatten(in_tree, list(xs)))
            leaves, out_tree = tree_flatten(out)
            store["tree"] = out_tree
            return leaves

        traced, consts = staging.trace_to_jaxpr(flat_fun, in_avals)
        if any(isinstance(c, Tracer) for c in consts):
            raise UnexpectedTracerError(
                "Found a JAX Tracer as a constant in the decomposition for the composite op "
                f"'{name}'. {_TRACER_HINT}")
        # Scalar constants stay inside the decomposition (JAX stages them as literals);
        # larger ones become leading operands, as JAX's lowering passes its const args.
        inner = [np.ndim(c) == 0 for c in consts]
        jaxpr = Jaxpr([v for v, k in zip(traced.constvars, inner) if k],
                      [v for v, k in zip(traced.constvars, inner) if not k] + traced.invars,
                      traced.outvars, traced.eqns, traced.effects, traced.debug_info)
        body_consts = [c for c, k in zip(consts, inner) if k]
        consts = [c for c, k in zip(consts, inner) if not k]
        attributes = []
        for k, v in kwargs.items():
            leaves, treedef = tree_flatten(v)
            leaves = tuple(HashableArray(x) if isinstance(x, np.ndarray) else x
                           for x in leaves)
            attributes.append((k, leaves, treedef))
        outs = composite_p.bind(*consts, *flat_args, name=name,
                                attributes=tuple(attributes), version=version,
                                jaxpr=ClosedJaxpr(jaxpr, body_consts))
        return tree_unflatten(store["tree"], list(outs))

    return _decorator
