"""Named axes are bound per thread (``batching.axis_env``), as the trace state: a thread
tracing under ``vmap(..., axis_name=...)`` never sees or unbinds another thread's axes;
threads acting for another (pmap's device threads, background builds) take its axes."""
import threading

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.extend.core import unsafe_get_axis_names_DO_NOT_USE as axis_names
from kiln.interpreters import batching


def test_a_thread_leaving_its_vmap_does_not_unbind_another_threads_axis():
    # Thread A binds 'j' (size 8), then thread B binds 'i' (size 4); A leaves its vmap
    # while B is still inside its own. With one process-wide stack, A's exit popped B's
    # 'i' and left A's 'j' bound in B.
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def fa(x):
        seen["a"] = axis_names()
        a_in.set()
        assert b_in.wait(10)
        return x

    def fb(x):
        b_in.set()
        assert a_out.wait(10)
        seen["b"] = axis_names()
        return x + lax.psum(1, "i")

    def run_a():
        try:
            kiln.vmap(fa, axis_name="j")(jnp.ones(8))
        finally:
            a_out.set()

    t = threading.Thread(target=run_a)
    t.start()
    assert a_in.wait(10)
    got = kiln.vmap(fb, axis_name="i")(jnp.zeros(4))
    t.join()
    np.testing.assert_array_equal(np.asarray(got), np.full(4, 4))
    assert seen["a"] == ["j"] and seen["b"] == ["i"]
    assert len(batching.axis_env) == 0


def test_an_axis_bound_in_another_thread_is_unbound_here():
    inside, done = threading.Event(), threading.Event()

    def f(x):
        inside.set()
        assert done.wait(10)
        return x

    t = threading.Thread(target=lambda: kiln.vmap(f, axis_name="k")(jnp.ones(3)))
    t.start()
    try:
        assert inside.wait(10)
        assert axis_names() == []
        with pytest.raises(NameError, match="unbound axis name: k"):
            batching.axis_size("k")
    finally:
        done.set()
        t.join()


def test_bound_axes_hands_a_threads_axes_to_another():
    batching.axis_env.append(("m", 5))
    try:
        snap = batching.axis_env.snapshot()
    finally:
        batching.axis_env.pop()
    out = {}

    def worker():
        out["before"] = axis_names()
        with batching.bound_axes(snap):
            out["inside"] = (axis_names(), batching.axis_size("m"))
        out["after"] = axis_names()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out == {"before": [], "inside": (["m"], 5), "after": []}


def test_pmap_inside_vmap_still_sees_the_outer_axis():
    # pmap's device threads act for the caller: an outer vmap's axis stays bound there.
    n = kiln.local_device_count()
    f = kiln.vmap(kiln.pmap(lambda x: lax.psum(x, "d") + lax.psum(1.0, "v"),
                            axis_name="d"), axis_name="v")
    x = np.arange(3 * n, dtype=np.float32).reshape(3, n)
    got = np.asarray(f(x))
    want = x.sum(axis=1, keepdims=True) + 3.0
    np.testing.assert_allclose(got, np.broadcast_to(want, x.shape))
