"""``shard_map``: a function written for one device's block, run on every device of a mesh.

Eagerly, the function is traced once per argument signature with the block shapes and
every mesh axis name bound, and that program runs on each device's worker thread over
its block (``kiln.parallel.spmd``); ``out_specs`` say how the blocks assemble into the
global outputs (Arrays with a ``NamedSharding``). Under a transformation (``jit``,
``grad``, ``vmap``) the same values are computed as nested ``vmap``s, one per mesh axis,
over the blocks laid side by side (so collectives mean the same thing); an output whose
spec omits a mesh axis must then not vary along it, else ``vmap``'s ``ValueError``.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from kiln import transfer
from kiln._physical_tree import tree_flatten, tree_unflatten
from kiln._traceback_util import api_boundary
from kiln.array import Array, make_array, to_array
from kiln.core import trace as core
from kiln.core.trace import Tracer, get_aval
from kiln.interpreters import batching
from kiln.parallel import global_array, spmd
from kiln.parallel.constraint import sharding_constraint_p
from kiln.sharding import (
    AbstractMesh,
    AxisType,
    Mesh,
    NamedSharding,
    PartitionSpec,
    concrete_named_sharding,
    context_mesh,
    get_abstract_mesh,
)
from kiln.transformations import _check_arg


def _install_hook():
    from kiln.parallel import vma
    vma.install_emulation_hook()


_install_hook()


class InferFromArgs:
    """``in_specs``' default (JAX's ``jax.sharding.Infer``): take each argument's spec
    from its sharding's ``Explicit`` mesh axes (every manual axis must be Explicit)."""

    def __repr__(self):
        return "jax.sharding.Infer"


Infer = InferFromArgs()


def _is_spec(s) -> bool:
    return isinstance(s, PartitionSpec) or s is None


def _specs_for(what: str, tree, specs, n_leaves: int, keep_none: bool = False) -> list:
    """Broadcast a tree prefix of PartitionSpecs (``P`` leaves) to one per leaf. ``None``
    is a leaf: with ``keep_none`` it stays ``None`` (an input passed through as is),
    else it means ``P()``."""
    from kiln.transformations import _flatten_axes
    s_leaves, s_tree = tree_flatten(specs, is_leaf=_is_spec)
    # Replace each spec by a placeholder int so the generic prefix broadcast applies.
    proxy = tree_unflatten(s_tree, list(range(len(s_leaves))))
    try:
        idx = _flatten_axes(f"shard_map {what}", tree, proxy, n_leaves)
    except ValueError:
        msg = _prefix_error(f"shard_map {what}", specs, _tree_of(tree))
        raise ValueError(msg or f"shard_map {what} must be a tree prefix of the "
                         f"corresponding value, got {what}={specs} for value tree "
                         f"{tree}.") from None
    out = []
    for i in idx:
        s = s_leaves[i] if i is not None else None
        out.append(s if s is not None or keep_none else PartitionSpec())
    return out


def _tree_of(tree):
    """The value tree ``tree`` with integer leaves (for key paths), or None."""
    try:
        return tree_unflatten(tree, list(range(tree.num_leaves)))
    except Exception:       # noqa: BLE001 - a custom node that needs real leaves
        return None


def _prefix_error(name: str, prefix, full, path: str = "") -> str | None:
    """JAX's message for a ``prefix`` tree that is no prefix of ``full``: the first key
    path where they differ."""
    if _is_spec(prefix) or full is None and path == "":
        return None
    head = "pytree structure error: "
    if type(prefix) is not type(full):
        return (f"{head}different types at key path\n    {name}{path}\nAt that key path, the "
                f"prefix pytree {name} has a subtree of type\n    {type(prefix)}\nbut at the "
                f"same key path the full pytree has a subtree of different type\n    "
                f"{type(full)}.")
    if isinstance(prefix, (list, tuple)):
        if len(prefix) != len(full):
            t = type(prefix).__name__
            return (f"{head}different lengths of {t} at key path\n    {name}{path}\nAt that "
                    f"key path, the prefix pytree {name} has a subtree of type {t} of length "
                    f"{len(prefix)}, but the full pytree has a subtree of the same type but "
                    f"of length {len(full)}.")
        items = [(f"[{i}]", a, b) for i, (a, b) in enumerate(zip(prefix, full))]
    elif isinstance(prefix, dict):
        if set(prefix) != set(full):
            return (f"{head}different pytree metadata at key path\n    {name}{path}\nAt "
                    f"that key path, the prefix pytree {name} has a subtree of type dict "
                    f"with keys {sorted(prefix, key=str)}, but the full pytree has keys "
                    f"{sorted(full, key=str)}.")
        items = [(f"[{k!r}]", prefix[k], full[k]) for k in prefix]
    else:
        return None
    for key, a, b in items:
        msg = _prefix_error(name, a, b, path + key)
        if msg:
            return msg
    return None


def _spec_keys(tree, specs, n_leaves: int) -> list:
    """The key path (``keystr``) of the spec that applies to each value leaf."""
    from kiln.transformations import _flatten_axes
    from kiln.tree_util import keystr, tree_flatten_with_path
    if _is_spec(specs):
        return [""] * n_leaves
    paths = [keystr(p) for p, _ in tree_flatten_with_path(specs, is_leaf=_is_spec)[0]]
    s_leaves, s_tree = tree_flatten(specs, is_leaf=_is_spec)
    proxy = tree_unflatten(s_tree, list(range(len(s_leaves))))
    idx = _flatten_axes("shard_map specs", tree, proxy, n_leaves)
    return [paths[i] if i is not None and i < len(paths) else "" for i in idx]


def _value_keys(tree) -> list:
    from kiln.tree_util import keystr, tree_flatten_with_path
    full = _tree_of(tree)
    if full is None:
        return [f"[{i}]" for i in range(tree.num_leaves)]
    return [keystr(p) for p, _ in tree_flatten_with_path(full)[0]]


def _rank_error(what: str, f, spec_key: str, spec, value_key: str, aval) -> ValueError:
    """JAX's error for a spec longer than its value's rank."""
    import inspect
    name = getattr(f, "__name__", str(f))
    io = "in" if what == "in_specs" else "out"
    extra = ""
    if io == "in":
        base = "the passed args"
        try:
            params = [q for q in inspect.signature(f).parameters.values()
                      if q.kind not in (q.KEYWORD_ONLY, q.VAR_KEYWORD)]
            pos = int(value_key[1:value_key.index("]")])
            if pos < len(params) and params[pos].kind != params[pos].VAR_POSITIONAL:
                extra = f", where args[{pos}] is bound to {name}'s parameter '{params[pos].name}',"
        except (TypeError, ValueError):
            pass
    else:
        base = f"{name}(*args)"
    msg = (f"shard_map applied to the function '{name}' was given an {io}_specs entry which "
           f"is too long to be compatible with the corresponding {io}put value from the "
           f"function:\n\n{io}_specs{spec_key} is {spec!r} which has length {len(spec)}, but "
           f"{base}{value_key}{extra} has shape {aval.str_short(short_dtypes=False)}, which has "
           f"rank {aval.ndim} (and {aval.ndim} < {len(spec)})\n\nEntries in {io}_specs must "
           f"be of length no greater than the number of axes in the corresponding {io}put "
           f"value.\n\nEither revise the spec to be shorter, or modify '{name}' so that its "
           f"{io}puts have sufficient rank.")
    if aval.ndim == 0:
        msg += (f"\n\nFor scalar values (rank 0), consider using an {io}_specs entry of "
                "`P()`, where `P = jax.sharding.PartitionSpec`.")
        if io == "out":
            msg += (" In particular, for rank 0 outputs which are not constant over the "
                    "mesh, add at least one (singleton) axis to them so that they can be "
                    "concatenated using out_specs.")
    return ValueError(msg)


