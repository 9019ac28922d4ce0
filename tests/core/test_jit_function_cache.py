"""The trace cache belongs to the function (as in JAX), weakly."""
import gc
import weakref

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def test_inline_jit_in_a_loop_traces_once():
    n = [0]

    def f(x):
        n[0] += 1
        return x * 2.0

    for _ in range(4):
        out = kiln.jit(f)(jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(out), [2.0, 2.0, 2.0])
    assert n[0] == 1
    kiln.jit(f)(jnp.ones(4))            # a new signature traces again
    assert n[0] == 2


def test_options_that_change_the_trace_get_their_own_cache():
    n = [0]

    def f(x, k):
        n[0] += 1
        return x * k

    kiln.jit(f, static_argnums=1)(jnp.ones(2), 3)
    kiln.jit(f, static_argnums=1)(jnp.ones(2), 3)
    assert n[0] == 1
    kiln.jit(f)(jnp.ones(2), 3)         # k traced, not static: a different trace
    assert n[0] == 2


def test_cache_does_not_keep_the_function_alive():
    def f(x):
        return x + 1

    kiln.jit(f)(jnp.ones(2))
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None


def test_unweakrefable_callables_still_jit():
    assert int(kiln.jit(abs)(jnp.int32(-3))) == 3


def test_clear_cache_retraces():
    n = [0]

    def f(x):
        n[0] += 1
        return x

    g = kiln.jit(f)
    g(jnp.ones(1))
    g.clear_cache()
    kiln.jit(f)(jnp.ones(1))
    assert n[0] == 2


def test_clear_caches_retraces_every_jitted_function():
    # jax.clear_caches(): all staging and compilation caches (BlackJAX's conftest calls it).
    n = [0, 0]

    def f(x):
        n[0] += 1
        return x * 2.0

    g = kiln.jit(f)
    h = kiln.jit(abs)                   # unweakrefable: a private cache, cleared too
    inner = kiln.jit(lambda x: (n.__setitem__(1, n[1] + 1), x + 1)[1])
    for _ in range(2):
        g(jnp.ones(2))
        h(jnp.int32(-2))
        inner(jnp.ones(2))
    assert n == [1, 1] and h._cache_size() == 1
    assert kiln.clear_caches() is None
    assert h._cache_size() == 0
    np.testing.assert_array_equal(np.asarray(g(jnp.ones(2))), [2.0, 2.0])
    inner(jnp.ones(2))
    assert n == [2, 2]
    g(jnp.ones(2))
    assert n[0] == 2


def test_clear_caches_matches_jax():
    jax = pytest.importorskip("jax")
    assert callable(jax.clear_caches) and jax.clear_caches() is None


def test_inline_jit_under_a_trace_sees_arrays():
    # jit(inline=True) inside another trace: Python scalars and NumPy values arrive as
    # arrays (weak for scalars), as in a traced call (BlackJAX's linear_map reads .dtype).
    import functools

    seen = []

    @functools.partial(kiln.jit, static_argnames=("k",), inline=True)
    def lin(a, b, *, k=1):
        seen.append((a.dtype, a.weak_type, b.dtype))
        return a * b * k

    def outer(b):
        y = lin(0.5, b, k=2)
        z = lin(np.float64(2.0), np.ones(2), k=1)
        assert seen[-2][:2] == (np.float32, True) and seen[-1] == (np.float32, False,
                                                                    np.float32)
        assert z.dtype == np.float32
        return y + z

    assert kiln.vmap(outer)(jnp.ones((3, 2))).shape == (3, 2)
    np.testing.assert_allclose(np.asarray(kiln.grad(lambda b: outer(b).sum())(jnp.ones(2))),
                               [1.0, 1.0])
    np.testing.assert_allclose(np.asarray(kiln.jit(outer)(jnp.ones(2))), [3.0, 3.0])
    with pytest.raises(TypeError, match="not a valid JAX type"):
        kiln.jit(lambda b: kiln.jit(lambda x: "s", inline=True)(b))(1.0)


def test_pytree_fast_path_serves_repeat_calls_without_retracing():
    """Calls with pytrees of concrete Arrays (and static arguments) hit a cache keyed by
    the tree, the leaf types and the static values: no retrace, the same results, and a
    new trace whenever one of those changes."""
    import numpy as np

    import kiln
    import kiln.numpy as jnp
    traces = []

    def f(tree, scale, x):
        traces.append(1)
        return {"sum": tree["a"] + tree["b"][0] * scale, "x": x * 2}

    tree = {"a": jnp.ones(3), "b": [jnp.arange(3.0)]}
    g = kiln.jit(f, static_argnums=1)
    for _ in range(3):
        out = g(tree, 2.0, jnp.ones(2))
    assert len(traces) == 1
    np.testing.assert_allclose(out["sum"], [1.0, 3.0, 5.0])
    g(tree, 3.0, jnp.ones(2))                               # a new static value
    g({"a": jnp.ones(3), "b": [jnp.ones(3), jnp.ones(1)]}, 2.0, jnp.ones(2))   # new tree
    g(tree, 2.0, jnp.ones(2, jnp.int32))                    # new leaf dtype
    g(tree, 2.0, 1.0)                                       # a Python scalar: slow path
    assert len(traces) == 5
    np.testing.assert_allclose(g(tree, 3.0, jnp.ones(2))["sum"], [1.0, 4.0, 7.0])
    assert len(traces) == 5


def test_pytree_fast_path_still_donates():
    import kiln
    import kiln.numpy as jnp
    jf = kiln.jit(lambda t: {k: v + 1 for k, v in t.items()}, donate_argnums=0)
    for _ in range(3):
        t = {"a": jnp.ones(4), "b": jnp.zeros(4)}
        out = jf(t)
        assert t["a"].is_deleted() and t["b"].is_deleted()
        assert float(out["a"][0]) == 2.0


def test_jit_of_an_unhashable_callable_gets_a_private_cache():
    # A callable object that cannot key the per-function cache (Equinox's Modules hold
    # arrays and raise TypeError from __hash__): jit keeps a cache per wrapper, and
    # clear_caches reaches it.
    import numpy as np

    import kiln
    import kiln.numpy as jnp

    class Affine:
        def __init__(self, w):
            self.w = w

        def __hash__(self):
            raise TypeError("unhashable: holds arrays")

        def __call__(self, x):
            return self.w * x + 1.0

    traces = []
    obj = Affine(jnp.arange(3.0))
    f = kiln.jit(lambda x: (traces.append(1), obj(x))[1])
    g = kiln.jit(obj)
    np.testing.assert_allclose(np.asarray(g(jnp.ones(3))), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(np.asarray(g(jnp.ones(3))), [1.0, 2.0, 3.0])
    assert g._cache_size() == 1
    f(jnp.ones(3))
    kiln.clear_caches()
    assert g._cache_size() == 0
    np.testing.assert_allclose(np.asarray(g(jnp.ones(3))), [1.0, 2.0, 3.0])
