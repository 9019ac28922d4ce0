"""Op records for the structural lax primitives: broadcasting/reshaping/transposing,
select_n, convert_element_type, reductions, slicing/padding, dot_general,
cumulative reductions, argmax/argmin and ``lax.reduce``.

References are written directly in NumPy (index arithmetic), independently of the
kiln impls. Integer start indices are array arguments, so the vmap tests batch them
too (and exercise the batched-index rules).
"""
from __future__ import annotations

import numpy as np

from kiln import lax

try:  # tests/ is on sys.path under pytest; the repository root when run as a package
    from op_records import OpRecord, args_of, boolean, f32, i32
except ImportError:  # pragma: no cover
    from tests.op_records import OpRecord, args_of, boolean, f32, i32

# ----------------------------------------------------------------------------------------------
# samplers


def idx(low, high):
    """A scalar int32 index sampler."""
    def sample(rng):
        return np.asarray(rng.integers(low, high), np.int32)
    return sample


def scalar32(low=-2.0, high=2.0):
    def sample(rng):
        return np.asarray(rng.uniform(low, high), np.float32)
    return sample


def with_zeros(*shape, frac=0.3):
    """float32 values in ±[0.5, 1.5] with some exact zeros (for product gradients)."""
    def sample(rng):
        x = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        x[rng.random(size=shape) < frac] = 0.0
        return x.astype(np.float32)
    return sample


def distinct32(*shape, spread=1.0):
    """float32 values well apart (no near-ties: max/min/argmax gradients are smooth)."""
    def sample(rng):
        n = int(np.prod(shape, dtype=np.int64))
        x = rng.permutation(n).astype(np.float64) * spread - n * spread / 2
        x += rng.uniform(-0.2, 0.2, size=n) * spread
        return x.reshape(shape).astype(np.float32)
    return sample


def with_nans(*shape):
    def sample(rng):
        x = rng.uniform(-2, 2, size=shape).astype(np.float32)
        x[rng.random(size=shape) < 0.2] = np.nan
        return x
    return sample


# ----------------------------------------------------------------------------------------------
# NumPy references


def np_pad(x, pv, cfg):
    out = x
    for axis, (lo, hi, interior) in enumerate(cfg):
        n = out.shape[axis]
        size = lo + hi + (0 if n == 0 else n + (n - 1) * interior)
        pos = np.arange(size) - lo                      # position in the dilated operand
        src = pos // (interior + 1)
        valid = (pos >= 0) & (pos % (interior + 1) == 0) & (src < n)
        taken = np.take(out, np.clip(src, 0, max(n - 1, 0)), axis=axis) if n else \
            np.zeros(out.shape[:axis] + (size,) + out.shape[axis + 1:], x.dtype)
        shape = [1] * out.ndim
        shape[axis] = size
        out = np.where(valid.reshape(shape), taken, pv).astype(x.dtype)
    return out


def _clamp(i, n, s):
    i = int(i)
    if i < 0:
        i += n
    return min(max(i, 0), n - s)


def np_dynamic_slice(x, starts, sizes):
    st = [_clamp(i, n, s) for i, n, s in zip(starts, x.shape, sizes)]
    return x[tuple(slice(a, a + s) for a, s in zip(st, sizes))]


def np_dynamic_update_slice(x, u, starts):
    st = [_clamp(i, n, s) for i, n, s in zip(starts, x.shape, u.shape)]
    out = x.copy()
    out[tuple(slice(a, a + s) for a, s in zip(st, u.shape))] = u
    return out


