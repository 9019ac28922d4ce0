"""The collectives' implementations on a device thread of an SPMD call.

Each collective primitive's ``impl`` is wrapped: on a device thread whose
:class:`~kiln.parallel.spmd.DeviceContext` binds the primitive's axes, it runs the
collective over the participating devices' operands (a rendezvous, see ``spmd``);
anywhere else it keeps the primitive's own ``impl`` (the unbound-axis ``NameError``).
Results every device shares (``psum``) are one read-only buffer.
"""
from __future__ import annotations

import numpy as np

from kiln.lax import parallel as P
from kiln.parallel import native
from kiln.parallel.spmd import current_context


def _axes(params) -> tuple:
    if "axes" in params:
        return tuple(params["axes"])
    a = params["axis_name"]
    return tuple(a) if isinstance(a, (tuple, list)) else (a,)


def _install(prim, fn):
    unbound = prim.impl

    def impl(*args, **params):
        ctx = current_context()
        if ctx is None or not ctx.has(_axes(params)):
            return unbound(*args, **params)
        return fn(ctx, *args, **params)
    impl.__name__ = f"{prim.name}_spmd_impl"
    prim.impl = impl
    # Results are new arrays (shared by the devices, never views of the operands): a
    # compiled program's island need not copy them (kiln.compiler.build.executable).
    prim.island_result_fresh = True


_MPI_DTYPES = {np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128,
                                     np.int8, np.int16, np.int32, np.int64, np.uint8,
                                     np.uint16, np.uint32, np.uint64, np.bool_)}


def _fold(op, slots):
    out = np.array(slots[0])
    for v in slots[1:]:
        op(out, v, out=out)
    return out


def _reducer(op, mpi_op: str):
    def run(ctx, x, *, axes, axis_index_groups=None, **_):
        x = np.asarray(x)      # (np.ascontiguousarray would make a 0-d array 1-d)
        rank, g = ctx.group_of(tuple(axes), axis_index_groups)
        if g.n == 1:
            return np.array(x)
        if g.step or (g.world is not None and x.dtype not in _MPI_DTYPES):
            return g.exchange(rank, x, lambda slots, r: _fold(op, slots))
        members = g.local
        if (g.world is None and isinstance(g.barrier, native.NativeBarrier)
                and x.dtype in native.DTYPES):
            return _native_reduce(g, rank, x, mpi_op)
        turn = g.begin()
        if rank == members[0]:
            g.shared(turn, np.empty(x.shape, x.dtype))
        slots = g.slots(turn)
        slots[rank] = x.reshape(-1)
        g.wait()
        out = g.shared(turn)
        # Each local participant reduces its share of the elements (in device order, so
        # every run gives the same bits); other processes' partial results are then
        # combined by one MPI allreduce; all read the one result.
        flat = out.reshape(-1)
        k, m = members.index(rank), len(members)
        lo, hi = flat.size * k // m, flat.size * (k + 1) // m
        s = [slots[r] for r in members]
        if hi > lo:
            if m == 1:
                flat[lo:hi] = s[0][lo:hi]
            else:
                op(s[0][lo:hi], s[1][lo:hi], out=flat[lo:hi])
                for j in range(2, m):
                    op(flat[lo:hi], s[j][lo:hi], out=flat[lo:hi])
        if g.world is not None:
            if g.wait() == 0:
                from mpi4py import MPI
                name = "LOR" if x.dtype == np.bool_ and mpi_op == "SUM" else mpi_op
                g.world.Allreduce(MPI.IN_PLACE, flat, op=getattr(MPI, name))
        g.wait()
        out.flags.writeable = False
        return out
    return run


