"""Memory: ``device_memory_profile()`` (pprof); ``kiln.live_arrays()`` is in the
package's ``__init__`` (``import kiln`` exports it without loading this module).

Live arrays are found by asking the garbage collector for every concrete
``ArrayImpl`` (each is a GC-tracked object from its creation): nothing is registered
when an array is made, so creating arrays costs nothing extra. (A registry would cost
each array: ``ArrayImpl`` is unhashable, so a ``WeakSet`` cannot hold it, and a list
of weak references measured 85-190 ns per array, 10-25% of a small eager op; see
``benchmarks/bench_profiler_overhead.py``.) The price is paid by the caller instead:
one pass over the GC's objects, milliseconds for ordinary programs.

``device_memory_profile()`` is a gzipped ``perftools.profiles.Profile`` (pprof's
``profile.proto``) as JAX's: sample types ``allocations/count`` and ``space/bytes``, one
sample per live array and device (its bytes on that device; labels ``kind=buffer``,
``device``) and one per compiled program (``kind=executable``, 0 bytes, as JAX on CPU).
kiln does not record where each array was allocated, so each sample's location is one
frame naming the array's type (``float32[512,512]``) or the program (``jit(f)``).

What it must not hold: tracing or trace files.
"""
from __future__ import annotations

import time

import numpy as np


def _per_device_bytes(a) -> list:
    """``(device, bytes)`` for each device holding a block of array ``a``."""
    from kiln.devices import devices
    v = a._value
    try:
        s = a._sharding
    except AttributeError:
        s = None
    if s is None:
        return [(devices()[0], int(v.nbytes))]
    try:
        shard = tuple(s.shard_shape(v.shape))
        nbytes = int(np.prod(shard, dtype=np.int64)) * v.dtype.itemsize
        return [(d, nbytes) for d in sorted(s.device_set, key=lambda d: d.id)]
    except Exception:           # noqa: BLE001 - a sharding without per-device shapes
        return [(devices()[0], int(v.nbytes))]


class _Strings:
    def __init__(self):
        self.table = [""]
        self.index = {"": 0}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


def _profile_proto(samples, strings: _Strings) -> bytes:
    """Encode pprof's Profile: ``samples`` are ``(frame name, [count, bytes], labels)``."""
    from kiln.profiler import _protowire as W
    out = bytearray()
    for typ, unit in (("allocations", "count"), ("space", "bytes")):
        vt = bytearray()
        W.put_varint(vt, 1, strings(typ))
        W.put_varint(vt, 2, strings(unit))
        W.put_bytes(out, 1, bytes(vt))
    frames: dict = {}
    for frame, values, labels in samples:
        loc = frames.setdefault(frame, len(frames) + 1)
        s = bytearray()
        W.put_packed(s, 1, [loc])
        W.put_packed(s, 2, values)
        for k, v in labels:
            lab = bytearray()
            W.put_varint(lab, 1, strings(k))
            W.put_varint(lab, 2, strings(v))
            W.put_bytes(s, 3, bytes(lab))
        W.put_bytes(out, 2, bytes(s))
    for i in frames.values():
        line = bytearray()
        W.put_varint(line, 1, i)            # function id
        loc = bytearray()
        W.put_varint(loc, 1, i)
        W.put_bytes(loc, 4, bytes(line))
        W.put_bytes(out, 4, bytes(loc))
    for frame, i in frames.items():
        fn = bytearray()
        W.put_varint(fn, 1, i)
        W.put_varint(fn, 2, strings(frame))
        W.put_varint(fn, 3, strings(frame))
        W.put_varint(fn, 4, strings("<kiln>"))
        W.put_bytes(out, 5, bytes(fn))
    W.put_varint(out, 9, time.time_ns())
    W.put_varint(out, 14, strings("space"))     # default_sample_type
    body = bytes(out)
    tail = bytearray()
    for s in strings.table:
        W.put_bytes(tail, 6, s)
    return body + bytes(tail)


def device_memory_profile(backend: str | None = None) -> bytes:
    """Captures a kiln device memory profile as ``pprof``-format protocol buffer.

    A device memory profile is a snapshot of the state of memory: the live arrays (per
    device holding them) and the compiled programs, as JAX's. The output is a gzipped
    ``profile.proto`` that the `pprof tool <https://github.com/google/pprof>`_ reads
    (``pprof -top profile.prof``). kiln does not record allocation stacks: each sample's
    one frame names the array's dtype and shape, or the program.

    Args:
      backend: optional; the name of the backend (``"cpu"``).

    Returns:
      A byte string containing a gzipped binary pprof protocol buffer.
    """
    import gzip

    from kiln.backends import cpu
    from kiln.profiler import live_arrays
    arrays = live_arrays(backend)
    strings = _Strings()
    samples = []
    for a in arrays:
        v = a._value
        frame = f"{v.dtype.name}[{','.join(str(d) for d in v.shape)}]"
        for dev, nbytes in _per_device_bytes(a):
            samples.append((frame, [1, nbytes], [("kind", "buffer"), ("device", str(dev))]))
    for entry in list(cpu._cache.values()):
        exe = entry.exe
        if exe is not None:
            samples.append((f"jit({exe.name})", [1, 0], [("kind", "executable")]))
    return gzip.compress(_profile_proto(samples, strings))


def save_device_memory_profile(filename, backend: str | None = None) -> None:
    """Collects a device memory profile and writes it to ``filename``
    (see :func:`device_memory_profile`).

    Args:
      filename: the file to write the profile to.
      backend: optional; the name of the backend (``"cpu"``).
    """
    profile = device_memory_profile(backend)
    with open(filename, "wb") as f:
        f.write(profile)
