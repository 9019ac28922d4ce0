"""``sharding.AbstractMesh``, ``get_abstract_mesh``, ``get_mesh``, ``use_abstract_mesh``
against JAX: the empty mesh outside any context, ``set_mesh`` and legacy ``with mesh:``
contexts, properties and reprs, and shardings over an abstract mesh resolved against the
mesh context (as Flax builds them), eagerly and under ``jit``/``vmap``/``grad``."""
from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.sharding import (
    AbstractMesh,
    AxisType,
    NamedSharding,
    PartitionSpec,
    get_abstract_mesh,
    get_mesh,
    set_mesh,
    use_abstract_mesh,
)

PROPS = ["empty", "axis_names", "shape", "size", "axis_sizes", "axis_types", "shape_tuple",
         "are_all_axes_explicit", "are_all_axes_auto", "are_all_axes_manual", "manual_axes",
         "explicit_axes", "auto_axes", "_any_axis_manual", "_any_axis_explicit",
         "_any_axis_auto"]


def _props(m):
    return {p: getattr(m, p) for p in PROPS}


def _same_types(k, j):
    """AxisType tuples of kiln and JAX name the same types."""
    return tuple(t.name for t in k) == tuple(t.name for t in j)


def test_empty_outside_any_mesh():
    m = get_abstract_mesh()
    assert isinstance(m, AbstractMesh)
    assert m.empty and m.axis_names == () and m.size == 0 and m.axis_sizes == ()
    assert m == AbstractMesh((), ()) and hash(m) == hash(AbstractMesh((), ()))
    assert m.abstract_mesh is m
    assert repr(m) == "AbstractMesh((), axis_types=())"
    for name in ("devices", "device_ids", "local_devices"):
        with pytest.raises(ValueError, match=f"AbstractMesh does not implement {name}"):
            getattr(m, name)
    c = get_mesh()
    assert c.empty and c.size == 0 and c.axis_names == () and c.devices.shape == ()
    assert repr(c) == "Mesh(axis_sizes=(), axis_names=())"
    # the mesh in an unsharded value's type is the same empty abstract mesh
    assert kiln.typeof(jnp.ones(3)).sharding.mesh == m


def test_empty_matches_jax():
    jax = pytest.importorskip("jax")
    k, j = get_abstract_mesh(), jax.sharding.get_abstract_mesh()
    kp, jp = _props(k), _props(j)
    kt, jt = kp.pop("axis_types"), jp.pop("axis_types")
    assert kp == jp and _same_types(kt, jt)
    assert repr(k) == repr(j)
    assert repr(get_mesh()) == repr(jax.sharding.get_mesh())


def test_constructor_update_and_pickle():
    jax = pytest.importorskip("jax")
    for args, kw in [(((2, 3), ("a", "b")), {}),
                     (((4,), ("x",)), {"axis_types": "Explicit"}),
                     (((2, 2), ("x", "y")), {"axis_types": ("Manual", "Auto")})]:
        kkw = {k: (tuple(AxisType[t] for t in v) if isinstance(v, tuple) else AxisType[v])
               for k, v in kw.items()}
        jkw = {k: (tuple(jax.sharding.AxisType[t] for t in v) if isinstance(v, tuple)
                   else jax.sharding.AxisType[v]) for k, v in kw.items()}
        k, j = AbstractMesh(*args, **kkw), jax.sharding.AbstractMesh(*args, **jkw)
        assert repr(k) == repr(j)
        kp, jp = _props(k), _props(j)
        assert _same_types(kp.pop("axis_types"), jp.pop("axis_types")) and kp == jp
        ku = k.update_axis_types({args[1][0]: AxisType.Manual})
        ju = j.update_axis_types({args[1][0]: jax.sharding.AxisType.Manual})
        assert repr(ku) == repr(ju)
        assert pickle.loads(pickle.dumps(k)) == k
    with pytest.raises(TypeError):
        AbstractMesh((2,), ("a",), axis_types=("Auto",))
    with pytest.raises(ValueError, match="Number of axis names"):
        AbstractMesh((2,), ("a",), axis_types=(AxisType.Auto, AxisType.Auto))