def _check_out_ranks(f, out_tree, out_specs, ospecs, avals) -> None:
    for k, (s, a) in enumerate(zip(ospecs, avals)):
        if len(s) > a.ndim:
            raise _rank_error("out_specs", f, _spec_keys(out_tree, out_specs,
                                                         out_tree.num_leaves)[k],
                              s, _value_keys(out_tree)[k], a)


def _check_spec(spec: PartitionSpec, manual, what: str, where: str) -> None:
    seen: set = set()
    for a in spec.mesh_axes():
        if a not in manual:
            raise ValueError(f"shard_map {what} argument must refer to an axis marked as "
                             f"manual ({frozenset(manual)}), but:\n\n  {what} refers "
                             f"to {a!r} ({where})\n\nCheck the {what} values passed to "
                             "shard_map.")
        if a in seen:
            raise ValueError(f"shard_map {what} {spec!r} ({where}) names mesh axis {a!r} twice; "
                             "each mesh axis may split at most one dimension.")
        seen.add(a)


def _check_unreduced(specs, what: str, mesh, manual) -> None:
    """JAX's checks of specs naming reduced/unreduced axes: only in a full manual
    shard_map, over ``Explicit`` mesh axes."""
    prefix = "in" if what.startswith("in") else "out"
    full = frozenset(mesh.axis_names) == frozenset(manual)
    for s in tree_flatten(specs, is_leaf=_is_spec)[0]:
        if not isinstance(s, PartitionSpec) or not (s.reduced or s.unreduced):
            continue
        if not full:
            raise NotImplementedError(
                f"unreduced/reduced can only be passed to {prefix}_specs when shard_map is "
                f"in full manual mode. Got mesh axis names {tuple(mesh.axis_names)}, "
                f"manual_axes: {frozenset(manual)}, specs: {s}. Please file a bug at "
                "https://github.com/jax-ml/jax/issues.")
        for kind in ("unreduced", "reduced"):
            if not all(_axis_type(mesh, a) == AxisType.Explicit for a in getattr(s, kind)):
                raise ValueError(
                    f"{kind} in {prefix}_specs {s} can only be used when the mesh passed to "
                    f"shard_map contains axis names all of type `Explicit`. Got mesh {mesh}")


def _check_in_type(x, spec, aval) -> None:
    """JAX's check that an in_spec's unreduced/reduced axes are the argument's type's
    (when kiln knows that type: an array's sharding, a ``jit`` argument's)."""
    from kiln.parallel.placement import arg_type_sharding
    t = arg_type_sharding(x) if isinstance(x, (Array, Tracer)) else None
    if t is None:
        return
    for kind in ("unreduced", "reduced"):
        if getattr(spec, kind) != getattr(t.spec, kind):
            raise ValueError(
                f"in_specs containing {kind} {spec} passed to shard_map should be equal to "
                f"the {kind} present on the in_aval {aval.str_short()}")


def _mesh_key(mesh) -> tuple:
    return (tuple(mesh.axis_names), tuple(mesh.axis_sizes), tuple(mesh.axis_types))


def _axis_type(mesh, name):
    types = getattr(mesh, "axis_types", None) or ()
    return dict(zip(mesh.axis_names, types)).get(name)


def _inferred_spec(x, manual) -> PartitionSpec:
    """The spec of an argument from its sharding's type: its ``Explicit`` mesh axes that
    are manual here (JAX's inference of ``in_specs``)."""
    from kiln.parallel.placement import arg_type_sharding, typeof
    if not isinstance(x, (Array, Tracer)):
        return PartitionSpec()
    sh = arg_type_sharding(x)
    spec = sh.spec if sh is not None else typeof(x).sharding.spec
    parts = []
    for d in range(len(spec)):
        axes = tuple(a for a in spec.axes_of(d) if a in manual)
        parts.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    while parts and parts[-1] is None:
        parts.pop()
    return PartitionSpec(*parts, reduced=spec.reduced & manual,
                         unreduced=spec.unreduced & manual)


def _okey(out_tree, out_specs, k: int) -> str:
    try:
        return _spec_keys(out_tree, out_specs, out_tree.num_leaves)[k]
    except Exception:       # noqa: BLE001 - only for the message
        return f"[{k}]"


def _out_vma_error(f, mesh, key, spec, varying) -> ValueError:
    """JAX's error for an output that varies along a mesh axis its spec does not name."""
    fun_name = getattr(f, "__name__", str(f))
    names = list(mesh.axis_names)
    unmentioned = [n for n in names if n not in spec.mesh_axes()]
    if len(unmentioned) > 1:
        need = ",".join(str(n) for n in names if n in spec.mesh_axes())
        got = ",".join(str(n) for n in names if n in varying)
        diff = ",".join(str(n) for n in unmentioned if n in varying)
        msg = (f"out_specs{key} is {spec} which implies that the corresponding output value "
               f"is only varying across mesh axes {{{need}}} and not {{{diff}}}, but it was "
               f"inferred to be possibly varying over {{{got}}}")
    else:
        msg = (f"out_specs{key} is {spec} which implies that the corresponding output value "
               f"is replicated across mesh axis '{unmentioned[0]}', but could not infer "
               "replication over any axes")
    return ValueError(
        f"shard_map applied to the function '{fun_name}' was given out_specs which require "
        "replication which can't be statically inferred given the mesh:\n\n"
        f"The mesh given has shape {tuple(mesh.shape.values())} with corresponding axis "
        f"names {tuple(mesh.axis_names)}.\n\n{msg}\n\nCheck if these output values are "
        "meant to be replicated over those mesh axes. If not, consider revising the "
        "corresponding out_specs entries. If so, consider disabling the check by passing "
        "the check_vma=False argument to `jax.shard_map`. (kiln checks the values "
        "eagerly, and whether the value is mapped along the axis under a transformation.)")


def _manual_mesh_context(full_mesh, manual):
    """The abstract mesh inside the body (``get_abstract_mesh()``): ``full_mesh``'s axes,
    the manual ones (and those an enclosing shard_map made manual) typed ``Manual``."""
    from kiln.sharding import _MeshContext
    cur = get_abstract_mesh()
    outer = (set(cur.manual_axes) if not cur.empty
             and tuple(cur.axis_names) == tuple(full_mesh.axis_names) else set())
    types = tuple(AxisType.Manual if a in manual or a in outer else t
                  for a, t in zip(full_mesh.axis_names, full_mesh.axis_types))
    return _MeshContext(AbstractMesh(tuple(full_mesh.axis_sizes),
                                     tuple(full_mesh.axis_names), types), "abstract")


def _mesh_from_args(flat, am):
    """The concrete mesh of an eager shard_map given an ``AbstractMesh``: the mesh of the
    arguments' ``NamedSharding``s (JAX's), else the mesh context's of the same axes."""
    mesh = None
    for a in flat:
        sh = getattr(a, "_sharding", None) if isinstance(a, Array) else None
        if isinstance(sh, NamedSharding) and isinstance(sh.mesh, Mesh) and sh.mesh.axis_names:
            if tuple(sh.mesh.shape_tuple) != tuple(am.shape_tuple):
                raise ValueError(
                    f"Mesh shape of the input {tuple(sh.mesh.shape_tuple)} does not match the "
                    f"mesh shape passed to shard_map  {tuple(am.shape_tuple)} for shape "
                    f"{get_aval(a).str_short()}")
            mesh = sh.mesh
    if mesh is not None:
        return mesh
    ctx = context_mesh()
    if (ctx is not None and tuple(ctx.axis_names) == tuple(am.axis_names)
            and tuple(ctx.axis_sizes) == tuple(am.axis_sizes)):
        return concrete_named_sharding(NamedSharding(am), "shard_map mesh").mesh
    raise ValueError("Please pass `jax.Array`s with a `NamedSharding` as input to "
                     "`shard_map` when passing `AbstractMesh` to the mesh argument.")