def np_dot_general(a, b, dn, out_dtype=None):
    (lc, rc), (lb, rb) = dn
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    la = [None] * a.ndim
    lb_ = [None] * b.ndim
    for i, j in zip(lb, rb):
        la[i] = lb_[j] = next(letters)
    for i, j in zip(lc, rc):
        la[i] = lb_[j] = next(letters)
    for i in range(a.ndim):
        if la[i] is None:
            la[i] = next(letters)
    for j in range(b.ndim):
        if lb_[j] is None:
            lb_[j] = next(letters)
    out = [la[i] for i in lb] + [la[i] for i in range(a.ndim) if i not in lb and i not in lc] + \
        [lb_[j] for j in range(b.ndim) if j not in rb and j not in rc]
    spec = f"{''.join(la)},{''.join(lb_)}->{''.join(out)}"
    dt = out_dtype or np.result_type(a, b)
    return np.einsum(spec, a.astype(np.float64) if dt.kind == "f" else a.astype(dt),
                     b.astype(np.float64) if dt.kind == "f" else b.astype(dt)).astype(dt)


def np_cum(fn, x, axis, reverse):
    if reverse:
        x = np.flip(x, axis)
    out = fn(x, axis)
    if reverse:
        out = np.flip(out, axis)
    return out.astype(x.dtype)


def _logaddexp_acc(x, axis):
    return np.logaddexp.accumulate(x.astype(np.float64), axis=axis)


def _select_n_ref(which, *cases):
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0])
    return np.choose(which, cases)


# ----------------------------------------------------------------------------------------------
# records

RECORDS: list[OpRecord] = []


def rec(name, fun, args, ref, **kw):
    RECORDS.append(OpRecord(name=name, fun=fun, args=args, ref=ref, **kw))


# -- existing structural primitives --------------------------------------------------------------
rec("broadcast_in_dim_vec", lambda x: lax.broadcast_in_dim(x, (2, 3), (1,)), args_of(f32(3)),
    lambda x: np.broadcast_to(x, (2, 3)))
rec("broadcast_in_dim_unit", lambda x: lax.broadcast_in_dim(x, (3, 4, 2), (0, 1)),
    args_of(f32(3, 1)), lambda x: np.broadcast_to(x[:, :, None], (3, 4, 2)))
rec("broadcast_in_dim_scalar", lambda x: lax.broadcast_in_dim(x, (2, 2), ()), args_of(f32()),
    lambda x: np.broadcast_to(x, (2, 2)))
rec("reshape", lambda x: lax.reshape(x, (6, 4)), args_of(f32(2, 3, 4)),
    lambda x: x.reshape(6, 4))
rec("reshape_dimensions", lambda x: lax.reshape(x, (4, 6), (2, 0, 1)), args_of(f32(2, 3, 4)),
    lambda x: np.transpose(x, (2, 0, 1)).reshape(4, 6))
rec("transpose", lambda x: lax.transpose(x, (2, 0, 1)), args_of(f32(2, 3, 4)),
    lambda x: np.transpose(x, (2, 0, 1)))
rec("squeeze", lambda x: lax.squeeze(x, (1,)), args_of(f32(3, 1, 4)), lambda x: x[:, 0])
rec("expand_dims", lambda x: lax.expand_dims(x, (0, 2)), args_of(f32(3, 4)),
    lambda x: x[None, :, None])
rec("select_n_bool", lambda p, a, b: lax.select_n(p, a, b),
    args_of(boolean(3, 4), f32(3, 4), f32(3, 4)), _select_n_ref, diff_argnums=(1, 2))
rec("select_n_int", lambda w, a, b, c: lax.select_n(w, a, b, c),
    args_of(i32(3, 4, low=0, high=3), f32(3, 4), f32(3, 4), f32(3, 4)), _select_n_ref,
    diff_argnums=(1, 2, 3))
rec("select_n_scalar_pred", lambda p, a, b: lax.select_n(p, a, b),
    args_of(boolean(), f32(3), f32(3)), _select_n_ref, diff_argnums=(1, 2))
rec("convert_f32_i32", lambda x: lax.convert_element_type(x, np.int32), args_of(f32(3, 4)),
    lambda x: x.astype(np.int32), diff_argnums=())
