"""SPMD partitioning of a ``jit`` with shardings: one program per mesh device, on its shards.

``jit(f, in_shardings=..., out_shardings=...)`` called eagerly over a mesh with more than
one device, where some input or output is split, does what JAX's GSPMD partitioner does:
from the global jaxpr and a ``PartitionSpec`` per input, it propagates a spec to every
value (forward, equation by equation) and writes a *per-device* jaxpr over local shapes,
with collectives where the global computation needs values from other devices. That
program then runs on every device's worker thread over its block of each input, like a
``shard_map`` (``kiln.parallel.spmd.run_spmd``), and the per-device results are
assembled into global Arrays laid out as ``out_shardings`` (or as propagated).

A spec is kept per value as a tuple, one entry per dimension, of the mesh axes that
split it (``()``: not split). Mesh axes of size 1 are dropped (they split nothing).

Rules (every other primitive: operands gathered to replicated, run whole on every
device, result replicated: correct, not parallel):

- elementwise ops: the operands' specs merged dimension by dimension (the first split
  wins; an operand laid out otherwise is resharded); rank-0 operands broadcast.
- ``broadcast_in_dim``, ``reshape`` (a split that stays the major dimension of its group
  of merged/split dimensions), ``transpose``, ``squeeze``, ``convert_element_type``: the
  split follows its dimension.
- ``reduce_sum``/``reduce_max``/``reduce_min``: a local reduction, then ``psum``/
  ``pmax``/``pmin`` over the mesh axes that split a reduced dimension. ``argmax``,
  ``argmin``, the other reductions, ``cumsum`` & co, ``sort``, ``rev``: the dimensions
  they work along are gathered, the others stay split.
- ``dot_general``: batch dimensions split alike stay split (a replicated side is sliced
  to match); contracting dimensions split alike give a local product and a ``psum``
  (otherwise they are gathered); free dimensions stay split (unless that reuses a mesh
  axis, then the right side's is gathered).
- ``jit``, ``custom_jvp_call``, ``custom_vjp_call``, ``checkpoint``: their body is
  partitioned in place (the program being run is a primal one).
- ``with_sharding_constraint`` (the ``sharding_constraint`` primitive) and outputs
  are resharded to the constraint / ``out_shardings``: ``all_gather`` of the dimensions whose
  split changes, then slicing by ``axis_index`` for the new splits (a value born of a
  ``broadcast_in_dim`` is broadcast again at the local shape instead).

``KILN_DUMP=spmd`` (comma-separated with the compiler's ``passes``/``c``) prints each
partitioned per-device jaxpr when it is built.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal
from kiln.lax.structural import broadcast_in_dim_p

Spec = tuple  # one tuple of mesh axis names per dimension

_ELEMENTWISE = frozenset("""
add sub mul div neg max min abs sign floor ceil round exp exp2 log log1p expm1 tanh logistic
sin cos tan asin acos atan sinh cosh asinh acosh atanh atan2 sqrt rsqrt cbrt pow integer_pow
square rem eq ne lt le gt ge and or xor not shift_left shift_right_logical
shift_right_arithmetic select_n convert_element_type clamp is_finite erf erfc nextafter
population_count clz bitcast_convert_type add_any erf_inv lgamma digamma igamma igammac
igamma_grad_a polygamma zeta bessel_i0e bessel_i1e regularized_incomplete_beta real imag
complex conj stop_gradient rounded reduce_precision xla_erf xla_erf_inv xla_exp xla_fma xla_log
xla_log1p xla_pow xla_tan random_gamma_grad name
""".split())
_REDUCE_COLLECTIVE = {"reduce_sum": "psum", "reduce_max": "pmax", "reduce_min": "pmin"}
_REDUCE_LOCAL = frozenset(("reduce_prod", "reduce_and", "reduce_or", "reduce_xor",
                           "argmax", "argmin"))
_ALONG_AXIS = {"cumsum": "axis", "cumprod": "axis", "cummax": "axis", "cummin": "axis",
               "cumlogsumexp": "axis", "sort": "dimension", "rev": "dimensions"}
_INLINE = {"jit": "jaxpr", "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
           "checkpoint": "jaxpr"}
# Effects must happen once, as in the unpartitioned program: such jaxprs are not split.
_EFFECTFUL = frozenset(("debug_callback", "debug_print", "io_callback", "pure_callback"))


def dump_enabled() -> bool:
    """Whether ``KILN_DUMP`` asks for the partitioned per-device jaxprs."""
    return "spmd" in {s.strip() for s in os.environ.get("KILN_DUMP", "").split(",")}


def spec_of(pspec, ndim: int, mesh) -> Spec:
    """A ``PartitionSpec`` as a per-dimension tuple of the mesh axes (of size > 1)."""
    sizes = dict(mesh.shape)
    out = []
    for d in range(ndim):
        axes = pspec.axes_of(d) if d < len(pspec) else ()
        out.append(tuple(a for a in axes if sizes[a] > 1))
    return tuple(out)


def to_pspec(spec: Spec):
    """The ``PartitionSpec`` JAX gives a propagated layout (trailing ``None``s dropped)."""
    from kiln.sharding import PartitionSpec
    parts = [None if not a else (a[0] if len(a) == 1 else a) for a in spec]
    while parts and parts[-1] is None:
        parts.pop()
    return PartitionSpec(*parts)


def is_split(spec: Spec) -> bool:
    return any(spec)


def _per_shard(eqn) -> bool:
    """A callback that runs on every device over its shards (``partitioned=True``), or
    ``inspect_sharding``, which the partitioner answers itself."""
    name = eqn.primitive.name
    return name == "inspect_sharding" or (name in ("debug_callback", "debug_print")
                                          and bool(eqn.params.get("partitioned")))


def has_effects(jaxpr: Jaxpr) -> bool:
    """Whether ``jaxpr`` (or a sub-jaxpr) holds a callback or print that must run once
    (partitioned ones run per device: they do not count)."""
    for e in jaxpr.eqns:
        if e.primitive.name in _EFFECTFUL and not _per_shard(e):
            return True
        for v in e.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                inner = sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub
                if isinstance(inner, Jaxpr) and has_effects(inner):
                    return True
    return False


def observes_layout(jaxpr: Jaxpr) -> bool:
    """Whether running ``jaxpr`` whole or partitioned is observable: it holds a
    ``partitioned=True`` callback or an ``inspect_sharding`` at its top level or in a
    call's body (a plain ``jit`` of such a program is partitioned over its arguments'
    shardings, as JAX's compiler partitions every program)."""
    for e in jaxpr.eqns:
        if _per_shard(e):
            return True
        key = _INLINE.get(e.primitive.name)
        body = e.params.get(key) if key else None
        if isinstance(body, ClosedJaxpr) and observes_layout(body.jaxpr):
            return True
    return False


