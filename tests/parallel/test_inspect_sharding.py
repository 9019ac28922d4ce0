"""``jax.debug.inspect_array_sharding`` and ``debug.print(partitioned=True)``: the layout
of a value eagerly, inside a plain ``jit`` (once per compilation, the one device), inside
a ``jit`` partitioned over sharded arguments (the propagated ``NamedSharding``), under
``grad``/``vmap``; a partitioned print runs on every device over its blocks."""
import contextlib
import io

import numpy as np

import kiln
import kiln.numpy as jnp
from kiln import debug
from kiln.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding


def _mesh(n, name="x"):
    return Mesh(np.array(kiln.devices()[:n]), (name,))


def test_eager_calls_back_with_the_arrays_sharding():
    seen = []
    s = NamedSharding(_mesh(2), PartitionSpec("x"))
    x = kiln.device_put(np.arange(4.), s)
    debug.inspect_array_sharding({"a": x, "b": jnp.ones(2)}, callback=seen.append)
    assert seen[0] == s and isinstance(seen[1], SingleDeviceSharding)


def test_jit_calls_back_once_per_compilation():
    seen = []

    def f(x):
        debug.inspect_array_sharding(x, callback=seen.append)
        return x * 2

    g = kiln.jit(f)
    np.testing.assert_array_equal(g(np.arange(3.)), [0., 2., 4.])
    g(np.arange(3.))
    assert len(seen) == 1 and isinstance(seen[0], SingleDeviceSharding)
    assert len(seen[0].device_set) == 1
    kiln.jit(kiln.grad(lambda x: f(x).sum()))(np.arange(3.))
    assert len(seen) == 2
    kiln.vmap(f)(np.ones((2, 3)))       # eagerly: the batched array's sharding, once
    assert len(seen) == 3


def test_partitioned_jit_reports_the_propagated_layout():
    seen = []

    def f(x):
        y = jnp.sin(x)
        debug.inspect_array_sharding(y, callback=seen.append)
        debug.inspect_array_sharding(y.sum(0), callback=seen.append)
        return y

    mesh = _mesh(2)
    x = kiln.device_put(np.arange(8.).reshape(2, 4), NamedSharding(mesh, PartitionSpec("x")))
    out = kiln.jit(f)(x)
    np.testing.assert_allclose(out, np.sin(np.arange(8.).reshape(2, 4)), rtol=1e-6)
    assert seen == [NamedSharding(mesh, PartitionSpec("x")), NamedSharding(mesh, PartitionSpec())]
    sj = kiln.jit(f, in_shardings=NamedSharding(mesh, PartitionSpec(None, "x")))
    sj(np.arange(8.).reshape(2, 4))
    assert seen[2] == NamedSharding(mesh, PartitionSpec(None, "x"))


def test_partitioned_print_runs_per_device_on_its_blocks():
    mesh = _mesh(2)
    x = kiln.device_put(np.arange(8).reshape(2, 4), NamedSharding(mesh, PartitionSpec(None, "x")))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        kiln.jit(lambda v: debug.print("v={}", v, partitioned=True))(x)
        kiln.jit(kiln.vmap(lambda v: debug.print("r={}", v, partitioned=True)))(x)
        kiln.jit(lambda v: debug.print("w={}", v))(x)   # not partitioned: once, whole
    lines = sorted(buf.getvalue().splitlines())
    assert lines == sorted(["v=[[0 1]\n [4 5]]".split("\n")[0], " [4 5]]", "v=[[2 3]",
                            " [6 7]]", "r=[0 1]", "r=[2 3]", "r=[4 5]", "r=[6 7]",
                            "w=[[0 1 2 3]", " [4 5 6 7]]"])


def test_visualize_array_sharding_inside_jit():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        kiln.jit(lambda: debug.visualize_array_sharding(jnp.zeros(8)) or jnp.zeros(1))()
    assert "CPU 0" in buf.getvalue()
