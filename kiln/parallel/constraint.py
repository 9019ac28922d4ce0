"""The ``sharding_constraint`` primitive: ``lax.with_sharding_constraint`` inside a trace.

Its value is its operand; it records, in the jaxpr, the layout the value must have
there. The SPMD partitioner (``kiln.parallel.partition``) reshards to it; everywhere
else it is the identity (the compiler treats it as one). Params as JAX's:
``sharding`` (a ``NamedSharding``), ``layout`` (``None``), ``context_mesh`` (the mesh
set with ``set_mesh``, or ``None``), ``unconstrained_dims`` (dimensions whose layout is
left to propagation).
"""
from __future__ import annotations

from kiln.core.trace import Primitive
from kiln.interpreters import ad, batching

sharding_constraint_p = Primitive("sharding_constraint")


def _eager_lay_out(outs, args, params) -> None:
    """Eagerly: the result laid out as the constraint's ``NamedSharding`` over a
    concrete mesh, as a ``jit`` of the constraint returns it."""
    from kiln.sharding import Mesh, NamedSharding
    sharding = params.get("sharding")
    if (isinstance(sharding, NamedSharding) and type(sharding.mesh) is Mesh
            and sharding.mesh.axis_names):
        outs[0]._sharding = sharding


sharding_constraint_p.impl = lambda x, **params: x
sharding_constraint_p.eager_layout = _eager_lay_out


def _abstract_eval(x, *, sharding, **params):
    """The operand's type; over a mesh with ``Explicit`` axes it carries the layout
    (``x.aval.sharding``: the type's sharding, as JAX's)."""
    from kiln.core.avals import ShapedArray
    from kiln.sharding import AxisType, NamedSharding
    if (type(x) is ShapedArray and isinstance(sharding, NamedSharding)
            and AxisType.Explicit in tuple(getattr(sharding.mesh, "axis_types", ()) or ())):
        from kiln.parallel.placement import type_sharding
        return x.with_type_sharding(type_sharding(sharding, len(x.shape)))
    return x


sharding_constraint_p.abstract_eval = _abstract_eval


def constrain(x, sharding):
    """Bind the constraint on a traced ``x`` (``sharding``: a ``NamedSharding``)."""
    from kiln.core.trace import get_aval
    from kiln.sharding import get_abstract_mesh
    sharding.check_shape(get_aval(x).shape)
    return sharding_constraint_p.bind(x, sharding=sharding, layout=None,
                                      context_mesh=get_abstract_mesh(),
                                      unconstrained_dims=frozenset())


def _transpose(ct, x, *, sharding, **params):
    """The cotangent laid out the same way, but reduced and unreduced mesh axes swapped
    (JAX's cotangent type of a reduced value is unreduced, and back)."""
    spec = getattr(sharding, "spec", None)
    if type(ct) is ad.Zero:
        if spec is None or not (spec.reduced or spec.unreduced):
            return [ct]
        # a zero cotangent of a reduced/unreduced value still has its layout (JAX's type)
        ct = ad.instantiate_zeros(ct)
    if spec is not None and (spec.reduced or spec.unreduced):
        sharding = sharding.update(spec=spec.to_ct_spec())
    return [sharding_constraint_p.bind(ct, sharding=sharding, **params)]


ad.deflinear2(sharding_constraint_p, _transpose)


def _batch(axis_data, vals, dims, *, sharding, layout, context_mesh, unconstrained_dims):
    from kiln.sharding import NamedSharding, PartitionSpec
    (x,), (d,) = vals, dims
    if d is None:
        return sharding_constraint_p.bind(x, sharding=sharding, layout=layout,
                                          context_mesh=context_mesh,
                                          unconstrained_dims=unconstrained_dims), None
    parts = list(sharding.spec)
    parts += [None] * (d - len(parts))
    # the mapped dimension: split along vmap's spmd_axis_name (JAX's)
    spmd = getattr(axis_data, "spmd_name", None)
    if spmd is not None and not set(spmd if isinstance(spmd, tuple) else (spmd,)) & set(
            sharding.spec.mesh_axes()) and all(
            a in sharding.mesh.axis_names for a in (spmd if isinstance(spmd, tuple)
                                                    else (spmd,))):
        parts.insert(d, spmd)
    else:
        parts.insert(d, None)
    moved = NamedSharding(sharding.mesh, PartitionSpec(*parts, reduced=sharding.spec.reduced,
                                                       unreduced=sharding.spec.unreduced))
    dims_ = frozenset(u + (u >= d) for u in unconstrained_dims)
    return sharding_constraint_p.bind(x, sharding=moved, layout=layout,
                                      context_mesh=context_mesh,
                                      unconstrained_dims=dims_), d


batching.batch_rules[sharding_constraint_p] = _batch


def _zero_ct_matters(eqn) -> bool:
    spec = getattr(eqn.params.get("sharding"), "spec", None)
    return spec is not None and bool(spec.reduced or spec.unreduced)


# a zero cotangent of a reduced/unreduced value is laid out as its type says
ad.zero_cotangent_transposes[sharding_constraint_p] = _zero_ct_matters
