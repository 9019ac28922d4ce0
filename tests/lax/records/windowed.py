"""Op records for the windowed reductions: ``reduce_window_sum/max/min``, the generic
``reduce_window`` and the pooling-gradient primitives ``select_and_gather_add`` /
``select_and_scatter_add``.

References are explicit Python loops over windows (independent of the kiln impls, which
use strided views). Max/min inputs are well separated, so their derivatives are smooth.
"""
from __future__ import annotations

import numpy as np

from kiln import lax

try:  # tests/ is on sys.path under pytest; the repository root when run as a package
    from op_records import OpRecord, args_of, f32
except ImportError:  # pragma: no cover
    from tests.op_records import OpRecord, args_of, f32


def distinct32(*shape):
    """float32 values well apart (no ties)."""
    def sample(rng):
        n = int(np.prod(shape))
        x = rng.permutation(n).astype(np.float64) * 0.5 - n / 4
        x += rng.uniform(-0.1, 0.1, size=n)
        return x.reshape(shape).astype(np.float32)
    return sample


def _positions(shape, wd, ws, pads, bd, wdl):
    """For each output index, the operand indices of its window in row-major order
    (padding and base-dilation holes left out)."""
    out_shape = lax.reduce_window_shape_tuple(shape, wd, ws, pads, bd, wdl)
    for o in np.ndindex(*out_shape):
        idxs = []
        for k in np.ndindex(*wd):
            pos = [oi * s + ki * r - lo for oi, s, ki, r, (lo, _) in zip(o, ws, k, wdl, pads)]
            if all(p >= 0 and p % b == 0 and p // b < n for p, b, n in zip(pos, bd, shape)):
                idxs.append(tuple(p // b for p, b in zip(pos, bd)))
        yield o, idxs
    return out_shape


def np_reduce_window(x, init, fn, wd, ws, pads, bd, wdl):
    out_shape = lax.reduce_window_shape_tuple(x.shape, wd, ws, pads, bd, wdl)
    out = np.empty(out_shape, x.dtype)
    for o, idxs in _positions(x.shape, wd, ws, pads, bd, wdl):
        acc = np.asarray(init, x.dtype)
        for i in idxs:
            acc = fn(acc, x[i])
        out[o] = acc
    return out


def np_gather(t, x, select, wd, ws, pads, bd, wdl):
    out_shape = lax.reduce_window_shape_tuple(x.shape, wd, ws, pads, bd, wdl)
    out = np.zeros(out_shape, t.dtype)
    for o, idxs in _positions(x.shape, wd, ws, pads, bd, wdl):
        best, tan = (-np.inf if select == "ge" else np.inf), 0
        for i in idxs:
            if not (best >= x[i] if select == "ge" else best <= x[i]):
                best, tan = x[i], t[i]
        out[o] = tan
    return out


def np_scatter(s, x, select, wd, ws, pads):
    ones = (1,) * x.ndim
    out = np.zeros(x.shape, s.dtype)
    for o, idxs in _positions(x.shape, wd, ws, pads, ones, ones):
        # (no ties or infinities here, so the padding never wins the selection)
        vals = [x[i] for i in idxs]
        if vals:
            pick = idxs[int(np.argmax(vals) if select == "ge" else np.argmin(vals))]
            out[pick] += s[o]
    return out


RECORDS: list[OpRecord] = []


def rec(name, fun, args, ref, **kw):
    RECORDS.append(OpRecord(name=name, fun=fun, args=args, ref=ref, **kw))


W2 = dict(window_dimensions=(2, 3), window_strides=(1, 2), padding=((1, 0), (1, 1)),
          base_dilation=(1, 2), window_dilation=(2, 1))
W2_ARGS = tuple(W2[k] for k in ("window_dimensions", "window_strides", "padding",
                                "base_dilation", "window_dilation"))
POOL = dict(window_dimensions=(1, 2, 2), window_strides=(1, 2, 1), padding="SAME")
POOL_PADS = ((0, 0), (0, 1), (0, 1))
POOL_ARGS = ((1, 2, 2), (1, 2, 1), POOL_PADS, (1, 1, 1), (1, 1, 1))

rec("reduce_window_sum", lambda x: lax.reduce_window(x, 0.0, lax.add, **W2),
    args_of(f32(4, 5)), lambda x: np_reduce_window(x, 0, np.add, *W2_ARGS))
rec("reduce_window_sum_pool", lambda x: lax.reduce_window(x, 0.0, lax.add, **POOL),
    args_of(f32(2, 5, 4)), lambda x: np_reduce_window(x, 0, np.add, *POOL_ARGS))
rec("reduce_window_max", lambda x: lax.reduce_window(x, -np.inf, lax.max, **W2),
    args_of(distinct32(4, 5)), lambda x: np_reduce_window(x, -np.inf, np.maximum, *W2_ARGS))
rec("reduce_window_max_pool", lambda x: lax.reduce_window(x, -np.inf, lax.max, **POOL),
    args_of(distinct32(2, 5, 4)),
    lambda x: np_reduce_window(x, -np.inf, np.maximum, *POOL_ARGS))
rec("reduce_window_min", lambda x: lax.reduce_window(x, np.inf, lax.min, **W2),
    args_of(distinct32(4, 5)), lambda x: np_reduce_window(x, np.inf, np.minimum, *W2_ARGS))
rec("reduce_window_mul", lambda x: lax.reduce_window(x, np.float32(1), lax.mul, **W2),
    args_of(f32(4, 5, low=0.5, high=1.5)),
    lambda x: np_reduce_window(x, 1, np.multiply, *W2_ARGS))
rec("reduce_window_add_init", lambda x: lax.reduce_window(x, np.float32(0.5), lax.add, **W2),
    args_of(f32(4, 5)), lambda x: np_reduce_window(x, 0.5, np.add, *W2_ARGS))
rec("select_and_gather_add",
    lambda t, x: lax.select_and_gather_add_p.bind(
        t, x, select_prim=lax.ge_p, window_dimensions=(1, 2, 2), window_strides=(1, 2, 1),
        padding=POOL_PADS, base_dilation=(1, 1, 1), window_dilation=(1, 1, 1)),
    args_of(f32(2, 5, 4), distinct32(2, 5, 4)),
    lambda t, x: np_gather(t, x, "ge", *POOL_ARGS), diff_argnums=(0,))
rec("select_and_gather_add_le_dilated",
    lambda t, x: lax.select_and_gather_add_p.bind(t, x, select_prim=lax.le_p, **dict(
        zip(("window_dimensions", "window_strides", "padding", "base_dilation",
             "window_dilation"), W2_ARGS))),
    args_of(f32(4, 5), distinct32(4, 5)),
    lambda t, x: np_gather(t, x, "le", *W2_ARGS), diff_argnums=(0,))
rec("select_and_scatter_add",
    lambda s, x: lax.select_and_scatter_add_p.bind(
        s, x, select_prim=lax.ge_p, window_dimensions=(1, 2, 2), window_strides=(1, 2, 1),
        padding=POOL_PADS),
    args_of(f32(2, 3, 4), distinct32(2, 5, 4)),
    lambda s, x: np_scatter(s, x, "ge", (1, 2, 2), (1, 2, 1), POOL_PADS), diff_argnums=(0,))
rec("select_and_scatter_add_le",
    lambda s, x: lax.select_and_scatter_add_p.bind(
        s, x, select_prim=lax.le_p, window_dimensions=(3, 2), window_strides=(2, 1),
        padding=((1, 1), (0, 0))),
    args_of(f32(3, 3), distinct32(5, 4)),
    lambda s, x: np_scatter(s, x, "le", (3, 2), (2, 1), ((1, 1), (0, 0))), diff_argnums=(0,))
