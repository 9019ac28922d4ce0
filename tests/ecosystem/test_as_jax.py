"""``kiln.as_jax`` (``import jax`` resolves to kiln) and the JAX surface libraries use:
``jax.typing``, ``jax.flatten_util``, ``jax.core``, ``jax.extend``, ``jax.api_util``,
``jax.interpreters.partial_eval``, ``jax._src`` stand-ins, and Flax/Optax running on kiln.

The alias changes the process for good, so everything that installs it runs in a
subprocess; the kiln modules themselves are tested in-process against JAX.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import flatten_util
from kiln.api_util import (
    argnums_partial,
    debug_info,
    donation_vector,
    flatten_axes,
    flatten_fun,
    flatten_fun_nokwargs,
    rebase_donate_argnums,
    shaped_abstractify,
)
from kiln.core.avals import ShapedArray
from kiln.extend import core as ex_core
from kiln.extend import linear_util as lu
from kiln.interpreters import partial_eval as pe
from kiln.tree_util import tree_flatten, tree_structure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(args, env=None, cwd=None, timeout=240):
    e = dict(os.environ)
    e.update(env or {})
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=e, timeout=timeout)


def _run_alias(code, *extra):
    p = _run(["-m", "kiln.as_jax", "-c", textwrap.dedent(code), *extra])
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


# ---------------------------------------------------------------------------------------------
# The import hook.

def test_alias_resolves_jax_to_kiln():
    out = _run_alias("""
        import sys, types
        import jax, jax.numpy as jnp, jax.lax, jax.tree_util, jax.random
        import kiln
        assert jax.numpy is kiln.numpy and jnp is kiln.numpy and jax.lax is kiln.lax
        assert sys.modules["jax.tree_util"] is kiln.tree_util
        assert jax.jit is kiln.jit and jax.Array is kiln.Array
        assert jax.__version__ == "0.10.2" and jax.__version_info__ == (0, 10, 2)
        import jax.version
        assert jax.version.__version__ == "0.10.2" and jax.version.__version_info__ == (0, 10, 2)
        assert kiln.__version__ != "0.10.2"
        import jaxlib, jaxlib.version
        assert jaxlib.__version__ == "0.10.2" and jaxlib.version.__version__ == "0.10.2"
        import jax.lib
        assert jax.lib.__version__ == "0.10.2" and sys.modules["jax.lib"] is jax.lib
        from jax import flatten_util, typing, api_util, extend
        from jax.extend import linear_util, core, source_info_util
        from jax.interpreters import partial_eval as pe
        from jax._src import traceback_util, dtypes, core as src_core
        assert flatten_util is kiln.flatten_util and typing is kiln.typing
        print(sys.argv, float(jnp.sum(jnp.arange(4.0))))
    """, "a", "b")
    assert out.strip() == "['-c', 'a', 'b'] 6.0"


def test_alias_keeps_attributes_shadowed_by_submodules():
    # kiln.config (the flags object) and kiln.devices (a function) share their names with
    # modules kiln/config.py and kiln/devices.py; importing those as jax.X must not replace
    # the attributes.
    _run_alias("""
        import jax, kiln, types
        import jax.config
        import jax.devices
        from jax import config as c
        assert not isinstance(jax.config, types.ModuleType), jax.config
        assert c is kiln.config and jax.config is kiln.config
        assert callable(jax.devices) and not isinstance(jax.devices, types.ModuleType)
        assert jax.devices()[0].platform == "cpu"
        jax.config.update("jax_enable_x64", True)
        assert jax.numpy.arange(3.0).dtype == "float64"
        # the kiln package itself is not clobbered either
        assert not isinstance(kiln.config, types.ModuleType)
        assert not isinstance(kiln.devices, types.ModuleType)
    """)


def test_alias_missing_modules_raise_module_not_found():
    _run_alias("""
        import importlib
        for name in ["jax.no_such_module", "jax.experimental.no_such", "jaxlib.xla_client"]:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as e:
                assert e.name == name, (e.name, name)
            else:
                raise AssertionError(name)
        try:
            import jax
            jax.no_such_attribute
        except AttributeError as e:
            assert "no_such_attribute" in str(e)
        else:
            raise AssertionError
    """)


def test_alias_refuses_when_real_jax_is_loaded():
    pytest.importorskip("jax")
    p = _run(["-c", "import jax\nimport kiln.as_jax"])
    assert p.returncode != 0
    assert "ImportError" in p.stderr and "real `jax` is already imported" in p.stderr


def test_alias_runs_scripts_and_modules(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys, jax, jax.numpy as jnp
        import helper
        print(__name__, sys.argv[1:], helper.VALUE, jax.__version__,
              float(jax.grad(lambda x: x ** 3)(2.0)))
    """))
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    p = _run(["-m", "kiln.as_jax", str(script), "--flag", "x"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["__main__", "['--flag',", "'x']", "7", "0.10.2", "12.0"]
    p = _run(["-m", "kiln.as_jax", "-m", "prog", "y"], cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[:3] == ["__main__", "['y']", "7"]
    p = _run(["-m", "kiln.as_jax"])
    assert p.returncode == 2 and "usage" in p.stdout


def test_alias_import_kiln_as_jax_in_process_then_canonical_module():
    # `python -m kiln.as_jax` runs the file as __main__; a later `import kiln.as_jax` must
    # see the hook as installed (one finder in sys.meta_path).
    out = _run_alias("""
        import sys, kiln.as_jax as a
        assert a.installed()
        print(sum(type(f).__name__ == "_JaxFinder" for f in sys.meta_path))
    """)
    assert out.strip() == "1"


# ---------------------------------------------------------------------------------------------
# jax.typing

def test_typing_matches_jax():
    jax = pytest.importorskip("jax")
    from kiln.typing import ArrayLike, DTypeLike
    values = [kiln.numpy.ones(2), np.ones(2), np.float32(1), 1, 1.5, True, 2j, [1, 2], "x",
              None, (1,)]
    for v in values:
        jv = jax.numpy.ones(2) if isinstance(v, kiln.Array) else v
        assert isinstance(v, ArrayLike) == isinstance(jv, jax.typing.ArrayLike), v
    # as in JAX, tracers are kiln.Array instances but not ArrayLike (a Union checks the
    # type's subclasses, and tracer classes are not Array subclasses)
    seen = []
    kiln.jit(lambda x: seen.append((isinstance(x, ArrayLike), isinstance(x, kiln.Array))))(1.)
    jseen = []
    jax.jit(lambda x: jseen.append((isinstance(x, jax.typing.ArrayLike),
                                    isinstance(x, jax.Array))))(1.)
    assert seen == jseen == [(False, True)]
    # DTypeLike holds ``type[Any]``: as in JAX, isinstance works for strings only (before
    # reaching that member) and raises TypeError otherwise
    assert isinstance("float32", DTypeLike) and isinstance("float32", jax.typing.DTypeLike)
    for d in [np.float32, np.dtype("int8"), float]:
        with pytest.raises(TypeError):
            isinstance(d, jax.typing.DTypeLike)
        with pytest.raises(TypeError):
            isinstance(d, DTypeLike)


# ---------------------------------------------------------------------------------------------
# jax.flatten_util

def test_ravel_pytree_matches_jax():
    jax = pytest.importorskip("jax")
    from jax.flatten_util import ravel_pytree as j_ravel
    tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": (np.float32(2.5),
            np.ones(4, np.float32))}
    flat, unravel = flatten_util.ravel_pytree(tree)
    jflat, junravel = j_ravel(tree)
    np.testing.assert_array_equal(flat, jflat)
    assert flat.dtype == jflat.dtype and flat.shape == (11,)
    back = unravel(flat * 2)
    jback = junravel(jflat * 2)
    assert tree_structure(back) == tree_structure(tree)
    for a, b in zip(tree_flatten(back)[0], jax.tree_util.tree_leaves(jback)):
        np.testing.assert_array_equal(a, b)
        assert a.shape == b.shape and a.dtype == b.dtype
    # a single dtype: unravel is dtype-polymorphic
    assert unravel(flat.astype(jnp.int32))["a"].dtype == jnp.int32
    # hashable, usable as a static argument
    assert unravel == flatten_util.ravel_pytree(tree)[1]
    out = kiln.jit(lambda u, v: u(v)["b"][1], static_argnums=0)(unravel, flat)
    np.testing.assert_array_equal(out, np.ones(4))


def test_ravel_pytree_mixed_dtypes_and_empty():
    pytest.importorskip("jax")
    from jax.flatten_util import ravel_pytree as j_ravel
    tree = [np.arange(3, dtype=np.int32), np.ones(2, np.float32), np.array(True)]
    flat, unravel = flatten_util.ravel_pytree(tree)
    jflat, _ = j_ravel(tree)
    assert flat.dtype == jflat.dtype == np.float32
    np.testing.assert_array_equal(flat, jflat)
    back = unravel(flat)
    assert [x.dtype for x in back] == [np.int32, np.float32, np.bool_]
    with pytest.raises(TypeError, match="unravel function given array of dtype"):
        unravel(flat.astype(jnp.int32))
    e, un = flatten_util.ravel_pytree({})
    assert e.shape == (0,) and e.dtype == np.float32 and un(e) == {}
    # differentiable and batchable
    g = kiln.grad(lambda t: jnp.sum(flatten_util.ravel_pytree(t)[0] ** 2))(
        {"x": jnp.ones(2), "y": jnp.full(3, 2.0)})
    np.testing.assert_allclose(g["y"], np.full(3, 4.0))
    v = kiln.vmap(lambda x: flatten_util.ravel_pytree((x, x[:1]))[0])(jnp.ones((5, 2)))
    assert v.shape == (5, 3)


# ---------------------------------------------------------------------------------------------
# jax.core / jax.extend.core

def test_core_public_names():
    assert kiln.core.Tracer is kiln.core.trace.Tracer
    assert kiln.core.ShapedArray is ShapedArray
    assert isinstance(ShapedArray((2,), np.float32), kiln.core.AbstractValue)
    with pytest.raises(AttributeError, match="jax.typeof"):
        kiln.core.get_aval  # noqa: B018  (removed in JAX 0.10)
    with pytest.warns(DeprecationWarning, match="jax.extend.core.find_top_trace"):
        f = kiln.core.find_top_trace
    assert f is ex_core.find_top_trace
    seen = []
    kiln.jit(lambda x: seen.append(isinstance(x, kiln.core.Tracer)) or x)(1.0)
    assert seen == [True]


def test_find_top_trace_and_opaque_trace_state():
    outer = ex_core.get_opaque_trace_state()
    assert outer == ex_core.get_opaque_trace_state()
    states = []

    def f(x):
        states.append(ex_core.get_opaque_trace_state(convention="flax"))
        assert ex_core.find_top_trace((x,)) is x._trace
        assert ex_core.unsafe_am_i_under_a_jit_DO_NOT_USE()
        return x

    kiln.jit(f)(1.0)
    assert states[0] != outer
    assert not ex_core.unsafe_am_i_under_a_jit_DO_NOT_USE()
    names = kiln.vmap(lambda x: (ex_core.unsafe_get_axis_names_DO_NOT_USE(), x)[1],
                      axis_name="i")
    names(jnp.ones(2))
    under = []
    kiln.vmap(lambda x: under.append(ex_core.unsafe_am_i_under_a_vmap_DO_NOT_USE()) or x)(
        jnp.ones(2))
    assert under == [True]


def test_extend_core_jaxpr_tools():
    closed = kiln.make_jaxpr(lambda x, y: kiln.jit(jnp.sin)(x) * y)(1.0, 2.0)
    ex_core.check_jaxpr(closed.jaxpr)
    out = ex_core.jaxpr_as_fun(closed)(0.5, 3.0)
    np.testing.assert_allclose(out[0], np.sin(0.5) * 3.0, rtol=1e-6)
    subs = list(ex_core.subjaxprs(closed.jaxpr))
    assert len(subs) == 1 and subs[0].eqns[0].primitive.name == "sin"
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda x: ex_core.concrete_or_error(float, x))(1.0)
    assert ex_core.concrete_or_error(float, jnp.float32(2.0)) == 2.0
    assert ex_core.primal_dtype_to_tangent_dtype(np.int32) == kiln.dtypes.float0
    assert ex_core.primal_dtype_to_tangent_dtype(np.float16) == np.float16
    a = ShapedArray((3, 4), np.float32)
    assert ex_core.mapped_aval(3, 0, a).shape == (4,)
    assert ex_core.unmapped_aval(5, 1, a).shape == (3, 5, 4)
    assert ex_core.valid_jaxtype(1.0) and not ex_core.valid_jaxtype("s")
    with ex_core.eval_context():
        assert not isinstance(jnp.ones(2) + 1, kiln.core.Tracer)


