"""Layouts of eager results: an operation applied eagerly to committed arrays (placed
with ``device_put``, ``jit`` shardings, ``make_array_from_callback``, ...) gives a result
committed to the same devices, as JAX's op-by-op dispatch does (each eager operation is
a small compiled program whose output layout its compiler propagates).

kiln keeps every value whole in host memory, so a layout is only the result's
``sharding`` (what ``addressable_shards``, ``devices()``, ``jit`` and ``shard_map`` read).
The rules, per primitive, for the primitives most eager code applies to sharded arrays:

- one device: every committed operand on the same single device, the result on it;
- elementwise primitives over a ``NamedSharding``'s mesh: the result's dimensions split
  as the operands of its shape split them (the first split wins, a mesh axis used once;
  rank-0 operands broadcast), as the SPMD partitioner does (``kiln.parallel.partition``);
- ``slice`` keeps the split of a dimension it leaves whole and drops the others';
  ``squeeze`` drops its dimensions; ``rev`` keeps every split.

Operands committed to different devices or meshes, unreduced layouts and other
primitives leave the result uncommitted on the default device (kiln's layout before
this module). Installed as the primitives' ``eager_layout`` hook (``kiln.core.trace``).
"""
from __future__ import annotations

from kiln.array import Array
from kiln.sharding import AbstractMesh, NamedSharding, PartitionSpec, SingleDeviceSharding

_ELEMENTWISE_EXTRA = ("copy", "copy_p")


def _committed_layouts(args) -> list:
    out = []
    for a in args:
        if type(a) is Array:
            try:
                s = a._sharding
            except AttributeError:
                continue
            out.append((a, s))
    return out


def _single_device(layouts):
    """The one device every committed operand is on, or None."""
    from kiln.devices import devices
    dev = None
    for _, s in layouts:
        if s is None:
            d = devices()[0]
        elif isinstance(s, SingleDeviceSharding):
            d = s.device
        elif isinstance(s, NamedSharding) and s.mesh.size == 1:
            d = next(iter(s.mesh.devices.flat))
        else:
            return None
        if dev is not None and d != dev:
            return None
        dev = d
    return dev


def _mesh_of(layouts):
    """The mesh every committed operand is laid out over, or None (mixed layouts)."""
    mesh = None
    for _, s in layouts:
        if not isinstance(s, NamedSharding) or isinstance(s.mesh, AbstractMesh):
            return None
        if s.spec.unreduced or s.spec.reduced:
            return None
        if mesh is not None and s.mesh != mesh:
            return None
        mesh = s.mesh
    return mesh


def _axes(s: NamedSharding, ndim: int) -> list:
    return [s.spec.axes_of(d) for d in range(ndim)]


def _to_spec(parts: list) -> PartitionSpec:
    return PartitionSpec(*[None if not a else a[0] if len(a) == 1 else tuple(a)
                           for a in parts])


def _elementwise(out, layouts, params):
    shape = out.shape
    used: set = set()
    parts: list = [()] * len(shape)
    for a, s in layouts:
        if a.shape != shape:
            continue
        for d, axes in enumerate(_axes(s, len(shape))):
            if not parts[d] and axes and not used.intersection(axes):
                parts[d] = axes
                used.update(axes)
    return parts


def _slice(out, layouts, params):
    (a, s), = layouts
    strides = params.get("strides") or (1,) * a.ndim
    return [axes if n_in == n_out and st == 1 else ()
            for axes, n_in, n_out, st in zip(_axes(s, a.ndim), a.shape, out.shape, strides)]


def _squeeze(out, layouts, params):
    (a, s), = layouts
    drop = {d % a.ndim for d in params["dimensions"]}
    return [axes for d, axes in enumerate(_axes(s, a.ndim)) if d not in drop]


def _rev(out, layouts, params):
    (a, s), = layouts
    return _axes(s, a.ndim)


def _rule_for(rule):
    def lay_out(outs, args, params):
        if len(outs) != 1:
            return
        layouts = _committed_layouts(args)
        if not layouts:
            return
        out = outs[0]
        if type(out) is not Array:
            return
        dev = _single_device(layouts)
        if dev is not None and all(isinstance(s, (type(None), SingleDeviceSharding))
                                   for _, s in layouts):
            out._sharding = layouts[0][1]
            return
        mesh = _mesh_of(layouts)
        if mesh is None:
            return
        if rule is not _elementwise and len(layouts) != 1:
            return
        parts = rule(out, layouts, params)
        kind = layouts[0][1]._memory_kind
        out._sharding = NamedSharding(mesh, _to_spec(parts), memory_kind=kind)
    return lay_out


def install() -> None:
    """Set the ``eager_layout`` hook of the primitives these rules cover (those without
    a hook of their own)."""
    import kiln.lax as lax
    from kiln.core.trace import Primitive
    from kiln.parallel.partition import _ELEMENTWISE
    rules = {"slice": _slice, "squeeze": _squeeze, "rev": _rev}
    for name in (*_ELEMENTWISE, *_ELEMENTWISE_EXTRA):
        rules.setdefault(name, _elementwise)
    for v in list(vars(lax).values()):
        if isinstance(v, Primitive) and v.name in rules and v.eager_layout is None \
                and not v.multiple_results:
            v.eager_layout = _rule_for(rules[v.name])


install()
