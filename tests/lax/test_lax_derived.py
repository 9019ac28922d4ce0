"""Parity of the composite functions of ``kiln.lax.derived`` with ``jax.lax``: values,
shapes, dtypes, errors, and behaviour under jit / grad / vmap."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import lax

jax = pytest.importorskip("jax")
jlax = jax.lax


def _eq(a, b, tol=0.0):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    if tol:
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(a, b)


def _tree_eq(a, b, tol=0.0):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        _eq(x, y, tol)


def _same_error(name, *args, **kwargs):
    with pytest.raises(Exception) as je:
        getattr(jlax, name)(*args, **kwargs)
    with pytest.raises(type(je.value)):
        getattr(lax, name)(*args, **kwargs)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5


def test_signatures_match():
    import inspect
    for n in lax.derived.__all__:
        kp = list(inspect.signature(getattr(lax, n)).parameters.values())
        jp = list(inspect.signature(getattr(jlax, n)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in kp] == \
            [(p.name, p.kind, p.default) for p in jp], n


@pytest.mark.parametrize("shapes", [[(3, 1), (4,)], [(3, 1), (1, 4), (5, 1, 1)], [(2,)],
                                    [(0, 1), (1,)], [(), (2, 3)]])
def test_broadcast_shapes(shapes):
    assert lax.broadcast_shapes(*shapes) == jlax.broadcast_shapes(*shapes)


@pytest.mark.parametrize("shapes", [[(3, 1), (4, 1)], [(3, -1), (1,)], [(0,), (3,)]])
def test_broadcast_shapes_errors(shapes):
    _same_error("broadcast_shapes", *shapes)


@pytest.mark.parametrize("x,rank", [(1.0, 2), (np.ones(3, np.int32), 1), (X, 5)])
def test_broadcast_to_rank(x, rank):
    k, j = lax.broadcast_to_rank(x, rank), jlax.broadcast_to_rank(x, rank)
    _eq(k, j)
    assert k.weak_type == j.weak_type


@pytest.mark.parametrize("axis", [0, 1, -1, 3])
def test_stack_unstack(axis):
    ops = [X, X * 2, X + 1]
    _eq(lax.stack(ops, axis), jlax.stack(ops, axis))
    _tree_eq(lax.unstack(X, axis % 3), jlax.unstack(X, axis % 3))
    assert isinstance(lax.unstack(X), tuple)


def test_stack_unstack_errors():
    _same_error("stack", [np.ones(2, np.int32), np.ones(2, np.float32)])
    _same_error("stack", [np.ones(2), np.ones(3)])
    _same_error("stack", [np.ones(2)], axis=3)
    _same_error("unstack", 1.0)
    _same_error("unstack", X, 3)


@pytest.mark.parametrize("reps", [(2, 1, 1), (1, 3, 2), (2, 0, 1), (1, 1, 1)])
def test_tile(reps):
    _eq(lax.tile(X, reps), jlax.tile(X, reps))


def test_tile_errors():
    _same_error("tile", X, (2,))


@pytest.mark.parametrize("sizes,axis", [((1, 1), 0), ((1, 0, 2), 1), ((4,), -1), ((3, 1), 2)])
def test_split(sizes, axis):
    k, j = lax.split(X, sizes, axis), jlax.split(X, sizes, axis)
    assert type(k) is type(j)
    _tree_eq(k, j)


def test_split_errors():
    _same_error("split", X, (1, 2), 0)
    _same_error("split", X, (3, -1), 0)


@pytest.mark.parametrize("shape,dtype", [(3, np.float32), ((2, 3), np.int32), ((), np.bool_)])
def test_empty(shape, dtype):
    # JAX's CPU backend fills with zeros.
    _eq(lax.empty(shape, dtype), jlax.empty(shape, dtype))


def test_optimization_barrier():
    tree = (1.0, [X], {"a": np.int32(3)})
    k, j = lax.optimization_barrier(tree), jlax.optimization_barrier(tree)
    assert jax.tree_util.tree_structure(k) == jax.tree_util.tree_structure(j)
    _tree_eq(k, j)
    g = kiln.grad(lambda x: lax.optimization_barrier((x, x * 2))[1].sum())(X)
    _eq(g, np.full_like(X, 2.0))


A = np.array([[3., 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]], np.float32)
BIG = np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32)


@pytest.mark.parametrize("name", ["approx_max_k", "approx_min_k"])
@pytest.mark.parametrize("x,k,kw", [
    (A, 3, {}), (A, 1, dict(reduction_dimension=0)), (A, 3, dict(aggregate_to_topk=False)),
    (A, 3, dict(recall_target=0.5)), (np.array([0., -0., 0., 1.]), 2, {}),
    (BIG, 3, dict(aggregate_to_topk=False)), (BIG, 1, dict(aggregate_to_topk=False)),
    (BIG, 3, dict(aggregate_to_topk=False, reduction_input_size_override=2000,
                  recall_target=0.5)),
    (BIG.T, 2, dict(reduction_dimension=0, aggregate_to_topk=False))])
def test_approx_k(name, x, k, kw):
    k_out, j_out = getattr(lax, name)(x, k, **kw), getattr(jlax, name)(x, k, **kw)
    assert type(k_out) is type(j_out)
    _tree_eq(k_out, j_out)


def test_approx_k_nan_max():
    x = np.array([1., np.nan, 3, -np.inf], np.float32)
    _tree_eq(lax.approx_max_k(x, 2), jlax.approx_max_k(x, 2))


@pytest.mark.parametrize("args", [(A, 9), (A, 0), (np.float32(1), 1),
                                  (A.astype(np.int32), 3), (A, 3, -2)])
def test_approx_k_errors(args):
    _same_error("approx_max_k", *args)
    _same_error("approx_min_k", *args)


def test_approx_k_transforms():
    for name in ("approx_max_k", "approx_min_k"):
        kf, jf = getattr(lax, name), getattr(jlax, name)
        _tree_eq(kiln.jit(lambda x: kf(x, 3))(A), jf(A, 3))
        _eq(kiln.grad(lambda x: (kf(x, 3)[0] ** 2).sum())(A),
            jax.grad(lambda x: (jf(x, 3)[0] ** 2).sum())(A))
        _tree_eq(kiln.vmap(lambda x: kf(x, 2))(A), jax.vmap(lambda x: jf(x, 2))(A))
        _tree_eq(kiln.vmap(lambda x: kf(x, 2, reduction_dimension=0), in_axes=1)(
            np.stack([A, A + 1], -1)),
            jax.vmap(lambda x: jf(x, 2, reduction_dimension=0), in_axes=1)(
                np.stack([A, A + 1], -1)))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "uint8", "uint16", "uint32"])
def test_mulhi(dtype):
    info = np.iinfo(dtype)
    r = np.random.default_rng(1)
    a = r.integers(info.min, info.max, (64,), endpoint=True).astype(dtype)
    b = r.integers(info.min, info.max, (64,), endpoint=True).astype(dtype)
    a[:3] = info.min, info.max, info.min
    b[:3] = info.min, info.min, info.max
    _eq(lax.mulhi(a, b), jlax.mulhi(a, b))
    _eq(kiln.jit(lax.mulhi)(a, b), jlax.mulhi(a, b))
    _eq(kiln.vmap(lax.mulhi, in_axes=(0, None))(a.reshape(8, 8), b[:8]),
        jax.vmap(jlax.mulhi, in_axes=(0, None))(a.reshape(8, 8), b[:8]))


@pytest.mark.parametrize("x,y", [(3, 4), (np.arange(3, dtype=np.int32) * 1000003, 5),
                                 (np.int32(-5), np.arange(3, dtype=np.int32) * 700001),
                                 (np.ones((1, 3), np.int32) * -5, np.ones((2, 1), np.int32) * 7)])
def test_mulhi_broadcast_and_weak(x, y):
    k, j = lax.mulhi(x, y), jlax.mulhi(x, y)
    _eq(k, j)
    assert k.weak_type == j.weak_type


@pytest.mark.parametrize("x,y", [(1.0, 2.0), (True, False), (np.int32(1), np.int16(2)),
                                 (np.ones(3, np.int32), np.ones((2, 3), np.int32))])
def test_mulhi_errors(x, y):
    _same_error("mulhi", x, y)


@pytest.mark.parametrize("dn,lhs_shape,filt,strides,padding,kw", [
    (None, (2, 3, 5, 6), (2, 3), (1, 1), "VALID", {}),
    (("NHWC", "HWIO", "NHWC"), (2, 5, 6, 3), (3, 2), (2, 1), "SAME", {}),
    (("NCHW", "OIWH", "CNHW"), (1, 2, 5, 4), (2, 2), (1, 2), [(1, 0), (0, 1)],
     dict(rhs_dilation=(2, 1))),
    (None, (1, 2, 4), (3,), (1,), [(1, 2)], dict(lhs_dilation=(2,))),
])
def test_conv_general_dilated_patches(dn, lhs_shape, filt, strides, padding, kw):
    x = np.random.default_rng(2).standard_normal(lhs_shape).astype(np.float32)
    args = (filt, strides, padding)
    kwargs = dict(dimension_numbers=dn, **kw)
    _eq(lax.conv_general_dilated_patches(x, *args, **kwargs),
        jlax.conv_general_dilated_patches(x, *args, **kwargs), 1e-6)
    kf = kiln.jit(lambda v: lax.conv_general_dilated_patches(v, *args, **kwargs))
    _eq(kf(x), jlax.conv_general_dilated_patches(x, *args, **kwargs), 1e-6)
    _eq(kiln.grad(lambda v: (lax.conv_general_dilated_patches(v, *args, **kwargs) ** 2).sum())(x),
        jax.grad(lambda v: (jlax.conv_general_dilated_patches(v, *args, **kwargs) ** 2).sum())(x),
        1e-5)
    xb = np.stack([x, x * 2])
    _eq(kiln.vmap(lambda v: lax.conv_general_dilated_patches(v, *args, **kwargs))(xb),
        jax.vmap(lambda v: jlax.conv_general_dilated_patches(v, *args, **kwargs))(xb), 1e-6)


def test_conv_patches_dtypes():
    x = np.arange(2 * 2 * 4 * 4).reshape(2, 2, 4, 4)
    for dt, pet in [(np.int32, None), (np.float16, None), (np.float16, np.float32)]:
        _eq(lax.conv_general_dilated_patches(x.astype(dt), (2, 2), (1, 1), "VALID",
                                             preferred_element_type=pet),
            jlax.conv_general_dilated_patches(x.astype(dt), (2, 2), (1, 1), "VALID",
                                              preferred_element_type=pet))


def test_axis_size():
    x = np.ones((3, 2), np.float32)
    f = lambda ln: (lambda v: v * ln.axis_size("i"))  # noqa: E731
    _eq(kiln.vmap(f(lax), axis_name="i")(x), jax.vmap(f(jlax), axis_name="i")(x))
    g = lambda ln: (lambda v: v * ln.axis_size(("i", "j")))  # noqa: E731
    _eq(kiln.vmap(kiln.vmap(g(lax), axis_name="j"), axis_name="i")(x),
        jax.vmap(jax.vmap(g(jlax), axis_name="j"), axis_name="i")(x))
    _eq(kiln.jit(kiln.vmap(f(lax), axis_name="i"))(x), jax.vmap(f(jlax), axis_name="i")(x))
    _same_error("axis_size", "i")


def test_structural_transforms():
    _eq(kiln.jit(lambda x: lax.stack([x, x + 1], 1))(X), jlax.stack([X, X + 1], 1))
    _eq(kiln.grad(lambda x: (lax.tile(x, (2, 1, 3)) ** 2).sum())(X),
        jax.grad(lambda x: (jlax.tile(x, (2, 1, 3)) ** 2).sum())(X))
    _eq(kiln.grad(lambda x: sum((p * (i + 1)).sum()
                                for i, p in enumerate(lax.split(x, (1, 3), 2))))(X),
        jax.grad(lambda x: sum((p * (i + 1)).sum()
                               for i, p in enumerate(jlax.split(x, (1, 3), 2))))(X))
    _eq(kiln.grad(lambda x: lax.unstack(x, 1)[2].sum())(X),
        jax.grad(lambda x: jlax.unstack(x, 1)[2].sum())(X))
    _eq(kiln.vmap(lambda x: lax.tile(x, (2, 2)))(X), jax.vmap(lambda x: jlax.tile(x, (2, 2)))(X))
    _tree_eq(kiln.vmap(lambda x: lax.split(x, (2, 2), 1), in_axes=1)(X),
             jax.vmap(lambda x: jlax.split(x, (2, 2), 1), in_axes=1)(X))
    _tree_eq(kiln.vmap(lambda x: lax.unstack(x, 0))(X), jax.vmap(lambda x: jlax.unstack(x, 0))(X))
    _eq(kiln.vmap(lambda x: lax.stack([x, 2 * x], -1))(X),
        jax.vmap(lambda x: jlax.stack([x, 2 * x], -1))(X))
    _eq(kiln.vmap(lambda x: lax.broadcast_to_rank(x, 4))(X),
        jax.vmap(lambda x: jlax.broadcast_to_rank(x, 4))(X))
    _eq(kiln.jit(lambda: lax.empty((2, 2), np.float32))(), jlax.empty((2, 2), np.float32))


def test_broadcast_shapes_checks_dimensions_as_jax():
    # Each shape is canonicalized first (integer dimensions), then checked for negatives.
    with pytest.raises(TypeError, match="Only non-negative indices are allowed"):
        lax.broadcast_shapes((-1,))
    with pytest.raises(TypeError, match="Shapes must be 1D sequences"):
        lax.broadcast_shapes("hello")
    with pytest.raises(TypeError, match="Shapes must be 1D sequences"):
        lax.broadcast_shapes((2.0,), (2,))
    assert lax.broadcast_shapes((3, 1), (np.int64(4),)) == (3, 4)