# ---------------------------------------------------------------------------------------------
# linear_util, api_util, partial_eval

def test_linear_util_transformations():
    def scale(inner, k, *args):
        return [k * o for o in inner(*args)]

    def record(inner, store, *args):
        out = inner(*args)
        store.store(len(out))
        return out

    f = lu.wrap_init(lambda x, y, *, bias: [x + y + bias], {"bias": 1.0})
    g = lu.transformation2(scale)(f, 10.0)
    g, n = lu.transformation_with_aux2(record)(g)
    assert g.call_wrapped(1.0, 2.0) == [40.0] and n() == 1
    # JAX curries them: a call with every argument is still a thunk.
    assert lu.transformation2(scale, f, 10.0)().call_wrapped(1.0, 2.0) == [40.0]

    def gen_double(*args):
        ans = yield args, {}
        yield [2 * a for a in ans]

    h = lu.transformation(gen_double)(lu.wrap_init(lambda x: [x + 1]))
    assert h.call_wrapped(3) == [8]
    s = lu.Store()
    with pytest.raises(lu.StoreException):
        s.val  # noqa: B018
    s.store(1)
    with pytest.raises(lu.StoreException):
        s.store(2)


def test_api_util_flatten_fun_and_friends():
    args, kwargs = ((1.0, {"a": 2.0}), {"k": 3.0})
    flat, in_tree = tree_flatten((args, kwargs))
    dbg = debug_info("test", lambda x, y, k: None, args, kwargs)
    assert dbg.traced_for == "test" and dbg.arg_names == ("x", "y['a']", "k")
    f = lu.wrap_init(lambda x, y, k: (x + y["a"], {"z": k}), debug_info=dbg)
    ff, out_tree = flatten_fun(f, in_tree)
    assert ff.call_wrapped(*flat) == [3.0, 3.0]
    assert out_tree() == tree_structure((0, {"z": 0}))
    flat2, in_tree2 = tree_flatten((1.0, 2.0))
    g, out2 = flatten_fun_nokwargs(lu.wrap_init(lambda a, b: [a * b]), in_tree2)
    assert g.call_wrapped(*flat2) == [2.0] and out2().num_leaves == 1
    p, dyn = argnums_partial(lu.wrap_init(lambda a, b, c: a - b * c), (1,), (10, 2, 3))
    assert dyn == (2,) and p.call_wrapped(4) == -2
    assert rebase_donate_argnums((0, 3), (1,)) == (0, 2)
    _, tree = tree_flatten(((1, (2, 3)), {"w": 4}))
    assert donation_vector((1,), ("w",), tree) == (False, True, True, True)
    assert flatten_axes("vmap in_axes", tree_structure((1, (2, 3))), (0, (None, 1))) == \
        [0, None, 1]
    with pytest.raises(ValueError, match="tree prefix"):
        flatten_axes("vmap in_axes", tree_structure((1, 2)), (0, 1, 2))
    assert shaped_abstractify(kiln.ShapeDtypeStruct((2,), np.int32)) == \
        ShapedArray((2,), np.int32)
    assert shaped_abstractify(1.0) == ShapedArray((), np.float32, True)