def _check_spmd_axis_names(ispecs, out_specs, mesh=None, manual=frozenset()) -> None:
    """JAX's error for a ``vmap(..., spmd_axis_name=...)`` around a shard_map whose specs
    use that mesh axis; a ``vmap`` over a dimension split along ``Explicit`` mesh axes
    takes them out of the mesh the shard_map may make manual."""
    t = core.current_trace()
    spmd: set = set()
    explicit: set = set()
    while t is not None:
        ad = getattr(t, "axis_data", None)
        name = getattr(ad, "spmd_name", None) if ad is not None else None
        if name is not None:
            names = set(name) if isinstance(name, (tuple, list)) else {name}
            if getattr(ad, "explicit", False):
                explicit |= names
            else:
                spmd |= names
        t = getattr(t, "parent", None)
    if explicit & set(manual) and mesh is not None:
        raise ValueError(f"jax.shard_map requires axis_names={set(manual)} to be a subset "
                         f"of mesh.axis_names={set(mesh.axis_names) - explicit}")
    if not spmd:
        return
    if spmd & {a for s in ispecs if s is not None for a in s.mesh_axes()}:
        raise ValueError("vmap spmd_axis_name cannot appear in shard_map in_specs")
    if spmd & {a for s in tree_flatten(out_specs, is_leaf=_is_spec)[0]
               if isinstance(s, PartitionSpec) for a in s.mesh_axes()}:
        raise ValueError("vmap spmd_axis_name cannot appear in shard_map out_specs")


def _with_static(f, static: dict, n: int, tree):
    """``f`` of the dynamic leaves alone: the static ones (``in_specs`` ``None``) put back."""
    def g(*dyn):
        it = iter(dyn)
        full = [static[i] if i in static else next(it) for i in range(n)]
        return f(*tree_unflatten(tree, full))
    g.__name__ = getattr(f, "__name__", "f")
    return g


def _submesh(mesh, manual):
    """The mesh of the manual axes alone (the first device along each other axis), for
    a shard_map whose ``axis_names`` leave some mesh axes automatic: kiln does not
    partition automatic axes, so their devices would compute the same blocks."""
    if set(manual) == set(mesh.axis_names):
        return mesh
    keep = [i for i, a in enumerate(mesh.axis_names) if a in manual]
    if isinstance(mesh, AbstractMesh):
        return AbstractMesh(tuple(mesh.axis_sizes[i] for i in keep),
                            tuple(mesh.axis_names[i] for i in keep),
                            tuple(mesh.axis_types[i] for i in keep))
    idx = tuple(slice(None) if i in keep else 0 for i in range(len(mesh.axis_names)))
    return Mesh(mesh.devices[idx], tuple(mesh.axis_names[i] for i in keep),
                axis_types=tuple(mesh.axis_types[i] for i in keep))


@api_boundary
def shard_map(f: Callable | None = None, /, *, out_specs, in_specs=Infer, mesh=None,
              axis_names=frozenset(), check_vma: bool = True, check_rep=None,
              auto=frozenset(), _smap: bool = False) -> Callable:
    """Map ``f`` over the blocks of its arguments, one block per device of ``mesh``.

    Args:
      f: a function of the per-device blocks; collectives over mesh axis names
        (``lax.psum(x, 'x')``) combine blocks across devices.
      out_specs: a tree prefix of the outputs, of ``PartitionSpec``s: which mesh axes
        split each output dimension. A mesh axis an output spec omits means the output is
        the same on every device along it.
      in_specs: a tree prefix of the positional arguments, of ``PartitionSpec``s; a
        ``None`` leaf passes that argument to ``f`` as it is (any Python object). By
        default (``Infer``) each argument's spec is its sharding's, which needs every
        manual mesh axis to be ``Explicit``.
      mesh: the device mesh (default: the one set by ``kiln.sharding.set_mesh``).
      axis_names: the manual mesh axes (default: all); the others are not bound inside
        ``f`` and specs may not name them.
      check_vma: check that outputs are the same along the mesh axes their spec omits
        (see the module docstring); ``False`` takes the first device's value.

    Returns:
      The mapped function; eagerly its outputs are Arrays with ``NamedSharding``s.
    """
    if f is None:
        return functools.partial(shard_map, out_specs=out_specs, in_specs=in_specs,
                                 mesh=mesh, axis_names=axis_names, check_vma=check_vma,
                                 _smap=_smap)
    if not callable(f):
        raise TypeError("shard_map requires a callable for its first argument, but got "
                        f"{f} of type {type(f)}.")
    if check_rep is not None:       # the name before JAX 0.6
        check_vma = bool(check_rep)
    if not isinstance(axis_names, (set, frozenset)):
        raise TypeError("`axis_names` argument of shard_map should be of type `frozenset` "
                        f"or `set`. Got type: {type(axis_names)}")
    cache: dict = {}

    @api_boundary
    @functools.wraps(f)
    def mapped(*args):
        if mesh is not None and isinstance(mesh, (Mesh, AbstractMesh)):
            ctx = get_abstract_mesh()
            if not ctx.empty and _mesh_key(ctx) != _mesh_key(mesh):
                raise ValueError(f"The context mesh {ctx} should match the mesh passed to "
                                 f"shard_map {mesh}")
        m = mesh if mesh is not None else context_mesh()
        if m is None and mesh is None:
            am = get_abstract_mesh()
            m = None if am.empty else am
            if m is None:
                raise ValueError("The context mesh cannot be empty. Use "
                                 "`jax.set_mesh(mesh)` to enter into a mesh context")
        if not isinstance(m, (Mesh, AbstractMesh)):
            raise TypeError("shard_map requires a `jax.sharding.Mesh` or a "
                            "`jax.sharding.AbstractMesh` instance for its second argument, "
                            f"but got {m} of type {type(m)}.")
        if m.empty:
            raise ValueError(f"shard_map requires a non-empty mesh. Got {m}")
        flat, in_tree = tree_flatten(args)
        nested = (core.current_trace() is not core.eval_trace
                  or any(isinstance(x, Tracer) for x in flat)
                  or spmd.current_context() is not None)
        if isinstance(m, AbstractMesh) and not nested:
            m = _mesh_from_args(flat, m)
        manual = frozenset(axis_names) or frozenset(m.axis_names)
        if not manual <= set(m.axis_names):
            raise ValueError(f"jax.shard_map requires axis_names={set(manual)} to be a "
                             f"subset of mesh.axis_names={set(m.axis_names)}")
        if in_specs is Infer:
            bad = [a for a in m.axis_names
                   if a in manual and _axis_type(m, a) != AxisType.Explicit]
            if bad:
                types = ", ".join(str(_axis_type(m, a)) for a in m.axis_names if a in manual)
                if _smap:
                    raise TypeError(f"in_axes was not specified when axis_name={set(manual)} "
                                    f"was of type {types}")
                raise TypeError("shard_map in_specs argument must be a pytree of "
                                "`jax.sharding.PartitionSpec` instances, but it was `None` "
                                f"when axis_names={set(manual)} are of type {types}")
            ispecs = [_inferred_spec(x, manual) for x in flat]
        else:
            _check_unreduced(in_specs, "in_specs", m, manual)
            ispecs = _specs_for("in_specs", in_tree, in_specs if isinstance(in_specs, tuple)
                                or len(args) != 1 else (in_specs,), len(flat),
                                keep_none=True)
        static = {i: x for i, (x, s) in enumerate(zip(flat, ispecs)) if s is None}
        for i, (x, s) in enumerate(zip(flat, ispecs)):
            if s is None:
                continue
            _check_arg(x, "shard_map arguments")
            _check_spec(s, manual, "in_specs", f"args leaf {i}")
            a = get_aval(x)
            if s.unreduced or s.reduced:
                _check_in_type(x, s, a)
            if len(s) > a.ndim:
                raise _rank_error("in_specs", f, _spec_keys(in_tree, in_specs, len(flat))[i]
                                  if not _is_spec(in_specs) else "", s,
                                  _value_keys(in_tree)[i], a)
            for d in range(a.ndim):
                k = math.prod(m.shape[ax] for ax in s.axes_of(d))
                if a.shape[d] % k:
                    raise ValueError(
                        "shard_map applied to the function "
                        f"'{getattr(f, '__name__', f)}' was given argument arrays with axis "
                        "sizes that are not evenly divisible by the corresponding mesh axis "
                        f"sizes:\n\nThe mesh given has shape {m.axis_sizes} with "
                        f"corresponding axis names {m.axis_names}.\n\nthe passed args leaf "
                        f"{i} of shape {a.str_short()} has dimension {d} of size "
                        f"{a.shape[d]}, split {k} ways by {s!r}.")
        _check_unreduced(out_specs, "out_specs", m, manual)
        for i, s in enumerate(tree_flatten(out_specs, is_leaf=_is_spec)[0]):
            if isinstance(s, PartitionSpec):
                _check_spec(s, manual, "out_specs", f"out_specs leaf {i}")
        g = f
        if static:
            g = _with_static(f, static, len(flat), in_tree)
            keep = [i for i in range(len(flat)) if i not in static]
            flat = [flat[i] for i in keep]
            ispecs = [ispecs[i] for i in keep]
            in_tree = tree_flatten(tuple(flat))[1]
        full_mesh = m
        m = _submesh(m, manual)
        if nested:
            _check_spmd_axis_names(ispecs, out_specs, full_mesh,
                                   manual if axis_names else frozenset())
            if _can_stage(flat, full_mesh):
                staged = _stage(g, m, flat, in_tree, ispecs, out_specs, check_vma,
                                full_mesh)
                if staged is not _NOT_STAGED:
                    return staged
            return _emulate(g, m, flat, in_tree, ispecs, out_specs, check_vma, full_mesh)
        try:
            return _run(g, m, flat, in_tree, ispecs, out_specs,
                        None if static else cache, check_vma, full_mesh)
        except core.ConcretizationTypeError:
            # the function needs concrete values (Python control flow on a value that is
            # the same on every device, e.g. after a psum): computed as vmaps eagerly,
            # where such values are concrete
            return _emulate(g, m, flat, in_tree, ispecs, out_specs, check_vma, full_mesh)

    return mapped