def _native_reduce(g, rank: int, x, op_name: str):
    """The local all-reduce in one native call (barrier, share of the reduction, barrier)
    with the GIL released; ``ptrs`` holds the operands' addresses, then the output's."""
    if not x.flags.c_contiguous:
        x = x.copy()
    members = g.local
    k, m = members.index(rank), len(members)
    turn = g.begin()
    ptrs = g.pointers(turn, m + 1)
    if k == 0:
        out = np.empty(x.shape, x.dtype)
        g.shared(turn, out)
        ptrs[m] = out.ctypes.data
    ptrs[k] = x.ctypes.data
    g.barrier.allreduce(ptrs.ctypes.data, ptrs.ctypes.data + m * ptrs.itemsize, x.size, k, m,
                        native.DTYPES[x.dtype], native.OPS[op_name])
    out = g.shared(turn)
    out.flags.writeable = False
    return out


def _psum_op(a, b, out):
    if out.dtype == np.bool_:
        return np.logical_or(a, b, out=out)
    return np.add(a, b, out=out)


def _axis_index(ctx, *, axis_name):
    return np.asarray(ctx.coords[axis_name], np.int32)


def _names(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _all_gather(ctx, x, *, all_gather_dimension, axis_name, axis_index_groups=None,
                axis_size=None, tiled=False):
    rank, g = ctx.group_of(_names(axis_name), axis_index_groups)
    d = all_gather_dimension

    def combine(slots, r):
        return np.concatenate(slots, d) if tiled else np.stack(slots, d)
    return g.exchange(rank, np.asarray(x), combine)


def _reduce_scatter(ctx, x, *, axis_name, scatter_dimension, axis_index_groups=None,
                    axis_size=None, tiled=False):
    rank, g = ctx.group_of(_names(axis_name), axis_index_groups)
    x = np.asarray(x)
    d = scatter_dimension

    def combine(slots, r):
        n = slots[0].shape[d] // g.n if tiled else 1
        idx = (slice(None),) * d + (slice(r * n, (r + 1) * n) if tiled else r,)
        out = np.array(slots[0][idx])
        for v in slots[1:]:
            out = _psum_op(out, v[idx], out=out)
        return out
    return g.exchange(rank, x, combine)


def _all_to_all(ctx, x, *, axis_name, split_axis, concat_axis, axis_index_groups=None,
                tiled=False):
    rank, g = ctx.group_of(_names(axis_name), axis_index_groups)
    x = np.asarray(x)

    def combine(slots, r):
        n = x.shape[split_axis] // g.n
        idx = (slice(None),) * split_axis + (slice(r * n, (r + 1) * n),)
        return np.concatenate([v[idx] for v in slots], concat_axis)
    return g.exchange(rank, x, combine)


def _ppermute(ctx, x, *, axis_name, perm):
    rank, g = ctx.group_of(_names(axis_name))
    x = np.asarray(x)
    src_of = {int(d): int(s) for s, d in perm}

    def combine(slots, r):
        s = src_of.get(r)
        return np.zeros_like(x) if s is None else np.array(slots[s])
    return g.exchange(rank, x, combine)


def _pbroadcast(ctx, x, *, axis_name, source):
    rank, g = ctx.group_of(_names(axis_name))
    return g.exchange(rank, np.asarray(x), lambda slots, r: np.array(slots[source]))


_install(P.psum_p, _reducer(_psum_op, "SUM"))
_install(P.pmax_p, _reducer(np.maximum, "MAX"))
_install(P.pmin_p, _reducer(np.minimum, "MIN"))
_install(P.axis_index_p, _axis_index)
_install(P.all_gather_p, _all_gather)
_install(P.all_gather_invariant_p,
         lambda ctx, x, **params: _all_gather(ctx, x, axis_index_groups=None, **params))
_install(P.reduce_scatter_p, _reduce_scatter)
_install(P.all_to_all_p, _all_to_all)
_install(P.ppermute_p, _ppermute)
_install(P.pbroadcast_p, _pbroadcast)
# reduced/unreduced (JAX's types): the casts are the identity on a device; the sums and
# the gather are psum's, reduce_scatter's and all_gather's
_install(P.unreduced_psum_p, _reducer(_psum_op, "SUM"))
_install(P.unreduced_reduce_scatter_p, _reduce_scatter)
_install(P.all_gather_reduced_p,
         lambda ctx, x, **params: _all_gather(ctx, x, axis_index_groups=None, **params))
