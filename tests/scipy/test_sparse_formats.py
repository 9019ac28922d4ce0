"""``kiln.experimental.sparse`` beyond BCOO's basics: the COO/CSR/CSC matrices, BCSR, the
BCOO layout operations (update_layout, slices, rev, concatenate, broadcast, gather,
conv), ``random_bcoo``, ``todense_p``, ``sparsify`` and ``sparse.linalg.spsolve``: values
against dense NumPy, ``jit``, derivatives, ``vmap`` and JAX's error classes. Run with
``jax_numpy_rank_promotion='raise'``, as JAX's own sparse tests are."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import scipy.sparse as ssp

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.experimental import sparse

_rng = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _strict_ranks():
    with kiln.numpy_rank_promotion("raise"):
        yield


def _sp(shape, density=0.4, dtype=np.float32):
    x = _rng.standard_normal(shape) * (_rng.uniform(size=shape) < density)
    return x.astype(dtype)


M = _sp((5, 7))
X3 = _sp((3, 4, 5))
FORMATS = [sparse.COO, sparse.CSR, sparse.CSC]


# -- COO / CSR / CSC -------------------------------------------------------------------------

@pytest.mark.parametrize("cls", FORMATS)
def test_formats_round_trip_products_transpose(cls):
    s = cls.fromdense(M)
    assert isinstance(s, cls) and s.nse == int((M != 0).sum()) and s.shape == M.shape
    np.testing.assert_array_equal(s.todense(), M)
    np.testing.assert_array_equal(sparse.todense(s), M)
    np.testing.assert_array_equal(s.T.todense(), M.T)
    v, B = _sp((7,), 1.0), _sp((7, 3), 1.0)
    np.testing.assert_allclose(s @ v, M @ v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s @ B, M @ B, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.T @ np.ones(5, np.float32), M.T @ np.ones(5), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(kiln.jit(lambda s, B: s @ B)(s, B), M @ B, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(kiln.jit(lambda s: s.todense())(s), M)
    assert (s @ v.astype(np.int32)).dtype == np.float32           # promotion
    with pytest.raises(NotImplementedError):
        s @ s
    with pytest.raises(NotImplementedError):
        s @ np.ones((7, 2, 2), np.float32)
    with pytest.raises(TypeError):
        hash(s)


def test_buffers_match_scipy():
    coo, csr = ssp.coo_matrix(M), ssp.csr_matrix(M)
    d, r, c = sparse.coo._coo_fromdense(M, nse=coo.nnz)
    np.testing.assert_array_equal(d, coo.data)
    np.testing.assert_array_equal(r, coo.row)
    np.testing.assert_array_equal(c, coo.col)
    d, i, p = kiln.jit(functools.partial(sparse.csr._csr_fromdense, nse=csr.nnz))(M)
    np.testing.assert_array_equal(d, csr.data)
    np.testing.assert_array_equal(i, csr.indices)
    np.testing.assert_array_equal(p, csr.indptr)
    # nse larger than the nonzeros: zero padding, counted nowhere in indptr.
    d, i, p = sparse.csr._csr_fromdense(M, nse=csr.nnz + 2)
    np.testing.assert_array_equal(d[-2:], 0)
    np.testing.assert_array_equal(p, csr.indptr)
    np.testing.assert_array_equal(sparse.csr._csr_todense(d, i, p, shape=M.shape), M)
    row, col = sparse.util._csr_to_coo(csr.indices, csr.indptr)
    np.testing.assert_array_equal(row, coo.row)
    for transpose in (False, True):
        v = np.ones(5 if transpose else 7, np.float32)
        np.testing.assert_allclose(
            sparse.csr._csr_matvec(csr.data, csr.indices, csr.indptr, v, shape=M.shape,
                                   transpose=transpose), (M.T if transpose else M) @ v,
            rtol=1e-5)
        np.testing.assert_allclose(
            sparse.coo._coo_matmat(coo.data, coo.row, coo.col, v[:, None],
                                   spinfo=sparse.COOInfo(shape=M.shape), transpose=transpose),
            (M.T if transpose else M) @ v[:, None], rtol=1e-5)


def test_format_derivatives_and_vmap():
    d, i, p = sparse.csr._csr_fromdense(M, nse=int((M != 0).sum()))
    x = _sp((7,), 1.0)

    def f(d, x):
        return jnp.sum(sparse.csr._csr_matvec(d, i, p, x, shape=M.shape) ** 2)
    dd, dx = kiln.grad(f, argnums=(0, 1))(d, x)
    y = M @ x
    np.testing.assert_allclose(dx, 2 * M.T @ y, rtol=1e-4)
    rows, cols = np.nonzero(M)
    np.testing.assert_allclose(dd, 2 * y[rows] * x[cols], rtol=1e-4)
    # fromdense: tangents of the values, float0 for the indices.
    _, t = kiln.jvp(lambda m: sparse.coo._coo_fromdense(m, nse=len(rows)), (M,),
                    (np.ones_like(M),))
    np.testing.assert_array_equal(t[0], np.ones(len(rows)))
    assert t[1].dtype == kiln.dtypes.float0
    s = sparse.CSR.fromdense(M)
    vs = _sp((4, 7), 1.0)
    np.testing.assert_allclose(kiln.vmap(lambda v: s @ v)(vs), vs @ M.T, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("fmt", ["coo", "csr", "csc", "bcoo", "bcsr"])
def test_eye_empty_pytree(fmt):
    e = sparse.eye(4, 6, 1, sparse_format=fmt)
    np.testing.assert_array_equal(e.todense(), np.eye(4, 6, 1))
    assert e.nse == 4
    np.testing.assert_array_equal(kiln.jit(lambda: sparse.eye(4, 3, -2, sparse_format=fmt))()
                                  .todense(), np.eye(4, 3, -2))
    z = sparse.empty((2, 4), sparse_format=fmt)
    assert z.nse == 0 and z.todense().shape == (2, 4)
    bufs, tree = kiln.tree.flatten(z)
    assert kiln.tree.unflatten(tree, bufs).shape == (2, 4)
    with pytest.raises(ValueError, match="not recognized"):
        sparse.empty((2,), sparse_format="dok")


def test_todense_primitive():
    s = sparse.BCOO.fromdense(np.array([1.0, 0.0, 3.0], np.float32))
    bufs, tree = kiln.tree.flatten(s)

    def f(*b):
        return sparse.todense_p.bind(*b, tree=tree)
    jac = kiln.jacfwd(f)(*bufs)
    np.testing.assert_array_equal(jac, kiln.jacrev(f)(*bufs))
    np.testing.assert_array_equal(kiln.jit(f)(*bufs), [1, 0, 3])
    np.testing.assert_array_equal(sparse.bcoo_todense_p.bind(*bufs, spinfo=s._info),
                                  [1, 0, 3])


# -- BCOO layout operations ------------------------------------------------------------------

LAYOUTS = [(nb, nd) for nb in range(4) for nd in range(4 - nb)]


@pytest.mark.parametrize("nb,nd", LAYOUTS)
def test_update_layout_every_pair(nb, nd):
    m = sparse.BCOO.fromdense(X3, n_batch=nb, n_dense=nd)
    for nb2, nd2 in LAYOUTS:
        out = sparse.bcoo_update_layout(m, n_batch=nb2, n_dense=nd2, on_inefficient=None)
        assert (out.n_batch, out.n_dense) == (nb2, nd2)
        np.testing.assert_array_equal(out.todense(), X3)
        if nb2 > nb or nd2 > nd:
            with pytest.raises(sparse.SparseEfficiencyError):
                m.update_layout(n_batch=nb2, n_dense=nd2)
            with pytest.warns(sparse.SparseEfficiencyWarning):
                sparse.bcoo_update_layout(m, n_batch=nb2, n_dense=nd2, on_inefficient="warn")


@pytest.mark.parametrize("nb,nd", [(0, 0), (1, 0), (1, 1), (0, 1), (2, 0)])
def test_slices_rev_concat_broadcast(nb, nd):
    m = sparse.BCOO.fromdense(X3, n_batch=nb, n_dense=nd)
    s = sparse.bcoo_slice(m, start_indices=(1, 0, 1), limit_indices=(3, 4, 5),
                          strides=(1, 2, 3))
    np.testing.assert_array_equal(s.todense(), X3[1:3, 0:4:2, 1:5:3])
    ds = kiln.jit(lambda m, i: sparse.bcoo_dynamic_slice(m, (i, i, i), (2, 2, 2)).todense())
    for i in (1, 7):                                           # 7: clamped as lax does
        np.testing.assert_array_equal(ds(m, i), lax.dynamic_slice(X3, (i, i, i), (2, 2, 2)))
    np.testing.assert_array_equal(sparse.bcoo_rev(m, (0, 2)).todense(), X3[::-1, :, ::-1])
    for d in range(3 - nd):
        np.testing.assert_array_equal(sparse.bcoo_concatenate([m, m], dimension=d).todense(),
                                      np.concatenate([X3, X3], d))
    if nd:
        with pytest.raises(NotImplementedError, match="dense"):
            sparse.bcoo_concatenate([m, m], dimension=2)
    b = sparse.bcoo_broadcast_in_dim(m, shape=(2, 3, 4, 5), broadcast_dimensions=(1, 2, 3))
    np.testing.assert_array_equal(b.todense(), np.broadcast_to(X3, (2, 3, 4, 5)))
    with pytest.raises(ValueError):
        sparse.bcoo_slice(m, start_indices=(0, 0, 0), limit_indices=(4, 4, 5))


def test_getitem_general_and_gather():
    x = _sp((3, 4))
    for nb in range(3):
        m = sparse.BCOO.fromdense(x, n_batch=nb)
        for idx in (np.index_exp[np.array([[1], [2]]), 1:],
                    np.index_exp[np.array([True, False, True])],
                    np.index_exp[None, 0, np.array([[2]])], np.index_exp[::-1], (1,)):
            np.testing.assert_array_equal(m[idx].todense(), x[idx])
            np.testing.assert_array_equal(kiln.jit(lambda m: m[idx].todense())(m), x[idx])
        np.testing.assert_array_equal(kiln.jit(lambda m, i: m[i].todense())(m, 2), x[2])
        np.testing.assert_array_equal([r.todense() for r in m], list(x))


def test_slice_gradient_and_conv():
    m = sparse.BCOO.fromdense(X3, n_batch=1)

    def f(data):
        mm = sparse.BCOO((data, m.indices), shape=m.shape)
        return jnp.sum(sparse.bcoo_slice(mm, start_indices=(0, 1, 0),
                                         limit_indices=(2, 3, 5)).todense() ** 2)
    g = kiln.grad(f)(m.data)
    want = np.zeros_like(X3)
    want[:2, 1:3] = 2 * X3[:2, 1:3]
    np.testing.assert_allclose(sparse.bcoo_extract(m, want).data, g, rtol=1e-6)
    a, k = _sp((1, 1, 9), 0.6), _sp((1, 1, 3), 1.0)
    got = sparse.bcoo_conv_general_dilated(sparse.BCOO.fromdense(a), k, window_strides=(1,),
                                           padding=[(1, 1)])
    want = lax.conv_general_dilated(a, k, window_strides=(1,), padding=[(1, 1)])
    np.testing.assert_allclose(got.todense(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError):
        sparse.bcoo_conv_general_dilated(sparse.BCOO.fromdense(a), k, window_strides=(2,),
                                         padding="VALID")


def test_random_bcoo():
    m = sparse.random_bcoo(kiln.random.PRNGKey(0), (3, 10, 2), n_batch=1, n_dense=1,
                           indices_dtype=np.int16, sorted_indices=True)
    assert m.nse == 2 and m.indices.dtype == np.int16 and m.indices_sorted
    assert int((m.todense() != 0).sum()) == 3 * 2 * 2
    with pytest.raises(ValueError):
        sparse.random_bcoo(kiln.random.PRNGKey(0), (3,), nse=5)


def test_multiply_sparse_broadcasting_and_mixed_dot():
    a, b = _sp((3, 4, 5), 0.5), _sp((1, 4, 1), 0.7)
    for na, nbb in [(0, 0), (1, 0), (0, 1), (2, 1)]:
        A = sparse.BCOO.fromdense(a, n_batch=na)
        B = sparse.BCOO.fromdense(b, n_batch=nbb)
        np.testing.assert_allclose((A * B).todense(), a * b, rtol=1e-6)
    lhs = sparse.BCOO.fromdense(np.eye(6, dtype=np.float32), n_batch=1)
    rhs = sparse.BCOO.fromdense(np.arange(6.0, dtype=np.float32))
    np.testing.assert_array_equal((lhs @ rhs).todense(), np.arange(6.0))


# -- BCSR ------------------------------------------------------------------------------------

@pytest.mark.parametrize("nb,nd", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_bcsr(nb, nd):
    shape = (2,) * nb + (4, 5) + (3,) * nd
    x = _sp(shape)
    s = sparse.BCSR.fromdense(x, n_batch=nb, n_dense=nd)
    assert (s.n_batch, s.n_dense, s.n_sparse) == (nb, nd, 2)
    assert s.indptr.shape == (2,) * nb + (5,)
    np.testing.assert_array_equal(s.todense(), x)
    np.testing.assert_array_equal(kiln.jit(lambda s: s.todense())(s), x)
    np.testing.assert_array_equal(s.to_bcoo().todense(), x)
    np.testing.assert_array_equal(sparse.BCSR.from_bcoo(s.to_bcoo()).todense(), x)
    np.testing.assert_array_equal(sparse.bcsr_extract(s.indices, s.indptr, x), s.data)
    rhs = _sp((5, 2), 1.0)
    dn = (((nb + 1,), (0,)), ((), ()))
    np.testing.assert_allclose(sparse.bcsr_dot_general(s, rhs, dimension_numbers=dn),
                               lax.dot_general(x, rhs, dn), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sparse.bcsr_concatenate([s, s], dimension=nb).todense(),
                                  np.concatenate([x, x], nb))
    if nb:
        np.testing.assert_array_equal(kiln.vmap(sparse.todense)(s), x)
        out = kiln.vmap(lambda t: sparse.empty(t.shape, t.dtype, sparse_format="bcsr",
                                               n_dense=nd))(x)
        assert isinstance(out, sparse.BCSR) and out.shape == x.shape and out.n_batch == 1


def test_bcsr_matmul_scipy_and_grad():
    a = ssp.random(6, 5, density=0.4, format="csr", random_state=3, dtype=np.float32)
    s = sparse.BCSR.from_scipy_sparse(a)
    v = _sp((5,), 1.0)
    np.testing.assert_allclose(s @ v, a @ v, rtol=1e-5)

    def f(data):
        return jnp.sum(sparse.BCSR((data, s.indices, s.indptr), shape=s.shape) @ v)
    np.testing.assert_allclose(kiln.grad(f)(s.data), v[a.indices], rtol=1e-6)
    with pytest.raises(ValueError, match="2 sparse dimensions"):
        sparse.BCSR.fromdense(np.ones(3, np.float32))


# -- sparsify and linalg ---------------------------------------------------------------------

def test_sparsify():
    x = _sp((4, 5))
    m = sparse.BCOO.fromdense(x)

    def f(a, v):
        return (2 * jnp.sin(a)).T @ v
    v = _sp((4,), 1.0)
    np.testing.assert_allclose(sparse.sparsify(f)(m, v), 2 * np.sin(x).T @ v, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(kiln.jit(sparse.sparsify(f))(m, v), 2 * np.sin(x).T @ v,
                               rtol=1e-5, atol=1e-6)
    cat = sparse.sparsify(functools.partial(lax.concatenate, dimension=0))([m, m])
    assert isinstance(cat, sparse.BCOO)
    np.testing.assert_array_equal(cat.todense(), np.concatenate([x, x]))
    red = sparse.sparsify(lambda a: (a * a).sum(1))(m)
    assert isinstance(red, sparse.BCOO)
    np.testing.assert_allclose(red.todense(), (x * x).sum(1), rtol=1e-6)
    with pytest.raises(NotImplementedError, match="exp"):
        sparse.sparsify(jnp.exp)(m)
    assert sparse.sparsify(jnp.exp)(1.0) == pytest.approx(np.e)
    b = sparse.BCSR.fromdense(x)
    np.testing.assert_allclose(sparse.sparsify(lambda a: a @ np.ones(5, np.float32))(b),
                               x.sum(1), rtol=1e-5)


def test_spsolve():
    a = (np.eye(6) * 4 + _sp((6, 6), 0.3)).astype(np.float32)
    d, i, p = sparse.csr._csr_fromdense(a, nse=int((a != 0).sum()))
    b = _sp((6,), 1.0)
    x = sparse.linalg.spsolve(d, i, p, b)
    np.testing.assert_allclose(a @ np.asarray(x), b, rtol=1e-4, atol=1e-5)
    g = kiln.grad(lambda b: jnp.sum(sparse.linalg.spsolve(d, i, p, b)))(b)
    np.testing.assert_allclose(g, np.linalg.solve(a.T, np.ones(6)), rtol=1e-4)
    with pytest.raises(AttributeError, match="lobpcg"):
        _ = sparse.linalg.lobpcg_standard


def test_not_provided():
    with pytest.raises(AttributeError, match="not provided"):
        _ = sparse.coo_spmv_p
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sparse.bcoo_update_layout(sparse.BCOO.fromdense(M), n_batch=0)
