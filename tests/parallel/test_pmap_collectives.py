"""Every collective on pmap's device threads (kiln.parallel.collectives) against the same
collective's vmap batching rule (tested against JAX in tests/parallel/test_collectives.py)."""
import functools

import numpy as np
import pytest

import kiln
from kiln import lax

X = np.arange(4 * 8 * 3, dtype=np.float32).reshape(4, 8, 3) - 40
GROUPS = [[0, 1], [2, 3]]

CASES = {
    "psum": lambda v: lax.psum(v, "i"),
    "psum_groups": lambda v: lax.psum(v, "i", axis_index_groups=GROUPS),
    "pmax_groups": lambda v: lax.pmax(v, "i", axis_index_groups=[[0, 3], [1, 2]]),
    "pmin": lambda v: lax.pmin(v, "i"),
    "pmean": lambda v: lax.pmean(v, "i"),
    "all_gather": lambda v: lax.all_gather(v, "i", axis=1),
    "all_gather_tiled": lambda v: lax.all_gather(v, "i", axis=0, tiled=True),
    "all_gather_groups": lambda v: lax.all_gather(v, "i", axis_index_groups=GROUPS),
    "psum_scatter": lambda v: lax.psum_scatter(v[:4], "i", scatter_dimension=0),
    "psum_scatter_tiled": lambda v: lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True),
    "all_to_all": lambda v: lax.all_to_all(v, "i", split_axis=0, concat_axis=1, tiled=True),
    "all_to_all_untiled": lambda v: lax.all_to_all(v[:4], "i", 0, 0),
    "ppermute": lambda v: lax.ppermute(v, "i", [(0, 2), (2, 1), (1, 0)]),
    "pshuffle": lambda v: lax.pshuffle(v, "i", [3, 2, 0, 1]),
    "pswapaxes": lambda v: lax.pswapaxes(v[:4], "i", 0),
    "axis_index": lambda v: v * lax.axis_index("i"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pmap_collective_equals_vmap(name):
    f = CASES[name]
    got = kiln.pmap(f, axis_name="i")(X)
    want = kiln.vmap(f, axis_name="i")(X)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_two_named_axes_on_a_mesh():
    from kiln.sharding import Mesh
    from kiln.sharding import PartitionSpec as P
    mesh = Mesh(np.array(kiln.devices()).reshape(2, 4), ("a", "b"))
    x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)

    def f(v):
        return (lax.psum(v, ("a", "b")) + lax.all_gather(v, "b", tiled=True).sum(0)
                + lax.axis_index(("a", "b")))
    sm = kiln.shard_map(f, mesh=mesh, in_specs=P(("a", "b")), out_specs=P(("a", "b")))
    np.testing.assert_allclose(np.asarray(sm(x)), np.asarray(kiln.jit(sm)(x)), rtol=1e-6)


def test_grad_through_pmap_collectives_equals_vmap():
    def loss(mapper, v):
        g = functools.partial(mapper, axis_name="i")(
            lambda a: lax.psum_scatter(a * a, "i", tiled=True) + lax.all_gather(a, "i").sum(0))
        return (g(v) ** 2).sum()
    x = X[:, :4, 0]
    gp = kiln.grad(lambda v: loss(kiln.pmap, v))(x)
    gv = kiln.grad(lambda v: loss(kiln.vmap, v))(x)
    np.testing.assert_allclose(np.asarray(gp), np.asarray(gv), rtol=1e-6)
