"""Public JAX names and arguments kiln lacked (issue 26): ``lax.mul(out_dtype=)``,
``jnp.ravel_multi_index(dtype=)``, config flags, ``jax.default_device``,
``jax.transfer_guard``, ``checkpoint_policies``, ``fwd_and_bwd``, ``AccuracyMode``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def test_mul_out_dtype():
    x = jnp.full(3, 100, jnp.int8)
    y = jnp.full(3, 3, jnp.int8)
    out = lax.mul(x, y, out_dtype=jnp.int32)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [300, 300, 300])
    assert lax.mul(x, jnp.full(3, 3, jnp.int16), out_dtype=jnp.int32).dtype == np.int32
    assert kiln.jit(lambda a, b: lax.mul(a, b, out_dtype=jnp.int32))(x, y).dtype == np.int32
    out = kiln.vmap(lambda a, b: lax.mul(a, b, out_dtype=jnp.int32))(
        jnp.full((2, 3), 100, jnp.int8), jnp.full((2, 3), 3, jnp.int16))
    np.testing.assert_array_equal(out, np.full((2, 3), 300))
    g = kiln.grad(lambda a: lax.mul(a, jnp.float32(2), out_dtype=jnp.float32))(jnp.float16(1))
    assert g.dtype == np.float16 and g == 2
    with pytest.raises(TypeError):
        lax.mul(x, jnp.ones(3, jnp.int16))    # mixed dtypes need out_dtype


def test_mul_out_dtype_matches_jax():
    jax = pytest.importorskip("jax")
    x, y = np.full(3, 100, np.int8), np.full(3, 3, np.int16)
    ref = jax.lax.mul(x, y, out_dtype=np.int32)
    out = lax.mul(x, y, out_dtype=np.int32)
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)


_A, _B = np.array([1, 2, 0], np.int8), np.array([3, 0, 1], np.int8)


def test_ravel_multi_index_dtype():
    assert jnp.ravel_multi_index((_A, _B), (3, 4)).dtype == np.int8
    out = jnp.ravel_multi_index((_A, _B), (3, 4), dtype=jnp.int16)
    assert out.dtype == np.int16
    np.testing.assert_array_equal(out, np.ravel_multi_index((_A, _B), (3, 4)))
    out = jnp.ravel_multi_index((_A, _B), (3, 4), order="F", dtype=np.uint8)
    np.testing.assert_array_equal(out, np.ravel_multi_index((_A, _B), (3, 4), order="F"))
    with pytest.raises(ValueError, match="not large enough"):
        jnp.ravel_multi_index((_A, _B), (300, 4))
    with pytest.raises(ValueError, match="not an integer type"):
        jnp.ravel_multi_index((_A, _B), (3, 4), dtype=float)
    with pytest.raises(ValueError, match="not an integer type"):   # float promotes: as JAX
        jnp.ravel_multi_index((_A.astype(float), _B), (3, 4))
    with pytest.raises(TypeError, match="only int indices"):
        jnp.ravel_multi_index((_A.astype(float), _B), (3, 4), dtype=np.int32)
    f = kiln.jit(lambda a, b: jnp.ravel_multi_index((a, b), (3, 4), mode="wrap",
                                                    dtype=jnp.int16))
    assert f(_A, _B).dtype == np.int16
    g = kiln.vmap(lambda a, b: jnp.ravel_multi_index((a, b), (3, 4), mode="clip",
                                                     dtype=jnp.int16))
    np.testing.assert_array_equal(g(_A, _B), np.ravel_multi_index((_A, _B), (3, 4)))
    np.testing.assert_array_equal(jnp.ravel_multi_index((_A, _B), (3, 4), mode="ignore"),
                                  np.ravel_multi_index((_A, _B), (3, 4)))


def test_ravel_multi_index_matches_jax():
    jax = pytest.importorskip("jax")
    for kw in ({}, {"dtype": np.int16}, {"order": "F"}):
        ref = jax.numpy.ravel_multi_index((_A, _B), (3, 4), **kw)
        out = jnp.ravel_multi_index((_A, _B), (3, 4), **kw)
        assert out.dtype == ref.dtype
        np.testing.assert_array_equal(out, ref)


def test_random_seed_offset():
    base = np.asarray(kiln.random.key_data(kiln.random.key(3)))
    kiln.config.update("jax_random_seed_offset", 3)
    try:
        assert kiln.config.jax_random_seed_offset == 3
        np.testing.assert_array_equal(kiln.random.key_data(kiln.random.key(0)), base)
        np.testing.assert_array_equal(kiln.random.PRNGKey(0), base)
        f = kiln.jit(lambda s: kiln.random.key_data(kiln.random.key(s)))
        np.testing.assert_array_equal(f(0), base)
    finally:
        kiln.config.update("jax_random_seed_offset", 0)
    # the offset is part of jit's cache key: the same function retraces without it
    np.testing.assert_array_equal(f(0), kiln.random.key_data(kiln.random.key(0)))


def test_random_seed_offset_matches_jax():
    jax = pytest.importorskip("jax")
    with _offset(jax, 5), _offset(kiln, 5):
        np.testing.assert_array_equal(kiln.random.key_data(kiln.random.key(1)),
                                      jax.random.key_data(jax.random.key(1)))


class _offset:
    def __init__(self, mod, n):
        self.mod, self.n = mod, n

    def __enter__(self):
        self.mod.config.update("jax_random_seed_offset", self.n)

    def __exit__(self, *exc):
        self.mod.config.update("jax_random_seed_offset", 0)


def test_default_device():
    assert kiln.config.jax_default_device is None
    dev = kiln.devices()[0]
    with kiln.default_device(dev):
        assert kiln.config.jax_default_device == dev
        assert jnp.ones(2).devices() == {dev}
    with kiln.default_device("cpu"):
        assert kiln.jit(lambda x: x + 1)(jnp.ones(2)).devices() == {dev}
    assert kiln.config.jax_default_device is None
    with pytest.raises(ValueError, match="unknown platform"):
        kiln.config.update("jax_default_device", "tpu")


def test_transfer_guard():
    with kiln.transfer_guard("allow"):
        assert kiln.config.jax_transfer_guard_host_to_device == "allow"
        np.testing.assert_array_equal(kiln.jit(lambda x: x + 1)(np.ones(2)), [2, 2])
    assert kiln.config.jax_transfer_guard_host_to_device is None
    for cm in (kiln.transfer_guard, kiln.transfer_guard_host_to_device,
               kiln.transfer_guard_device_to_host, kiln.transfer_guard_device_to_device):
        with cm("disallow"):       # levels are accepted (tests/core/test_transfer_guard.py)
            pass
    assert kiln.config.jax_transfer_guard_device_to_host is None
    with pytest.raises(ValueError, match="Invalid value"):
        kiln.transfer_guard("forbid").__enter__()


def test_debug_key_reuse_flag():
    assert kiln.config.jax_debug_key_reuse is False
    with kiln.debug_key_reuse(False):
        kiln.random.normal(kiln.random.key(0))
    with pytest.raises(NotImplementedError, match="key-reuse checker"):
        with kiln.debug_key_reuse(True):
            pass
    assert kiln.config.jax_debug_key_reuse is False


def test_svd_divide_and_conquer():
    from kiln.lax import linalg
    x = np.random.default_rng(0).random((2, 4, 3)).astype(np.float32)
    alg = linalg.SvdAlgorithm.DIVIDE_AND_CONQUER
    assert alg.value == "divide_and_conquer"
    s = linalg.svd(x, compute_uv=False, algorithm=alg)
    np.testing.assert_allclose(s, np.linalg.svd(x, compute_uv=False), rtol=1e-5)
    s_jit = kiln.jit(lambda a: linalg.svd(a, compute_uv=False, algorithm=alg))(x)
    np.testing.assert_allclose(s_jit, s, rtol=1e-5)
    g = kiln.grad(lambda a: linalg.svd(a, compute_uv=False, algorithm=alg).sum())(x[0])
    assert g.shape == (4, 3)


def test_checkpoint_policies_answer_as_jax():
    from kiln.ad_checkpoint import Offloadable, Recompute, Saveable, checkpoint_name
    cp = kiln.checkpoint_policies
    dot_b = dict(dimension_numbers=(((1,), (0,)), ((0,), (0,))))
    dot = dict(dimension_numbers=(((1,), (0,)), ((), ())))
    dot_p, sin_p = lax.dot_general_p, lax.sin_p
    assert cp.everything_saveable(sin_p) and not cp.nothing_saveable(dot_p, **dot)
    assert cp.dots_saveable(dot_p, **dot_b) and not cp.dots_saveable(sin_p)
    assert cp.dots_with_no_batch_dims_saveable(dot_p, **dot)
    assert not cp.dots_with_no_batch_dims_saveable(dot_p, **dot_b)
    name_p = type("P", (), {"name": "name"})()
    assert cp.save_only_these_names("a")(name_p, name="a")
    assert not cp.save_only_these_names("a")(name_p, name="b")
    assert cp.save_any_names_but_these("a")(name_p, name="b")
    both = cp.save_from_both_policies(cp.dots_saveable, cp.save_only_these_names("a"))
    assert both(dot_p, **dot) and both(name_p, name="a") and not both(sin_p)
    off = cp.offload_dot_with_no_batch_dims("device", "pinned_host")
    assert off(dot_p, **dot) == Offloadable("device", "pinned_host") and off(sin_p) is Recompute
    so = cp.save_and_offload_only_these_names(names_which_can_be_saved=["a"],
                                              names_which_can_be_offloaded=["b"],
                                              offload_src="device", offload_dst="pinned_host")
    assert so(name_p, name="a") is Saveable and so(sin_p) is Recompute
    with pytest.raises(ValueError):
        cp.save_and_offload_only_these_names(names_which_can_be_saved=["a"],
                                             names_which_can_be_offloaded=["a"],
                                             offload_src="device", offload_dst="pinned_host")
    # under checkpoint with any policy the gradient is unchanged
    f = lambda x: jnp.sin(checkpoint_name(jnp.sin(x), "a")).sum()   # noqa: E731
    x = jnp.arange(3.0)
    for pol in (cp.dots_saveable, cp.save_only_these_names("a"), None):
        g = kiln.grad(kiln.ad_checkpoint.checkpoint(f, policy=pol))(x)
        np.testing.assert_allclose(g, np.cos(np.sin(x)) * np.cos(x), rtol=1e-6)


def test_checkpoint_policies_names_match_jax():
    jax = pytest.importorskip("jax")
    names = {n for n in vars(jax.checkpoint_policies) if not n.startswith("_")}
    assert names == {n for n in vars(kiln.checkpoint_policies) if not n.startswith("_")}


@pytest.mark.parametrize("jitted", [True, False])
def test_fwd_and_bwd(jitted):
    x, w = jnp.arange(4.0).reshape(2, 2), jnp.full((2, 2), 2.0)
    ct = jnp.ones((2, 2))
    fwd, bwd = kiln.fwd_and_bwd(lambda a, b: a @ b, argnums=(0, 1), jitted=jitted)
    y, res = fwd(x, w)
    np.testing.assert_allclose(y, x @ w)
    gx, gw = bwd(res, ct)
    np.testing.assert_allclose(gx, ct @ w.T)
    np.testing.assert_allclose(gw, x.T @ ct)
    fwd, bwd = kiln.fwd_and_bwd(lambda a, b: (a @ b, a.sum()), argnums=1, has_aux=True,
                                jitted=jitted)
    y, res, aux = fwd(x, w)
    assert aux == 6.0
    np.testing.assert_allclose(bwd(res, ct), x.T @ ct)
    with pytest.raises(TypeError, match="generator"):
        kiln.fwd_and_bwd(_gen_fn, argnums=0)


def _gen_fn(x):
    yield x


_ACC_OPS = ["exp", "exp2", "expm1", "log", "log1p", "tanh", "logistic", "sin", "cos",
            "sqrt", "rsqrt", "cbrt", "tan"]


@pytest.mark.parametrize("name", _ACC_OPS)
def test_accuracy_argument(name):
    x = np.random.default_rng(0).uniform(0.1, 3, 50).astype(np.float32)
    op = getattr(lax, name)
    ref = op(x)
    for acc in (lax.AccuracyMode.HIGHEST, lax.AccuracyMode.DEFAULT,
                lax.Tolerance(atol=1e-3, rtol=1e-3), None):
        np.testing.assert_array_equal(op(x, accuracy=acc), ref)
        np.testing.assert_array_equal(kiln.jit(lambda v: op(v, accuracy=acc))(x), ref)
    g = kiln.grad(lambda v: op(v, accuracy=lax.AccuracyMode.HIGHEST).sum())(x)
    np.testing.assert_allclose(g, kiln.grad(lambda v: op(v).sum())(x))
    v = kiln.vmap(lambda v: op(v, accuracy=lax.AccuracyMode.HIGHEST))(x.reshape(5, 10))
    np.testing.assert_array_equal(v, np.asarray(ref).reshape(5, 10))
    with pytest.raises(TypeError, match="accuracy"):
        op(x, accuracy="high")


def test_tolerance_validation():
    with pytest.raises(ValueError, match="non-negative"):
        lax.Tolerance(atol=-1.0)
    with pytest.raises(ValueError, match="At least one"):
        lax.Tolerance()


def test_accuracy_matches_jax_on_cpu():
    jax = pytest.importorskip("jax")
    x = np.random.default_rng(1).uniform(0.1, 3, 50).astype(np.float32)
    for name in _ACC_OPS:
        ref = getattr(jax.lax, name)(x, accuracy=jax.lax.AccuracyMode.HIGHEST)
        out = getattr(lax, name)(x, accuracy=lax.AccuracyMode.HIGHEST)
        np.testing.assert_allclose(out, ref, rtol=2e-6, err_msg=name)


def test_traced_lower_lowering_platforms():
    traced = kiln.jit(jnp.sin).trace(1.0)
    low = traced.lower(lowering_platforms=("cpu",))
    assert low.compile()(1.0) == pytest.approx(np.sin(1.0))
    assert traced.lower(lowering_platforms=("cpu", "cuda")).compile()(2.0) == \
        pytest.approx(np.sin(2.0))
    with pytest.raises(NotImplementedError, match="only for its CPU"):
        traced.lower(lowering_platforms=("tpu",))
    with pytest.raises(TypeError):
        traced.lower(lowering_platforms="cpu")


# -- api_test (issue 26, second pass) ------------------------------------------------------

def test_vmap_argument_errors_are_jax_texts():
    with pytest.raises(ValueError, match=r"vmap wrapped function must be passed at least one "
                                         r"argument containing an array or axis_size must be "
                                         r"specified, got empty \*args=\(\{\},\) and "
                                         r"\*\*kwargs=\{\}"):
        kiln.vmap(lambda x: x)({})
    with pytest.raises(ValueError, match="at least one non-None value in in_axes"):
        kiln.vmap(lambda x: x, in_axes=None)(jnp.ones(2))

    def f(x1, x2, a3):
        return x1 + x2 + a3

    with pytest.raises(ValueError, match=(
            "vmap got inconsistent sizes for array axes to be mapped:\n"
            r"  \* most axes \(2 of them\) had size 2, e.g. axis 0 of argument x1 of type "
            r"float32\[2\];\n"
            r"  \* one axis had size 1: axis 0 of kwargs\['a3'\] of type float32\[1\]")):
        kiln.vmap(f)(jnp.ones(2), a3=jnp.ones(1), x2=jnp.ones(2))
    with pytest.raises(ValueError, match=r"one axis had size 3: axis 0 of args\[2\] of type "):
        kiln.vmap(lambda x, *a: x)(jnp.ones(4), jnp.ones(4), jnp.ones(3))


def test_jit_static_and_donate_argnames_errors():
    with pytest.raises(ValueError, match="static_argnames and donate_argnames cannot "
                                         "intersect"):
        kiln.jit(lambda x: x, static_argnames="x", donate_argnames="x")

    class NoSignature:
        @property
        def __signature__(self):
            raise TypeError("no signature")

        def __call__(self, *args):
            return None

    with pytest.raises(ValueError, match="Getting the signature of function.*failed. Pass "
                                         "donate_argnums instead of donate_argnames."):
        kiln.jit(NoSignature(), donate_argnames="a")


def test_no_execution_blocks_running_not_tracing():
    f = kiln.jit(lambda: jnp.ones(3))
    f()
    with kiln.no_execution():
        assert "ones" in str(kiln.make_jaxpr(f)()) or "broadcast" in str(kiln.make_jaxpr(f)())
        with pytest.raises(RuntimeError, match="no_execution"):
            f()
        with pytest.raises(RuntimeError, match="no_execution"):
            kiln.jit(lambda x: x + 1)(1.)
    np.testing.assert_array_equal(f(), np.ones(3))


def test_lowered_in_avals_and_donate_argnums():
    from kiln.core import ShapedArray
    low = kiln.jit(lambda x: jnp.sqrt(x ** 2) + 1.).lower(1.)
    assert low.in_avals == ((ShapedArray((), np.float32, weak_type=True),), {})
    assert low.compile().in_avals == low.in_avals
    low = kiln.jit(lambda x, y: x + y, donate_argnums=(1,)).lower(jnp.ones(2), jnp.ones(2))
    assert low.donate_argnums == low.compile().donate_argnums == (1,)


def test_deepcopy_of_a_tracer_is_a_copy_and_len_of_shape_dtype_struct():
    import copy
    assert "copy" in str(kiln.make_jaxpr(copy.deepcopy)(1.))
    assert int(kiln.jit(copy.deepcopy)(1)) == 1
    assert len(kiln.ShapeDtypeStruct((3, 2), np.float32)) == 3
    with pytest.raises(TypeError, match="len"):
        len(kiln.ShapeDtypeStruct((), np.float32))


def test_jit_returns_distinct_buffers_for_a_repeated_output():
    x = jnp.array([1, 2, 3])
    z1, z2 = kiln.jit(lambda x: (x, x))(x)
    assert z1.unsafe_buffer_pointer() != z2.unsafe_buffer_pointer()
    assert kiln.jit(lambda x: x)(x).unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
    assert kiln.jit(lambda x: x).lower(x).compile().in_tree == kiln.tree.flatten(((0,), {}))[1]


def test_leaked_tracer_error_names_where_it_was_created():
    from kiln.errors import UnexpectedTracerError
    box = []

    @kiln.jit
    def f(x):
        box.append(jnp.sin(x))
        return x

    f(1.)
    with pytest.raises(UnexpectedTracerError, match=r"(?s)intermediate value with type "
                       r"float32\[\] wrapped in a DynamicJaxprTracer.*global state.*"
                       r"was created on line .*test_jax_suite_gaps_api.py:\d+"):
        kiln.jit(lambda y: y + box[0])(1.)


def test_checkpoint_does_not_retrace_the_same_signature():
    """``checkpoint`` caches its traces by argument types, static arguments and trace
    context (as JAX's): ten calls trace once; a new shape or static value traces again;
    a function closing over a tracer is traced every time (its jaxpr captures it)."""
    import functools

    import kiln
    from kiln import lax
    count = [0]

    @kiln.checkpoint
    def g(x):
        count[0] += 1
        return lax.sin(x), 3.

    for _ in range(10):
        g(2.)
    assert count[0] == 1
    g(np.ones(3, np.float32))
    assert count[0] == 2
    assert abs(float(kiln.grad(lambda x: g(x)[0])(2.)) - np.cos(2.)) < 1e-6

    @functools.partial(kiln.checkpoint, static_argnums=(0,))
    def h(x):
        count[0] += 1
        return lax.sin(x) if x > 0 else lax.cos(x)

    before = count[0]
    for _ in range(5):
        h(2.)
    h(-2.)
    assert count[0] == before + 2

    def outer(y):
        @kiln.checkpoint
        def k(x):
            count[0] += 1
            return x * y
        return k(y)
    before = count[0]
    kiln.grad(outer)(3.)
    kiln.grad(outer)(3.)
    assert count[0] == before + 2


def test_vjp_returns_jaxs_vjp_object():
    """``vjp``'s function is JAX's ``VJP``: ``args_res`` holds each primal argument the
    backward pass uses (else ``NotNeeded``), ``opaque_residuals`` the forward values,
    ``jaxpr`` the linear jaxpr; a pytree (through ``jit``) whose ``args_res`` may be
    passed again."""
    import kiln
    import kiln.numpy as jnp
    from kiln._src.api import NotNeeded
    a, b = jnp.full(2, 2.), jnp.full(2, 3.)
    y, f_vjp = kiln.vjp(lambda x, y: x * y, a, b)
    assert f_vjp.args_res[0] is a and f_vjp.args_res[1] is b and not f_vjp.opaque_residuals
    f_vjp.args_res = [None, None]
    f_vjp.args_res = [a, b]
    assert [list(c) for c in f_vjp(jnp.ones(2))] == [[3., 3.], [2., 2.]]
    _, g_vjp = kiln.vjp(lambda x: jnp.sin(x) * jnp.ones(3), jnp.ones(3))
    assert isinstance(g_vjp.args_res[0], NotNeeded) and g_vjp.opaque_residuals
    assert " mul " in str(g_vjp.jaxpr)

    @kiln.jit
    def h(v):
        v.args_res = [b, a]
        return v(jnp.ones(2))
    assert [list(c) for c in h(f_vjp)] == [[2., 2.], [3., 3.]]
    with pytest.raises(TypeError, match="single argument"):
        f_vjp(1., 2.)