def test_partial_eval_trace_to_jaxpr_nounits():
    calls = []

    def f(x, y):
        k = jnp.cos(x) * 2.0          # known: computed now
        calls.append(k)
        return [k, k * y + jnp.sin(y), x + 1.0]

    x = jnp.float32(0.5)
    pvals = [pe.PartialVal.known(x), pe.PartialVal.unknown(ShapedArray((3,), np.float32))]
    jaxpr, out_pvals, consts = pe.trace_to_jaxpr_nounits(lu.wrap_init(f), pvals)
    assert [pv.is_known() for pv in out_pvals] == [True, False, True]
    np.testing.assert_allclose(out_pvals[0].get_known(), 2 * np.cos(0.5), rtol=1e-6)
    assert out_pvals[1].get_aval() == ShapedArray((3,), np.float32)
    assert len(jaxpr.invars) == 1 and len(jaxpr.outvars) == 1
    y = np.array([1.0, 2.0, 3.0], np.float32)
    out = kiln.core.eval_jaxpr(jaxpr, consts, y)[0]
    np.testing.assert_allclose(out, 2 * np.cos(0.5) * y + np.sin(y), rtol=1e-6)
    # everything known: nothing staged
    jaxpr2, outs2, _ = pe.trace_to_jaxpr_nounits(
        lu.wrap_init(lambda a: [a * 2]), [pe.PartialVal.known(jnp.ones(2))])
    assert outs2[0].is_known() and not jaxpr2.eqns
    # instantiate forces a known output into the jaxpr
    jaxpr3, outs3, consts3 = pe.trace_to_jaxpr_nounits(
        lu.wrap_init(lambda a: [a * 2]), [pe.PartialVal.known(jnp.ones(2))], instantiate=True)
    assert not outs3[0].is_known() and len(jaxpr3.outvars) == 1
    np.testing.assert_array_equal(kiln.core.eval_jaxpr(jaxpr3, consts3)[0], [2.0, 2.0])


