"""Buffer donation (``donate_argnums``/``donate_argnames``) and ``memory_analysis``,
against JAX's behaviour."""
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def _f(x, y):
    return x * 2 + y


def test_donated_array_is_deleted_and_reading_it_raises():
    f = kiln.jit(_f, donate_argnums=(0,))
    x, y = jnp.ones((2, 3)), jnp.ones((2, 3))
    np.testing.assert_array_equal(np.asarray(f(x, y)), np.full((2, 3), 3.0))
    assert x.is_deleted() and not y.is_deleted()
    assert x.shape == (2, 3) and x.dtype == np.float32
    msg = r"Array has been deleted with shape=float32\[2,3\]\."
    with pytest.raises(RuntimeError, match=msg):
        x + 1
    with pytest.raises(RuntimeError, match=msg):
        np.asarray(x)
    with pytest.raises(RuntimeError, match=msg):
        f(x, y)
    with pytest.raises(RuntimeError, match=msg):
        jnp.sin(x)


def test_donate_argnames_and_inference_through_the_signature():
    f = kiln.jit(_f, donate_argnames="y")
    x, y = jnp.ones(4), jnp.ones(4)
    f(x, y)
    assert y.is_deleted() and not x.is_deleted()
    g = kiln.jit(_f, donate_argnums=1)
    x, y = jnp.ones(4), jnp.ones(4)
    g(x, y=y)
    assert y.is_deleted() and not x.is_deleted()


def test_unusable_donation_warns_and_keeps_the_array():
    g = kiln.jit(lambda x: x.sum(), donate_argnums=0)
    z = jnp.ones(4)
    with pytest.warns(UserWarning, match=r"Some donated buffers were not usable: float32\[4\]"):
        g(z)
    assert not z.is_deleted()
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # warned once per compilation
        g(jnp.ones(4))


def test_outputs_are_matched_to_donations_in_order_by_shape_and_dtype():
    f = kiln.jit(lambda a, b, c: (a + 1, c.astype(jnp.int32)), donate_argnums=(0, 1, 2))
    a, b, c = jnp.ones(3), jnp.ones(3), jnp.ones(5)
    with pytest.warns(UserWarning, match=r"float32\[3\], float32\[5\]"):
        f(a, b, c)
    assert a.is_deleted() and not b.is_deleted() and not c.is_deleted()


def test_numpy_arguments_and_pytrees():
    f = kiln.jit(lambda t: {"w": t["w"] - 0.1 * t["g"], "g": t["g"]}, donate_argnums=0)
    w = np.ones(3, np.float32)
    out = f({"w": w, "g": np.ones(3, np.float32)})
    np.testing.assert_allclose(np.asarray(out["w"]), 0.9)
    np.testing.assert_array_equal(w, 1.0)       # a NumPy argument is never touched
    tree = {"w": jnp.ones(3), "g": jnp.ones(3)}
    f(tree)
    assert tree["w"].is_deleted() and tree["g"].is_deleted()


def test_static_and_donated_cannot_overlap():
    with pytest.raises(ValueError, match="static"):
        kiln.jit(_f, static_argnums=0, donate_argnums=0)


def test_no_deletion_inside_other_transformations():
    f = kiln.jit(_f, donate_argnums=0)
    x = jnp.ones(3)
    kiln.grad(lambda x: f(x, x).sum())(x)
    assert not x.is_deleted()


def test_memory_analysis_fields():
    f = kiln.jit(lambda x, y: (jnp.tanh(x @ y) + 1.0).sum(axis=0), donate_argnums=0)
    x = jnp.ones((64, 32))
    m = f.lower(x, jnp.ones((32, 32))).compile().memory_analysis()
    assert m.argument_size_in_bytes == (64 * 32 + 32 * 32) * 4
    assert m.output_size_in_bytes == 32 * 4
    assert m.alias_size_in_bytes == 0           # no output of x's shape
    assert m.temp_size_in_bytes >= 64 * 32 * 4  # the matrix product
    assert m.peak_memory_in_bytes == (m.argument_size_in_bytes + m.output_size_in_bytes
                                      + m.temp_size_in_bytes - m.alias_size_in_bytes)
    g = kiln.jit(_f, donate_argnums=0)
    m = g.lower(jnp.ones(8), jnp.ones(8)).compile().memory_analysis()
    assert m.alias_size_in_bytes == 32


def test_matches_jax_semantics():
    jax = pytest.importorskip("jax")
    for lib in (jax, kiln):
        f = lib.jit(_f, donate_argnums=(0,))
        x, y = lib.numpy.ones(4), lib.numpy.ones(4)
        f(x, y)
        assert x.is_deleted() and not y.is_deleted()
        with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[4\]"):
            x + 1


def test_unsafe_buffer_pointer_follows_donated_memory():
    """``Array.unsafe_buffer_pointer()`` is the buffer's address: a donated input whose
    memory the output took over gives the output the same pointer (JAX's check)."""
    f = kiln.jit(lambda x: x + 1.0, donate_argnums=0)
    x = kiln.numpy.arange(100000.0)
    p = x.unsafe_buffer_pointer()
    assert isinstance(p, int) and p != 0
    y = f(x)
    y.block_until_ready()
    if x.is_deleted():
        with pytest.raises(RuntimeError):
            x.unsafe_buffer_pointer()
    p2 = y.unsafe_buffer_pointer()
    z = f(y)
    assert z.unsafe_buffer_pointer() in (p2, p) or not y.is_deleted()


def test_unsafe_buffer_pointer_of_a_lazy_value_gives_it_a_buffer():
    x = kiln.numpy.zeros(1000)          # stored as a broadcast scalar
    p = x.unsafe_buffer_pointer()
    assert p == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(np.asarray(x), np.zeros(1000))


def test_compile_checks_compiler_option_names():
    from kiln.errors import JaxRuntimeError
    lowered = kiln.jit(lambda x: 2 * x).lower(1.0)
    assert float(lowered.compile(compiler_options={"xla_gpu_autotune_level": "0"})(3.0)) == 6.0
    with pytest.raises(JaxRuntimeError, match="No such compile option"):
        lowered.compile(compiler_options={"an option that does not make sense": "bad"})