rec("convert_i32_f32", lambda x: lax.convert_element_type(x, np.float32), args_of(i32(3, 4)),
    lambda x: x.astype(np.float32), diff_argnums=())
rec("convert_f32_c64", lambda x: lax.convert_element_type(x, np.complex64), args_of(f32(5)),
    lambda x: x.astype(np.complex64), vmap=True)
rec("reduce_sum", lambda x: lax.reduce_sum(x, (1,)), args_of(f32(3, 4, 2)),
    lambda x: x.sum(1))
rec("reduce_sum_all", lambda x: lax.reduce_sum(x, (0, 2)), args_of(f32(3, 4, 2)),
    lambda x: x.sum((0, 2)))
rec("reduce_max", lambda x: lax.reduce_max(x, (1,)), args_of(distinct32(3, 4)),
    lambda x: x.max(1))
rec("reduce_min", lambda x: lax.reduce_min(x, (0, 1)), args_of(distinct32(3, 4)),
    lambda x: x.min((0, 1)))

# The general reduce (reduce_p): two operands, one output for the harness.
rec("reduce_variadic", lambda x: (lambda v, w: v - w)(*lax.reduce(
        (x, x * 2.0), (np.float32(-np.inf), np.float32(np.inf)),
        lambda a, b: (lax.max(a[0], b[0]), lax.min(a[1], b[1])), (1,))),
    args_of(distinct32(3, 4)), lambda x: x.max(1) - (x * 2).min(1))

# -- rev / pad / concatenate ---------------------------------------------------------------------
rec("rev", lambda x: lax.rev(x, (0,)), args_of(f32(4, 3)), lambda x: x[::-1])
rec("rev_2d", lambda x: lax.rev(x, (0, 2)), args_of(f32(2, 3, 4)), lambda x: x[::-1, :, ::-1])
for cfg in [((1, 2, 0),), ((1, 2, 1), (0, 0, 0)), ((-1, 2, 1), (2, -2, 0)),
            ((-2, -1, 2), (1, 1, 1)), ((0, 0, 0), (0, 0, 0))]:
    shape = (5,) if len(cfg) == 1 else (4, 5)
    rec(f"pad_{cfg}", lambda x, pv, cfg=cfg: lax.pad(x, pv, cfg),
        args_of(f32(*shape), scalar32()), lambda x, pv, cfg=cfg: np_pad(x, pv, cfg),
        diff_argnums=(0, 1))
rec("pad_int", lambda x: lax.pad(x, np.int32(-7), ((1, -1, 2), (0, 1, 0))), args_of(i32(3, 2)),
    lambda x: np_pad(x, np.int32(-7), ((1, -1, 2), (0, 1, 0))), diff_argnums=())
rec("concatenate_0", lambda a, b: lax.concatenate([a, b], 0), args_of(f32(2, 3), f32(4, 3)),
    lambda a, b: np.concatenate([a, b], 0), diff_argnums=(0, 1))
rec("concatenate_1_three", lambda a, b, c: lax.concatenate([a, b, c], 1),
    args_of(f32(2, 1), f32(2, 3), f32(2, 2)), lambda a, b, c: np.concatenate([a, b, c], 1),
    diff_argnums=(0, 1, 2))

# -- slice ---------------------------------------------------------------------------------------
rec("slice", lambda x: lax.slice(x, (1, 0), (3, 4)), args_of(f32(4, 5)), lambda x: x[1:3, 0:4])
rec("slice_strided", lambda x: lax.slice(x, (0, 1), (4, 5), (2, 3)), args_of(f32(4, 5)),
    lambda x: x[0:4:2, 1:5:3])
rec("slice_empty", lambda x: lax.slice(x, (2, 0), (2, 5)), args_of(f32(4, 5)),
    lambda x: x[2:2, :], grad_order=1)
rec("slice_in_dim", lambda x: lax.slice_in_dim(x, 1, -1, 2, axis=1), args_of(f32(3, 7)),
    lambda x: x[:, 1:-1:2])
