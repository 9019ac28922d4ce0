"""``experimental.mesh_utils`` against JAX's (CPU devices): shapes, device order, errors,
handlers per device kind, hybrid meshes over processes, and use in a ``Mesh``."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.experimental import mesh_utils


def test_create_device_mesh(jax8):
    from jax.experimental import mesh_utils as jmu
    for shape in [(8,), (4, 2), (2, 2, 2), (8, 1)]:
        k = mesh_utils.create_device_mesh(shape)
        j = jmu.create_device_mesh(shape)
        assert k.shape == j.shape == shape
        assert [d.id for d in k.flat] == [d.id for d in j.flat]
    devs = kiln.devices()[:4]
    k = mesh_utils.create_device_mesh((2, 2), devs[::-1])
    assert [d.id for d in k.flat] == [3, 2, 1, 0]
    for bad in [(3,), ("a", 2)]:
        with pytest.raises(ValueError) as ke:
            mesh_utils.create_device_mesh(bad)
        with pytest.raises(ValueError) as je:
            jmu.create_device_mesh(bad)
        assert str(ke.value) == str(je.value)
    mesh = kiln.sharding.Mesh(mesh_utils.create_device_mesh((4, 2)), ("x", "y"))
    assert mesh.shape == {"x": 4, "y": 2}


def test_handler_and_hybrid():
    calls = []

    def handler(shape, devices, *, contiguous_submeshes):
        calls.append(shape)
        return np.asarray(devices[::-1], dtype=object).reshape(shape)

    mesh_utils.device_kind_handler_dict["cpu"] = handler
    try:
        m = mesh_utils.create_device_mesh((2,), kiln.devices()[:2])
    finally:
        del mesh_utils.device_kind_handler_dict["cpu"]
    assert calls == [(2,)] and [d.id for d in m.flat] == [1, 0]
    h = mesh_utils.create_hybrid_device_mesh((2, 2), (1, 1), kiln.devices()[:4],
                                             process_is_granule=True)
    assert h.shape == (2, 2) and [d.id for d in h.flat] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="does not have attribute slice_index"):
        mesh_utils.create_hybrid_device_mesh((2,), (1,), kiln.devices()[:2])
    with pytest.raises(ValueError, match="Number of slices 1 must equal"):
        mesh_utils.create_hybrid_device_mesh((2,), (2,), kiln.devices()[:2],
                                             process_is_granule=True)