def _can_stage(flat, mesh) -> bool:
    """Whether this call is staged as a ``shard_map`` equation: traced by a plain staging
    trace (``make_jaxpr``, ``jit``), outside any other shard_map body, over one
    process's devices, with array operands."""
    from kiln.core.avals import ShapedArray
    from kiln.interpreters import staging
    from kiln.parallel.shard_map_prim import staged_batch, staged_jvp
    t = core.current_trace()
    return ((type(t) is staging.JaxprTrace and not t.forward_known or staged_batch(t)
             or staged_jvp(t))
            and staging.vma_rule[0] is None and not get_abstract_mesh().manual_axes
            and spmd.current_context() is None
            and isinstance(mesh, (Mesh, AbstractMesh))
            and not global_array.spans_processes(mesh)
            and all(type(get_aval(x)) is ShapedArray for x in flat))


#: What :func:`_stage` returns when the body does not stage (a body without outputs
#: returns None itself: it was staged once and must not be emulated again, which ran an
#: ``io_callback`` in it twice per shard).
_NOT_STAGED = object()


def _stage(f, mesh, flat, in_tree, ispecs, out_specs, check_vma, full_mesh):
    """Stage the call as one ``shard_map`` equation (``kiln.parallel.shard_map_prim``):
    the body traced over one device's blocks, as the eager call traces it. Returns the
    outputs, or ``_NOT_STAGED`` when the body does not trace so (it is then emulated,
    which raises the error it raises, if any)."""
    from kiln.interpreters import staging
    from kiln.interpreters.pjit import trace_closed
    from kiln.lax import parallel as lax_parallel
    from kiln.parallel import vma
    from kiln.parallel.placement import note_type
    from kiln.parallel.shard_map_prim import expansion, shard_map_p
    avals = [get_aval(x) for x in flat]
    local = [_with_vma(a.update(shape=_local_shape(a.shape, s, mesh)), s, check_vma)
             for a, s in zip(avals, ispecs)]
    store = {}

    def flat_fun(*xs):
        out = f(*tree_unflatten(in_tree, list(xs)))
        leaves, tree = tree_flatten(out)
        store["tree"] = tree
        return [o if isinstance(o, (Array, Tracer)) else to_array(o) for o in leaves]

    try:
        with _manual_mesh_context(full_mesh, mesh.axis_names):
            inner_mesh = get_abstract_mesh()
        local = [_local_type(x, a, inner_mesh, mesh.axis_names)
                 for x, a in zip(flat, local)]
        for name, size in zip(mesh.axis_names, mesh.axis_sizes):
            batching.axis_env.append((name, size))
        prev_rule, staging.vma_rule[0] = staging.vma_rule[0], vma.stage_rule
        from kiln.config import config
        auto = bool(check_vma) and bool(config.jax_auto_pcast)
        prev_pvary, lax_parallel.auto_pvary[0] = lax_parallel.auto_pvary[0], auto
        prev_args, staging.vma_args[0] = (staging.vma_args[0],
                                          vma.pvary_operands if auto else None)
        try:
            with _manual_mesh_context(full_mesh, mesh.axis_names):
                closed, tconsts = trace_closed(flat_fun, local)
        finally:
            staging.vma_args[0] = prev_args
            lax_parallel.auto_pvary[0] = prev_pvary
            staging.vma_rule[0] = prev_rule
            for _ in mesh.axis_names:
                batching.axis_env.pop()
        out_tree = store["tree"]
        ospecs = _specs_for("out_specs", out_tree, out_specs, out_tree.num_leaves)
        for i, s in enumerate(ospecs):
            _check_spec(s, mesh.axis_names, "out_specs", f"output leaf {i}")
        _check_out_ranks(f, out_tree, out_specs, ospecs, closed.out_avals)
        all_specs = [PartitionSpec()] * len(tconsts) + list(ispecs)
        _check_vma_static(f, full_mesh, closed, all_specs, ospecs, check_vma,
                          lambda k: _okey(out_tree, out_specs, k))
        params = dict(jaxpr=closed, mesh=full_mesh, in_specs=tuple(all_specs),
                      out_specs=tuple(ospecs), check_vma=bool(check_vma),
                      newly_manual_axes=frozenset(mesh.axis_names))
        args = [*tconsts, *flat]
        expansion(params, [get_aval(x) for x in args])
    except Exception:       # noqa: BLE001 - emulated instead (raising its own error)
        return _NOT_STAGED
    outs = shard_map_p.bind(*args, **params)
    outs = [note_type(o, NamedSharding(full_mesh, out_type_spec(s, a, mesh.axis_names)))
            if isinstance(o, Tracer) else o
            for o, s, a in zip(outs, ospecs, closed.out_avals)]
    return tree_unflatten(out_tree, outs)


