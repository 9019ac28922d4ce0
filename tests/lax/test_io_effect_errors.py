"""``io_callback`` (JAX's IO effect) where JAX refuses it: under a batched ``cond``
predicate, in a ``while_loop`` with a batched predicate, and in ``checkpoint``'s partial
evaluation (``grad`` of a rematerialized function); debug prints stay allowed there. Also
``jax.experimental.pjit`` and ``NamedSharding._device_assignment`` (JAX's
python_callback_test reads them)."""
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.experimental import io_callback


def test_vmap_of_cond_with_io_callback():
    def f(pred):
        return lax.cond(pred, lambda: io_callback(lambda: None, None),
                        lambda: io_callback(lambda: None, None))
    with pytest.raises(NotImplementedError, match="IO effect not supported in vmap-of-cond"):
        kiln.vmap(f)(jnp.array([True, False]))
    seen = []
    # An unbatched predicate is fine.
    kiln.vmap(lambda x: lax.cond(True, lambda: io_callback(lambda: seen.append(1), None),
                                 lambda: None) or x)(jnp.arange(2))
    assert seen


def test_vmap_of_while_with_io_callback_and_a_batched_predicate():
    def f(i):
        def body(i):
            io_callback(lambda x: None, None, i)
            return i + 1
        return lax.while_loop(lambda i: i < 5, body, i)
    with pytest.raises(NotImplementedError, match="while_loop with batched predicate"):
        kiln.vmap(f)(jnp.array([0, 4]))
    np.testing.assert_array_equal(
        np.asarray(kiln.vmap(lambda i: lax.while_loop(lambda i: i < 5, lambda i: i + 1, i))(
            jnp.array([0, 4]))), [5, 5])


def test_checkpoint_partial_eval_with_io_callback():
    @kiln.grad
    @kiln.checkpoint
    def f(x, y):
        io_callback(lambda x: x, y, y)
        return x
    with pytest.raises(NotImplementedError, match="Effects not supported in partial-eval"):
        f(2.0, 3.0)

    @kiln.grad
    @kiln.checkpoint
    def g(x):
        kiln.debug.print("x={}", x)          # a debug effect: replayed, allowed
        return x * x
    assert float(g(3.0)) == 6.0


def test_experimental_pjit_and_device_assignment():
    from kiln.experimental import pjit
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f = pjit.pjit(lambda x: x * 2)
    assert any(issubclass(x.category, DeprecationWarning) for x in w)
    np.testing.assert_array_equal(np.asarray(f(jnp.ones(2))), [2.0, 2.0])
    mesh = kiln.make_mesh((2,), ("x",))
    s = kiln.sharding.NamedSharding(mesh, kiln.sharding.PartitionSpec("x"))
    assert s._device_assignment == tuple(mesh.devices.flat)
    d = kiln.devices()[0]
    assert kiln.sharding.SingleDeviceSharding(d)._device_assignment == (d,)


def test_io_callback_in_a_shard_map_without_outputs_runs_once_per_shard():
    # A body returning None was staged as a shard_map equation and then emulated again
    # (its None result read as "not staged"): each callback ran twice per shard under jit.
    import collections

    from kiln.experimental.shard_map import shard_map
    from kiln.sharding import Mesh
    from kiln.sharding import PartitionSpec as P
    mesh = Mesh(np.array(kiln.devices()[:4]), ("x",))
    got = collections.defaultdict(list)

    def record(sid, x):
        got[int(np.asarray(sid).item())].append(np.asarray(x).tolist())

    def body(sid, x):
        io_callback(record, None, sid, x, ordered=False)
        io_callback(record, None, sid, x + 1, ordered=False)
    f = shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=None)
    prims = [e.primitive.name for e in kiln.make_jaxpr(f)(jnp.arange(4), jnp.arange(8)).jaxpr.eqns]
    assert prims == ["shard_map"]
    kiln.jit(f)(jnp.arange(4), jnp.arange(8))
    kiln.effects_barrier()
    assert dict(got) == {i: [[2 * i, 2 * i + 1], [2 * i + 1, 2 * i + 2]] for i in range(4)}
