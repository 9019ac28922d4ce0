"""The ``jax._src`` surface kiln provides for JAX's own test helpers (issue 26): config
states, ``util`` helpers, dtype tables, ``ShapeDtypeStruct.update``,
``lax.RaggedDotDimensionNumbers``; compared with JAX where it is installed (in a
subprocess: JAX and kiln's alias never share a process)."""
import json
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln._src import config as kcfg
from kiln._src import core as kcore
from kiln._src import dispatch as kdispatch
from kiln._src import dtypes as kdtypes
from kiln._src import util as kutil


def test_config_states_read_and_set_kiln_flags():
    assert kcfg.enable_x64.value is False
    with kcfg.enable_x64(True):
        assert kiln.config.jax_enable_x64 is True
        assert jnp.arange(3).dtype == np.int64
    assert kcfg.enable_x64.value is False
    with kcfg.numpy_rank_promotion("raise"):
        assert kcfg.config_states["jax_numpy_rank_promotion"].value == "raise"
        with pytest.raises(ValueError):
            jnp.ones(3) + jnp.ones((2, 3))
    assert kcfg._read("jax_numpy_rank_promotion") == "allow"
    with pytest.raises(TypeError):
        bool(kcfg.enable_x64)
    assert kiln.config._read("jax_enable_x64") is False
    assert kiln.config.x64_enabled is False


def test_fixed_jax_only_options_refuse_other_values():
    st = kcfg.use_shardy_partitioner
    assert st.value is False
    with st(False):
        pass
    with pytest.raises(NotImplementedError, match="use_shardy_partitioner"):
        with st(True):
            pass


def test_explicit_x64_dtypes_is_a_real_option():
    st = kcfg.explicit_x64_dtypes
    assert st.value == kcfg.ExplicitX64Mode.WARN
    with st("error"):
        assert st.value == kcfg.ExplicitX64Mode.ERROR
    assert st.value == kcfg.ExplicitX64Mode.WARN


def test_flag_definers_and_env(monkeypatch):
    f = kcfg.int_flag("jax_suite_test_flag", 3, help="x")
    assert f.value == 3
    monkeypatch.setenv("KILN_TEST_BOOL_ENV", "yes")
    assert kcfg.bool_env("KILN_TEST_BOOL_ENV", False) is True
    assert kcfg.int_env("KILN_TEST_UNSET_ENV", 7) == 7


def test_util_helpers():
    assert kutil.safe_map(lambda a, b: a + b, [1, 2], [3, 4]) == [4, 6]
    with pytest.raises(ValueError):
        kutil.safe_zip([1], [1, 2])
    assert kutil.split_list([1, 2, 3, 4], [1, 2]) == [[1], [2, 3], [4]]
    lo, hi = kutil.partition_list([False, True, False], "abc")
    assert (lo, hi) == (["a", "c"], ["b"])
    assert kutil.merge_lists([False, True, False], lo, hi) == ["a", "b", "c"]
    assert kutil.unzip3([(1, 2, 3), (4, 5, 6)]) == ((1, 4), (2, 5), (3, 6))
    assert kutil.tuple_update((1, 2, 3), 1, 9) == (1, 9, 3)


def test_dtype_tables_and_jax_type():
    assert np.dtype("float32") in kdtypes._jax_types
    assert kdtypes._jax_type(*kdtypes._dtype_and_weaktype(1.0)) is float
    assert kdtypes._jax_type(*kdtypes._dtype_and_weaktype(jnp.float32(1))) == np.float32
    assert kdtypes._jax_type(np.dtype(bool), True) == np.dtype(bool)


def test_reset_trace_state_and_apply_primitive():
    assert kcore.reset_trace_state() is True
    out = kdispatch.apply_primitive(lax.add_p, jnp.float32(1), jnp.float32(2))
    assert float(out) == 3.0


def test_shape_dtype_struct_update():
    s = kiln.ShapeDtypeStruct((2, 3), np.float32)
    t = s.update(shape=(4,))
    assert t.shape == (4,) and t.dtype == np.float32 and s.shape == (2, 3)
    with pytest.raises(TypeError):
        s.update(bogus=1)


