"""Config context managers are thread-local, as JAX's: ``with enable_x64():`` in one
thread is not seen by another; ``config.update`` sets the global value (JAX's
``x64_context_test.test_thread_safety``)."""
import threading

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.config import Config, config, config_context


def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()))
    t.start()
    t.join()
    return out["v"]


def test_two_threads_with_different_x64_contexts_overlap():
    barrier = threading.Barrier(2)
    got = {}

    def run(flag):
        with kiln.enable_x64(flag):
            barrier.wait()          # both contexts are active now
            got[flag] = jnp.array(np.int64(0)).dtype
            barrier.wait()

    threads = [threading.Thread(target=run, args=(f,)) for f in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {False: np.dtype("int32"), True: np.dtype("int64")}
    assert jnp.array(np.int64(0)).dtype == np.int32


def test_a_context_is_not_seen_by_other_threads_and_is_removed_on_exit():
    with kiln.enable_x64():
        assert jnp.array(1.).dtype == np.float64
        assert _in_thread(lambda: (config.jax_enable_x64, jnp.array(1.).dtype)) == (
            False, np.dtype("float32"))
        assert kiln.jit(lambda x: x + 1)(np.float64(1)).dtype == np.float64
    assert not isinstance(Config.__dict__.get("jax_enable_x64"), property)
    assert "jax_enable_x64" not in Config.__dict__     # plain attribute reads again
    assert jnp.array(1.).dtype == np.float32


def test_update_sets_the_global_value_under_a_context():
    try:
        with kiln.enable_x64(False):
            config.update("jax_enable_x64", True)
            assert config.jax_enable_x64 is False          # this thread's value wins
            assert config.global_value("jax_enable_x64") is True
            assert _in_thread(lambda: jnp.array(1.).dtype) == np.float64
        assert config.jax_enable_x64 is True
        assert jnp.array(1.).dtype == np.float64
    finally:
        config.update("jax_enable_x64", False)


def test_nested_contexts_and_bad_values():
    with config_context(jax_numpy_rank_promotion="raise"):
        with config_context(jax_numpy_rank_promotion="warn"):
            assert config.jax_numpy_rank_promotion == "warn"
        assert config.jax_numpy_rank_promotion == "raise"
        assert _in_thread(lambda: config.jax_numpy_rank_promotion) == "allow"
        with pytest.raises(ValueError):
            with config_context(jax_numpy_rank_promotion="bad"):
                pass
        assert config.jax_numpy_rank_promotion == "raise"
    assert config.jax_numpy_rank_promotion == "allow"


def test_debug_nans_in_one_thread_only():
    started, done = threading.Event(), threading.Event()

    def other():
        with kiln.debug_nans(True):
            started.set()
            done.wait(10)

    t = threading.Thread(target=other)
    t.start()
    started.wait(10)
    try:
        assert np.isnan(float(jnp.log(jnp.float32(-1.))))        # no error here
        assert np.isnan(float(kiln.jit(jnp.log)(jnp.float32(-1.))))
    finally:
        done.set()
        t.join()
    with kiln.debug_nans(True), pytest.raises(FloatingPointError):
        jnp.log(jnp.float32(-1.))


def test_jit_fast_path_is_not_shared_across_a_context():
    f = kiln.jit(lambda x: x[:, None] + x[None, :1])
    x = jnp.ones(3)
    f(x)
    f(x)                      # cached on the fast path
    with config_context(jax_numpy_rank_promotion="raise"):
        assert f(x).shape == (3, 1)     # same ranks: still fine
    g = kiln.jit(lambda a, b: a + b)
    g(jnp.ones(3), jnp.ones((2, 3)))
    with config_context(jax_numpy_rank_promotion="raise"), pytest.raises(ValueError):
        g(jnp.ones(3), jnp.ones((2, 3)))


def test_spmd_device_threads_run_in_the_callers_context():
    with kiln.enable_x64():
        out = kiln.pmap(lambda x: x * 2)(np.ones((1, 2), np.float64))
        assert out.dtype == np.float64


def test_a_same_value_context_survives_a_global_update_from_another_thread():
    with kiln.enable_x64(False):          # the global value too: nothing changes here
        try:
            _in_thread(lambda: config.update("jax_enable_x64", True))
            assert config.jax_enable_x64 is False
            assert jnp.array(1.).dtype == np.float32
            assert _in_thread(lambda: jnp.array(1.).dtype) == np.float64
        finally:
            config.update("jax_enable_x64", False)
    assert jnp.array(1.).dtype == np.float32