def test_partial_eval_dynamic_and_dce():
    jaxpr, out_avals, consts = pe.trace_to_jaxpr_dynamic(
        lu.wrap_init(lambda a, b: [jnp.sin(a), a * b, b + 1.0]),
        [ShapedArray((2,), np.float32), ShapedArray((2,), np.float32)])
    assert [a.shape for a in out_avals] == [(2,)] * 3 and len(jaxpr.eqns) == 3
    new, used_inputs = pe.dce_jaxpr(jaxpr, [True, False, False])
    assert used_inputs == [True, False] and len(new.eqns) == 1 and len(new.invars) == 1
    new2, used2 = pe.dce_jaxpr(jaxpr, [False, False, True], instantiate=True)
    assert used2 == [True, True] and len(new2.eqns) == 1


# ---------------------------------------------------------------------------------------------
# Small pieces: typeof(x).sharding, layouts, traceback exclusions, top-level names.

def test_typeof_sharding_and_layout():
    jax = pytest.importorskip("jax")
    s = kiln.typeof(jnp.ones((2, 3))).sharding
    js = jax.typeof(jax.numpy.ones((2, 3))).sharding
    assert tuple(s.spec) == tuple(js.spec) == (None, None)
    assert s.mesh.are_all_axes_explicit == js.mesh.are_all_axes_explicit is False
    assert s.mesh.axis_names == () and s.mesh.empty
    # JAX's constructor keywords (Flax passes sharding=); kiln avals carry no sharding
    a = ShapedArray((2, 3), np.float32, sharding=s)
    assert a == ShapedArray((2, 3), np.float32) and a.sharding == s
    s1 = s.update(spec=kiln.P(None))
    assert tuple(s1.spec) == (None,) and s1.mesh == s.mesh
    sds = kiln.ShapeDtypeStruct((2, 3), jnp.int32)
    assert kiln.typeof(sds) == ShapedArray((2, 3), np.int32)
    assert jax.typeof(jax.ShapeDtypeStruct((2, 3), np.int32)).shape == (2, 3)
    np.testing.assert_array_equal(jnp.full_like(sds, 3), np.full((2, 3), 3, np.int32))
    from kiln.experimental.layout import Format, Layout, with_layout_constraint
    assert Format().layout is None and Format(Layout.AUTO).layout is Layout.AUTO
    with pytest.raises(ValueError, match="Sharding has to be concrete"):
        Format(Layout((1, 0)))
    with pytest.raises(TypeError):
        Format(layout="bad")
    x = jnp.arange(4.0)
    assert with_layout_constraint(x, Layout((0,))) is x