def _local_type(x, aval, inner_mesh, manual):
    """A body argument's type: with the sharding of ``x``'s type (a value laid out over
    ``Explicit`` mesh axes), over the body's mesh, its manual axes taken out."""
    from kiln.core.avals import ShapedArray
    from kiln.parallel.placement import arg_type_sharding
    t = arg_type_sharding(x) if isinstance(x, (Array, Tracer)) else None
    if t is None or type(aval) is not ShapedArray:
        return aval
    parts = []
    for d in range(aval.ndim):
        axes = tuple(a for a in t.spec.axes_of(d) if a not in manual) \
            if d < len(t.spec) else ()
        parts.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    spec = PartitionSpec(*parts, reduced=t.spec.reduced - set(manual),
                         unreduced=t.spec.unreduced - set(manual))
    return aval.with_type_sharding(NamedSharding(inner_mesh, spec))


def out_type_spec(spec, body_aval, manual) -> PartitionSpec:
    """A shard_map output's spec in its type: ``spec``'s manual axes, then, per
    dimension, the automatic mesh axes the body's result is split along in its type."""
    t = getattr(body_aval, "_tsh", None)
    if t is None:
        return spec
    parts = []
    for d in range(len(body_aval.shape)):
        axes = tuple(spec.axes_of(d)) + tuple(
            a for a in (t.spec.axes_of(d) if d < len(t.spec) else ()) if a not in manual)
        parts.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    while parts and parts[-1] is None and len(parts) > len(spec):
        parts.pop()
    return PartitionSpec(*parts, reduced=spec.reduced, unreduced=spec.unreduced)


def _local_shape(shape, spec: PartitionSpec, mesh: Mesh) -> tuple:
    return tuple(n // math.prod(mesh.shape[a] for a in spec.axes_of(d))
                 for d, n in enumerate(shape))


def _global_shape(shape, spec: PartitionSpec, mesh: Mesh) -> tuple:
    return tuple(n * math.prod(mesh.shape[a] for a in spec.axes_of(d))
                 for d, n in enumerate(shape))


def _run(f, mesh: Mesh, flat, in_tree, ispecs, out_specs, cache, check_vma=True,
         full_mesh=None):
    full_mesh = mesh if full_mesh is None else full_mesh
    from kiln.interpreters.pjit import trace_closed
    multi = global_array.spans_processes(mesh)
    if multi:
        global_array.check_mesh(mesh, "shard_map")
    arrays = [x if type(x) is Array else to_array(x) for x in flat]
    local = [_with_vma(a.aval.update(shape=_local_shape(a.shape, s, mesh)), s, check_vma)
             for a, s in zip(arrays, ispecs)]
    if full_mesh is not mesh:
        # a partially manual body: arguments typed with their automatic axes' sharding
        with _manual_mesh_context(full_mesh, mesh.axis_names):
            inner_mesh = get_abstract_mesh()
        local = [_local_type(x, a, inner_mesh, mesh.axis_names)
                 for x, a in zip(arrays, local)]
    from kiln._compile_log import trace_context
    key = (tuple((a.shape, a.dtype, a.weak_type) for a in local), in_tree,
           tuple(ispecs), mesh, trace_context(),
           tuple(getattr(a, "_tsh", None) for a in local))
    entry = cache.get(key) if cache is not None else None
    if entry is None:
        store = {}

        def flat_fun(*xs):
            out = f(*tree_unflatten(in_tree, list(xs)))
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return [o if isinstance(o, (Array, Tracer)) else to_array(o) for o in leaves]

        for name, size in zip(mesh.axis_names, mesh.axis_sizes):
            batching.axis_env.append((name, size))
        from kiln.interpreters import staging
        from kiln.parallel import vma
        transfer.eager_shard_map_depth[0] += 1
        prev_rule, staging.vma_rule[0] = staging.vma_rule[0], vma.stage_rule
        try:
            with _manual_mesh_context(full_mesh, mesh.axis_names):
                closed, tconsts = trace_closed(flat_fun, local)
        finally:
            staging.vma_rule[0] = prev_rule
            transfer.eager_shard_map_depth[0] -= 1
            for _ in mesh.axis_names:
                batching.axis_env.pop()
        assert not tconsts
        out_tree = store["tree"]
        ospecs = _specs_for("out_specs", out_tree, out_specs, out_tree.num_leaves)
        for i, s in enumerate(ospecs):
            _check_spec(s, mesh.axis_names, "out_specs", f"output leaf {i}")
        _check_out_ranks(f, out_tree, out_specs, ospecs, closed.out_avals)
        _check_vma_static(f, full_mesh, closed, ispecs, ospecs, check_vma,
                          lambda k: _okey(out_tree, out_specs, k))
        entry = (closed, out_tree, ospecs)
        if cache is not None:
            cache[key] = entry
    closed, out_tree, ospecs = entry
    if multi:
        return _run_processes(closed, mesh, arrays, ispecs, out_tree, ospecs, check_vma)
    placements = mesh.coords()
    values = [np.asarray(a._value) for a in arrays]
    in_shardings = [NamedSharding(mesh, s) for s in ispecs]
    per_device = [[_in_block(a, v, sh, d, c) for a, v, sh in zip(arrays, values, in_shardings)]
                  for d, c in placements]
    results = spmd.run_spmd(closed, dict(mesh.shape), placements, per_device,
                            name="shard_map")
    outs = []
    sizes = dict(mesh.shape)
    for k, (aval, s) in enumerate(zip(closed.out_avals, ospecs)):
        sh = NamedSharding(mesh, s)
        gshape = _global_shape(aval.shape, s, mesh)
        if s.unreduced:
            outs.append(_unreduced_out(mesh, full_mesh, sh, gshape, aval, placements,
                                       [r[k] for r in results]))
            continue
        g = np.empty(gshape, aval.dtype)
        for (_, c), r in zip(placements, results):
            if sh.replica_id(c) == 0:
                g[sh.block_index(c, gshape)] = r[k]
        missing = [a for a in mesh.axis_names if a not in s.mesh_axes() and sizes[a] > 1]
        if check_vma and missing:
            for (_, c), r in zip(placements, results):
                if sh.replica_id(c) and not np.array_equal(
                        g[sh.block_index(c, gshape)], r[k],
                        equal_nan=aval.dtype.kind in "fc"):
                    raise _out_vma_error(f, mesh, _okey(out_tree, out_specs, k), s,
                                         _varying_axes(mesh, sh, placements, results, k))
        arr = make_array(g, aval.weak_type)
        arr._sharding = sh if full_mesh is mesh else NamedSharding(
            full_mesh, out_type_spec(s, aval, mesh.axis_names))
        outs.append(arr)
    return tree_unflatten(out_tree, outs)


def _in_block(arr, value, sh, device, coords):
    """The block of ``arr`` a device gets for the in_spec of ``sh``: for an unreduced
    spec, the device's partial (those the array holds, else the whole value on the
    first device along the unreduced axes and zeros on the others)."""
    block = value[sh.block_index(coords, value.shape)]
    u = sh.spec.unreduced
    if not u:
        return block
    parts = getattr(arr, "_partials", None)
    own = getattr(arr, "_sharding", None)
    if parts is not None and own is not None and own.spec.unreduced == u \
            and device.id in parts:
        return parts[device.id]
    if any(coords[a] for a in u):
        return np.zeros_like(block)
    return block


