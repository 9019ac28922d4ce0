"""NumPy and Python-scalar leaves on the cached-``jit`` fast path (``kiln_rt.tree_sig``
with ``host``; ``kiln.jitting._tree_key``).

A NumPy argument already of its canonical dtype, C-contiguous and aligned is read in
place by a synchronous call (no copy: the program has read it when the call returns)
and copied when the call is dispatched asynchronously (the program runs later). Either
way, changing the array after the call never changes a result, including outputs that
are the argument itself or a reshape of it (JAX's outputs are its own buffers).
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import jitting, tree_util
from kiln.config import config_context

rt = pytest.importorskip("kiln.compiler.build.runtime")

N = 1 << 20             # 4 MiB of float32: heavy enough for asynchronous dispatch


class Box:
    """A registered pytree node the native walk does not take (Python's flattening
    keys the call instead)."""

    def __init__(self, x):
        self.x = x


tree_util.register_pytree_node(Box, lambda b: ((b.x,), None), lambda _, c: Box(c[0]))


@pytest.fixture(scope="module")
def host_walk():
    rt.get_run()
    fn = rt.tree_sig()
    if fn is None:
        pytest.skip("kiln_rt (the runtime extension) is not built on this machine")
    return lambda tree, x64=False: fn(tree, jitting.Array, tree_util.native_walk_types,
                                      jitting._SIG_MARKERS, jitting._host_canon(x64))


def test_walk_keys_host_leaves_as_tracing_types_them(host_walk):
    f32 = np.ones(3, np.float32)
    f64 = np.ones(3)
    sig, vals, borrowed = host_walk(({"x": f32, "y": f64}, 2, 0.5, True))
    leaves = [e for e in sig if len(e) == 3]
    assert leaves == [((3,), np.dtype("float32"), False), ((3,), np.dtype("float32"), False),
                      ((), np.dtype("int32"), True), ((), np.dtype("float32"), True),
                      ((), np.dtype("bool"), False)]
    assert vals[0] is f32 and borrowed == [0]           # canonical: the array itself
    assert vals[1].dtype == np.float32 and not np.shares_memory(vals[1], f64)
    assert [v.dtype for v in vals[2:]] == [np.int32, np.float32, np.bool_]
    assert vals[3] == np.float32(0.5) and vals[2] == 2 and vals[4]


def test_walk_copies_what_is_not_canonical(host_walk):
    strided = np.arange(8, dtype=np.float32)[::2]
    fortran = np.asfortranarray(np.ones((3, 2), np.float32))
    swapped = np.ones(3, ">f4")                  # not a key of host: Python's path
    sig, vals, borrowed = host_walk((strided, fortran))
    assert borrowed == []
    assert vals[0].flags.c_contiguous and vals[1].flags.c_contiguous
    np.testing.assert_array_equal(vals[0], strided)
    np.testing.assert_array_equal(vals[1], fortran)
    assert host_walk((swapped,)) is None
    assert host_walk((2 ** 31,)) is None             # beyond int32: Python's path
    assert host_walk((np.ones(2, np.float32).view(np.matrix),)) is None
    assert host_walk((np.ones(2),), x64=True)[0][-1][1] == np.dtype("float64")


def _copied_bytes(f, *args) -> int:
    """Bytes allocated at most during ``f(*args)`` (results read): NumPy's allocations
    (tracemalloc) plus blocks taken from the runtime's huge-page allocator."""
    def blocks():
        st = rt.pool_stats()
        return st.get("hits", 0) + st.get("maps", 0)
    n0 = blocks()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = f(*args)
        kiln.block_until_ready(out)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak + (blocks() - n0) * N * 4


@pytest.mark.parametrize("wrap", [lambda x: {"x": x}, lambda x: Box(x)],
                         ids=["native-walk", "python-walk"])
def test_synchronous_call_reads_numpy_argument_in_place(wrap):
    f = kiln.jit(lambda t: jnp.sum(t["x"] if isinstance(t, dict) else t.x))
    x = np.ones(N, np.float32)
    with config_context(jax_cpu_enable_async_dispatch=False):
        for _ in range(3):
            f(wrap(x))
        copied = _copied_bytes(f, wrap(x))
    assert copied < N * 4 // 4, copied                # no 4 MiB copy of x
    with config_context(jax_cpu_enable_async_dispatch=True):
        # dispatched asynchronously (it may run after the call): x is copied
        assert _copied_bytes(f, wrap(x)) >= N * 4


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("fn", [lambda t: t["x"], lambda t: t["x"].reshape(-1, 2),
                                lambda t: (t["x"] * 2.0, t["x"])],
                         ids=["identity", "reshape", "pair"])
def test_changing_the_argument_after_the_call_changes_no_result(fn, async_):
    f = kiln.jit(fn)
    x = np.ones(N, np.float32)
    with config_context(jax_cpu_enable_async_dispatch=async_):
        for _ in range(3):
            f({"x": x})
        out = f({"x": x})
        x[:] = -7.0
        for leaf in tree_util.tree_leaves(out):
            v = np.asarray(leaf)
            assert (v == 1.0).all() or (v == 2.0).all()
            assert not np.shares_memory(v, x)


def test_scalars_and_numpy_leaves_one_trace_same_values():
    traces = []

    def f(p, batch, lr, flag):
        traces.append(1)
        return p - lr * batch.mean(0) * jnp.where(flag, 1.0, -1.0)
    g = kiln.jit(f)
    p = jnp.zeros(8)
    for i in range(4):
        batch = np.full((2, 8), float(i), np.float32)
        got = g(p, batch, 0.5, i % 2 == 0)
        want = f(p, jnp.asarray(batch), 0.5, jnp.asarray(i % 2 == 0))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert len(traces) == 1 + 4
    key = g._tree_key((p, batch, 0.5, True), {})
    assert key[0][0] is jitting._TREE_KEY_NATIVE and key[2] == [1]
