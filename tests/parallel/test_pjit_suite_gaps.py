"""Gaps JAX's ``pjit_test`` found (issue 26): shardings in types through operations
(explicit mode), ``auto_axes``/``explicit_axes``, ``top_level_all_gather``,
``out_sharding=`` of ``lax``/``jnp`` functions, ``UNSPECIFIED`` in ``jit``, ``lower`` of
``ShapedArray``s, ``primal_tangent_dtype``; the values and messages are JAX 0.10.2's."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core.avals import ShapedArray, ShardingTypeError
from kiln.sharding import (
    UNSPECIFIED,
    AbstractDevice,
    AxisType,
    NamedSharding,
    auto_axes,
    explicit_axes,
    set_mesh,
)
from kiln.sharding import PartitionSpec as P


@pytest.fixture
def mesh():
    m = kiln.make_mesh((2, 2), ("x", "y"))      # Explicit axes, as JAX's make_mesh
    with set_mesh(m):
        yield m


def test_elementwise_types_broadcast_and_lay_out_jit_outputs(mesh):
    s = NamedSharding(mesh, P("x", "y"))
    a = kiln.device_put(np.arange(16).reshape(8, 2), s)
    b = kiln.device_put(np.arange(2).reshape(1, 2), NamedSharding(mesh, P(None, None)))
    specs = {}

    @kiln.jit
    def f(x, y):
        out = x * y
        specs["mul"] = out.aval.sharding.spec
        specs["T"] = x.T.aval.sharding.spec
        specs["sum"] = x.sum(0).aval.sharding.spec
        specs["bcast"] = lax.broadcast_in_dim(x, (3, 8, 2), (1, 2)).aval.sharding.spec
        return out
    out = f(a, b)
    assert specs == {"mul": P("x", "y"), "T": P("y", "x"), "sum": P("y"),
                     "bcast": P(None, "x", "y")}
    assert out.sharding == s
    np.testing.assert_array_equal(np.asarray(out), np.arange(16).reshape(8, 2) *
                                  np.arange(2).reshape(1, 2))


def test_incompatible_operand_shardings_raise_sharding_type_error(mesh):
    a = kiln.device_put(np.arange(16).reshape(8, 2), P("x", "y"))
    b = kiln.device_put(np.arange(16).reshape(8, 2), P("y", "x"))
    with pytest.raises(ShardingTypeError, match="mul got incompatible shardings for "
                                                "broadcasting"):
        kiln.jit(lambda x, y: x * y)(a, b)


def test_dot_general_type_keeps_free_dimensions(mesh):
    a = kiln.device_put(np.arange(16.).reshape(8, 2), P("x", None))
    b = kiln.device_put(np.arange(16.).reshape(2, 8), P(None, "y"))
    seen = []

    @kiln.jit
    def f(x, y):
        z = x @ y
        seen.append(z.aval.sharding.spec)
        return z
    out = f(a, b)
    assert seen == [P("x", "y")]
    assert out.sharding == NamedSharding(mesh, P("x", "y"))
    np.testing.assert_allclose(np.asarray(out), np.arange(16.).reshape(8, 2) @
                               np.arange(16.).reshape(2, 8))


def test_grad_of_sharded_contraction_still_runs(mesh):
    # the backward pass contracts along the split batch dimension on both sides: JAX's
    # transpose rules pass out_sharding there, kiln leaves the product untyped
    x = kiln.device_put(np.ones((8, 4), np.float32), P("x", None))
    w = np.ones((4, 3), np.float32)
    g = kiln.jit(kiln.grad(lambda w, x: jnp.sum(x @ w)))(w, x)
    np.testing.assert_allclose(np.asarray(g), np.full((4, 3), 8.0))


def test_auto_axes_and_explicit_axes(mesh):
    arr = kiln.device_put(np.arange(16.).reshape(8, 2), P("x", "y"))
    inner = []

    @kiln.jit
    def f(x):
        @auto_axes(out_sharding=P("x", None))
        def g(x):
            inner.append(kiln.sharding.get_abstract_mesh().axis_types)
            return x * 2
        return g(x)
    out = f(arr)
    assert inner == [(AxisType.Auto, AxisType.Auto)]
    assert out.sharding == NamedSharding(mesh, P("x", None))
    np.testing.assert_array_equal(np.asarray(out), np.arange(16.).reshape(8, 2) * 2)
    with pytest.raises(TypeError, match="Missing required keyword argument: 'out_sharding'"):
        auto_axes(lambda x: x)(arr)

    auto = kiln.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    with set_mesh(auto):
        h = explicit_axes(lambda x: x + 1, in_sharding=P("x", "y"))
        np.testing.assert_array_equal(np.asarray(kiln.jit(h)(np.ones((4, 2)))),
                                      np.full((4, 2), 2.0))
    with pytest.raises(ValueError, match="Context mesh cannot be empty"):
        with set_mesh(None):
            explicit_axes(lambda x: x, in_sharding=P())(np.ones(2))


def test_top_level_all_gather():
    from kiln.parallel.shard_map import top_level_all_gather
    m = kiln.make_mesh((2,), ("x",))
    with set_mesh(m):
        arr = kiln.device_put(np.arange(8.), P("x"))
        out = kiln.jit(lambda x: top_level_all_gather(x, P(reduced={"x"})))(arr)
        assert out.sharding == NamedSharding(m, P(None, reduced={"x"}))
        np.testing.assert_array_equal(np.asarray(out), np.arange(8.))
    m2 = kiln.make_mesh((2, 2), ("x", "y"))
    with set_mesh(m2):
        arr = kiln.device_put(np.arange(16).reshape(8, 2), P(None, "y"))
        with pytest.raises(ValueError, match="input.*to be unsharded"):
            top_level_all_gather(arr, P("x", "y"))
        arr = kiln.device_put(np.arange(16).reshape(8, 2), P("x", "y"))
        with pytest.raises(ValueError, match="multiple dimensions cannot be all_gathered"):
            top_level_all_gather(arr, P())


def test_out_sharding_arguments_lay_results_out(mesh):
    x = np.arange(8.)
    assert jnp.reshape(x, (4, 2), out_sharding=P("x", None)).sharding.spec == P("x", None)
    assert jnp.arange(8.).reshape(2, 4, out_sharding=P(None, "y")).sharding.spec == \
        P(None, "y")
    assert lax.broadcast(x, (2,), out_sharding=P(None, "x")).sharding.spec == P(None, "x")
    y = kiln.device_put(np.ones((4, 2)), P("x", "y"))
    assert lax.reduce_sum(y, axes=(1,), out_sharding=P("x")).sharding.spec == P("x")
    from kiln._src.lax.lax import _convert_element_type
    out = _convert_element_type(y, np.dtype(np.float32), sharding=NamedSharding(mesh, P("x")))
    assert out.sharding.spec == P("x") and out.dtype == np.float32


def test_unspecified_in_jit_shardings_means_none():
    assert repr(UNSPECIFIED) == "UnspecifiedValue"
    f = kiln.jit(lambda x, y: (x * 2, y + 1), in_shardings=(UNSPECIFIED, None),
                 out_shardings=UNSPECIFIED)
    a, b = f(np.ones(2), np.ones(2))
    np.testing.assert_array_equal(np.asarray(a), [2., 2.])
    np.testing.assert_array_equal(np.asarray(b), [2., 2.])


def test_lower_takes_shaped_arrays():
    f = kiln.jit(lambda x, y: x @ y)
    x = jnp.arange(64).reshape(8, 8)
    exe = f.lower(ShapedArray((8, 8), jnp.int32), x).compile()
    np.testing.assert_array_equal(np.asarray(exe(x, x)), np.asarray(x) @ np.asarray(x))


def test_primal_tangent_dtype():
    from kiln.experimental import primal_tangent_dtype
    dt = primal_tangent_dtype(jnp.dtype("int8"), jnp.dtype("bfloat16"))
    assert str(dt) == "PrimalTangentDType{i8/bf16}"
    assert kiln.dtypes.issubdtype(dt, kiln.dtypes.extended)
    f = kiln.jit(lambda x: lax.convert_element_type(lax.convert_element_type(x, dt), "int8"))
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(4, dtype="int8"))), [0, 1, 2, 3])


def test_abstract_device_public():
    d = AbstractDevice("tpu", None, "tpu")
    assert d == AbstractDevice("tpu", None, "tpu") and d.platform == "tpu"



def test_product_of_operands_split_on_one_axis_is_left_untyped(mesh):
    # both free dimensions split on "x": no single spec can say it (one mesh axis on two
    # dimensions); the product runs, its out_sharding decides the layout
    a = kiln.device_put(np.arange(8.0).reshape(4, 2), NamedSharding(mesh, P("x", None)))
    b = kiln.device_put(np.arange(8.0).reshape(2, 4), NamedSharding(mesh, P(None, "x")))
    out = kiln.jit(lambda a, b: jnp.einsum("ik,kj->ij", a, b,
                                           out_sharding=P("x", None)))(a, b)
    np.testing.assert_allclose(np.asarray(out), np.arange(8.0).reshape(4, 2)
                               @ np.arange(8.0).reshape(2, 4))