def _unreduced_out(mesh, full_mesh, sh, gshape, aval, placements, blocks):
    """An output whose spec is unreduced along some mesh axes: its value is the sum of
    the devices' partials along them (the first replica along the other axes the spec
    omits); the array keeps each device's partial (``addressable_shards``)."""
    s = sh.spec
    g = np.zeros(gshape, aval.dtype)
    others = [a for a in mesh.axis_names if a not in s.mesh_axes() and a not in s.unreduced]
    parts = {}
    for (d, c), r in zip(placements, blocks):
        r = np.asarray(r)
        parts[d.id] = r
        if not any(c[a] for a in others):
            g[sh.block_index(c, gshape)] += r
    arr = make_array(g, aval.weak_type)
    arr._sharding = sh if full_mesh is mesh else NamedSharding(full_mesh, s)
    arr._partials = parts
    return arr


def _in_mat(spec, check_vma=True):
    """The manual axis types of a body's argument of in_spec ``spec`` (JAX's)."""
    from kiln.core.avals import ManualAxisType
    from kiln.lax.parallel import skip_size_one
    u, r = (spec.unreduced, spec.reduced) if check_vma else (frozenset(), frozenset())
    return ManualAxisType(varying=frozenset(skip_size_one(tuple(spec.mesh_axes()))),
                          unreduced=u, reduced=r)


def _with_vma(aval, spec, check_vma=True):
    from kiln.core.avals import ShapedArray
    m = _in_mat(spec, check_vma)
    return aval.with_mat(m) if not m.empty and type(aval) is ShapedArray else aval


def _check_vma_static(f, mesh, closed, ispecs, ospecs, check_vma, key_of) -> None:
    """JAX's static check: the manual axis types of each output (inferred over the
    traced body, ``kiln.parallel.vma``) against its spec: it may vary only along the axes
    the spec names (or makes unreduced: a varying value becomes the partials of an
    unreduced one), and be unreduced/reduced exactly along the spec's; also the carry
    types of loops (a TypeError, raised whatever ``check_vma``)."""
    from kiln.parallel import vma
    outs = vma.infer_mat(closed.jaxpr, [_in_mat(s, check_vma) for s in ispecs])
    if not check_vma:
        return
    for k, (m, s) in enumerate(zip(outs, ospecs)):
        _check_out_type(f, mesh, key_of(k), s, m, closed.out_avals[k])


def _check_out_type(f, mesh, key, s, m, aval) -> None:
    if m.varying - set(s.mesh_axes()) - s.unreduced:
        raise _out_vma_error(f, mesh, key, s, m.varying)
    need = s.unreduced - m.unreduced
    if need and not (m.varying & need):
        raise ValueError(
            "vary_unreduced_cast is a Varying->Unreduced collective. This means that the "
            "axis names mentioned in `axes` passed to `vary_unreduced_cast` must be present "
            f"in `jax.typeof(x).mat.varying`. Got axes={tuple(sorted(need, key=str))} and "
            f"jax.typeof(x).mat.varying={m.varying}")
    t = aval.str_short()
    if m.unreduced - s.unreduced:
        raise ValueError("out_specs passed to shard_map should be equal to the unreduced "
                         f"present on the out_aval. Got out_specs={s} and out_aval={t}")
    if s.reduced != m.reduced:
        raise ValueError("out_specs passed to shard_map should be equal to the reduced "
                         f"present on the out_aval. Got out_specs={s} and out_aval={t}")


def _varying_axes(mesh, sh, placements, results, k) -> set:
    """The mesh axes along which output ``k``'s blocks differ (for the error message)."""
    out = set()
    ref = {}
    for (_, c), r in zip(placements, results):
        for a in mesh.axis_names:
            key = (a, tuple(sorted((b, i) for b, i in c.items() if b != a)))
            v = np.asarray(r[k])
            if key in ref:
                if not np.array_equal(ref[key], v, equal_nan=v.dtype.kind in "fc"):
                    out.add(a)
            else:
                ref[key] = v
    return out


def _vma_error(s, k, missing) -> ValueError:
    return ValueError(
        f"shard_map out_specs {s!r} say output leaf {k} is the same on every device of "
        f"mesh axes {missing} (the spec does not name them), but it varies along them. "
        "Name the axes in out_specs, or make the value the same everywhere (e.g. with "
        "lax.psum), or pass check_vma=False to take the first device's value.")


def _run_processes(closed, mesh: Mesh, arrays, ispecs, out_tree, ospecs, check_vma):
    """The eager call over a mesh spanning several processes (``kiln.distributed``): this
    process runs its devices' blocks; collectives cross processes over MPI; outputs are
    global Arrays holding this process's blocks."""
    from kiln import distributed
    placements = global_array.local_placements(mesh)
    blocks = [global_array.local_blocks(a, NamedSharding(mesh, s), placements)
              for a, s in zip(arrays, ispecs)]
    per_device = [[b[i] for b in blocks] for i in range(len(placements))]
    results = spmd.run_spmd(closed, dict(mesh.shape), placements, per_device,
                            name="shard_map", world=distributed.comm(),
                            layout=global_array.layout(mesh))
    sizes = dict(mesh.shape)
    outs = []
    for k, (aval, s) in enumerate(zip(closed.out_avals, ospecs)):
        sh = NamedSharding(mesh, s)
        gshape = _global_shape(aval.shape, s, mesh)
        missing = [a for a in mesh.axis_names if a not in s.mesh_axes() and sizes[a] > 1]
        first: dict = {}
        out_blocks = {}
        for (d, c), r in zip(placements, results):
            key = sh.block_index(c, gshape)
            kk = tuple((x.start, x.stop) for x in key)
            v = np.asarray(r[k])
            if kk in first:
                # this process's replicas of a block: checked against each other (other
                # processes' replicas are not compared)
                if check_vma and missing and not np.array_equal(
                        first[kk], v, equal_nan=aval.dtype.kind in "fc"):
                    raise _vma_error(s, k, missing)
                if not check_vma:
                    v = first[kk]
            else:
                first[kk] = v
            out_blocks[d.id] = v
        outs.append(global_array.assemble(sh, gshape, aval.dtype, aval.weak_type,
                                          out_blocks))
    return tree_unflatten(out_tree, outs)