# split's results reordered and scaled into one array (the record harness checks one
# output; tests/lax/test_split.py checks the results one by one).
rec("split_1", lambda x: lax.concatenate(
        [(lambda a, b, c: c * 2.0)(*lax.split(x, (2, 0, 3), axis=1)),
         lax.split(x, (2, 0, 3), axis=1)[1], lax.split(x, (2, 0, 3), axis=1)[0]], 1),
    args_of(f32(3, 5)), lambda x: np.concatenate([x[:, 2:] * 2, x[:, 2:2], x[:, :2]], 1))
rec("split_neg_axis", lambda x: (lambda a, b: lax.concatenate([b, a * 3.0], 0))(
        *lax.split(x, (1, 3), axis=-3)),
    args_of(f32(4, 2, 3)), lambda x: np.concatenate([x[1:], x[:1] * 3], 0))
rec("split_int", lambda x: (lambda a, b: lax.concatenate([b, a], 0))(*lax.split(x, (4, 1))),
    args_of(i32(5, 2)), lambda x: np.concatenate([x[4:], x[:4]], 0), diff_argnums=())
rec("index_in_dim", lambda x: lax.index_in_dim(x, -1, 0, keepdims=False), args_of(f32(3, 4)),
    lambda x: x[-1])

# -- dynamic_slice / dynamic_update_slice --------------------------------------------------------
rec("dynamic_slice", lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)),
    args_of(f32(5, 6), idx(-6, 7), idx(-7, 8)),
    lambda x, i, j: np_dynamic_slice(x, (i, j), (2, 3)))
rec("dynamic_slice_3d", lambda x, i: lax.dynamic_slice(x, (1, i, 0), (2, 2, 4)),
    args_of(f32(3, 5, 4), idx(-2, 6)),
    lambda x, i: np_dynamic_slice(x, (1, i, 0), (2, 2, 4)))
rec("dynamic_slice_in_dim", lambda x, i: lax.dynamic_slice_in_dim(x, i, 2, axis=1),
    args_of(f32(3, 5), idx(-5, 6)), lambda x, i: np_dynamic_slice(x, (0, i), (3, 2)))
rec("dynamic_index_in_dim", lambda x, i: lax.dynamic_index_in_dim(x, i, 0, keepdims=False),
    args_of(f32(4, 3), idx(-4, 4)), lambda x, i: np_dynamic_slice(x, (i, 0), (1, 3))[0])
rec("dynamic_update_slice", lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)),
    args_of(f32(5, 6), f32(2, 3), idx(-6, 7), idx(-7, 8)),
    lambda x, u, i, j: np_dynamic_update_slice(x, u, (i, j)), diff_argnums=(0, 1))
rec("dynamic_update_slice_in_dim",
    lambda x, u, i: lax.dynamic_update_slice_in_dim(x, u, i, axis=0),
    args_of(f32(5, 3), f32(2, 3), idx(-5, 6)),
    lambda x, u, i: np_dynamic_update_slice(x, u, (i, 0)), diff_argnums=(0, 1))
rec("dynamic_update_index_in_dim",
    lambda x, u, i: lax.dynamic_update_index_in_dim(x, u, i, 1),
    args_of(f32(3, 4), f32(3), idx(-4, 4)),
    lambda x, u, i: np_dynamic_update_slice(x, u[:, None], (0, i)), diff_argnums=(0, 1))

# -- iota and constructors -----------------------------------------------------------------------
rec("broadcasted_iota", lambda x: lax.add(x, lax.broadcasted_iota(np.float32, (3, 4), 1)),
    args_of(f32(3, 4)), lambda x: x + np.arange(4, dtype=np.float32))
rec("iota_int", lambda x: lax.mul(x, lax.iota(np.int32, 5)), args_of(i32(5)),
    lambda x: x * np.arange(5, dtype=np.int32), diff_argnums=())
