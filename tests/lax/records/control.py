"""Op records for structured control flow: cond, switch, scan (forward, reverse, pytree,
no xs, unrolled), fori_loop, while_loop, map (with and without batch_size) and
associative_scan.

Each reference is a plain Python loop over NumPy values, written independently of
kiln. The generic driver then checks eager values, jit, jvp/vjp against finite
differences and vmap against a Python loop (a batched predicate or index exercises
the select path of cond; batched while loops get per-lane trip counts).

``while_loop`` records are tagged ``fwd_only``: their jvp is checked against finite
differences, but reverse mode through a while loop is an error, as in JAX.
Bodies use ``kiln.lax`` only, so the records do not depend on ``kiln.numpy``.
"""
from __future__ import annotations

import numpy as np

from kiln import lax

try:  # tests/ is on sys.path under pytest; the repository root when run as a package
    from op_records import OpRecord, args_of, f32, i32
except ImportError:  # pragma: no cover
    from tests.op_records import OpRecord, args_of, f32, i32

F = np.float32


def c(v):
    """A float32 scalar constant (strongly typed, like ``np.float32(v)``)."""
    return F(v)


def scalar32(low, high, away_from_zero=0.0):
    """A float32 scalar in [low, high] at least ``away_from_zero`` from 0 (for predicates)."""
    def sample(rng):
        while True:
            v = rng.uniform(low, high)
            if abs(v) >= away_from_zero:
                return np.asarray(v, np.float32)
    return sample


def int_scalar(low, high):
    def sample(rng):
        return np.asarray(rng.integers(low, high), np.int32)
    return sample


def distinct32(*shape):
    def sample(rng):
        n = int(np.prod(shape))
        x = rng.permutation(n).astype(np.float64) - n / 2 + rng.uniform(-0.2, 0.2, size=n)
        return (x.reshape(shape) * 0.5).astype(np.float32)
    return sample


def _f32(x):
    return np.asarray(x, np.float32)


# ----------------------------------------------------------------------------------------------
# cond / switch

def cond_fun(p, x):
    return lax.cond(lax.gt(p, c(0)), lambda x: lax.mul(lax.sin(x), c(2)),
                    lambda x: lax.add(lax.cos(x), x), x)


def cond_ref(p, x):
    return _f32(np.where(p > 0, 2 * np.sin(x), np.cos(x) + x))


def cond_pytree_fun(p, x, y):
    def t(ops):
        a, b = ops
        return {"s": lax.mul(a, b), "t": (lax.exp(b),)}

    def f(ops):
        a, b = ops
        return {"s": lax.sub(a, b), "t": (lax.mul(a, a),)}
    return lax.cond(lax.lt(p, c(0)), t, f, (x, y))


def cond_pytree_ref(p, x, y):
    if p < 0:
        return [_f32(x * y), _f32(np.exp(y))]
    return [_f32(x - y), _f32(x * x)]


def cond_closure_fun(p, x, w):
    # Branches close over `w` (hoisted consts) and take no operands.
    return lax.cond(lax.gt(p, c(0)), lambda: lax.mul(x, w), lambda: lax.sub(w, lax.sin(x)))


def cond_closure_ref(p, x, w):
    return _f32(x * w if p > 0 else w - np.sin(x))


_BRANCHES = [lambda x: lax.sin(x), lambda x: lax.mul(lax.cos(x), x),
             lambda x: lax.add(lax.mul(x, x), c(1))]


def switch_fun(i, x):
    return lax.switch(i, _BRANCHES, x)


def switch_ref(i, x):
    k = int(np.clip(i, 0, 2))
    return _f32([np.sin(x), np.cos(x) * x, x * x + 1][k])


# ----------------------------------------------------------------------------------------------
# scan

def _scan_body(a):
    def body(carry, x):
        new = lax.add(lax.mul(carry, a), x)
        return new, lax.mul(lax.sin(carry), x)
    return body


def scan_fun(c0, xs, a):
    return lax.scan(_scan_body(a), c0, xs)


def scan_ref(c0, xs, a, reverse=False):
    carry = c0.astype(np.float64)
    ys = [None] * len(xs)
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for i in order:
        ys[i] = np.sin(carry) * xs[i]
        carry = carry * a + xs[i]
    return [_f32(carry), _f32(np.stack(ys))]


def scan_reverse_fun(c0, xs, a):
    return lax.scan(_scan_body(a), c0, xs, reverse=True)


def scan_unroll_fun(c0, xs, a):
    return lax.scan(_scan_body(a), c0, xs, unroll=2)