def _emulate(f, mesh: Mesh, flat, in_tree, ispecs, out_specs, check_vma=True,
             full_mesh=None, out_layouts=None, typed=False):
    """The same values as nested vmaps over the mesh axes (under transformations).
    ``out_layouts``: the outputs' specs in their layouts (default ``out_specs``').
    ``typed``: the outputs' types were checked against ``out_specs`` (a body derived
    from a checked one: its JVP, parts, transpose): an output computed as mapped along an
    axis its spec omits (a call whose body has a collective over that axis is mapped
    along it) is the same along it, its first value taken."""
    from kiln import lax
    full_mesh = mesh if full_mesh is None else full_mesh
    if global_array.spans_processes(mesh):
        raise NotImplementedError(
            "shard_map over a mesh with other processes' devices under a transformation "
            "(grad, vmap, or inside a traced jit): kiln runs it only eagerly (a jit of it "
            "called eagerly runs it so); call it outside the transformation.")
    names = mesh.axis_names
    sizes = dict(mesh.shape)

    def split(x, spec):
        # (..., n_d, ...) -> (mesh axes splitting x, in mesh order, ..., local dims)
        a = get_aval(x)
        shape, order = [], []
        for d, n in enumerate(a.shape):
            axes = spec.axes_of(d)
            k = math.prod(sizes[ax] for ax in axes)
            for ax in axes:
                order.append((names.index(ax), len(shape)))
                shape.append(sizes[ax])
            shape.append(n // k)
        y = lax.reshape(x, tuple(shape))
        order.sort()
        front = [pos for _, pos in order]
        rest = [i for i in range(len(shape)) if i not in front]
        return lax.transpose(y, tuple(front + rest))

    def partials(y, spec):
        # an unreduced spec: one more leading dim per unreduced mesh axis (mesh order
        # among the leading dims), the value at index 0 and zeros at the others (any
        # split into partials of the same sum is the same value)
        used = [a for a in names if a in spec.mesh_axes()]
        for ax in [a for a in names if a in spec.unreduced]:
            pos = sum(1 for a in used if names.index(a) < names.index(ax))
            nd = get_aval(y).ndim
            y = lax.expand_dims(y, (pos,))
            cfg = [(0, 0, 0)] * (nd + 1)
            cfg[pos] = (0, sizes[ax] - 1, 0)
            y = lax.pad(y, np.zeros((), get_aval(y).dtype), cfg)
            used.append(ax)
        return y

    if isinstance(full_mesh, (Mesh, AbstractMesh)):
        # each argument is laid out as its in_spec says, and so is its cotangent (as the
        # outputs of JAX's transposed shard_map; reduced and unreduced swapped:
        # ``sharding_constraint``'s transpose)
        flat = [_constrain(x, NamedSharding(full_mesh, s)) for x, s in zip(flat, ispecs)]
    xs = [partials(split(x, s), s) for x, s in zip(flat, ispecs)]
    store = {}

    def inner(*blocks):
        out = f(*tree_unflatten(in_tree, list(blocks)))
        leaves, tree = tree_flatten(out)
        store["tree"] = tree
        _check_out_ranks(f, tree, out_specs,
                         _specs_for("out_specs", tree, out_specs, tree.num_leaves),
                         [get_aval(x) for x in leaves])
        return leaves

    fn = inner
    errors = {"f": f, "mesh": mesh, "check_vma": check_vma, "typed": typed,
              "key": lambda k: _okey(store["tree"], out_specs, k)}
    for j in reversed(range(len(names))):
        ax = names[j]
        in_ax = [0 if ax in s.mesh_axes() or ax in s.unreduced else None for s in ispecs]
        kinds = [("unreduced" if ax in s.unreduced else "reduced" if ax in s.reduced
                  else None) if check_vma else None for s in ispecs]
        fn = _vmap_level(fn, ax, sizes[ax], in_ax, store, out_specs, errors, kinds)
    with _manual_mesh_context(full_mesh, names):
        outs = fn(*xs)
    out_tree = store["tree"]
    ospecs = _specs_for("out_specs", out_tree, out_specs, out_tree.num_leaves)
    final = []
    for k, (o, s) in enumerate(zip(outs, ospecs)):
        o = _merge(o, s, names, sizes)
        if out_layouts is not None:
            s = out_layouts[k]
        if isinstance(full_mesh, (Mesh, AbstractMesh)) and isinstance(o, Tracer):
            # the outputs are laid out as out_specs say (a jit's output is, as in JAX)
            o = sharding_constraint_p.bind(o, sharding=NamedSharding(full_mesh, s),
                                           layout=None, context_mesh=get_abstract_mesh(),
                                           unconstrained_dims=frozenset())
            from kiln.parallel.placement import note_type
            o = note_type(o, NamedSharding(full_mesh, s))
        final.append(o)
    return tree_unflatten(out_tree, final)


def _vmap_level(fn, ax, size, in_ax, store, out_specs, errors, kinds=None):
    """One mesh axis as a vmap; each output is mapped at 0 when its spec names ``ax``."""
    def out_specs_now():
        tree = store["tree"]
        return _specs_for("out_specs", tree, out_specs, tree.num_leaves)
    return _vmap_dynamic_out(fn, in_ax, ax, size, out_specs_now, errors, kinds)


def _tag(ys, kinds):
    """The arguments of one emulated mesh axis typed reduced/unreduced along it as their
    in_specs say (``BatchTracer.ur``)."""
    if not kinds or not any(kinds):
        return ys
    from kiln.interpreters.batching import BatchTrace, BatchTracer
    trace = core.current_trace()
    if not isinstance(trace, BatchTrace):
        return ys
    out = []
    for y, k in zip(ys, kinds):
        mine = isinstance(y, BatchTracer) and y._trace is trace
        if k == "unreduced" and mine:
            y = BatchTracer(trace, y.val, y.bdim, "unreduced")
        elif k == "reduced" and not mine:
            y = BatchTracer(trace, y, None, "reduced")
        out.append(y)
    return out


def _ur_kind(o, name) -> str | None:
    mat = get_aval(o).mat if isinstance(o, Tracer) else None
    if mat is None:
        return None
    return "unreduced" if name in mat.unreduced else "reduced" if name in mat.reduced \
        else None


def _vmap_dynamic_out(fn, in_ax, name, size, out_specs_now, errors, kinds=None):
    """``vmap`` whose ``out_axes`` are computed after tracing ``fn``."""
    def run(*xs):
        store = {}

        def body(*ys):
            outs = list(fn(*_tag(list(ys), kinds)))
            # which outputs vary along the inner manual axes (for the error message)
            store["varying"] = [get_aval(o).mat.varying if isinstance(o, Tracer)
                                else frozenset() for o in outs]
            store["ur"] = [_ur_kind(o, name) for o in outs]
            return outs
        outs, dims = batching.batch_flat(body, list(xs), list(in_ax),
                                         batching.AxisData(name, size, manual=True))
        ospecs = out_specs_now()
        final = []
        for k, (o, d, s) in enumerate(zip(outs, dims, ospecs)):
            if errors["check_vma"] and name in s.reduced and store["ur"][k] != "reduced":
                m = get_aval(o) if d is None else None
                raise ValueError(
                    "out_specs passed to shard_map should be equal to the reduced present "
                    f"on the out_aval. Got out_specs={s} and out_aval="
                    f"{m.str_short() if m is not None else 'a varying value'}")
            if name in s.unreduced:
                # the partials' sum; a value the same on every device (check_vma=False)
                # is each device's partial
                if d is None:
                    if errors["check_vma"]:
                        raise ValueError(
                            "vary_unreduced_cast is a Varying->Unreduced collective. This "
                            "means that the axis names mentioned in `axes` passed to "
                            "`vary_unreduced_cast` must be present in "
                            f"`jax.typeof(x).mat.varying`. Got axes=({name!r},) and "
                            f"jax.typeof(x).mat.varying={store['varying'][k]}")
                    final.append(_times(o, size))
                else:
                    from kiln import lax
                    final.append(lax.reduce_sum(o, (d,)))
                continue
            if name not in s.mesh_axes():
                if d is not None:
                    if (errors["check_vma"] and not errors.get("typed")
                            and not (size == 1 and _drop_size_one())):
                        varying = set(store["varying"][k]) | {name}
                        raise _out_vma_error(errors["f"], errors["mesh"], errors["key"](k), s,
                                             varying)
                    o = _lax_index(o, d)     # check_vma=False: the first device's value
                final.append(o)
            else:
                final.append(batching.matchaxis(o, d, 0, size))
        return final
    return run


def _drop_size_one() -> bool:
    from kiln.config import config
    return bool(config.jax_remove_size_one_mesh_axis_from_type)


def _times(x, n):
    from kiln import lax
    return lax.mul(x, np.asarray(n, get_aval(x).dtype))


def _constrain(x, sharding):
    from kiln.core.avals import ShapedArray
    if not isinstance(x, Tracer) or not isinstance(get_aval(x), ShapedArray):
        return x
    return sharding_constraint_p.bind(x, sharding=sharding, layout=None,
                                      context_mesh=get_abstract_mesh(),
                                      unconstrained_dims=frozenset())


def _lax_index(x, d):
    from kiln import lax
    return lax.index_in_dim(x, 0, d, keepdims=False)


def _merge(o, spec: PartitionSpec, names, sizes):
    """Inverse of ``split``: leading mesh-axis dims (mesh order) back into their dims."""
    from kiln import lax
    used = [a for a in names if a in spec.mesh_axes()]
    a = get_aval(o)
    nlead = len(used)
    local = a.shape[nlead:]
    perm, shape = [], []
    for d, n in enumerate(local):
        axes = spec.axes_of(d)
        for ax in axes:
            perm.append(used.index(ax))
        perm.append(nlead + d)
        shape.append(n * math.prod(sizes[ax] for ax in axes))
    y = lax.transpose(o, tuple(perm)) if perm != list(range(len(perm))) else o
    return lax.reshape(y, tuple(shape))



def _axes_to_spec(axis_name, axis) -> PartitionSpec:
    return PartitionSpec() if axis is None else PartitionSpec(*([None] * axis), axis_name)


def smap(f: Callable | None = None, /, *, in_axes=Infer, out_axes, axis_name) -> Callable:
    """``shard_map`` over one mesh axis of the context mesh, with ``vmap``-style axes
    (JAX's ``jax.smap``): ``in_axes``/``out_axes`` say which dimension of each argument /
    output the mesh axis ``axis_name`` splits (``None``: not split). Without ``in_axes``
    they are inferred from the arguments' shardings (the axis must be ``Explicit``).
    The other mesh axes stay automatic (not bound inside ``f``)."""
    if f is None:
        return lambda g: smap(g, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name)
    if isinstance(axis_name, (list, tuple)):
        raise TypeError(f"smap axis_name should be a `str` or a `Hashable`, but got "
                        f"{axis_name}")
    if in_axes is not None and in_axes is not Infer and not isinstance(in_axes, (int, tuple)):
        raise TypeError("smap in_axes must be an int, None, jax.sharding.Infer, or a tuple of"
                        " entries corresponding to the positional arguments passed to the"
                        f" function, but got {in_axes}.")
    is_none = lambda x: x is None    # noqa: E731
    if in_axes is not Infer and not all(
            isinstance(a, int) for a in tree_flatten(in_axes, is_leaf=is_none)[0]
            if a is not None):
        raise TypeError("smap in_axes must be an int, None, jax.sharding.Infer, or (nested)"
                        f" container with those types as leaves, but got {in_axes}.")
    if not all(isinstance(a, int) for a in tree_flatten(out_axes, is_leaf=is_none)[0]
               if a is not None):
        raise TypeError("smap out_axes must be an int, None, or (nested) container "
                        f"with those types as leaves, but got {out_axes}.")

    def to_specs(axes):
        leaves, tree = tree_flatten(axes, is_leaf=is_none)
        return tree_unflatten(tree, [_axes_to_spec(axis_name, a) for a in leaves])
    in_specs = Infer if in_axes is Infer else to_specs(in_axes)
    return shard_map(f, in_specs=in_specs, out_specs=to_specs(out_axes),
                     axis_names=frozenset({axis_name}), _smap=True)


def _top_level_all_gather_one(x, out_sharding, multi_dim: bool):
    from kiln.lax.parallel import all_gather
    from kiln.parallel.placement import typeof
    aval = typeof(x)
    am = get_abstract_mesh()
    if isinstance(out_sharding, PartitionSpec):
        out_sharding = NamedSharding(am, out_sharding)
    if not isinstance(out_sharding, NamedSharding):
        raise ValueError(f"out_sharding passed to top_level_all_gather cannot be "
                         f"{out_sharding}. It should be a PartitionSpec or NamedSharding.")
    in_mesh = aval.sharding.mesh.abstract_mesh
    out_mesh = out_sharding.mesh.abstract_mesh
    if (in_mesh.axis_names, in_mesh.axis_sizes, in_mesh.axis_types) != (
            out_mesh.axis_names, out_mesh.axis_sizes, out_mesh.axis_types):
        raise ValueError(f"Input sharding mesh {in_mesh} should be equal to out_sharding "
                         f"mesh {out_mesh}")
    in_spec = aval.sharding.spec
    in_parts = tuple(in_spec) + (None,) * (len(aval.shape) - len(in_spec))
    out_spec = out_sharding.spec
    out_parts = tuple(out_spec) + (None,) * (len(in_parts) - len(out_spec))
    if _drop_size_one():
        sizes = dict(zip(out_mesh.axis_names, out_mesh.axis_sizes))

        def drop(p):
            if p is None:
                return None
            kept = tuple(a for a in (p if isinstance(p, tuple) else (p,)) if sizes[a] != 1)
            return None if not kept else kept if isinstance(p, tuple) else kept[0]
        out_parts = tuple(drop(p) for p in out_parts)
        out_spec = PartitionSpec(*out_parts,
                                 reduced={a for a in out_spec.reduced if sizes[a] != 1},
                                 unreduced={a for a in out_spec.unreduced if sizes[a] != 1})
    else:
        out_spec = PartitionSpec(*out_parts, reduced=out_spec.reduced,
                                 unreduced=out_spec.unreduced)

    def body(v):
        count = 0
        for dim, (i, o) in enumerate(zip(in_parts, out_parts)):
            if i == o:
                continue
            if not multi_dim and count > 0:
                raise ValueError(
                    "multiple dimensions cannot be all_gathered since multi_dim=False "
                    f"passed to `top_level_all_gather`. Got in_spec={in_spec} and "
                    f"out_spec={out_spec}")
            count += 1
            if i is None:
                raise ValueError(
                    f"top_level_all_gather doesn't allow input {aval} to be unsharded on "
                    f"dimension {dim} when out_spec={out_spec}.")
            i = i if isinstance(i, tuple) else (i,)
            o = o if o is None or isinstance(o, tuple) else (o,)
            if o is not None and i[:len(o)] != o:
                raise ValueError(
                    "top_level_all_gather maintains `top_level_all_gather(x, ...) == x` "
                    f"property. The in_spec={in_spec} and out_spec={out_spec} don't "
                    "satisfy this property. Please change your out_spec of array "
                    f"dimension {dim} so that it's a prefix of in_spec")
            names = i if o is None else i[len(o):]
            v = all_gather(v, axis_name=names, axis=dim, tiled=True, to="reduced")
        return v
    from kiln.jitting import jit
    return jit(shard_map(body, out_specs=out_spec))(x)


def top_level_all_gather(xs, out_sharding, *, multi_dim: bool = False):
    """All-gather each array of ``xs`` (laid out over a mesh whose axes are all
    ``Explicit``) from its layout to ``out_sharding`` (a spec that is a prefix of the
    array's along each dimension; the gathered axes become ``reduced``), the value
    unchanged. Only one dimension may change unless ``multi_dim``."""
    am = get_abstract_mesh()
    if not am.are_all_axes_explicit:
        raise ValueError("top_level_all_gather works when all mesh axes of context mesh "
                         f"are explicit. Got {am}")
    from kiln.parallel.placement import _per_leaf
    leaves, tree = tree_flatten(xs)
    shs = _per_leaf(tree, len(leaves), out_sharding, "top_level_all_gather out_sharding")
    return tree_unflatten(tree, [_top_level_all_gather_one(x, s, multi_dim)
                                 for x, s in zip(leaves, shs)])