rec("full", lambda x: lax.mul(x, lax.full((3, 2), 1.5, np.float32)), args_of(f32(3, 2)),
    lambda x: x * np.float32(1.5))
rec("full_like", lambda x: lax.add(x, lax.full_like(x, 2)), args_of(f32(2, 3)),
    lambda x: x + np.float32(2))
rec("zeros_like_array", lambda x: lax.add(x, lax.zeros_like_array(x)), args_of(i32(4)),
    lambda x: x, diff_argnums=())
rec("collapse", lambda x: lax.collapse(x, 1, 3), args_of(f32(2, 3, 4, 2)),
    lambda x: x.reshape(2, 12, 2))

# -- dot_general ---------------------------------------------------------------------------------
DOTS = [
    ("matmul", (3, 4), (4, 5), (((1,), (0,)), ((), ()))),
    ("matvec", (3, 4), (4,), (((1,), (0,)), ((), ()))),
    ("vecvec", (4,), (4,), (((0,), (0,)), ((), ()))),
    ("outer", (3,), (2,), (((), ()), ((), ()))),
    ("contract_lhs0", (4, 3), (4, 2), (((0,), (0,)), ((), ()))),
    ("batch", (2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),
    ("batch_mixed", (3, 2, 4, 5), (4, 6, 3), (((2,), (0,)), ((0,), (2,)))),
    ("two_contract", (2, 3, 4), (4, 3, 5), (((1, 2), (1, 0)), ((), ()))),
]
for name, ls, rs, dn in DOTS:
    rec(f"dot_general_{name}", lambda a, b, dn=dn: lax.dot_general(a, b, dn),
        args_of(f32(*ls), f32(*rs)), lambda a, b, dn=dn: np_dot_general(a, b, dn),
        diff_argnums=(0, 1), tol=1e-4)
rec("dot_general_int8_pref_int32",
    lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                                 preferred_element_type=np.int32),
    args_of(lambda r: r.integers(-100, 100, (3, 8)).astype(np.int8),
            lambda r: r.integers(-100, 100, (8, 2)).astype(np.int8)),
    lambda a, b: np_dot_general(a, b, (((1,), (0,)), ((), ())), np.dtype(np.int32)),
    diff_argnums=())
rec("dot", lambda a, b: lax.dot(a, b, precision=lax.Precision.HIGHEST),
    args_of(f32(3, 4), f32(4, 2)), lambda a, b: (a.astype(np.float64) @ b).astype(np.float32),
    diff_argnums=(0, 1), tol=1e-4)
rec("batch_matmul", lambda a, b: lax.batch_matmul(a, b),
    args_of(f32(2, 3, 4), f32(2, 4, 2)),
    lambda a, b: (a.astype(np.float64) @ b).astype(np.float32), diff_argnums=(0, 1), tol=1e-4)

# -- cumulative reductions -----------------------------------------------------------------------
for axis, reverse in [(0, False), (1, True)]:
    sfx = f"_ax{axis}{'_rev' if reverse else ''}"
    rec("cumsum" + sfx, lambda x, a=axis, r=reverse: lax.cumsum(x, a, r), args_of(f32(4, 5)),
        lambda x, a=axis, r=reverse: np_cum(lambda v, ax: np.cumsum(v, ax), x, a, r))
    rec("cumprod" + sfx, lambda x, a=axis, r=reverse: lax.cumprod(x, a, r),
        args_of(with_zeros(4, 5)),
        lambda x, a=axis, r=reverse: np_cum(lambda v, ax: np.cumprod(v, ax), x, a, r))
    rec("cummax" + sfx, lambda x, a=axis, r=reverse: lax.cummax(x, a, r),
        args_of(distinct32(4, 5)),
        lambda x, a=axis, r=reverse: np_cum(lambda v, ax: np.maximum.accumulate(v, ax), x, a, r))
    rec("cummin" + sfx, lambda x, a=axis, r=reverse: lax.cummin(x, a, r),
        args_of(distinct32(4, 5)),
        lambda x, a=axis, r=reverse: np_cum(lambda v, ax: np.minimum.accumulate(v, ax), x, a, r))
    rec("cumlogsumexp" + sfx, lambda x, a=axis, r=reverse: lax.cumlogsumexp(x, a, r),
        args_of(f32(4, 5, low=-5, high=5)),
        lambda x, a=axis, r=reverse: np_cum(_logaddexp_acc, x, a, r))