def test_traceback_exclusions(tmp_path):
    from kiln._src import traceback_util
    from kiln.errors import user_frame_summary
    here = user_frame_summary()
    assert "test_as_jax.py" in here
    traceback_util.register_exclusion(os.path.dirname(__file__))
    try:
        assert "test_as_jax.py" not in user_frame_summary()
        assert traceback_util.api_boundary(len)([1, 2]) == 2
    finally:
        from kiln import errors
        traceback_util._exclude_paths.remove(os.path.abspath(os.path.dirname(__file__)))
        errors._excluded_paths.remove(os.path.abspath(os.path.dirname(__file__)))


def test_asarray_of_typed_keys():
    jax = pytest.importorskip("jax")
    k = kiln.random.key(0)
    assert jnp.asarray(k) is k
    c = jnp.array(k)
    assert c is not k and c.dtype == k.dtype
    np.testing.assert_array_equal(kiln.random.key_data(c), kiln.random.key_data(k))
    out = kiln.jit(lambda k: kiln.random.key_data(jnp.asarray(k)))(k)
    np.testing.assert_array_equal(out, jax.random.key_data(jax.random.key(0)))
    with pytest.raises(ValueError, match="Cannot convert_element_type"):
        jnp.asarray(k, dtype=jnp.float32)
    with pytest.raises(ValueError, match="Cannot convert_element_type"):
        jax.numpy.asarray(jax.random.key(0), dtype=jax.numpy.float32)


