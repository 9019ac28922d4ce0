"""``lax.ragged_dot``/``ragged_dot_general`` (issue 26): values against a NumPy reference
and JAX (when installed), dtypes, batch dimensions and per-batch group sizes, errors;
``jit``, ``vmap`` and ``grad`` (compared with JAX's gradients)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

try:
    import jax
except ImportError:  # pragma: no cover
    jax = None


def _ref(lhs, rhs, gs):
    out = np.zeros((lhs.shape[0], rhs.shape[-1]), np.float32)
    start = 0
    for i, size in enumerate(gs):
        out[start:start + size] = lhs[start:start + size] @ rhs[i]
        start += size
    return out


def _args(m=7, k=3, n=4, g=3, seed=0, gs=None):
    rng = np.random.RandomState(seed)
    lhs = rng.randn(m, k).astype(np.float32)
    rhs = rng.randn(g, k, n).astype(np.float32)
    gs = np.array(gs if gs is not None else [2, 0, 4], np.int32)
    return lhs, rhs, gs


@pytest.mark.parametrize("gs", [[2, 0, 4], [7, 0, 0], [1, 1, 1]])
def test_values_against_reference_and_jax(gs):
    lhs, rhs, gs = _args(gs=gs)
    out = lax.ragged_dot(lhs, rhs, gs)
    assert out.shape == (7, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out, _ref(lhs, rhs, gs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.jit(lax.ragged_dot)(lhs, rhs, gs), out, rtol=1e-6)
    if jax is not None:
        np.testing.assert_allclose(out, np.asarray(jax.lax.ragged_dot(lhs, rhs, gs)),
                                   rtol=1e-5, atol=1e-6)


def test_dtypes():
    lhs, rhs, gs = _args()
    bf = kiln.numpy.bfloat16
    assert lax.ragged_dot(lhs.astype(bf), rhs.astype(bf), gs).dtype == bf
    assert lax.ragged_dot(lhs.astype(bf), rhs.astype(bf), gs,
                          preferred_element_type=np.float32).dtype == np.float32


def test_grad_and_vmap():
    lhs, rhs, gs = _args(seed=1)

    def loss(l, r):
        return (lax.ragged_dot(l, r, gs) ** 2).sum()
    gl, gr = kiln.grad(loss, argnums=(0, 1))(lhs, rhs)
    assert gl.shape == lhs.shape and gr.shape == rhs.shape
    np.testing.assert_array_equal(np.asarray(gr)[1], 0)     # the empty group
    if jax is not None:
        jl, jr = jax.grad(lambda l, r: (jax.lax.ragged_dot(l, r, gs) ** 2).sum(),
                          argnums=(0, 1))(lhs, rhs)
        np.testing.assert_allclose(gl, np.asarray(jl), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(gr, np.asarray(jr), rtol=1e-4, atol=1e-5)
    gss = np.stack([gs, np.array([3, 3, 1], np.int32)])
    out = kiln.vmap(lax.ragged_dot)(np.stack([lhs, lhs]), np.stack([rhs, rhs]), gss)
    for b in range(2):
        np.testing.assert_allclose(out[b], _ref(lhs, rhs, gss[b]), rtol=1e-5, atol=1e-6)


def test_general_with_batch_dimension():
    rng = np.random.RandomState(2)
    lhs = rng.randn(2, 5, 3).astype(np.float32)       # batch, ragged, contracting
    rhs = rng.randn(3, 2, 3, 4).astype(np.float32)    # group, batch, contracting, free
    gs = np.array([[1, 2, 2], [5, 0, 0]], np.int32)
    dn = lax.RaggedDotDimensionNumbers((([2], [2]), ([0], [1])), [1], [0])
    out = lax.ragged_dot_general(lhs, rhs, gs, dn)
    assert out.shape == (2, 5, 4)
    for b in range(2):
        np.testing.assert_allclose(out[b], _ref(lhs[b], rhs[:, b], gs[b]), rtol=1e-5,
                                   atol=1e-6)
    if jax is not None:
        ref = jax.lax.ragged_dot_general(lhs, rhs, gs, jax.lax.RaggedDotDimensionNumbers(
            (([2], [2]), ([0], [1])), [1], [0]))
        np.testing.assert_allclose(out, np.asarray(ref), rtol=1e-5, atol=1e-6)


def test_errors():
    lhs, rhs, gs = np.ones((11, 5)), np.ones((3, 5, 7)), np.ones((3,), np.int32)
    dn = lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0, 1], [0])
    with pytest.raises(TypeError, match="exactly one lhs ragged dimension"):
        lax.ragged_dot_general(lhs, rhs, gs, dn)
    dn = lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [2], [0])
    with pytest.raises(TypeError, match="nonnegative and less than the number of axes"):
        lax.ragged_dot_general(lhs, rhs, gs, dn)
    dn = lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])
    with pytest.raises(TypeError, match=r"expected group_sizes to have shape \(3,\)"):
        lax.ragged_dot_general(lhs, rhs, np.ones((2, 3), np.int32), dn)
    dn = lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [1])
    with pytest.raises(TypeError, match="distinct from contracting and batch"):
        lax.ragged_dot_general(np.ones((11, 3)), np.ones((3, 3, 7)), gs, dn)
    dn = lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [1], [])
    with pytest.raises(TypeError, match="contracting dimensions to have the same shape"):
        lax.ragged_dot_general(lhs, np.ones((5, 7)), gs, dn)
    with pytest.raises(NotImplementedError, match="group_offset"):
        lax.ragged_dot(lhs, rhs, gs, group_offset=np.zeros(1, np.int32))


@pytest.mark.parametrize("lhs,rhs,gs,dn,msg", [
    ((2, 11, 5), (3, 2, 5, 7), (3,), ((([2], [2]), ([0], [1])), [0], [0]),
     "requires zero group dimensions in the rhs when lhs ragged dimension is contracting"),
    ((11, 5), (5, 7), (3,), ((([1], [0]), ([], [])), [0], []),
     "requires exactly one rhs group dimension when lhs ragged dimension is noncontracting"),
    ((11, 5), (3, 5, 7), (2,), ((([1], [1]), ([], [])), [0], [0]),
     "expected rhs group dimension size to be 2, got 3"),
    ((19, 11, 17, 5), (19, 17, 5, 7), (19, 11, 3), ((([2, 3], [1, 2]), ([0], [0])), [3], []),
     r"expected group_sizes to have shape \(19, 17, 3\), got \(19, 11, 3\)"),
])
def test_shape_errors_in_jax_order(lhs, rhs, gs, dn, msg):
    """JAX's shape checks come before kiln's unsupported-mode error."""
    dnums = lax.RaggedDotDimensionNumbers(*dn)
    with pytest.raises(TypeError, match=msg):
        lax.ragged_dot_general(jnp.ones(lhs), jnp.ones(rhs), jnp.ones(gs, jnp.int32), dnums)


@pytest.mark.parametrize("ls,rs,gs,dd,rag", [
    ((11, 5), (5, 7), (3,), (([1], [0]), ([], [])), [1]),          # ragged contracting
    ((2, 11, 5), (2, 5, 7), (2, 3), (([2], [1]), ([0], [0])), [2]),  # per-batch groups
    ((4, 11, 5), (4, 5, 7), (3,), (([2], [1]), ([0], [0])), [0]),    # ragged batch
])
def test_ragged_contracting_and_batch_modes(ls, rs, gs, dd, rag):
    rng = np.random.default_rng(0)
    lhs = rng.normal(size=ls).astype(np.float32)
    rhs = rng.normal(size=rs).astype(np.float32)
    n, g = ls[rag[0]], gs[-1]
    sizes = np.stack([np.diff(np.concatenate([[0], np.sort(rng.integers(0, n + 1, g - 1)),
                                              [n]])) for _ in range(int(np.prod(gs[:-1])))])
    sizes = sizes.reshape(gs).astype(np.int32)
    dn = lax.RaggedDotDimensionNumbers(dd, rag, [])
    out = lax.ragged_dot_general(lhs, rhs, sizes, dn)
    (lc, rc), (lb, rb) = dd
    if rag[0] in lb:            # a batch row belongs to one group: plain dot_general
        want = np.asarray(lax.dot_general(lhs, rhs, dd))
    else:                       # one product per group over its slice of the contraction
        k = rag[0]
        want = []
        for j in range(g):
            if sizes.ndim == 1:
                s0, s1 = sizes[:j].sum(), sizes[:j + 1].sum()
                sl = [slice(None)] * lhs.ndim
                sl[k] = slice(s0, s1)
                sr = [slice(None)] * rhs.ndim
                sr[rc[lc.index(k)]] = slice(s0, s1)
                want.append(np.asarray(lax.dot_general(lhs[tuple(sl)], rhs[tuple(sr)], dd)))
            else:
                rows = []
                for b in range(ls[0]):
                    s0, s1 = sizes[b, :j].sum(), sizes[b, :j + 1].sum()
                    rows.append(lhs[b, :, s0:s1] @ rhs[b, s0:s1, :])
                want.append(np.stack(rows))
        want = np.stack(want)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    jitted = kiln.jit(lambda a, b, c: lax.ragged_dot_general(a, b, c, dn))(lhs, rhs, sizes)
    np.testing.assert_allclose(jitted, want, rtol=1e-4, atol=1e-4)
    if jax is not None:
        jd = jax.lax.RaggedDotDimensionNumbers(dd, rag, [])
        np.testing.assert_allclose(out, jax.lax.ragged_dot_general(lhs, rhs, sizes, jd),
                                   rtol=1e-4, atol=1e-4)
