"""Op records for gather, the scatter family, sort and top_k.

References are element-by-element loops over XLA's definitions (independent of the
vectorized kiln impls). Index arguments are arrays, so the vmap tests batch them too and
exercise every case of the batching rules; samples include out-of-range indices.
"""
from __future__ import annotations

import itertools

import numpy as np

from kiln import lax

try:  # tests/ is on sys.path under pytest; the repository root when run as a package
    from op_records import OpRecord, args_of, f32, i32
except ImportError:  # pragma: no cover
    from tests.op_records import OpRecord, args_of, f32, i32

GDN = lax.GatherDimensionNumbers
SDN = lax.ScatterDimensionNumbers

# ----------------------------------------------------------------------------------------------
# loop references


def _starts(operand_shape, idx_vec, batch_pos, start_map, op_bdims, idx_bdims):
    start = [0] * len(operand_shape)
    for k, d in enumerate(start_map):
        start[d] = int(idx_vec[k])
    for j, d in enumerate(op_bdims):
        start[d] = batch_pos[idx_bdims[j]]
    return start


def np_gather(x, idx, dn, sizes, mode="promise", fill=None):
    idx = np.asarray(idx)
    out_rank = len(dn.offset_dims) + idx.ndim - 1
    batch_axes = [a for a in range(out_rank) if a not in dn.offset_dims]
    win = [d for d in range(x.ndim)
           if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    bshape = idx.shape[:-1]
    wsizes = [sizes[d] for d in win]
    out_shape = [0] * out_rank
    for a, n in zip(batch_axes, bshape):
        out_shape[a] = n
    for a, n in zip(dn.offset_dims, wsizes):
        out_shape[a] = n
    out = np.zeros(out_shape, x.dtype)
    if fill is None:
        fill = np.nan if x.dtype.kind in "fc" else (
            np.iinfo(x.dtype).min if x.dtype.kind == "i" else True)
    for pos in itertools.product(*[range(n) for n in out_shape]):
        b = [pos[a] for a in batch_axes]
        o = [pos[a] for a in dn.offset_dims]
        start = _starts(x.shape, idx[tuple(b)], b, dn.start_index_map,
                        dn.operand_batching_dims, dn.start_indices_batching_dims)
        ok = True
        for d in dn.start_index_map:
            hi = x.shape[d] - sizes[d]
            if not 0 <= start[d] <= hi:
                ok = False
            start[d] = min(max(start[d], 0), hi)
        full = list(start)
        for d, off in zip(win, o):
            full[d] += off
        out[pos] = x[tuple(full)] if (ok or mode != "fill") else fill
    return out


def np_scatter(x, idx, upd, dn, op, mode="drop"):
    x = np.array(x, copy=True)
    idx = np.asarray(idx)
    win = [d for d in range(x.ndim)
           if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    sizes = [1] * x.ndim
    for d, w in zip(win, dn.update_window_dims):
        sizes[d] = upd.shape[w]
    scat_axes = [a for a in range(upd.ndim) if a not in dn.update_window_dims]
    for pos in itertools.product(*[range(n) for n in upd.shape]):
        b = [pos[a] for a in scat_axes]
        o = [pos[a] for a in dn.update_window_dims]
        start = _starts(x.shape, idx[tuple(b)], b, dn.scatter_dims_to_operand_dims,
                        dn.operand_batching_dims, dn.scatter_indices_batching_dims)
        ok = True
        for d in dn.scatter_dims_to_operand_dims:
            hi = x.shape[d] - sizes[d]
            if not 0 <= start[d] <= hi:
                ok = False
            start[d] = min(max(start[d], 0), hi)
        if not ok and mode != "clip":
            continue
        full = list(start)
        for d, off in zip(win, o):
            full[d] += off
        full = tuple(full)
        v = upd[pos]
        if op == "set":
            x[full] = v
        elif op == "add":
            x[full] = x[full] + v
        elif op == "sub":
            x[full] = x[full] - v
        elif op == "mul":
            x[full] = x[full] * v
        elif op == "min":
            x[full] = np.minimum(x[full], v)
        else:
            x[full] = np.maximum(x[full], v)
    return x


# ----------------------------------------------------------------------------------------------
# samplers


def ints(*shape, low, high):
    return i32(*shape, low=low, high=high)


def unique_rows(n_rows, n, k):
    """(k, 1) distinct indices in [0, n)."""
    def sample(rng):
        return rng.permutation(n)[:k].reshape(k, 1).astype(np.int32)
    return sample


def distinct32(*shape):
    def sample(rng):
        size = int(np.prod(shape, dtype=np.int64))
        x = rng.permutation(size).astype(np.float32) - size / 2
        x += rng.uniform(-0.2, 0.2, size=size).astype(np.float32)
        return x.reshape(shape).astype(np.float32)
    return sample


def ties32(*shape, nan=True):
    """float32 values with many exact ties (small integers) and (``nan``) a NaN or two."""
    def sample(rng):
        x = rng.integers(-3, 4, size=shape).astype(np.float32)
        if nan:
            x[rng.random(size=shape) < 0.1] = np.nan
        return x
    return sample


def in_bounds(isamp, bounds):
    """``isamp`` with every index-vector column k clipped to [0, bounds[k]]."""
    def sample(rng):
        i = isamp(rng)
        return np.clip(i, 0, np.asarray(bounds, np.int32)).astype(i.dtype)
    return sample


# ----------------------------------------------------------------------------------------------
# records

RECORDS: list[OpRecord] = []


def rec(name, fun, args, ref, **kw):
    RECORDS.append(OpRecord(name=name, fun=fun, args=args, ref=ref, **kw))


# -- gather ----------------------------------------------------------------------------------------
GATHERS = [
    # name, operand shape, indices sampler, dn, slice sizes
    ("rows", (5, 4), ints(3, 1, low=-2, high=7), GDN((1,), (0,), (0,)), (1, 4)),
    ("points", (4, 5), ints(6, 2, low=-1, high=6), GDN((), (0, 1), (0, 1)), (1, 1)),
    ("windows", (6, 7), ints(2, 3, 2, low=-2, high=8), GDN((2, 3), (), (0, 1)), (2, 3)),
    ("permuted_map", (4, 5, 3), ints(5, 2, low=0, high=5), GDN((0, 2), (2,), (2, 0)),
     (2, 5, 1)),
    ("batching_dims", (3, 5, 4), ints(3, 2, 1, low=-1, high=6),
     GDN((2,), (1,), (1,), (0,), (0,)), (1, 1, 4)),
    ("batching_dims_inner", (5, 3), ints(2, 3, 1, low=0, high=5),
     GDN((), (0,), (0,), (1,), (1,)), (1, 1)),
    ("empty_index_vector", (3,), ints(2, 0, low=0, high=1), GDN((1,), (), ()), (2,)),
    ("scalar_batch", (4, 3), ints(1, low=-1, high=5), GDN((0,), (0,), (0,)), (1, 3)),
]
for name, shape, isamp, dn, sizes in GATHERS:
    bounds = [shape[d] - sizes[d] for d in dn.start_index_map]
    for mode in ("promise", "clip", "fill"):
        m = None if mode == "promise" else mode
        # Out-of-range promises give no adjoint pair (clamped reads, dropped writes, as in
        # JAX), so promise records sample in-range indices; fill uses a finite fill value.
        samp = in_bounds(isamp, bounds) if mode == "promise" else isamp
        fv = 0.5 if mode == "fill" else None
        rec(f"gather_{name}_{mode}",
            lambda x, i, dn=dn, sizes=sizes, m=m, fv=fv: lax.gather(x, i, dn, sizes, mode=m,
                                                                     fill_value=fv),
            args_of(f32(*shape), samp),
            lambda x, i, dn=dn, sizes=sizes, mode=mode, fv=fv: np_gather(x, i, dn, sizes,
                                                                         mode, fv))
rec("gather_fill_nan_default",
    lambda x, i: lax.gather(x, i, GDN((1,), (0,), (0,)), (1, 4), mode="fill"),
    args_of(f32(5, 4), ints(4, 1, low=-3, high=8)),
    lambda x, i: np_gather(x, i, GDN((1,), (0,), (0,)), (1, 4), "fill"), diff_argnums=())
rec("gather_fill_value_neg",
    lambda x, i: lax.gather(x, i, GDN((1,), (0,), (0,)), (1, 4), mode="fill", fill_value=-3.0),
    args_of(f32(5, 4), ints(4, 1, low=-3, high=8)),
    lambda x, i: np_gather(x, i, GDN((1,), (0,), (0,)), (1, 4), "fill", -3.0))
rec("gather_int_fill",
    lambda x, i: lax.gather(x, i, GDN((), (0, 1), (0, 1)), (1, 1), mode="fill"),
    args_of(i32(4, 5), ints(6, 2, low=-1, high=6)),
    lambda x, i: np_gather(x, i, GDN((), (0, 1), (0, 1)), (1, 1), "fill"), diff_argnums=())
rec("gather_int8_indices",
    lambda x, i: lax.gather(x, i.astype(np.int8), GDN((1,), (0,), (0,)), (1, 4)),
    args_of(f32(5, 4), ints(3, 1, low=0, high=5)),
    lambda x, i: np_gather(x, i, GDN((1,), (0,), (0,)), (1, 4)))

# -- scatter family ----------------------------------------------------------------------------------
SCATTERS = [
    # name, operand shape, indices sampler, updates shape, dn
    ("rows", (5, 4), ints(4, 1, low=-1, high=6), (4, 4), SDN((1,), (0,), (0,))),
    ("points", (4, 5), ints(6, 2, low=-1, high=6), (6,), SDN((), (0, 1), (0, 1))),
    ("windows", (6, 7), ints(2, 2, low=-1, high=6), (2, 2, 3), SDN((1, 2), (), (0, 1))),
    ("batching_dims", (3, 5), ints(3, 2, 1, low=-1, high=6), (3, 2),
     SDN((), (1,), (1,), (0,), (0,))),
    ("window_first", (4, 6), ints(3, 1, low=0, high=6), (2, 3), SDN((0,), (1,), (1,))),
]
_KINDS = {"scatter": ("set", lax.scatter), "scatter_add": ("add", lax.scatter_add),
          "scatter_sub": ("sub", lax.scatter_sub), "scatter_mul": ("mul", lax.scatter_mul),
          "scatter_min": ("min", lax.scatter_min), "scatter_max": ("max", lax.scatter_max)}
for kind, (op, fn) in _KINDS.items():
    for name, shape, isamp, ushape, dn in SCATTERS:
        for mode in ("drop", "clip", "promise_in_bounds"):
            if mode != "drop" and name not in ("rows", "windows"):
                continue
            samp = distinct32 if op in ("min", "max") else f32
            diff = (0,) if op == "mul" else (0, 2)
            isz = [1 if d in dn.inserted_window_dims or d in dn.operand_batching_dims else None
                   for d in range(len(shape))]
            win = [d for d in range(len(shape)) if isz[d] is None]
            for d, w in zip(win, dn.update_window_dims):
                isz[d] = ushape[w]
            bounds = [shape[d] - isz[d] for d in dn.scatter_dims_to_operand_dims]
            isamp_m = in_bounds(isamp, bounds) if mode == "promise_in_bounds" else isamp
            rec(f"{kind}_{name}_{mode}",
                lambda x, i, u, fn=fn, dn=dn, mode=mode: fn(x, i, u, dn, mode=mode),
                args_of(samp(*shape), isamp_m, samp(*ushape)),
                lambda x, i, u, dn=dn, op=op, mode=mode: np_scatter(x, i, u, dn, op, mode),
                diff_argnums=diff)
rec("scatter_mul_unique_updates",
    lambda x, i, u: lax.scatter_mul(x, i, u, SDN((1,), (0,), (0,)), unique_indices=True),
    args_of(f32(5, 3), unique_rows(3, 5, 3), f32(3, 3)),
    lambda x, i, u: np_scatter(x, i, u, SDN((1,), (0,), (0,)), "mul"), diff_argnums=(0, 2))
rec("scatter_unique",
    lambda x, i, u: lax.scatter(x, i, u, SDN((1,), (0,), (0,)), unique_indices=True),
    args_of(f32(5, 3), unique_rows(3, 5, 3), f32(3, 3)),
    lambda x, i, u: np_scatter(x, i, u, SDN((1,), (0,), (0,)), "set"), diff_argnums=(0, 2))
rec("scatter_add_int",
    lambda x, i, u: lax.scatter_add(x, i, u, SDN((), (0,), (0,))),
    args_of(i32(6), ints(8, 1, low=-2, high=8), i32(8)),
    lambda x, i, u: np_scatter(x, i, u, SDN((), (0,), (0,)), "add"), diff_argnums=())
rec("scatter_max_bool",
    lambda x, i, u: lax.scatter_max(x, i, u, SDN((), (0,), (0,))),
    args_of(lambda rng: rng.random(6) < 0.3, ints(4, 1, low=0, high=6),
            lambda rng: rng.random(4) < 0.5),
    lambda x, i, u: np_scatter(x, i, u, SDN((), (0,), (0,)), "max"), diff_argnums=())
rec("scatter_apply",
    lambda x, i: lax.scatter_apply(x, i, lambda v: lax.mul(v, np.float32(2.0)),
                                   SDN((), (0,), (0,)), update_shape=(5,)),
    args_of(f32(6), ints(5, 1, low=-1, high=7)),
    lambda x, i: np_scatter(x, i, np.full(5, 2.0, np.float32), SDN((), (0,), (0,)), "mul"),
    diff_argnums=())   # as in JAX, scatter_apply has no derivative (NotImplementedError)


# -- sort / top_k ------------------------------------------------------------------------------------

def np_sort_multi(ops, dimension, num_keys):
    ops = [np.moveaxis(o, dimension, -1) for o in ops]
    out = [np.empty_like(o) for o in ops]
    for pos in itertools.product(*[range(n) for n in ops[0].shape[:-1]]):
        rows = [o[pos] for o in ops]
        n = rows[0].shape[0]

        def key(j):
            k = []
            for r in rows[:num_keys]:
                v = r[j]
                parts = [v.real, v.imag] if np.iscomplexobj(r) else [v]
                for p in parts:
                    p = float(p) if r.dtype.kind in "fc" else int(p)
                    k.append((1, 0.0) if p != p else (0, p + 0.0))
            return k
        order = sorted(range(n), key=key)    # Python's sort is stable
        for o, r in zip(out, rows):
            o[pos] = r[order]
    return [np.moveaxis(o, -1, dimension) for o in out]


def _total_key(v):
    b = np.asarray(v, np.float32).view(np.int32).item()
    return b if b >= 0 else b ^ 0x7FFFFFFF


def np_top_k(x, k, axis=-1):
    x = np.moveaxis(x, axis, -1)
    vals = np.empty(x.shape[:-1] + (k,), x.dtype)
    idx = np.empty(x.shape[:-1] + (k,), np.int32)
    for pos in itertools.product(*[range(n) for n in x.shape[:-1]]):
        row = x[pos]
        keyf = (lambda j: (-_total_key(row[j]), j)) if row.dtype.kind == "f" else \
            (lambda j: (-int(row[j]), j))
        order = sorted(range(len(row)), key=keyf)[:k]
        vals[pos] = row[order]
        idx[pos] = order
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


rec("sort_1d", lambda x: lax.sort(x), args_of(f32(7)),
    lambda x: np_sort_multi([x], 0, 1)[0])
rec("sort_2d_dim0", lambda x: lax.sort(x, dimension=0), args_of(distinct32(5, 3)),
    lambda x: np_sort_multi([x], 0, 1)[0])
rec("sort_nan_ties", lambda x: lax.sort(x), args_of(ties32(3, 8)),
    lambda x: np_sort_multi([x], 1, 1)[0], diff_argnums=())
rec("sort_int", lambda x: lax.sort(x, dimension=0), args_of(i32(6, 2, low=-3, high=3)),
    lambda x: np_sort_multi([x], 0, 1)[0], diff_argnums=())
rec("sort_key_val", lambda k, v: lax.sort_key_val(k, v),
    args_of(ties32(2, 7, nan=False), f32(2, 7)),
    lambda k, v: tuple(np_sort_multi([k, v], 1, 1)), diff_argnums=(1,))
rec("sort_multi_num_keys2",
    lambda a, b, c: lax.sort((a, b, c), dimension=0, num_keys=2),
    args_of(i32(9, 2, low=0, high=3), ties32(9, 2, nan=False), f32(9, 2)),
    lambda a, b, c: tuple(np_sort_multi([a, b, c], 0, 2)), diff_argnums=(2,))
rec("sort_complex_lax", lambda x: lax.sort(x),
    args_of(lambda rng: (rng.integers(-2, 3, 6) + 1j * rng.integers(-2, 3, 6)).astype(
        np.complex64)),
    lambda x: np_sort_multi([x], 0, 1)[0], diff_argnums=())
rec("top_k", lambda x: lax.top_k(x, 3), args_of(distinct32(4, 6)),
    lambda x: np_top_k(x, 3))
rec("top_k_ties_nan", lambda x: lax.top_k(x, 5), args_of(ties32(2, 7)),
    lambda x: np_top_k(x, 5), diff_argnums=())
rec("top_k_axis0", lambda x: lax.top_k(x, 2, axis=0), args_of(distinct32(5, 3)),
    lambda x: np_top_k(x, 2, 0))
rec("top_k_int", lambda x: lax.top_k(x, 4), args_of(i32(3, 6, low=-3, high=3)),
    lambda x: np_top_k(x, 4), diff_argnums=())
