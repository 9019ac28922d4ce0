"""``jax.experimental.mesh_utils``: arrays of devices shaped for a ``Mesh``.

kiln's devices are CPU devices with no network topology, so (as JAX does for CPU
devices) a mesh is the devices in order, reshaped; ``device_kind_handler_dict`` lets a
caller register its own layout per ``device_kind``, as in JAX.
"""
from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["create_device_mesh", "create_hybrid_device_mesh", "device_kind_handler_dict"]

#: ``device_kind -> handler(mesh_shape, devices, *, contiguous_submeshes)``: a handler
#: returning an array of devices (or ``None`` to fall back to the default layout).
device_kind_handler_dict: dict[str, Callable[..., np.ndarray | None]] = {}


def _canonical_sizes(sizes) -> tuple | None:
    out = []
    for s in sizes:
        try:
            out.append(int(s))
        except (TypeError, ValueError):
            return None
    return tuple(out)


def create_device_mesh(mesh_shape: Sequence[int], devices: Sequence[Any] | None = None, *,
                       contiguous_submeshes: bool = False,
                       allow_split_physical_axes: bool = False) -> np.ndarray:
    """An array of ``devices`` (default: all of them) of shape ``mesh_shape``.

    Args:
      mesh_shape: the size of each mesh axis.
      devices: the devices to arrange (default ``kiln.devices()``).
      contiguous_submeshes: accepted as JAX's (every kiln device is in one process).
      allow_split_physical_axes: accepted as JAX's (no physical topology to split).

    Returns:
      A NumPy object array of devices with shape ``mesh_shape``, for ``sharding.Mesh``.

    Raises:
      ValueError: if ``mesh_shape`` is not a sequence of ints, or the number of devices is
        not its product.
    """
    if devices is None:
        from kiln.devices import devices as _all
        devices = _all()
    shape = _canonical_sizes(mesh_shape)
    if shape is None:
        raise ValueError("`mesh_shape` passed to `create_device_mesh` should be a sequence of"
                         f" ints. Got {mesh_shape}")
    if math.prod(shape) != len(devices):
        raise ValueError(f"Number of devices {len(devices)} must equal the product of "
                         f"mesh_shape {shape}")
    handler = device_kind_handler_dict.get(devices[-1].device_kind)
    if handler is not None:
        out = handler(shape, devices, contiguous_submeshes=contiguous_submeshes)
        if out is not None:
            return out
    return np.asarray(devices, dtype=object).reshape(shape)


def create_hybrid_device_mesh(mesh_shape: Sequence[int], dcn_mesh_shape: Sequence[int],
                              devices: Sequence[Any] | None = None, *,
                              process_is_granule: bool = False,
                              should_sort_granules_by_key: bool = True,
                              allow_split_physical_axes: bool = False) -> np.ndarray:
    """A device mesh for two-level parallelism: one ``mesh_shape`` block per granule
    (slice, or process when ``process_is_granule``), the blocks laid out as
    ``dcn_mesh_shape``.

    Raises:
      ValueError: if the devices have no such granule attribute, the number of granules
        is not the product of ``dcn_mesh_shape``, or a granule's device count is not the
        product of ``mesh_shape``.
    """
    if devices is None:
        from kiln.devices import devices as _all
        devices = _all()
    attr = "process_index" if process_is_granule else "slice_index"
    if not hasattr(devices[0], attr):
        raise ValueError(f"Device {devices[0]} does not have attribute {attr}. See "
                         "`process_is_granule` option.")
    groups = collections.defaultdict(list)
    for d in devices:
        groups[getattr(d, attr)].append(d)
    granules = ([groups[k] for k in sorted(groups)] if should_sort_granules_by_key
                else list(groups.values()))
    if math.prod(dcn_mesh_shape) != len(granules):
        raise ValueError(f"Number of slices {len(granules)} must equal the product of "
                         f"dcn_mesh_shape {dcn_mesh_shape}")
    blocks_of = [create_device_mesh(mesh_shape, g,
                                    allow_split_physical_axes=allow_split_physical_axes)
                 for g in granules]
    index = np.arange(len(granules)).reshape(tuple(dcn_mesh_shape))
    blocks = np.empty(index.shape, dtype=object)
    for pos in np.ndindex(index.shape):
        blocks[pos] = blocks_of[index[pos]]
    return np.block(blocks.tolist())
