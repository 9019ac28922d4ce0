"""Behaviours Flax NNX relies on, each found by running Flax's ``tests/nnx`` on kiln:
JAX 0.10.2's answers (hard-coded from JAX, or computed by JAX when installed)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.random as kr

# -- random.* accept a Python int as a shape (JAX's canonicalize_shape) ----------------------

@pytest.mark.parametrize("fn", [
    lambda k: kr.normal(k, 4), lambda k: kr.uniform(k, 4),
    lambda k: kr.bernoulli(k, 0.5, 4), lambda k: kr.randint(k, 4, 0, 5)])
def test_random_int_shape(fn):
    k = kr.key(0)
    out = fn(k)
    assert out.shape == (4,)


def test_random_int_shape_matches_tuple():
    k = kr.key(3)
    np.testing.assert_array_equal(kr.normal(k, 4), kr.normal(k, (4,)))


def test_random_bad_shape_still_raises():
    with pytest.raises(TypeError, match="Shapes must be 1D sequences"):
        kr.normal(kr.key(0), 4.0)


# -- jnp comparisons and broadcast_to of typed key arrays ---------------------------------

def test_key_comparisons():
    # (jnp.equal/not_equal, broadcast_to and shape queries of keys: branch flax-linen)
    k0, k1 = kr.key(0), kr.key(1)
    assert bool(jnp.array_equal(k0, k0)) and not bool(jnp.array_equal(k0, k1))
    assert bool(jnp.allclose(k0, k0)) and not bool(jnp.allclose(k0, k1))
    assert not bool(jnp.isclose(k0, k1))
    ks = kr.split(k0, 3)
    np.testing.assert_array_equal(jnp.isclose(ks, ks[1]), [False, True, False])
    assert not bool(jnp.array_equiv(ks, k0))
    assert bool(jnp.array_equiv(kr.split(k1, 1), kr.split(k1, 1)[0]))
    assert not bool(jnp.array_equal(ks, k0))      # shapes differ


@pytest.mark.parametrize("fn,name", [(jnp.isclose, "isclose"), (jnp.allclose, "isclose"),
                                     (jnp.array_equal, "equal"), (jnp.array_equiv, "equal")])
def test_key_comparisons_with_non_key_raise(fn, name):
    with pytest.raises(TypeError, match=f"{name} does not accept dtypes key<fry>, int32"):
        fn(kr.key(0), 1)


# -- operators convert an operand that defines __jax_array__ (Flax's Variable) --------------

class _Boxed:
    def __init__(self, v):
        self.v = v

    def __jax_array__(self):
        return jnp.asarray(self.v)


def test_binop_with_jax_array_operand():
    x = jnp.float32(2.0)
    np.testing.assert_allclose(x + _Boxed(1.0), 3.0)
    np.testing.assert_allclose(x * _Boxed(3.0), 6.0)
    np.testing.assert_allclose(kiln.jit(lambda a: a - _Boxed(1.0))(x), 1.0)
    assert (x + _Boxed(1.0)).dtype == np.float32


def test_binop_with_unknown_operand_defers():
    class Other:
        def __radd__(self, other):
            return "radd"
    assert jnp.float32(1.0) + Other() == "radd"
    with pytest.raises(TypeError):
        jnp.float32(1.0) + [1.0]


# -- out_sharding accepted by jnp.einsum/dot/matmul/tensordot (Flax NNX's layers pass it) --

def test_contractions_accept_out_sharding():
    a, b = jnp.ones((2, 3)), jnp.arange(12.0).reshape(3, 4)
    want = np.ones((2, 3)) @ np.arange(12.0).reshape(3, 4)
    for got in (jnp.einsum("ij,jk->ik", a, b, out_sharding=None), jnp.dot(a, b, out_sharding=None),
                jnp.matmul(a, b, out_sharding=None),
                jnp.tensordot(a, b, 1, out_sharding=None),
                kiln.jit(lambda a, b: jnp.einsum("ij,jk->ik", a, b, out_sharding=None))(a, b)):
        np.testing.assert_allclose(got, want)


# -- custom_vjp: a bwd output may be a prefix of the arguments' structure (JAX's rules) -----

def _bwd_case(m, bwd):
    @m.custom_vjp
    def f(x, y):
        return x["a"] * y

    f.defvjp(lambda x, y: (f(x, y), (x, y)), bwd)
    g = m.grad(lambda x, y: f(x, y), argnums=(0, 1))({"a": 2.0, "b": (3.0, 4.0)}, 5.0)
    return [np.asarray(v) for v in m.tree_util.tree_leaves(g)]


_BWDS = {
    "none_subtree": lambda res, g: ({"a": g * res[1], "b": None}, None),
    "none_arg": lambda res, g: (None, g),
    "none_leaf": lambda res, g: ({"a": g, "b": (1.0, None)}, g),
    "leaf_for_subtree": lambda res, g: ({"a": g, "b": 1.0}, g),   # broadcast to the subtree
}


@pytest.mark.parametrize("name", sorted(_BWDS))
def test_custom_vjp_bwd_prefix_structures(name):
    jax = pytest.importorskip("jax")
    got, want = _bwd_case(kiln, _BWDS[name]), _bwd_case(jax, _BWDS[name])
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b)


def test_custom_vjp_bwd_structure_error():
    with pytest.raises(TypeError, match="Custom VJP bwd rule must produce an output with the "
                                        "same container"):
        _bwd_case(kiln, lambda res, g: ({"a": g}, g))


# -- jit in_shardings has one entry per non-static positional argument ------------------------

def test_jit_in_shardings_skip_static_arguments():
    from kiln.sharding import NamedSharding, PartitionSpec
    mesh = kiln.make_mesh((1,), ("d",))
    s = NamedSharding(mesh, PartitionSpec("d"))

    def fn(x, scale, use_relu):
        y = x * scale
        return jnp.maximum(y, 0).sum() if use_relu else y.sum()

    x = jnp.linspace(-1.0, 1.0, 4)
    for kw in (dict(static_argnums=2), dict(static_argnames="use_relu")):
        f = kiln.jit(fn, in_shardings=(s, None), **kw)
        assert float(f(x, 0.5, True)) != float(f(x, 0.5, False))
    with pytest.raises(ValueError, match="in_shardings is the wrong length: got a tuple or "
                                         "list of length 3 for an args tuple of length 2"):
        kiln.jit(fn, in_shardings=(s, None, None), static_argnums=2)(x, 0.5, True)


# -- lax.scan caches the trace of its body per function object (JAX's behaviour) ------------

def _count_scan_traces(m):
    n = []

    def body(c, x):
        n.append(1)
        return c + 1, x ** 2

    xs = m.numpy.arange(5.0)
    outs = [m.lax.scan(body, m.numpy.int32(0), xs) for _ in range(2)]
    m.lax.scan(body, m.numpy.int32(0), m.numpy.arange(3.0))      # same element types
    m.jit(lambda: m.lax.scan(body, m.numpy.int32(0), xs))()      # inside jit too
    m.lax.scan(body, m.numpy.float32(0), xs)                     # a new carry type: traced
    m.jit(lambda y: m.lax.scan(lambda c, x: (c + y, x), 0.0, xs))(1.0)   # (a fresh body)
    return len(n), [np.asarray(o[1]) for o in outs]


def test_scan_body_trace_cached():
    jax = pytest.importorskip("jax")
    (kn, kys), (jn, jys) = _count_scan_traces(kiln), _count_scan_traces(jax)
    assert kn == jn == 2
    for a, b in zip(kys, jys):
        np.testing.assert_allclose(a, b)


# -- cond forwards outputs that every branch passes through (unbatched under vmap) ----------

def test_cond_passthrough_output_stays_unbatched_under_vmap():
    jax = pytest.importorskip("jax")

    def run(m):
        def f(i, b):
            # b is returned unchanged by both branches: not batched by the batched predicate
            return m.lax.cond(i % 2 == 0, lambda i, b: (i + 1, b), lambda i, b: (i, b), i, b)
        return m.vmap(f, in_axes=(0, None), out_axes=(0, None))(m.numpy.arange(4), 7.0)
    (ki, kb), (ji, jb) = run(kiln), run(jax)
    np.testing.assert_array_equal(ki, ji)
    assert float(kb) == float(jb) == 7.0


def test_vmap_out_axes_none_error_names_the_output():
    with pytest.raises(ValueError, match=r"at vmap out_axes\['b'\]\[0\], got axis spec None "
                                         r"but output was batched on axis 0"):
        kiln.vmap(lambda x: {"a": x, "b": [x, 1.0]},
                  out_axes={"a": 0, "b": [None, None]})(jnp.ones(3))


# -- warnings turned into errors: kiln's NumPy kernels stay silent on inf/nan, as XLA ------

def test_fp_warnings_silent_when_warnings_are_errors():
    import warnings
    x, z = jnp.float32(0.0), jnp.zeros(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(float(x / x))                        # eager fast path
        assert np.isnan(np.asarray(z / z)).all()
        assert np.isinf(float(jnp.log(x)))                   # a primitive's impl
        assert np.isnan(float(kiln.lax.fori_loop(0, 2, lambda i, c: c / x, x)))
        with pytest.raises(RuntimeWarning):                  # the user's own NumPy still warns
            np.log(np.zeros(1))


def test_make_mesh_axis_types_positional():
    from kiln.sharding import AxisType
    m = kiln.make_mesh((1,), ("d",), (AxisType.Auto,))
    assert m.axis_types == (AxisType.Auto,) and m.axis_names == ("d",)


# -- jit(...).lower(...).out_info / args_info (Flax NNX's summary uses out_info) ------------

def test_lowered_out_info_and_args_info():
    jax = pytest.importorskip("jax")

    def run(m):
        low = m.jit(lambda x, y=1: (x, x.sum() * y)).lower(m.numpy.ones(3),
                                                             y=m.numpy.int32(2))
        outs = [(tuple(o.shape), str(o.dtype)) for o in low.out_info]
        args, kwargs = low.args_info
        ins = [(tuple(a.shape), str(a.dtype), a.donated) for a in args]
        return outs, ins, {k: (tuple(v.shape), str(v.dtype)) for k, v in kwargs.items()}, \
            [(tuple(o.shape), str(o.dtype)) for o in low.compile().out_info]
    assert run(kiln) == run(jax)
