"""Devices: virtual CPU devices (``jax_num_cpu_devices`` of them) and shardings."""
from __future__ import annotations

from kiln.config import config


class Device:
    """A CPU device. kiln arrays live in host memory; devices name SPMD participants."""

    platform = "cpu"
    device_kind = "cpu"
    client = None

    def __init__(self, id: int):
        self.id = id
        self.process_index = 0
        self.host_id = 0

    def __repr__(self):
        return f"CpuDevice(id={self.id})"

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("cpu", self.id))


_devices: list = []


def devices(backend=None) -> list:
    """All devices (``jax_num_cpu_devices`` virtual CPU devices)."""
    n = max(1, int(config.jax_num_cpu_devices))
    while len(_devices) < n:
        _devices.append(Device(len(_devices)))
    return _devices[:n]


def local_devices(process_index=None, backend=None) -> list:
    return devices(backend)


def device_count(backend=None) -> int:
    return len(devices(backend))


def local_device_count(backend=None) -> int:
    return len(devices(backend))


def process_index(backend=None) -> int:
    return 0


def process_count(backend=None) -> int:
    return 1


def default_backend() -> str:
    return "cpu"


class SingleDeviceSharding:
    def __init__(self, device, *, memory_kind=None):
        self.device = device
        self.memory_kind = memory_kind

    @property
    def device_set(self):
        return {self.device}

    def __repr__(self):
        return f"SingleDeviceSharding(device={self.device!r})"