class _Val:
    """A value of the per-device program: its local tracer and its spec; ``bsrc`` is set
    when it is a ``broadcast_in_dim`` (operand ``_Val``, dims), so that another layout
    of it is a local broadcast rather than a gather or slice."""

    __slots__ = ("val", "spec", "shape", "bsrc", "memo")

    def __init__(self, val, spec: Spec, shape: tuple, bsrc=None):
        self.val = val
        self.spec = spec
        self.shape = shape          # the global shape
        self.bsrc = bsrc
        self.memo: dict = {}


class Partitioner:
    """Writes the per-device program for one mesh by interpreting a global jaxpr on
    local tracers (while ``kiln.interpreters.pjit.trace_closed`` stages it)."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.sizes = {a: s for a, s in mesh.shape.items()}

    # -- layouts -----------------------------------------------------------------------------

    def nsplit(self, axes) -> int:
        return math.prod(self.sizes[a] for a in axes)

    def local_shape(self, shape, spec: Spec) -> tuple:
        return tuple(n // self.nsplit(a) for n, a in zip(shape, spec))

    def reshard(self, v: _Val, dst: Spec):
        """``v``'s local value laid out as ``dst``."""
        from kiln import lax
        if v.spec == dst:
            return v.val
        hit = v.memo.get(dst)
        if hit is not None:
            return hit
        if v.bsrc is not None:
            out = self._rebroadcast(v, dst)
        else:
            x = v.val
            cur = list(v.spec)
            for d, (s, t) in enumerate(zip(v.spec, dst)):
                if s and t[:len(s)] != s:
                    x = lax.all_gather(x, s if len(s) > 1 else s[0], axis=d, tiled=True)
                    cur[d] = ()
            for d, t in enumerate(dst):
                extra = t[len(cur[d]):]
                if not extra:
                    continue
                n = x.shape[d] // self.nsplit(extra)
                idx = lax.axis_index(extra if len(extra) > 1 else extra[0])
                start = lax.mul(idx, np.int32(n))
                x = lax.dynamic_slice_in_dim(x, start, n, axis=d, allow_negative_indices=False)
            out = x
        v.memo[dst] = out
        return out

    def _rebroadcast(self, v: _Val, dst: Spec):
        from kiln.lax.structural import broadcast_in_dim_p
        src, dims = v.bsrc
        want = tuple(dst[o] if src.shape[i] == v.shape[o] else ()
                     for i, o in enumerate(dims))
        x = self.reshard(src, want)
        return broadcast_in_dim_p.bind(x, shape=self.local_shape(v.shape, dst),
                                       broadcast_dimensions=tuple(dims), sharding=None)

    def merge(self, vals: list, ndim: int) -> Spec:
        """The specs of same-shaped operands merged: per dimension, the first split whose
        mesh axes are still free."""
        out, used = [], set()
        for d in range(ndim):
            pick = ()
            for v in vals:
                if len(v.spec) == ndim and v.spec[d] and not used & set(v.spec[d]):
                    pick = v.spec[d]
                    break
            used.update(pick)
            out.append(pick)
        return tuple(out)

    # -- the interpreter ---------------------------------------------------------------------

    def run(self, jaxpr: Jaxpr, consts, args: list) -> list:
        """Interpret ``jaxpr`` over ``args`` (``_Val``s); returns the output ``_Val``s."""
        env: dict = {}

        def read(x):
            if isinstance(x, Literal):
                return _Val(x.val, (() ,) * len(x.aval.shape) if x.aval.shape else (),
                            tuple(x.aval.shape))
            return env[x]

        for var, c in zip(jaxpr.constvars, consts):
            env[var] = c if isinstance(c, _Val) else _Val(c, ((),) * np.ndim(c),
                                                          tuple(np.shape(c)))
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        for eqn in jaxpr.eqns:
            ins = [read(x) for x in eqn.invars]
            outs = self.eqn(eqn, ins)
            for var, o in zip(eqn.outvars, outs):
                env[var] = o
        return [read(x) for x in jaxpr.outvars]

    def eqn(self, eqn, ins: list) -> list:
        name = eqn.primitive.name
        p = eqn.params
        out_avals = [v.aval for v in eqn.outvars]
        rank = [len(a.shape) for a in out_avals]
        expand = getattr(eqn.primitive, "expand", None)
        if (name in _INLINE and isinstance(p.get(_INLINE[name]), ClosedJaxpr)
                or expand is not None):
            inner = expand(eqn) if expand is not None else p[_INLINE[name]]
            consts = [_Val(c, ((),) * np.ndim(c), tuple(np.shape(c))) for c in inner.consts]
            return self.run(inner.jaxpr, consts, ins)
        if (name in _ELEMENTWISE and len(out_avals) == 1
                and getattr(eqn.primitive, "broadcasts_size_one", False)
                and not all(v.shape in ((), out_avals[0].shape) for v in ins)
                and all(len(v.shape) in (0, rank[0]) for v in ins)):
            # Size-1 dimensions broadcast by the op itself (``sub a:f32[8,6] b:f32[8,1]``,
            # as JAX stages equal-rank ``jnp``): broadcast them explicitly first, so the
            # operands' splits merge as for same-shaped operands.
            shape = tuple(out_avals[0].shape)
            ins = [v if v.shape in ((), shape) else self._broadcast(v, tuple(range(len(shape))),
                                                                   shape) for v in ins]
        if (name in _ELEMENTWISE and len(out_avals) == 1
                and all(v.shape in ((), out_avals[0].shape) for v in ins)):
            spec = self.merge([v for v in ins if v.shape], rank[0])
            xs = [v.val if not v.shape else self.reshard(v, spec) for v in ins]
            return [self.bind(eqn, xs, spec)]
        if name == "inspect_sharding":
            from kiln.sharding import NamedSharding
            p["callback"](NamedSharding(self.mesh, to_pspec(ins[0].spec)))
            return []
        if _per_shard(eqn):      # each device calls back with its blocks
            eqn.primitive.bind(*[v.val for v in ins], **p)
            return []
        if name == "slice" and len(ins) == 1:
            return [self.slice(eqn, ins[0])]
        if name == "split":
            return self.split(eqn, ins[0])
        if name == "broadcast_in_dim" and len(ins) == 1:
            return [self._broadcast(ins[0], p["broadcast_dimensions"], p["shape"], p)]
        if name == "sharding_constraint":
            return [self.constraint(ins[0], p)]
        if name == "transpose":
            (v,), perm = ins, p["permutation"]
            return [self.bind(eqn, [v.val], tuple(v.spec[i] for i in perm))]
        if name == "squeeze":
            (v,), dims = ins, set(d % len(ins[0].shape) for d in p["dimensions"])
            return [self.bind(eqn, [v.val],
                              tuple(s for d, s in enumerate(v.spec) if d not in dims))]
        if name == "reshape" and p.get("dimensions") is None and len(ins) == 1:
            return self.reshape(eqn, ins[0])
        if name in _REDUCE_COLLECTIVE or name in _REDUCE_LOCAL:
            return self.reduce(eqn, ins[0])
        if name in _ALONG_AXIS:
            return self.along_axis(eqn, ins)
        if name == "dot_general":
            return self.dot_general(eqn, *ins)
        return self.replicated(eqn, ins)

    def _broadcast(self, v: _Val, dims, shape, params=None) -> _Val:
        """``broadcast_in_dim`` of ``v``: the result keeps ``v``'s split of every dimension
        it does not broadcast."""
        spec = [()] * len(shape)
        for i, o in enumerate(dims):
            if v.shape[i] == shape[o]:
                spec[o] = v.spec[i]
        spec = tuple(spec)
        p = dict(params) if params is not None else dict(
            shape=tuple(shape), broadcast_dimensions=tuple(dims), sharding=None)
        y = broadcast_in_dim_p.bind(v.val, **dict(p, shape=self.local_shape(shape, spec)))
        return _Val(y, spec, tuple(shape), bsrc=(v, tuple(dims)))

    def bind(self, eqn, xs: list, spec: Spec, **changes) -> _Val:
        params = dict(eqn.params, **changes)
        if "sharding" in params:
            params["sharding"] = None
        if "out_sharding" in params:
            params["out_sharding"] = None
        y = eqn.primitive.bind(*xs, **params)
        return _Val(y, spec, tuple(eqn.outvars[0].aval.shape))

    def replicated(self, eqn, ins: list) -> list:
        xs = [self.reshard(v, ((),) * len(v.shape)) if v.shape else v.val for v in ins]
        ys = eqn.primitive.bind(*xs, **eqn.params)
        ys = ys if eqn.primitive.multiple_results else [ys]
        return [_Val(y, ((),) * len(o.aval.shape), tuple(o.aval.shape))
                for y, o in zip(ys, eqn.outvars)]

    def split(self, eqn, v: _Val) -> list:
        """``split``: every dimension but the split one keeps its split (that one is
        gathered first)."""
        axis = eqn.params["axis"]
        spec = tuple(() if d == axis else a for d, a in enumerate(v.spec))
        ys = eqn.primitive.bind(self.reshard(v, spec), **eqn.params)
        return [_Val(y, spec, tuple(o.aval.shape)) for y, o in zip(ys, eqn.outvars)]

    def slice(self, eqn, v: _Val) -> _Val:
        """``slice``: a dimension taken whole (stride 1) keeps its split; the others are
        gathered first."""
        p = eqn.params
        starts, limits = p["start_indices"], p["limit_indices"]
        strides = p.get("strides") or (1,) * len(starts)
        whole = [s == 0 and lim == n and st == 1 for s, lim, st, n in
                 zip(starts, limits, strides, v.shape)]
        spec = tuple(a if w else () for a, w in zip(v.spec, whole))
        x = self.reshard(v, spec)
        local = self.local_shape(v.shape, spec)
        lim = tuple(n if w else lim for n, w, lim in zip(local, whole, limits))
        return self.bind(eqn, [x], spec, limit_indices=lim)

    def constraint(self, v: _Val, p: dict) -> _Val:
        sh = p["sharding"]
        if sh.mesh != self.mesh:
            return v
        spec = spec_of(sh.spec, len(v.shape), self.mesh)
        free = p.get("unconstrained_dims") or ()
        if free:
            fixed = {a for d, s in enumerate(spec) if d not in free for a in s}
            spec = tuple(v.spec[d] if d in free and not fixed & set(v.spec[d]) else
                         (() if d in free else s) for d, s in enumerate(spec))
        return _Val(self.reshard(v, spec), spec, v.shape)

    def reshape(self, eqn, v: _Val) -> list:
        src, dst = v.shape, tuple(eqn.params["new_sizes"])
        want = [()] * len(src)
        out = [()] * len(dst)
        for ins, outs in _reshape_groups(src, dst):
            if ins and outs:
                lead = v.spec[ins[0]]
                if lead and dst[outs[0]] % self.nsplit(lead) == 0:
                    want[ins[0]] = lead
                    out[outs[0]] = lead
        want, out = tuple(want), tuple(out)
        x = self.reshard(v, want)
        return [self.bind(eqn, [x], out, new_sizes=self.local_shape(dst, out))]

    def reduce(self, eqn, v: _Val) -> list:
        from kiln import lax
        name, axes = eqn.primitive.name, set(eqn.params["axes"])
        if name in _REDUCE_COLLECTIVE:
            spec = v.spec
        else:
            spec = tuple(() if d in axes else s for d, s in enumerate(v.spec))
        x = self.reshard(v, spec)
        out = tuple(s for d, s in enumerate(spec) if d not in axes)
        y = self.bind(eqn, [x], out)
        over = tuple(a for d, s in enumerate(spec) if d in axes for a in s)
        if over:
            y.val = getattr(lax, _REDUCE_COLLECTIVE[name])(y.val, over)
        return [y]

    def along_axis(self, eqn, ins: list) -> list:
        key = _ALONG_AXIS[eqn.primitive.name]
        ax = eqn.params[key]
        ndim = len(ins[0].shape)
        axes = {a % ndim for a in (ax if isinstance(ax, (tuple, list)) else (ax,))}
        spec = tuple(() if d in axes else s for d, s in enumerate(self.merge(ins, ndim)))
        xs = [self.reshard(v, spec) for v in ins]
        ys = eqn.primitive.bind(*xs, **eqn.params)
        ys = ys if eqn.primitive.multiple_results else [ys]
        return [_Val(y, spec, tuple(o.aval.shape)) for y, o in zip(ys, eqn.outvars)]

    def dot_general(self, eqn, lhs: _Val, rhs: _Val) -> list:
        from kiln import lax
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        ls, rs = list(lhs.spec), list(rhs.spec)
        used: set = set()
        for i, j in zip(lb, rb):            # batch: split alike (the split side wins)
            s = ls[i] or rs[j]
            if used & set(s):
                s = ()
            ls[i] = rs[j] = s
            used.update(s)
        summed = []
        for i, j in zip(lc, rc):            # contracting: alike -> local dot + psum
            if ls[i] and ls[i] == rs[j] and not used & set(ls[i]):
                summed.extend(ls[i])
                used.update(ls[i])
            else:
                ls[i] = rs[j] = ()
        lfree = [d for d in range(len(ls)) if d not in lc and d not in lb]
        rfree = [d for d in range(len(rs)) if d not in rc and d not in rb]
        for d in lfree:
            if used & set(ls[d]):
                ls[d] = ()
            used.update(ls[d])
        for d in rfree:
            if used & set(rs[d]):
                rs[d] = ()
            used.update(rs[d])
        ls, rs = tuple(ls), tuple(rs)
        x, y = self.reshard(lhs, ls), self.reshard(rhs, rs)
        out = tuple([ls[i] for i in lb] + [ls[d] for d in lfree] + [rs[d] for d in rfree])
        z = self.bind(eqn, [x, y], out)
        if summed:
            z.val = lax.psum(z.val, tuple(summed))
        return [z]


