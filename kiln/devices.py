"""Devices: virtual CPU devices (``jax_num_cpu_devices`` of them) and shardings."""
from __future__ import annotations

import os

from kiln.config import config


class Device:
    """A CPU device. kiln arrays live in host memory; a device is an SPMD participant
    with a worker thread of its own (``kiln.parallel.spmd``)."""

    platform = "cpu"
    device_kind = "cpu"
    client = None

    def __init__(self, id: int):
        self.id = id
        self.process_index = 0
        self.host_id = 0

    def __repr__(self):
        return f"CpuDevice(id={self.id})"

    def __str__(self):
        return f"cpu:{self.id}"

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("cpu", self.id))

    def __reduce__(self):
        # Unpickled as the device of the same id (so it compares and hashes alike).
        return (_device_by_id, (self.id,))

    def addressable_memories(self) -> list:
        """The memories this device can address: one, of kind ``"device"`` (kiln arrays
        live in host memory; there is no separate pinned or unpinned host space)."""
        return [self.default_memory()]

    def default_memory(self) -> Memory:
        """The memory arrays on this device live in."""
        return Memory(self, "device")

    def memory(self, kind: str) -> Memory:
        """This device's memory of ``kind`` (only ``"device"``)."""
        if kind != "device":
            raise ValueError(f"Could not find memory addressable by device {self}. Device "
                             f"{self} can address the following memory kinds: device. Got "
                             f"memory kind: {kind}")
        return self.default_memory()


class Memory:
    """A memory space of a :class:`Device` (``jax.Device.addressable_memories()``)."""

    __slots__ = ("device", "kind")
    platform = "cpu"

    def __init__(self, device: Device, kind: str):
        self.device = device
        self.kind = kind

    @property
    def process_index(self) -> int:
        return self.device.process_index

    def addressable_by_devices(self) -> list:
        return [self.device]

    def __eq__(self, other):
        return isinstance(other, Memory) and (other.device, other.kind) == (self.device,
                                                                           self.kind)

    def __hash__(self):
        return hash((self.device, self.kind))

    def __repr__(self):
        return f"CpuDeviceMemory(id={self.device.id}, process_index={self.process_index})"

    def __str__(self):
        return f"CPU_{self.kind.upper()}_{self.device.id}"


def _device_by_id(device_id: int) -> Device:
    for d in devices():
        if d.id == device_id:
            return d
    raise ValueError(f"Device {device_id} was not found")


_devices: list = []
# The device count, fixed at first use (JAX: "before backends are initialized").
_frozen_count: list = []


def _flag_count() -> int:
    """The device count ``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS`` asks
    for (scripts written for JAX set it), or 1."""
    for tok in os.environ.get("XLA_FLAGS", "").split():
        if tok.startswith("--xla_force_host_platform_device_count="):
            try:
                return max(1, int(tok.split("=", 1)[1]))
            except ValueError:
                raise ValueError(f"XLA_FLAGS: {tok!r} must give an integer") from None
    return 1


def _count() -> int:
    if _frozen_count:
        return _frozen_count[0]
    n = int(config.jax_num_cpu_devices)
    n = n if n > 0 else _flag_count()
    _frozen_count.append(n)
    return n


def _check_update(value) -> None:
    if not _frozen_count:
        return
    wanted = value if value > 0 else _flag_count()
    if wanted != _frozen_count[0]:
        object.__setattr__(config, "jax_num_cpu_devices", _frozen_count[0])
        raise RuntimeError("jax_num_cpu_devices config should be updated before backends are "
                           "initialized i.e. before any kiln operation that uses devices is "
                           "executed. You should initialize this config immediately after "
                           "`import kiln`.")


config.on_change("jax_num_cpu_devices", _check_update)


def local_count() -> int:
    """This process's number of devices (fixed at first use)."""
    return _count()


def _check_backend(backend) -> None:
    if backend not in (None, "cpu"):
        raise RuntimeError(f"Unknown backend {backend}. Available: ['cpu']")


def devices(backend=None) -> list:
    """All devices of all processes: ``jax_num_cpu_devices`` virtual CPU devices per
    process (default: as many as ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
    says, else 1). Process ``p``'s devices have ids ``p * local .. (p + 1) * local - 1``."""
    _check_backend(backend)
    from kiln import distributed
    n, procs = _count(), distributed.process_count()
    while len(_devices) < n * procs:
        d = Device(len(_devices))
        d.process_index = d.host_id = d.id // n
        _devices.append(d)
    return _devices[:n * procs]


def local_devices(process_index=None, backend=None) -> list:
    """The devices of process ``process_index`` (default: this one)."""
    from kiln import distributed
    p = distributed.process_index() if process_index is None else process_index
    return [d for d in devices(backend) if d.process_index == p]


def device_count(backend=None) -> int:
    return len(devices(backend))


def local_device_count(backend=None) -> int:
    _check_backend(backend)
    return _count()


def process_index(backend=None) -> int:
    from kiln import distributed
    return distributed.process_index()


def process_count(backend=None) -> int:
    from kiln import distributed
    return distributed.process_count()


def default_backend() -> str:
    return "cpu"