def test_flag_context_managers():
    jax = pytest.importorskip("jax")
    for lib in (kiln, jax):
        with lib.numpy_rank_promotion("raise"):
            with pytest.raises(ValueError):
                lib.numpy.ones(2) + lib.numpy.ones((3, 2))
        assert (lib.numpy.ones(2) + lib.numpy.ones((3, 2))).shape == (3, 2)
        with lib.numpy_dtype_promotion("strict"):
            with pytest.raises(lib.dtypes.TypePromotionError if lib is kiln else Exception):
                lib.numpy.ones(2, "int32") + lib.numpy.ones(2, "float32")
        with lib.threefry_partitionable(False):
            assert not lib.config.jax_threefry_partitionable
        with lib.enable_checks(True):
            assert lib.config.jax_enable_checks
        with lib.default_prng_impl("threefry2x32"):
            assert lib.config.jax_default_prng_impl == "threefry2x32"
    events = []
    kiln.monitoring.register_event_listener(lambda e, **kw: events.append((e, kw)))
    try:
        kiln.monitoring.record_event("/x", a=1)
    finally:
        kiln.monitoring.clear_event_listeners()
    kiln.monitoring.record_event("/y")
    assert events == [("/x", {"a": 1})]
    assert isinstance(kiln.jit(jnp.sin), kiln.stages.Wrapped)
    assert isinstance(kiln.jit(jnp.sin).lower(1.0), kiln.stages.Lowered)


def test_top_level_names_used_by_libraries():
    jax = pytest.importorskip("jax")
    assert kiln.float0 == jax.float0
    assert kiln.P is kiln.sharding.PartitionSpec
    assert kiln.NamedSharding is kiln.sharding.NamedSharding
    assert isinstance(kiln.devices()[0], kiln.Device)
    assert isinstance(jax.typing.ArrayLike, type(kiln.typing.ArrayLike))


# ---------------------------------------------------------------------------------------------
# Libraries on kiln (skipped without them).

def _parse_losses(text):
    return [float(v) for v in re.findall(r"loss (\d+\.\d+)", text)]


def test_flax_example_same_losses_as_jax():
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    script = os.path.join(ROOT, "examples", "flax_mlp.py")
    pj = _run([script])
    assert pj.returncode == 0, pj.stderr
    pk = _run(["-m", "kiln.as_jax", script])
    assert pk.returncode == 0, pk.stderr
    lj, lk = _parse_losses(pj.stdout), _parse_losses(pk.stdout)
    assert len(lj) == len(lk) == 11
    assert "kiln" in pk.stdout and "kiln" not in pj.stdout
    np.testing.assert_allclose(lk, lj, rtol=1e-4)     # 4 digits (in practice ~6)
    assert lk[-1] < 0.5 * lk[0]


_FLAX_PROBE = """
import json, jax, jax.numpy as jnp, numpy as np, optax
import flax, flax.linen as nn, flax.serialization, flax.struct
from flax.core import freeze

class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(5)(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.Dropout(0.5, deterministic=not train)(x)
        return nn.Dense(2)(nn.gelu(x))

@flax.struct.dataclass
class Box:
    a: jax.Array
    n: int = flax.struct.field(pytree_node=False, default=3)

net = Net()
x = jnp.linspace(-1, 1, 12, dtype=jnp.float32).reshape(4, 3)
v = net.init(jax.random.key(0), x)
y = net.apply(v, x)
yt, upd = net.apply(v, x, train=True, rngs={"dropout": jax.random.key(1)},
                    mutable=["batch_stats"])
shapes = jax.tree.map(lambda a: list(a.shape), net.lazy_init(
    jax.random.key(0), jax.ShapeDtypeStruct((4, 3), jnp.float32)))
b = jax.jit(lambda b: b.replace(a=b.a * 2))(Box(jnp.ones(2)))
data = flax.serialization.to_bytes(v)
v2 = flax.serialization.from_bytes(v, data)
opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))
params = v["params"]
st = opt.init(params)
for _ in range(3):
    g = jax.grad(lambda p: jnp.sum(net.apply({**v, "params": p}, x) ** 2))(params)
    u, st = opt.update(g, st, params)
    params = optax.apply_updates(params, u)
print(json.dumps({
    "y": np.asarray(y).tolist(), "yt": np.asarray(yt).tolist(),
    "mean": np.asarray(upd["batch_stats"]["BatchNorm_0"]["mean"]).tolist(),
    "shapes": shapes, "box": [np.asarray(b.a).tolist(), b.n],
    "same": bool(jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), v, v2))),
    "params": jax.tree.map(lambda a: np.asarray(a).tolist(), params),
}))
"""