def _reshape_groups(src: tuple, dst: tuple) -> list:
    """Pairs (source dims, target dims) of minimal groups with equal products, size-1
    dimensions left out (they are never split)."""
    si = [i for i, n in enumerate(src) if n != 1]
    di = [i for i, n in enumerate(dst) if n != 1]
    groups, a, b = [], 0, 0
    while a < len(si) and b < len(di):
        gi, go = [si[a]], [di[b]]
        ps, pd = src[si[a]], dst[di[b]]
        a, b = a + 1, b + 1
        while ps != pd:
            if ps < pd:
                gi.append(si[a])
                ps *= src[si[a]]
                a += 1
            else:
                go.append(di[b])
                pd *= dst[di[b]]
                b += 1
        groups.append((gi, go))
    return groups


class PartitionedProgram:
    """The per-device program of one (jaxpr, input specs, output specs) on one mesh."""

    def __init__(self, closed: ClosedJaxpr, mesh, in_specs: list, out_specs: list,
                 name: str):
        from kiln.interpreters import batching
        from kiln.interpreters.pjit import trace_closed
        self.mesh = mesh
        self.name = name
        part = Partitioner(mesh)
        in_avals = closed.in_avals
        local = [a.update(shape=part.local_shape(a.shape, s))
                 for a, s in zip(in_avals, in_specs)]
        store: dict = {}

        def per_device(*xs):
            args = [_Val(x, s, tuple(a.shape)) for x, s, a in zip(xs, in_specs, in_avals)]
            outs = part.run(closed.jaxpr, closed.consts, args)
            specs = [o.spec if w is None else w for o, w in zip(outs, out_specs)]
            store["specs"] = specs
            return [part.reshard(o, s) for o, s in zip(outs, specs)]

        for ax, size in mesh.shape.items():
            batching.axis_env.append((ax, size))
        try:
            self.local, tconsts = trace_closed(per_device, local)
        finally:
            for _ in mesh.axis_names:
                batching.axis_env.pop()
        assert not tconsts
        self.out_specs: list = store["specs"]
        self.out_avals = closed.out_avals
        self.in_avals = in_avals
        if dump_enabled():
            specs = ", ".join(str(to_pspec(s)) for s in in_specs)
            print(f"--- kiln spmd: {name} on {mesh!r}, in specs ({specs}) ---\n"
                  f"{self.local}", file=sys.stderr)

    def __call__(self, values: list, in_shardings: list, out_shardings: list) -> list:
        """Run on every device over its blocks of ``values`` (global NumPy arrays laid out
        as ``in_shardings``); global Arrays laid out as ``out_shardings`` (``None``:
        propagated)."""
        from kiln.array import make_array
        from kiln.parallel import spmd
        from kiln.sharding import NamedSharding
        placements = self.mesh.coords()
        per_device = [[v[sh.block_index(c, v.shape)] for v, sh in zip(values, in_shardings)]
                      for _, c in placements]
        results = spmd.run_spmd(self.local, dict(self.mesh.shape), placements, per_device,
                                name=self.name)
        outs = []
        for k, (aval, spec, want) in enumerate(zip(self.out_avals, self.out_specs,
                                                   out_shardings)):
            sh = want if want is not None else NamedSharding(self.mesh, to_pspec(spec))
            g = np.empty(aval.shape, aval.dtype)
            for (_, c), r in zip(placements, results):
                if sh.replica_id(c) == 0:
                    g[sh.block_index(c, aval.shape)] = r[k]
            arr = make_array(g, aval.weak_type)
            arr._sharding = sh
            outs.append(arr)
        return outs

    def run_processes(self, arrays: list, in_shardings: list, out_shardings: list) -> list:
        """``__call__`` over a mesh spanning several processes (``kiln.distributed``):
        ``arrays`` are the arguments (global Arrays, or values every process holds whole);
        this process runs its devices' blocks and gets global Arrays holding them."""
        from kiln import distributed
        from kiln.parallel import global_array, spmd
        from kiln.sharding import NamedSharding
        placements = global_array.local_placements(self.mesh)
        blocks = [global_array.local_blocks(x, sh, placements)
                  for x, sh in zip(arrays, in_shardings)]
        per_device = [[np.asarray(b[i], dtype=a.dtype) for b, a in
                       zip(blocks, self.in_avals)] for i in range(len(placements))]
        results = spmd.run_spmd(self.local, dict(self.mesh.shape), placements, per_device,
                                name=self.name, world=distributed.comm(),
                                layout=global_array.layout(self.mesh))
        outs = []
        for k, (aval, spec, want) in enumerate(zip(self.out_avals, self.out_specs,
                                                   out_shardings)):
            sh = want if want is not None else NamedSharding(self.mesh, to_pspec(spec))
            outs.append(global_array.assemble(
                sh, aval.shape, aval.dtype, aval.weak_type,
                {d.id: r[k] for (d, _), r in zip(placements, results)}))
        return outs