def scan_pytree_fun(h, v, xs):
    # Carries of different shapes; xs and ys are pytrees.
    def body(carry, x):
        h, v = carry
        h = lax.tanh(lax.add(lax.mul(h, x["a"]), v))
        v = lax.mul(v, c(0.9))
        return (h, v), {"h": h, "sum": lax.reduce_sum(lax.mul(h, x["b"]), (0,))}
    return lax.scan(body, (h, v), {"a": xs, "b": lax.cos(xs)})


def scan_pytree_ref(h, v, xs):
    h, v = h.astype(np.float64), v.astype(np.float64)
    hs, sums = [], []
    for x in xs:
        h = np.tanh(h * x + v)
        v = v * np.float32(0.9)
        hs.append(h)
        sums.append(np.sum(h * np.cos(x)))
    return [_f32(h), _f32(v), _f32(np.stack(hs)), _f32(np.array(sums))]


def scan_no_xs_fun(c0):
    def body(carry, _):
        return lax.add(lax.sin(carry), lax.mul(carry, c(0.5))), carry
    return lax.scan(body, c0, None, length=4)


def scan_no_xs_ref(c0):
    carry = c0.astype(np.float64)
    ys = []
    for _ in range(4):
        ys.append(carry)
        carry = np.sin(carry) + 0.5 * carry
    return [_f32(carry), _f32(np.stack(ys))]


# ----------------------------------------------------------------------------------------------
# fori_loop / while_loop

def _fori_body(i, x):
    fi = lax.convert_element_type(i, np.float32)
    return lax.add(lax.mul(x, c(0.9)), lax.mul(lax.sin(x), fi))


def fori_fun(x):
    return lax.fori_loop(0, 6, _fori_body, x)


def fori_ref(x, lo=0, hi=6):
    x = x.astype(np.float64)
    for i in range(lo, hi):
        x = 0.9 * x + np.sin(x) * i
    return _f32(x)


def fori_offset_fun(x):
    return lax.fori_loop(2, 5, _fori_body, x)


def fori_pytree_fun(x, y):
    def body(i, carry):
        a, (b,) = carry
        return lax.mul(a, b), (lax.add(b, lax.mul(a, c(0.1))),)
    return lax.fori_loop(0, 3, body, (x, (y,)))


def fori_pytree_ref(x, y):
    a, b = x.astype(np.float64), y.astype(np.float64)
    for _ in range(3):
        a, b = a * b, b + a * 0.1
    return [_f32(a), _f32(b)]


def while_count_fun(x):
    def cond(carry):
        return lax.lt(carry[0], 5)

    def body(carry):
        i, v = carry
        return lax.add(i, 1), lax.add(lax.mul(v, c(0.9)), lax.sin(v))
    return lax.while_loop(cond, body, (0, x))


def while_count_ref(x):
    v = x.astype(np.float64)
    for _ in range(5):
        v = 0.9 * v + np.sin(v)
    return [np.int32(5), _f32(v)]


def while_value_fun(x):
    # The trip count depends on the value: per-lane trip counts under vmap.
    def body(carry):
        n, v = carry
        return lax.add(n, 1), lax.add(lax.mul(v, c(1.5)), c(1))
    n, v = lax.while_loop(lambda carry: lax.lt(carry[1], c(20)), body, (0, x))
    return n, v


def while_value_ref(x):
    n, v = 0, np.float32(x)
    while v < 20:
        v = np.float32(v * np.float32(1.5) + np.float32(1))
        n += 1
    return [np.int32(n), _f32(v)]


# ----------------------------------------------------------------------------------------------
# map

def map_fun(xs):
    return lax.map(lambda x: lax.mul(lax.sin(x), x), xs)


def map_ref(xs):
    return _f32(np.sin(xs) * xs)


def map_batched_fun(xs):
    return lax.map(lambda x: lax.mul(lax.sin(x), x), xs, batch_size=2)


def map_pytree_fun(xs, ys):
    return lax.map(lambda p: {"a": lax.mul(p[0], p[1]), "b": lax.reduce_sum(p[0], (0,))},
                   (xs, ys))


def map_pytree_ref(xs, ys):
    return [_f32(xs * ys), _f32(xs.sum(axis=1))]


# ----------------------------------------------------------------------------------------------
# associative_scan

def assoc_add_fun(xs):
    return lax.associative_scan(lax.add, xs)


def assoc_add_ref(xs):
    return _f32(np.cumsum(xs.astype(np.float64), axis=0))


def assoc_rev_axis1_fun(xs):
    return lax.associative_scan(lax.add, xs, reverse=True, axis=1)


def assoc_rev_axis1_ref(xs):
    return _f32(np.flip(np.cumsum(np.flip(xs.astype(np.float64), 1), 1), 1))


def _affine(p, q):
    # (a1, b1) then (a2, b2): h -> a2 * (a1 * h + b1) + b2
    return lax.mul(p[0], q[0]), lax.add(lax.mul(q[0], p[1]), q[1])