@pytest.mark.slow
def test_flax_and_optax_features_match_jax():
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    pj = _run(["-c", _FLAX_PROBE])
    assert pj.returncode == 0, pj.stderr
    pk = _run(["-m", "kiln.as_jax", "-c", _FLAX_PROBE])
    assert pk.returncode == 0, pk.stderr
    j, k = json.loads(pj.stdout), json.loads(pk.stdout)
    assert k["shapes"] == j["shapes"] and k["box"] == j["box"] and k["same"] and j["same"]
    for name in ("y", "yt", "mean"):
        np.testing.assert_allclose(k[name], j[name], rtol=2e-5, atol=1e-6)
    for a, b in zip(tree_flatten(k["params"])[0], tree_flatten(j["params"])[0]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


# A sample of Optax's own test modules (the whole suite: docs/ecosystem.md).
_OPTAX_SAMPLE = ["optax._src.base_test", "optax.transforms._clipping_test",
                 "optax.transforms._combining_test", "optax.tree_utils._tree_math_test",
                 "optax.losses._regression_test", "optax._src.utils_test"]


@pytest.mark.slow
def test_optax_test_modules_pass_on_kiln(tmp_path):
    pytest.importorskip("optax")
    pytest.importorskip("absl")
    p = _run(["-m", "kiln.as_jax", "-m", "pytest", "-q", "-p", "no:cacheprovider",
              "--pyargs", *_OPTAX_SAMPLE], cwd=str(tmp_path), timeout=600)
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "failed" not in tail and int(re.search(r"(\d+) passed", tail).group(1)) >= 170


_FLAX_TRANSFORMS_PROBE = """
import json, jax, jax.numpy as jnp, numpy as np
import flax.linen as nn

class Block(nn.Module):
    @nn.compact
    def __call__(self, c, x):
        h = nn.Dense(4)(jnp.concatenate([c, x], -1))
        return jnp.tanh(h), h.sum(-1)

class M(nn.Module):
    @nn.compact
    def __call__(self, x):
        # conv + norm + attention + scan + vmap + remat + jit + RNN
        y = nn.Conv(3, (3,))(x)
        y = nn.LayerNorm()(y)
        y = nn.GroupNorm(num_groups=1)(y)
        y = nn.MultiHeadDotProductAttention(num_heads=1, qkv_features=4)(y)
        ScanBlock = nn.scan(Block, variable_broadcast="params", split_rngs={"params": False},
                            in_axes=1, out_axes=1)
        c, ys = ScanBlock()(jnp.zeros((x.shape[0], 4)), y)
        z = nn.remat(nn.Dense)(5)(c)
        z = nn.jit(nn.Dense)(5)(z)
        V = nn.vmap(nn.Dense, in_axes=0, out_axes=0, variable_axes={"params": None},
                    split_rngs={"params": False})
        z = V(2)(z)
        r = nn.RNN(nn.LSTMCell(3))(y)
        e = nn.Embed(7, 2)(jnp.array([[1, 2, 6]]))
        return z.sum() + ys.sum() + r.sum() + e.sum()

x = jnp.linspace(-1, 1, 2 * 5 * 2, dtype=jnp.float32).reshape(2, 5, 2)
m = M()
v = m.init(jax.random.key(0), x)
out = m.apply(v, x)
g = jax.jit(jax.grad(lambda p: m.apply({"params": p}, x)))(v["params"])
print(json.dumps({"out": float(out), "g": [float(jnp.sum(l)) for l in jax.tree.leaves(g)],
                  "shapes": [list(l.shape) for l in jax.tree.leaves(v)]}))
"""


@pytest.mark.slow
def test_flax_lifted_transforms_match_jax():
    # nn.scan (Flax's constancy check runs jax.interpreters.partial_eval), nn.remat, nn.jit,
    # nn.vmap, RNN/LSTM, attention, conv and norms: values and gradients as on JAX.
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    pj = _run(["-c", _FLAX_TRANSFORMS_PROBE])
    assert pj.returncode == 0, pj.stderr
    pk = _run(["-m", "kiln.as_jax", "-c", _FLAX_TRANSFORMS_PROBE])
    assert pk.returncode == 0, pk.stderr
    j, k = json.loads(pj.stdout), json.loads(pk.stdout)
    assert k["shapes"] == j["shapes"]
    np.testing.assert_allclose(k["out"], j["out"], rtol=1e-5)
    np.testing.assert_allclose(k["g"], j["g"], rtol=1e-4, atol=1e-5)


_CHEX_PROBE = """
import json, jax, jax.numpy as jnp, numpy as np, chex
out = {}
x = jnp.ones((2, 3))
chex.assert_shape(x, (2, 3)); chex.assert_rank(x, 2); chex.assert_type(x, float)
try:
    chex.assert_shape(x, (3, 2)); out["shape"] = "no"
except AssertionError:
    out["shape"] = "raised"
chex.assert_trees_all_close({"a": x}, {"a": x + 1e-7})
@chex.dataclass
class S:
    a: chex.Array
    b: int
out["dc"] = np.asarray(jax.jit(lambda s: s.replace(a=s.a * 2))(S(a=x, b=1)).a).tolist()
@chex.chexify
@jax.jit
def f(v):
    chex.assert_tree_all_finite(v)
    return v * 2
out["chexify_ok"] = np.asarray(f(jnp.ones(2))).tolist()
try:
    f(jnp.array([1.0, jnp.nan]))
    chex.block_until_chexify_assertions_complete()
    out["chexify_nan"] = "no"
except AssertionError as e:
    out["chexify_nan"] = "non-finite" in str(e)
@jax.jit
@chex.assert_max_traces(n=1)
def g(v):
    return v + 1
g(x); g(x)
try:
    g(jnp.ones(4)); out["max_traces"] = "no"
except AssertionError:
    out["max_traces"] = "raised"
with chex.fake_jit():
    out["fake_jit"] = bool(jax.jit(lambda v: isinstance(v, jax.core.Tracer))(x))
chex.set_n_cpu_devices(1)
print(json.dumps(out))
"""


def test_chex_on_kiln_matches_jax(tmp_path):
    pytest.importorskip("jax")
    pytest.importorskip("chex")
    probe = tmp_path / "chex_probe.py"      # chexify reads its function's source file
    probe.write_text(_CHEX_PROBE)
    pj = _run([str(probe)])
    assert pj.returncode == 0, pj.stderr
    pk = _run(["-m", "kiln.as_jax", str(probe)])
    assert pk.returncode == 0, pk.stderr
    assert json.loads(pk.stdout) == json.loads(pj.stdout)
    assert json.loads(pk.stdout)["chexify_nan"] is True


def test_lowered_compiler_ir_and_backends():
    ir = kiln.jit(lambda x: jnp.square(x) * 1.0 + 0.0).lower(2.0).compiler_ir()
    assert [e.primitive.name for e in ir.jaxpr.eqns] == ["square"] or \
        [e.primitive.name for e in ir.jaxpr.eqns] == ["integer_pow"]
    np.testing.assert_allclose(kiln.core.eval_jaxpr(ir.jaxpr, ir.consts, 3.0)[0], 9.0)
    hlo = kiln.jit(jnp.sin).lower(1.0).compiler_ir(dialect="hlo").as_hlo_text()
    assert "ROOT sin.1 = f32[] sine(Arg_0.1)" in hlo       # tests/compiler/test_hlo_text.py
    from kiln._src import xla_bridge
    kiln.devices()
    assert xla_bridge._backends["cpu"].platform == "cpu"
    assert xla_bridge.get_backend().device_count() == kiln.device_count()


def test_no_warnings_on_alias_import():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = _run(["-W", "error", "-m", "kiln.as_jax", "-c", "import jax, jax.numpy"])
    assert p.returncode == 0, p.stderr



def test_no_retrace_warning_under_the_alias():
    """JAX has no retrace warning, and kiln's is opt-in: under the alias a function traced
    again and again (a new jit object each time, as Flax's summary does) warns nothing,
    even with warnings as errors; KILN_WARN_RETRACE=1 turns it on."""
    code = """
        import warnings
        warnings.simplefilter("error")
        import jax, jax.numpy as jnp
        for i in range(15):
            jax.jit(lambda x: x + 1)(jnp.ones(2))
        print(jax.config.kiln_warn_retrace)
    """
    assert _run_alias(code).strip() == "False"
    p = _run(["-m", "kiln.as_jax", "-c", textwrap.dedent(code)],
             env={"KILN_WARN_RETRACE": "1"})
    assert p.returncode != 0 and "RetraceWarning" in p.stderr
