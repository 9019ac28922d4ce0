"""``kiln.experimental.sparse`` (BCOO) against dense NumPy/SciPy results and JAX's
``jax.experimental.sparse``: conversions, layouts, contractions, operators, reductions,
indexing, the pytree under ``jit``/``vmap`` and derivatives (values and dense operands)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as ssp

import kiln
import kiln.numpy as knp
from kiln import lax
from kiln.experimental import sparse
from kiln.experimental.sparse import BCOO

_rng = np.random.default_rng(3)


def _sparse_dense(shape, density=0.45, dtype=np.float32):
    x = _rng.standard_normal(shape) * (_rng.uniform(size=shape) < density)
    return x.astype(dtype)


M = _sparse_dense((4, 5))
MB = _sparse_dense((2, 3, 4))
MD = _sparse_dense((3, 4, 2))


def dense(x):
    return np.asarray(x.todense() if isinstance(x, BCOO) else x)


# -- construction and conversion ------------------------------------------------------------

def test_fromdense_layout_and_repr():
    s = BCOO.fromdense(M)
    assert s.nse == int((M != 0).sum()) and s.n_batch == 0 and s.n_sparse == 2
    assert s.indices_sorted and s.unique_indices
    assert s.dtype == np.float32 and s.indices.dtype == np.int32
    assert (s.ndim, s.size, len(s), s.shape) == (2, 20, 4, (4, 5))
    assert repr(s) == f"BCOO(float32[4, 5], nse={s.nse})"
    np.testing.assert_array_equal(dense(s), M)
    rows, cols = np.nonzero(M)
    np.testing.assert_array_equal(np.asarray(s.indices), np.stack([rows, cols], 1))
    np.testing.assert_array_equal(np.asarray(s.data), M[rows, cols])


@pytest.mark.parametrize("n_batch,n_dense", [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (0, 3)])
def test_fromdense_todense_round_trip(n_batch, n_dense):
    x = _sparse_dense((2, 3, 4))
    s = BCOO.fromdense(x, n_batch=n_batch, n_dense=n_dense)
    assert (s.n_batch, s.n_dense, s.n_sparse) == (n_batch, n_dense, 3 - n_batch - n_dense)
    np.testing.assert_array_equal(dense(s), x)
    np.testing.assert_array_equal(dense(sparse.todense(s)), x)
    big = BCOO.fromdense(x, n_batch=n_batch, n_dense=n_dense, nse=s.nse + 3)
    assert big.nse == s.nse + 3
    np.testing.assert_array_equal(dense(big), x)
    if 3 - n_batch - n_dense:       # padding: zero values at out-of-range coordinates
        pad = np.asarray(big.indices)[..., s.nse:, :]
        np.testing.assert_array_equal(pad, np.broadcast_to(x.shape[n_batch:3 - n_dense],
                                                           pad.shape))


def test_constructor_duplicates_and_validation():
    data = knp.array([1.0, 2.0, 3.0, 4.0])
    idx = knp.array([[0, 1], [0, 1], [2, 2], [3, 3]])     # a duplicate and an out-of-range
    s = BCOO((data, idx), shape=(3, 3))
    np.testing.assert_array_equal(dense(s), [[0, 3, 0], [0, 0, 0], [0, 0, 3]])
    assert not s.indices_sorted and not s.unique_indices
    with pytest.raises(ValueError):
        BCOO((data, idx), shape=(3, 3, 3, 3, 3)[:1])
    with pytest.raises(ValueError):
        BCOO((knp.ones(3), idx), shape=(3, 3))
    with pytest.raises(TypeError):
        BCOO((data, idx.astype(np.float32)), shape=(3, 3))
    with pytest.raises(TypeError):
        hash(s)


def test_from_scipy_sparse():
    a = ssp.random(6, 7, density=0.3, format="csr", random_state=2)
    s = BCOO.from_scipy_sparse(a)
    assert s.dtype == np.float32 and s.indices.dtype == np.int32 and s.nse == a.nnz
    np.testing.assert_allclose(dense(s), a.toarray(), rtol=1e-6)
    s64 = BCOO.from_scipy_sparse(a.tocsc(), index_dtype=np.int16)
    assert s64.indices.dtype == np.int16
    np.testing.assert_allclose(dense(s64), a.toarray(), rtol=1e-6)
    with pytest.raises(NotImplementedError):
        BCOO.from_scipy_sparse(a, n_batch=1)


def test_empty_and_eye():
    e = sparse.empty((3, 4), nse=2, dtype=np.int32)
    assert e.nse == 2 and e.dtype == np.int32
    np.testing.assert_array_equal(dense(e), np.zeros((3, 4)))
    for n, m, k in [(4, 4, 0), (3, 5, 2), (5, 3, -1), (3, 3, 5)]:
        np.testing.assert_array_equal(dense(sparse.eye(n, m, k)), np.eye(n, m, k))
        np.testing.assert_array_equal(dense(sparse.eye(n, m, k, n_batch=1)), np.eye(n, m, k))
    assert sparse.eye(3).dtype == np.float32
    with pytest.raises(ValueError):
        sparse.empty((2, 2), sparse_format="xyz")
    assert isinstance(sparse.eye(3, sparse_format="csr"), sparse.CSR)


def test_fromdense_nse_needs_concrete_values():
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda x: BCOO.fromdense(x))(M)
    out = kiln.jit(lambda x: BCOO.fromdense(x, nse=12))(M)
    assert out.nse == 12
    np.testing.assert_array_equal(dense(out), M)


# -- contractions -------------------------------------------------------------------------

DOT_CASES = [
    # (sparse shape, n_batch, n_dense, dense shape, dimension numbers, sparse on the left)
    ((4, 5), 0, 0, (5, 3), (((1,), (0,)), ((), ())), True),
    ((4, 5), 0, 0, (4, 3), (((0,), (0,)), ((), ())), True),
    ((4, 5), 0, 0, (5,), (((1,), (0,)), ((), ())), True),
    ((4, 5), 0, 0, (2, 4), (((1,), (0,)), ((), ())), False),
    ((4, 5), 0, 0, (5, 2), (((0,), (1,)), ((), ())), False),
    ((2, 3, 4), 1, 0, (2, 4, 5), (((2,), (1,)), ((0,), (0,))), True),
    ((2, 3, 4), 1, 0, (4, 5), (((2,), (0,)), ((), ())), True),
    ((2, 3, 4), 1, 0, (2, 5), (((0,), (0,)), ((), ())), True),     # contract a batch dim
    ((2, 3, 4), 0, 0, (3, 4), (((1, 2), (0, 1)), ((), ())), True),
    ((3, 4, 2), 0, 1, (4, 6), (((1,), (0,)), ((), ())), True),      # a dense dimension
    ((2, 3, 4), 2, 0, (3, 2, 4), (((2,), (2,)), ((0, 1), (1, 0))), True),
    ((2, 3, 4), 1, 0, (5, 2, 3), (((2,), (1,)), ((1,), (0,))), False),
]


@pytest.mark.parametrize("case", DOT_CASES, ids=[str(i) for i in range(len(DOT_CASES))])
def test_dot_general_against_dense(case):
    sshape, n_batch, n_dense, dshape, dims, left = case
    x = _sparse_dense(sshape)
    y = _rng.standard_normal(dshape).astype(np.float32)
    s = BCOO.fromdense(x, n_batch=n_batch, n_dense=n_dense)
    if left:
        got = sparse.bcoo_dot_general(s, y, dimension_numbers=dims)
        want = lax.dot_general(x, y, dims)
    else:
        got = sparse.bcoo_dot_general(y, s, dimension_numbers=dims)
        want = lax.dot_general(y, x, dims)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_dot_general_errors_and_dtypes():
    s = BCOO.fromdense(MB, n_batch=1)
    with pytest.raises(NotImplementedError, match="batch dimensions"):
        sparse.bcoo_dot_general(BCOO.fromdense(MB), knp.ones((2, 4, 5)),
                                dimension_numbers=(((2,), (1,)), ((0,), (0,))))
    with pytest.raises(NotImplementedError, match="dense"):
        sparse.bcoo_dot_general(BCOO.fromdense(MD, n_dense=1), knp.ones((2,)),
                                dimension_numbers=(((2,), (0,)), ((), ())))
    with pytest.raises(TypeError):
        sparse.bcoo_dot_general(s, knp.ones((3, 5)), dimension_numbers=(((2,), (0,)), ((), ())))
    out = sparse.bcoo_dot_general(BCOO.fromdense(M), knp.ones((5,), np.int32),
                                  dimension_numbers=(((1,), (0,)), ((), ())),
                                  preferred_element_type=np.float32)
    assert out.dtype == np.float32


@pytest.mark.parametrize("shape_s,n_batch,shape_d", [
    ((4, 5), 0, (5,)), ((4, 5), 0, (5, 3)), ((4, 5), 0, (3, 5, 2)), ((4, 5), 0, (2, 3, 5, 1)),
    ((2, 3, 4), 1, (4, 6)), ((2, 3, 4), 1, (2, 4, 6)), ((2, 3, 4), 1, (4,)),
])
def test_matmul_both_sides(shape_s, n_batch, shape_d):
    x = _sparse_dense(shape_s)
    s = BCOO.fromdense(x, n_batch=n_batch)
    y = _rng.standard_normal(shape_d).astype(np.float32)
    np.testing.assert_allclose(np.asarray(s @ y), np.matmul(x, y), rtol=1e-5, atol=1e-5)
    yt = np.swapaxes(y, -1, -2) if y.ndim > 1 else y
    xt = np.swapaxes(x, -1, -2)
    st = BCOO.fromdense(xt, n_batch=n_batch)
    np.testing.assert_allclose(np.asarray(yt @ st), np.matmul(yt, xt), rtol=1e-5, atol=1e-5)


def test_matmul_promotes_and_rejects():
    s = BCOO.fromdense(M)
    assert (s @ knp.ones(5, np.int32)).dtype == np.float32
    assert (s @ (1.0 * knp.ones(5))).dtype == np.float32
    with pytest.raises(TypeError):
        s @ [1.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(NotImplementedError):
        BCOO.fromdense(MB) @ knp.ones((2, 4, 1))


def test_sparse_sparse_products():
    a, b = BCOO.fromdense(M), BCOO.fromdense(M.T.copy())
    prod = a @ b
    assert isinstance(prod, BCOO) and prod.nse == min(a.nse * b.nse, 16)
    np.testing.assert_allclose(dense(prod), M @ M.T, rtol=1e-5, atol=1e-6)
    mul = a * a
    assert isinstance(mul, BCOO)
    np.testing.assert_allclose(dense(mul), M * M, rtol=1e-6)
    ab = BCOO.fromdense(MB, n_batch=1)
    np.testing.assert_allclose(dense(ab * ab), MB * MB, rtol=1e-6)


def test_dot_general_sampled():
    a = _rng.standard_normal((4, 3)).astype(np.float32)
    b = _rng.standard_normal((3, 5)).astype(np.float32)
    s = BCOO.fromdense(M)
    vals = sparse.bcoo_dot_general_sampled(a, b, s.indices,
                                           dimension_numbers=(((1,), (0,)), ((), ())))
    r, c = np.asarray(s.indices).T
    np.testing.assert_allclose(np.asarray(vals), (a @ b)[r, c], rtol=1e-5)
    g = kiln.grad(lambda a: knp.sum(sparse.bcoo_dot_general_sampled(
        a, b, s.indices, dimension_numbers=(((1,), (0,)), ((), ()))) ** 2))(a)
    mask = (M != 0)
    np.testing.assert_allclose(np.asarray(g), 2 * ((a @ b) * mask) @ b.T, rtol=1e-4)


# -- structure, reductions, elementwise -----------------------------------------------------

def test_transpose_reshape_squeeze():
    s = BCOO.fromdense(M)
    np.testing.assert_array_equal(dense(s.T), M.T)
    assert not s.T.indices_sorted
    sb = BCOO.fromdense(MD, n_batch=1, n_dense=1)
    np.testing.assert_array_equal(dense(sb.transpose((0, 1, 2))), MD)
    with pytest.raises(NotImplementedError):
        sb.transpose((1, 0, 2))
    with pytest.raises(TypeError):
        s.transpose((0, 0))
    np.testing.assert_array_equal(dense(s.reshape(5, 4)), M.reshape(5, 4))
    np.testing.assert_array_equal(dense(s.reshape((2, -1))), M.reshape(2, 10))
    np.testing.assert_array_equal(dense(s.reshape(20)), M.ravel())
    b = BCOO.fromdense(MB, n_batch=1)
    np.testing.assert_array_equal(dense(b.reshape(2, 12)), MB.reshape(2, 12))
    with pytest.raises(ValueError, match="batch and sparse"):
        b.reshape(6, 4)
    one = BCOO.fromdense(M[None])
    np.testing.assert_array_equal(dense(sparse.bcoo_squeeze(one, dimensions=(0,))), M)


@pytest.mark.parametrize("n_batch,n_dense", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_sum(n_batch, n_dense):
    x = _sparse_dense((2, 3, 4))
    nse = BCOO.fromdense(x, n_batch=n_batch, n_dense=n_dense).nse
    s = BCOO.fromdense(x, n_batch=n_batch, n_dense=n_dense, nse=nse + 2)   # with padding
    for axis in [0, 1, 2, -1, (0, 2), (1, 2)]:
        got = s.sum(axis=axis)
        assert isinstance(got, BCOO)
        np.testing.assert_allclose(dense(got), x.sum(axis=axis), rtol=1e-5, atol=1e-6)
    total = s.sum()
    assert not isinstance(total, BCOO)
    np.testing.assert_allclose(float(total), x.sum(), rtol=1e-5)
    np.testing.assert_allclose(dense(s.sum(1, keepdims=True)), x.sum(1, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dense(sparse.bcoo_reduce_sum(s, axes=(0,))), x.sum(0),
                               rtol=1e-5, atol=1e-6)
    si = BCOO.fromdense((x * 3).astype(np.int8))
    assert si.sum(0).dtype == np.int32


def test_elementwise_operators():
    s = BCOO.fromdense(M)
    v = _rng.standard_normal(5).astype(np.float32)
    full = _rng.standard_normal((4, 5)).astype(np.float32)
    for got, want in [(s * 2.0, M * 2), (2 * s, M * 2), (s * v, M * v), (full * s, M * full),
                      (s * full[:, :1], M * full[:, :1]), (s / 4, M / 4), (s / full, M / full),
                      (-s, -M), (+s, M), (abs(s), abs(M)), (s ** 2, M ** 2), (s + s, 2 * M),
                      (s - s, 0 * M)]:
        assert isinstance(got, BCOO)
        assert got.nse >= s.nse
        np.testing.assert_allclose(dense(got), want, rtol=1e-5, atol=1e-6)
    for got, want in [(s + full, M + full), (full + s, M + full)]:
        assert not isinstance(got, BCOO)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert (s * 2).dtype == np.float32 and s.astype(np.int32).dtype == np.int32
    bi = BCOO.fromdense(MB, n_batch=1)
    w = _rng.standard_normal((2, 1, 4)).astype(np.float32)
    np.testing.assert_allclose(dense(bi * w), MB * w, rtol=1e-6)
    with pytest.raises(NotImplementedError):
        s + 1.0
    with pytest.raises(NotImplementedError):
        s - full
    with pytest.raises(NotImplementedError):
        full / s
    with pytest.raises(NotImplementedError):
        s * knp.ones((3, 4, 5))
    with pytest.raises(NotImplementedError):
        s ** 0.5


def test_duplicates_sorting_and_indexing():
    data = knp.array([1.0, 2.0, 0.0, 3.0, 5.0])
    idx = knp.array([[2, 1], [0, 1], [1, 1], [0, 1], [3, 0]])
    s = BCOO((data, idx), shape=(3, 2))
    want = np.zeros((3, 2), np.float32)
    want[2, 1], want[0, 1] = 1, 5
    st = s.sort_indices()
    assert st.indices_sorted
    np.testing.assert_array_equal(np.asarray(st.indices)[:4], [[0, 1], [0, 1], [1, 1], [2, 1]])
    np.testing.assert_array_equal(dense(st), want)
    d = s.sum_duplicates()
    assert d.nse == 2 and d.unique_indices and d.indices_sorted
    np.testing.assert_array_equal(np.asarray(d.indices), [[0, 1], [2, 1]])
    np.testing.assert_array_equal(dense(d), want)
    d5 = kiln.jit(lambda m: m.sum_duplicates(nse=5, remove_zeros=False))(s)
    assert d5.nse == 5
    np.testing.assert_array_equal(dense(d5), want)
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda m: m.sum_duplicates())(s)
    b = BCOO.fromdense(MB, n_batch=1)
    for index in [1, (0, 2), (slice(None), 1), (1, slice(1, 3)), (Ellipsis, 2),
                  (slice(None), slice(0, 3, 2), slice(1, None))]:
        np.testing.assert_array_equal(dense(b[index]), MB[index])
    np.testing.assert_array_equal(np.stack([dense(r) for r in BCOO.fromdense(M)]), M)
    with pytest.raises(IndexError):
        BCOO.fromdense(M)[7]


# -- transformations ------------------------------------------------------------------------

def test_jit_pytree_argument_and_output():
    s = BCOO.fromdense(MB, n_batch=1)
    leaves, tree = kiln.tree_util.tree_flatten(s)
    assert len(leaves) == 2
    out = kiln.jit(lambda m, y: (m * 2.0, m @ y))(s, knp.ones((2, 4, 3)))
    assert isinstance(out[0], BCOO) and out[0].shape == s.shape and out[0].n_batch == 1
    np.testing.assert_allclose(dense(out[0]), 2 * MB, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out[1]), MB @ np.ones((2, 4, 3)), rtol=1e-5)
    got = kiln.jit(lambda m: m.T.sum(0))(BCOO.fromdense(M))
    np.testing.assert_allclose(dense(got), M.sum(1), rtol=1e-6)
    s.block_until_ready()


def test_vmap_over_batch_dimensions():
    s = BCOO.fromdense(MB, n_batch=1)
    y = _rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(kiln.vmap(lambda m, v: m @ v)(s, y)),
                               np.einsum("bij,bj->bi", MB, y), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(kiln.vmap(lambda m: m.todense())(s)), MB)
    np.testing.assert_allclose(np.asarray(kiln.vmap(sparse.todense, in_axes=0)(s)), MB)
    # Mapping a batch axis other than the first, and adding one on output.
    s2 = BCOO.fromdense(np.stack([MB, 2 * MB]), n_batch=2)
    got = kiln.vmap(lambda m: m.todense(), in_axes=1)(s2)
    np.testing.assert_allclose(np.asarray(got), np.stack([MB, 2 * MB]).swapaxes(0, 1))
    built = kiln.vmap(lambda x: BCOO.fromdense(x, nse=12))(MB)
    assert isinstance(built, BCOO) and built.n_batch == 1 and built.shape == MB.shape
    np.testing.assert_array_equal(dense(built), MB)
    # A sparse constant with a mapped dense operand (NumPyro's CAR pattern).
    a = BCOO.fromdense(M @ M.T)
    phi = _rng.standard_normal((3, 4)).astype(np.float32)
    got = kiln.vmap(lambda p: (a @ p[:, None]).squeeze(-1))(phi)
    np.testing.assert_allclose(np.asarray(got), phi @ (M @ M.T).T, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="batch dimension"):
        kiln.vmap(lambda m: m.todense())(BCOO.fromdense(M))


def test_grad_values_and_dense_operand():
    s = BCOO.fromdense(M)
    y = _rng.standard_normal((5, 3)).astype(np.float32)

    def f_sparse(data, y):
        return knp.sum(knp.sin(BCOO((data, s.indices), shape=s.shape) @ y))

    def f_dense(x, y):
        return knp.sum(knp.sin(x @ y))
    gd, gy = kiln.grad(f_sparse, argnums=(0, 1))(s.data, y)
    gx_ref, gy_ref = kiln.grad(f_dense, argnums=(0, 1))(M, y)
    r, c = np.asarray(s.indices).T
    np.testing.assert_allclose(np.asarray(gd), np.asarray(gx_ref)[r, c], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gy), np.asarray(gy_ref), rtol=1e-5, atol=1e-6)
    # forward mode, jit(grad) and vmap(grad) agree
    _, jv = kiln.jvp(lambda d: f_sparse(d, y), (s.data,), (knp.ones_like(s.data),))
    np.testing.assert_allclose(float(jv), float(np.sum(np.asarray(gd))), rtol=1e-5)
    gj = kiln.jit(kiln.grad(f_sparse, argnums=1))(s.data, y)
    np.testing.assert_allclose(np.asarray(gj), np.asarray(gy_ref), rtol=1e-5, atol=1e-6)
    z = _rng.standard_normal((3, 4)).astype(np.float32)
    gv = kiln.vmap(kiln.grad(lambda v: knp.sum((v @ s) ** 2)))(z)
    np.testing.assert_allclose(np.asarray(gv), 2 * (z @ M) @ M.T, rtol=1e-4, atol=1e-5)
    # fromdense and todense are differentiable with respect to the dense values
    g = kiln.grad(lambda x: knp.sum(BCOO.fromdense(x, nse=s.nse).data ** 2))(M)
    np.testing.assert_allclose(np.asarray(g), 2 * M, rtol=1e-6)
    g = kiln.grad(lambda d: knp.sum(BCOO((d, s.indices), shape=s.shape).todense() * M))(s.data)
    np.testing.assert_allclose(np.asarray(g), M[r, c], rtol=1e-6)


def test_sparse_grad_helpers():
    s = BCOO.fromdense(M)
    y = knp.arange(5.0)
    g = sparse.grad(lambda m, v: knp.sum(m @ v))(s, y)
    assert isinstance(g, BCOO)
    np.testing.assert_array_equal(np.asarray(g.indices), np.asarray(s.indices))
    np.testing.assert_allclose(dense(g), (M != 0) * np.arange(5.0)[None, :], rtol=1e-6)
    val, (gs, gy) = sparse.value_and_grad(lambda m, v: knp.sum(m @ v), argnums=(0, 1))(s, y)
    np.testing.assert_allclose(float(val), (M @ np.arange(5.0)).sum(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gy), M.sum(0), rtol=1e-5)
    jac = sparse.jacfwd(lambda m: m @ y)(s)
    assert isinstance(jac, BCOO) and jac.n_batch == 1 and jac.shape == (4, 4, 5)
    want = np.einsum("ij,jk->ijk", np.eye(4), (M != 0) * np.arange(5.0))
    np.testing.assert_allclose(dense(jac), want, rtol=1e-6)
    np.testing.assert_allclose(dense(sparse.jacrev(lambda m: m @ y)(s)), want, rtol=1e-6)


def test_not_provided_names():
    with pytest.raises(NotImplementedError, match="exp"):
        sparse.sparsify(knp.exp)(BCOO.fromdense(M))
    with pytest.raises(sparse.SparseEfficiencyError):
        BCOO.fromdense(M).update_layout(n_batch=1)


def test_against_jax():
    """Results (values, nse, layout) of one jitted JAX program against kiln's."""
    jax = pytest.importorskip("jax")
    from jax.experimental import sparse as jsp
    a = ssp.random(6, 6, density=0.4, format="csr", random_state=4)
    a = (a + a.T).astype(np.float32)
    phi = _rng.standard_normal((3, 6)).astype(np.float32)
    nse_m, nse_b = int((M != 0).sum()), int((MB != 0).sum(axis=(1, 2)).max())

    def program(sp, np_mod, grad, vmap):
        s = sp.BCOO.fromdense(M, nse=nse_m)
        b = sp.BCOO.fromdense(MB, n_batch=1, nse=nse_b)
        adj = sp.BCOO.from_scipy_sparse(a)

        def car(p):
            return np_mod.sum(p * (adj @ p[..., None]).squeeze(-1))
        return [s @ np_mod.ones((5, 2)), np_mod.ones((3, 4)) @ s, (s * 2.0).data,
                s.T.indices, s.sum(0).data, s.sum(0).indices, (b @ np_mod.ones(4)),
                s.reshape(2, 10).indices, grad(car)(phi[0]), vmap(grad(car))(phi),
                (s @ s.T).data, sp.eye(4, 5, 1).indices, adj.sum(-1).data, s[2].data]
    want = jax.jit(lambda: program(jsp, jax.numpy, jax.grad, jax.vmap))()
    got = program(sparse, knp, kiln.grad, kiln.vmap)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, i
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6,
                                   err_msg=str(i))