def assoc_affine_fun(a, b):
    return lax.associative_scan(_affine, (a, b))


def assoc_affine_ref(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    A, h = np.ones_like(a64[0]), np.zeros_like(b64[0])
    As, hs = [], []
    for t in range(len(a)):
        A = A * a64[t]
        h = a64[t] * h + b64[t]
        As.append(A)
        hs.append(h)
    return [_f32(np.stack(As)), _f32(np.stack(hs))]


def assoc_max_fun(xs):
    return lax.associative_scan(lax.max, xs, axis=-1)


def assoc_max_ref(xs):
    return np.maximum.accumulate(xs, axis=-1)


def assoc_int_fun(xs):
    return lax.associative_scan(lax.add, xs)


def assoc_int_ref(xs):
    return np.cumsum(xs, axis=0).astype(np.int32)


RECORDS = [
    OpRecord("cond", cond_fun, args_of(scalar32(-1, 1, 0.1), f32(3)), cond_ref,
             diff_argnums=(1,)),
    OpRecord("cond_pytree", cond_pytree_fun, args_of(scalar32(-1, 1, 0.1), f32(2, 3),
                                                     f32(2, 3)),
             cond_pytree_ref, diff_argnums=(1, 2)),
    OpRecord("cond_closure", cond_closure_fun, args_of(scalar32(-1, 1, 0.1), f32(3), f32(3)),
             cond_closure_ref, diff_argnums=(1, 2)),
    OpRecord("switch", switch_fun, args_of(int_scalar(-2, 5), f32(4)), switch_ref,
             diff_argnums=(1,)),
    OpRecord("scan", scan_fun, args_of(f32(3), f32(5, 3), f32(3, low=-1, high=1)), scan_ref,
             tol=1e-4, diff_argnums=(0, 1, 2)),
    OpRecord("scan_reverse", scan_reverse_fun, args_of(f32(3), f32(5, 3),
                                                       f32(3, low=-1, high=1)),
             lambda c0, xs, a: scan_ref(c0, xs, a, reverse=True), tol=1e-4,
             diff_argnums=(0, 1, 2)),
    OpRecord("scan_unroll", scan_unroll_fun, args_of(f32(2), f32(5, 2), f32(2, low=-1, high=1)),
             scan_ref, tol=1e-4, diff_argnums=(0, 1, 2), grad_order=1),
    OpRecord("scan_pytree", scan_pytree_fun, args_of(f32(3), f32(3), f32(4, 3)),
             scan_pytree_ref, tol=1e-4, diff_argnums=(0, 1, 2)),
    OpRecord("scan_no_xs", scan_no_xs_fun, args_of(f32(2, 2)), scan_no_xs_ref, tol=1e-4),
    OpRecord("fori_loop", fori_fun, args_of(f32(3)), fori_ref, tol=1e-4, jit_tol=1e-5),
    OpRecord("fori_loop_offset", fori_offset_fun, args_of(f32(3)),
             lambda x: fori_ref(x, 2, 5), tol=1e-4),
    OpRecord("fori_loop_pytree", fori_pytree_fun, args_of(f32(2, low=-1, high=1),
                                                          f32(2, low=-1, high=1)),
             fori_pytree_ref, tol=1e-4, diff_argnums=(0, 1)),
    OpRecord("while_loop", while_count_fun, args_of(f32(3)), while_count_ref, tol=1e-4,
             tags=("fwd_only",)),
    OpRecord("while_loop_value_trip_count", while_value_fun,
             args_of(scalar32(-0.5, 15)), while_value_ref, tol=1e-5, tags=("fwd_only",)),
    OpRecord("map", map_fun, args_of(f32(5, 3)), map_ref),
    OpRecord("map_batch_size", map_batched_fun, args_of(f32(5, 3)), map_ref),
    OpRecord("map_pytree", map_pytree_fun, args_of(f32(4, 3), f32(4, 3)), map_pytree_ref,
             diff_argnums=(0, 1)),
    OpRecord("associative_scan", assoc_add_fun, args_of(f32(7, 3)), assoc_add_ref, tol=1e-5),
    OpRecord("associative_scan_reverse_axis1", assoc_rev_axis1_fun, args_of(f32(3, 6)),
             assoc_rev_axis1_ref, tol=1e-5),
    OpRecord("associative_scan_affine", assoc_affine_fun,
             args_of(f32(9, 2, low=-1.2, high=1.2), f32(9, 2)), assoc_affine_ref, tol=1e-4,
             diff_argnums=(0, 1)),
    OpRecord("associative_scan_max", assoc_max_fun, args_of(distinct32(2, 5)), assoc_max_ref),
    OpRecord("associative_scan_int", assoc_int_fun, args_of(i32(6, 2)), assoc_int_ref,
             diff_argnums=()),
]