def test_ragged_dot_dimension_numbers_matches_jax():
    r = lax.RaggedDotDimensionNumbers(([[1], [1]], [[], []]), [0, 1], [0])
    mine = [r.dot_dimension_numbers, r.lhs_ragged_dimensions, r.rhs_group_dimensions]
    assert r == lax.RaggedDotDimensionNumbers((((1,), (1,)), ((), ())), (0, 1), (0,))
    pytest.importorskip("jax")
    code = ("import json; from jax import lax; r = lax.RaggedDotDimensionNumbers("
            "([[1], [1]], [[], []]), [0, 1], [0]); print(json.dumps([r.dot_dimension_numbers,"
            " r.lhs_ragged_dimensions, r.rhs_group_dimensions]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == json.loads(json.dumps(mine))


def test_register_canonicalize_value_handler():
    from kiln.dtypes import canonicalize_value_handlers, coerce_to_array

    class Box:
        def __init__(self, v):
            self.v = v

    kdtypes.register_canonicalize_value_handler(Box, lambda b: np.asarray(b.v, np.float64))
    try:
        out = coerce_to_array(Box([1.0, 2.0]))
        assert out.dtype == np.float32 and out.tolist() == [1.0, 2.0]
        kdtypes.register_canonicalize_value_handler(Box, None)
        assert canonicalize_value_handlers[Box](5) == 5
    finally:
        del canonicalize_value_handlers[Box]


def test_broadcast_flattened_prefix_with_treedef():
    from kiln import tree_util as tu
    full = (0, {"a": 0, "b": 0}, (0, 0))
    out = tu.broadcast_flattened_prefix_with_treedef(*tu.tree_flatten((1, 2, 3)),
                                                     tu.tree_structure(full))
    assert out == [1, 2, 2, 3, 3]
    leaves, td = tu.tree_flatten({"x": 5, "y": None})
    assert tu.broadcast_flattened_prefix_with_treedef(
        leaves, td, tu.tree_structure({"x": (0, [0]), "y": None})) == [5, 5]
    with pytest.raises(ValueError):
        tu.broadcast_flattened_prefix_with_treedef(*tu.tree_flatten((1, 2)),
                                                   tu.tree_structure(full))


def test_implementation_selectors_can_be_set():
    st = kcfg.config_states["jax_custom_vjp3"]
    assert st.value is False
    with st(True):
        assert kcfg._read("jax_custom_vjp3") is True
    assert st.value is False
    kcfg.update("jax_remat3", True)
    try:
        assert kcfg.remat3.value is True
    finally:
        kcfg.update("jax_remat3", False)


def test_src_array_module():
    from kiln._src import array as sa
    assert sa.ArrayImpl is kiln.array.ArrayImpl
    x = sa.make_array_from_callback((2, 3), kiln.sharding.SingleDeviceSharding(kiln.devices()[0]),
                                    lambda idx: np.arange(6.0).reshape(2, 3)[idx])
    np.testing.assert_array_equal(x, np.arange(6.0).reshape(2, 3))


def test_jax_only_options_read_as_config_attributes():
    assert kiln.config.jax_custom_vjp3 is False
    with kcfg.custom_vjp3(True):
        assert kiln.config.jax_custom_vjp3 is True
    assert kiln.config.jax_use_shardy_partitioner is False
    with pytest.raises(AttributeError, match="no attribute 'jax_not_an_option'"):
        getattr(kiln.config, "jax_not_an_option")  # noqa: B009


def test_src_core_jaxpr_helpers():
    closed = kiln.make_jaxpr(lambda x: lax.cond(x > 0, jnp.sin, jnp.cos, x))(1.)
    kcore.check_jaxpr(closed.jaxpr)
    subs = list(kcore.subjaxprs(closed.jaxpr))
    assert len(subs) == 2 and all(len(s.eqns) == 1 for s in subs)
    assert float(kcore.jaxpr_as_fun(closed)(0.)[0]) == 1.
    assert float(kcore.eval_jaxpr(closed.jaxpr, closed.consts, 0.)[0]) == 1.


def test_eval_jaxpr_p_calls_a_closed_jaxpr_under_every_transformation():
    import kiln
    import kiln.numpy as jnp
    from kiln._src.lax.eval_jaxpr import eval_jaxpr_p

    def g(x):
        closed = kiln.make_jaxpr(lambda v: [v ** 3 + 1.0])(x)
        return eval_jaxpr_p.bind(x, jaxpr=closed)[0]
    x = jnp.array(2.0)
    assert float(g(x)) == 9.0
    assert float(kiln.jit(g)(x)) == 9.0
    assert float(kiln.grad(g)(x)) == 12.0
    assert kiln.jvp(g, (x,), (jnp.ones_like(x),))[1] == 12.0
    np.testing.assert_allclose(kiln.vmap(g)(jnp.arange(3.)), np.arange(3.) ** 3 + 1)


def test_windowed_reductions_module_is_the_window_rules():
    # JAX's lax_vmap_test imports jax._src.lax.windowed_reductions and calls its
    # _select_and_gather_add/_select_and_scatter_add (the max-pooling JVP and transpose).
    import importlib

    import kiln.numpy as jnp
    from kiln import lax
    wr = importlib.import_module("kiln._src.lax").windowed_reductions
    x = jnp.asarray([[1.0, 5.0, 2.0, 3.0]])
    t = jnp.asarray([[10.0, 20.0, 30.0, 40.0]])
    pads = ((0, 0), (0, 0))
    out = wr._select_and_gather_add(t, x, lax.ge_p, (1, 2), (1, 2), pads, (1, 1), (1, 1))
    assert out.tolist() == [[20.0, 40.0]]       # the tangent at each window's max
    back = wr._select_and_scatter_add(jnp.asarray([[1.0, 2.0]]), x, lax.ge_p, (1, 2),
                                      (1, 2), pads)
    assert back.tolist() == [[0.0, 1.0, 0.0, 2.0]]


def test_call_primitives_take_jaxs_subfuns_convention():
    # JAX's core_test binds ``core.call_p.bind(*args, subfuns=(f,))`` (240 of its tests).
    import kiln.numpy as jnp
    from kiln._src import core
    from kiln.interpreters.calls import call_p, closed_call_p

    def f(x):
        return [x * 2.0]
    x = jnp.arange(3.0)
    assert core.call_p is call_p and core.closed_call_p is closed_call_p
    for out in (call_p.bind(x, subfuns=(f,)), closed_call_p.bind(x, subfuns=(f,)),
                call_p.bind(f, x), kiln.jit(lambda x: closed_call_p.bind(x, subfuns=(f,)))(x)):
        np.testing.assert_array_equal(np.asarray(out[0]), [0.0, 2.0, 4.0])
    g = kiln.grad(lambda x: jnp.sum(call_p.bind(x, subfuns=(f,))[0]))(x)
    np.testing.assert_array_equal(np.asarray(g), [2.0, 2.0, 2.0])
    closed = kiln.make_jaxpr(lambda x: call_p.bind(x, subfuns=(f,)))(x)
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["closed_call"]


def test_util_curry_and_subvals():
    from kiln._src import util
    assert util.curry(lambda a, b, c: a + b * c)(1)(2, 3) == 7
    assert util.subvals([1, 2, 3], [(0, "a"), (2, "c")]) == ("a", 2, "c")


def test_extend_backend_and_register_lowering_platforms():
    import kiln.extend as jex
    from kiln._src import api as kapi
    from kiln._src import xla_bridge
    from kiln.interpreters import mlir
    assert jex.backend.backends is xla_bridge.backends
    assert jex.backend.clear_backends is kapi.clear_backends
    assert jex.backend.get_backend().platform == "cpu"
    assert jex.backend.backend_xla_version() is None          # JAX's CPU backend says so too
    assert jex.backend.get_default_device() == kiln.devices()[0]
    f = kiln.jit(lambda x: x + 1.0)
    assert float(f(1.0)) == 2.0
    jex.backend.clear_backends()                              # caches cleared, still works
    assert float(f(1.0)) == 2.0
    with pytest.raises(NotImplementedError, match="no pluggable XLA backends"):
        jex.backend.register_backend_factory("tpu", None)
    with pytest.raises(NotImplementedError, match="unknown platform this_is_a_fake_platform. "
                                                  "Known platforms are: cpu, cuda"):
        mlir.register_lowering(prim=None, rule=None, platform="this_is_a_fake_platform")
    assert mlir.register_lowering(lax.sin_p, lambda *a, **k: None, platform="cuda") is not None
    assert kcore.mapped_aval is jex.core.mapped_aval and kcore.TraceTag is jex.core.TraceTag


def test_lax_internal_const_keeps_the_example_dtype():
    from kiln._src.lax import lax as lax_internal
    assert type(lax_internal._const(1.5, 0)) is float
    c = lax_internal._const(np.float16(2), 1)
    assert c.dtype == np.float16 and c == 1
    c = lax_internal._const(np.ones(3, np.int8), 5)
    assert c.dtype == np.int8 and c.shape == () and c == 5
    assert type(lax_internal._const(True, 0)) is bool


def test_lax_internal_delta_is_the_generalized_identity():
    from kiln._src.lax import lax as lax_internal
    got = np.asarray(lax_internal._delta(np.float32, (2, 3, 4), (1, 2)))
    want = np.broadcast_to(np.eye(3, 4, dtype=np.float32), (2, 3, 4))
    assert got.dtype == np.float32 and np.array_equal(got, want)
    got = np.asarray(kiln.jit(lambda: lax_internal._delta(np.int32, (2, 3, 2), (0, 2)))())
    want = np.zeros((2, 3, 2), np.int32)
    for i in range(2):
        want[i, :, i] = 1
    assert np.array_equal(got, want)


def test_ragged_dot_instruction_option_is_accepted():
    """JAX's ``jax_ragged_dot_use_ragged_dot_instruction`` (a TPU lowering choice): settable
    under its full name as in ``jax._src.config``; ragged_dot's result is the same."""
    lhs = np.arange(24, dtype=np.float32).reshape(6, 4) / 7
    rhs = np.arange(24, dtype=np.float32).reshape(2, 4, 3) / 5
    sizes = np.array([2, 4], np.int32)
    want = np.asarray(lax.ragged_dot(lhs, rhs, sizes))
    assert kiln.config.jax_ragged_dot_use_ragged_dot_instruction is True
    with kcfg.jax_ragged_dot_use_ragged_dot_instruction(False):
        assert kiln.config.jax_ragged_dot_use_ragged_dot_instruction is False
        np.testing.assert_array_equal(np.asarray(lax.ragged_dot(lhs, rhs, sizes)), want)
    assert kiln.config.jax_ragged_dot_use_ragged_dot_instruction is True
