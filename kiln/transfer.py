"""Moving values between the host and devices: ``device_put``, ``device_get``,
``block_until_ready`` and ``effects_barrier``.
"""
from __future__ import annotations

import numpy as np

from kiln import _transfer_guard
from kiln._physical_tree import (
    tree_map,
)
from kiln.array import Array, make_array, set_device_put, to_array
from kiln.core.trace import Tracer, masked_array_error


def block_until_ready(x):
    """Wait for every array in the pytree ``x`` (those whose programs still run: cached
    ``jit`` calls dispatch asynchronously, ``kiln._async_dispatch``)."""
    return tree_map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, x)


def effects_barrier() -> None:
    """Wait until every effect issued so far (``debug.print``, ``debug.callback``,
    ``io_callback``, ...) has run, as ``jax.effects_barrier``. kiln runs effects
    synchronously, in program order, while a computation executes (programs with
    effects are never dispatched asynchronously); this also waits for every program
    dispatched asynchronously so far."""
    from kiln import _async_dispatch
    _async_dispatch.drain()


# > 0 while an eager shard_map traces its per-device function (kiln.parallel.shard_map)
eager_shard_map_depth = [0]


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
    """Put the pytree ``x`` on ``device`` as kiln Arrays.

    ``device`` may be a Device, a Sharding (``NamedSharding(mesh, P(...))``: the
    arrays are laid out over the mesh's devices), or a tree prefix of those."""
    if eager_shard_map_depth[0] and device is not None:
        from kiln.devices import Device
        if isinstance(device, Device):
            raise ValueError("device_put with explicit device not allowed within "
                             f"shard_map-decorated functions, but got device {device}")
    if device is not None and not _is_default_device(device):
        from kiln.parallel.placement import place_tree
        return place_tree(x, device, "device_put")

    def put(a):
        if isinstance(a, Tracer):
            return a
        if type(a) is Array:
            if device is None or a._committed:
                return a
            out = make_array(a._v, a.weak_type)     # the same buffer, now committed
        else:
            if isinstance(a, np.ma.MaskedArray):
                masked_array_error()
            _transfer_guard.check_value(a, explicit=True)
            out = to_array(np.asarray(a)) if not isinstance(a, (int, float, complex, bool)) \
                else to_array(a)
        if device is not None:          # placed explicitly: committed (JAX's)
            out._sharding = None
        return out
    return tree_map(put, x)


def _is_default_device(d) -> bool:
    from kiln.devices import Device, devices
    return isinstance(d, Device) and d == devices()[0]


def device_get(x):
    """Fetch the pytree ``x`` as NumPy arrays (arrays of an extended dtype, which have no
    NumPy form, come back as they are, as in JAX)."""
    from kiln._extended import EValue
    return tree_map(lambda a: np.asarray(a) if isinstance(a, Array)
                    and type(a._value) is not EValue else a, x)


set_device_put(lambda x, device: device_put(x, device))      # Array.to_device