def test_contexts_match_jax(jax8):
    jax = jax8
    kmesh = kiln.make_mesh((2, 2), ("x", "y"))
    jmesh = jax.make_mesh((2, 2), ("x", "y"))
    with set_mesh(kmesh), jax.set_mesh(jmesh):
        k, j = get_abstract_mesh(), jax.sharding.get_abstract_mesh()
        assert repr(k) == repr(j) and k == kmesh.abstract_mesh
        assert get_mesh() is kmesh
        kp, jp = _props(k), _props(j)
        assert _same_types(kp.pop("axis_types"), jp.pop("axis_types")) and kp == jp
        with use_abstract_mesh(AbstractMesh((4,), ("z",))), \
                jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((4,), ("z",))):
            assert repr(get_abstract_mesh()) == repr(jax.sharding.get_abstract_mesh())
            assert get_mesh() is kmesh
        assert get_abstract_mesh() == kmesh.abstract_mesh
        with pytest.raises(ValueError, match="cannot change the size"):
            use_abstract_mesh(AbstractMesh((2,), ("z",)))
    # a legacy ``with mesh:`` sets no abstract mesh
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with kmesh, jmesh:
            assert get_abstract_mesh().empty and jax.sharding.get_abstract_mesh().empty
            assert get_mesh().empty and jax.sharding.get_mesh().empty
    assert get_abstract_mesh().empty
    with pytest.raises(ValueError, match="Expected mesh of type"):
        use_abstract_mesh(kmesh)


def test_same_inside_transformations():
    mesh = kiln.make_mesh((2,), ("x",))
    seen = []

    def f(x):
        seen.append(get_abstract_mesh())
        return (x * 2).sum()

    with set_mesh(mesh):
        kiln.jit(f)(np.ones(2, np.float32))
        kiln.grad(f)(np.ones(2, np.float32))
        kiln.vmap(f)(np.ones((3, 2), np.float32))
    kiln.jit(f)(np.ones(3, np.float32))
    assert seen[:3] == [mesh.abstract_mesh] * 3 and seen[3].empty


def test_flax_style_sharding_over_the_abstract_mesh():
    """Flax: ``NamedSharding(get_abstract_mesh(), spec)`` given to with_sharding_constraint,
    reshard and device_put, resolved against the context's concrete mesh."""
    mesh = kiln.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    with set_mesh(mesh):
        s = NamedSharding(get_abstract_mesh(), PartitionSpec("x"))
        y = kiln.device_put(x, s)
        assert y.sharding == NamedSharding(mesh, PartitionSpec("x"))
        assert [sh.data.shape for sh in y.addressable_shards] == [(2, 2), (2, 2)]

        @kiln.jit
        def g(v):
            return kiln.lax.with_sharding_constraint(v * 2, s)
        np.testing.assert_array_equal(np.asarray(g(x)), x * 2)
        gx = kiln.grad(lambda v: g(v).sum())(x)
        np.testing.assert_array_equal(np.asarray(gx), np.full_like(x, 2))
        np.testing.assert_array_equal(np.asarray(kiln.vmap(g)(x[None])), x[None] * 2)
    with pytest.raises(ValueError, match="AbstractMesh"):
        kiln.device_put(x, s)


def test_partition_spec_tuple_methods():
    """``index``/``count``/``partitions`` and ``+`` of PartitionSpec, as JAX's (Flax's
    logical-axis rules call ``spec.index``)."""
    jax = pytest.importorskip("jax")
    JP = jax.sharding.PartitionSpec
    for parts in [("a", None, ("b", "c")), (None,), ()]:
        k, j = PartitionSpec(*parts), JP(*parts)
        assert k.partitions == j.partitions
        assert k.count(None) == j.count(None)
        if None in parts:
            assert k.index(None) == j.index(None)
        with pytest.raises(ValueError):
            k.index("zz")
        assert repr(k + ("d",)) == repr(j + ("d",))
        assert repr(("d",) + k) == repr(("d",) + j)
        assert repr(k + PartitionSpec("x")) == repr(j + JP("x"))