rec("cumsum_int", lambda x: lax.cumsum(x, 0), args_of(i32(6)),
    lambda x: np.cumsum(x).astype(np.int32), diff_argnums=())
rec("cumprod_long", lambda x: lax.cumprod(x, 0), args_of(with_zeros(11, frac=0.1)),
    lambda x: np.cumprod(x).astype(np.float32))

# -- more reductions -----------------------------------------------------------------------------
rec("reduce_prod", lambda x: lax.reduce_prod(x, (1,)), args_of(f32(3, 4, low=0.5, high=1.5)),
    lambda x: x.prod(1))
rec("reduce_prod_zeros", lambda x: lax.reduce_prod(x, (0, 2)), args_of(with_zeros(3, 2, 4)),
    lambda x: x.prod((0, 2)))
rec("reduce_prod_int", lambda x: lax.reduce_prod(x, (0,)), args_of(i32(4, 3, low=-3, high=4)),
    lambda x: x.prod(0).astype(np.int32), diff_argnums=())
rec("reduce_and", lambda x: lax.reduce_and(x, (1,)), args_of(boolean(3, 4)),
    lambda x: x.all(1), diff_argnums=())
rec("reduce_or", lambda x: lax.reduce_or(x, (0, 1)), args_of(boolean(3, 4)),
    lambda x: np.asarray(x.any((0, 1))), diff_argnums=())
rec("reduce_xor", lambda x: lax.reduce_xor(x, (0,)), args_of(boolean(5, 2)),
    lambda x: np.bitwise_xor.reduce(x, 0), diff_argnums=())
rec("reduce_and_int", lambda x: lax.reduce_and(x, (0,)), args_of(i32(3, 4, low=0, high=64)),
    lambda x: np.bitwise_and.reduce(x, 0), diff_argnums=())
rec("reduce_xor_int", lambda x: lax.reduce_xor(x, (1,)), args_of(i32(3, 4, low=-64, high=64)),
    lambda x: np.bitwise_xor.reduce(x, 1), diff_argnums=())
rec("argmax", lambda x: lax.argmax(x, 1, np.int32), args_of(distinct32(3, 5)),
    lambda x: np.argmax(x, 1).astype(np.int32), diff_argnums=())
rec("argmin", lambda x: lax.argmin(x, 0, np.int32), args_of(distinct32(4, 3)),
    lambda x: np.argmin(x, 0).astype(np.int32), diff_argnums=())
rec("argmax_nan", lambda x: lax.argmax(x, 1, np.int32), args_of(with_nans(4, 6)),
    lambda x: np.argmax(x, 1).astype(np.int32), diff_argnums=())
rec("argmin_ties_int", lambda x: lax.argmin(x, 1, np.int32), args_of(i32(4, 6, low=0, high=3)),
    lambda x: np.argmin(x, 1).astype(np.int32), diff_argnums=())
rec("reduce_add", lambda x: lax.reduce(x, np.float32(0), lax.add, (0,)), args_of(f32(3, 4)),
    lambda x: x.sum(0))
rec("reduce_max_lambda", lambda x: lax.reduce(x, -np.inf, lambda a, b: lax.max(a, b), (1,)),
    args_of(distinct32(3, 4)), lambda x: x.max(1))
rec("reduce_mul_init", lambda x: lax.reduce(x, np.float32(2), lax.mul, (1,)),
    args_of(f32(3, 4, low=0.5, high=1.5)), lambda x: 2 * x.prod(1))
