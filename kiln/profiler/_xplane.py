"""XSpace files (``plugins/profile/<run>/<host>.xplane.pb``): writing and reading.

TensorBoard's profile plugin (``xprof``/``tensorboard-plugin-profile``) and
``jax.profiler.ProfileData`` read the ``XSpace`` protocol buffer of XLA's profiler
(``tsl/profiler/protobuf/xplane.proto``, package ``tensorflow.profiler``). This module
encodes it by hand (``_protowire``):

``XSpace {planes=1, errors=2, warnings=3, hostnames=4}``;
``XPlane {id=1, name=2, lines=3, event_metadata=4 (map int64 -> XEventMetadata),
stat_metadata=5 (map int64 -> XStatMetadata), stats=6}``;
``XLine {id=1, name=2, timestamp_ns=3, events=4, duration_ps=9, display_id=10,
display_name=11}``; ``XEvent {metadata_id=1, offset_ps=2, duration_ps=3, stats=4}``;
``XStat {metadata_id=1, double=2, uint64=3, int64=4, str=5, bytes=6, ref=7}``;
``XEventMetadata {id=1, name=2, display_name=4}``; ``XStatMetadata {id=1, name=2}``.

The host plane is ``/host:CPU`` with one line per thread (as JAX's), events nested by
time; ``Task Environment`` holds the profile's start and stop times.

The reader (:class:`ProfileData`) mirrors ``jax.profiler.ProfileData``.

What it must not hold: recording, or the Chrome JSON format (``_perfetto``).
"""
from __future__ import annotations

import os

from kiln.profiler import _protowire as W

HOST_PLANE = "/host:CPU"
METADATA_PLANE = "/host:metadata"
TASK_PLANE = "Task Environment"


class _Plane:
    """An XPlane under construction: metadata tables shared by its lines."""

    def __init__(self, plane_id: int, name: str):
        self.id = plane_id
        self.name = name
        self.event_ids: dict = {}
        self.stat_ids: dict = {}
        self.lines: list = []
        self.stats = bytearray()

    def event_id(self, name: str) -> int:
        i = self.event_ids.get(name)
        if i is None:
            i = self.event_ids[name] = len(self.event_ids) + 1
        return i

    def stat_id(self, name: str) -> int:
        i = self.stat_ids.get(name)
        if i is None:
            i = self.stat_ids[name] = len(self.stat_ids) + 1
        return i

    def stat(self, name: str, value) -> bytes:
        """One encoded XStat (bool/int -> int64 or uint64, float -> double, else str)."""
        s = bytearray()
        W.put_varint(s, 1, self.stat_id(name))
        if isinstance(value, bool):
            W.put_varint(s, 4, int(value))
        elif isinstance(value, int):
            if value >= 1 << 63:
                W.put_varint(s, 3, value)
            else:
                W.put_varint(s, 4, value)
        elif isinstance(value, float):
            W.put_double(s, 2, value)
        elif isinstance(value, (bytes, bytearray)):
            W.put_bytes(s, 6, bytes(value))
        else:
            W.put_bytes(s, 5, str(value))
        return bytes(s)

    def add_plane_stat(self, name: str, value) -> None:
        W.put_bytes(self.stats, 6, self.stat(name, value))

    def encode(self) -> bytes:
        out = bytearray()
        W.put_varint(out, 1, self.id)
        W.put_bytes(out, 2, self.name)
        for line in self.lines:
            W.put_bytes(out, 3, line)
        for name, i in self.event_ids.items():
            md = bytearray()
            W.put_varint(md, 1, i)
            W.put_bytes(md, 2, name)
            W.put_bytes(md, 4, name)
            entry = bytearray()
            W.put_varint(entry, 1, i)
            W.put_bytes(entry, 2, bytes(md))
            W.put_bytes(out, 4, bytes(entry))
        for name, i in self.stat_ids.items():
            md = bytearray()
            W.put_varint(md, 1, i)
            W.put_bytes(md, 2, name)
            entry = bytearray()
            W.put_varint(entry, 1, i)
            W.put_bytes(entry, 2, bytes(md))
            W.put_bytes(out, 5, bytes(entry))
        out += self.stats
        return bytes(out)


def sorted_events(session) -> dict:
    """The session's events grouped by thread ident, each list sorted so that an event
    comes before the events nested in it (start time, then longest first)."""
    by_thread: dict = {}
    for ev in session.events:
        by_thread.setdefault(ev[0], []).append(ev)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e[1], -e[2]))
    return by_thread


def encode_xspace(session, hostname: str, version: str) -> bytes:
    """The XSpace of a finished session."""
    t0 = session.start_ns
    stop = session.stop_ns if session.stop_ns is not None else t0
    host = _Plane(0, HOST_PLANE)
    by_thread = sorted_events(session)
    for ident, evs in by_thread.items():
        native, tname = session.threads.get(ident, (ident & 0x7FFFFFFF, f"thread {ident}"))
        line = bytearray()
        W.put_varint(line, 1, native)
        W.put_bytes(line, 2, tname)
        W.put_varint(line, 3, session.start_epoch_ns)
        for _, s, e, name, cat, args in evs:
            ev = bytearray()
            W.put_varint(ev, 1, host.event_id(name))
            W.put_varint(ev, 2, max(0, s - t0) * 1000)
            W.put_varint(ev, 3, max(0, e - s) * 1000)
            W.put_bytes(ev, 4, host.stat("category", cat))
            if args:
                for k, v in args.items():
                    if v is not None:
                        W.put_bytes(ev, 4, host.stat(k, v))
            W.put_bytes(line, 4, bytes(ev))
        W.put_varint(line, 9, max(0, stop - t0) * 1000)
        W.put_varint(line, 10, native)
        W.put_bytes(line, 11, tname)
        host.lines.append(bytes(line))
    host.add_plane_stat("process_id", os.getpid())

    meta = _Plane(1, METADATA_PLANE)
    meta.add_plane_stat("kiln_version", version)
    meta.add_plane_stat("profiler", "kiln")
    meta.add_plane_stat("process_id", os.getpid())

    task = _Plane(2, TASK_PLANE)
    task.add_plane_stat("profile_start_time", session.start_epoch_ns)
    stop_epoch = session.stop_epoch_ns or session.start_epoch_ns + (stop - t0)
    task.add_plane_stat("profile_stop_time", stop_epoch)

    out = bytearray()
    for plane in (meta, host, task):
        W.put_bytes(out, 1, plane.encode())
    W.put_bytes(out, 4, hostname)
    return bytes(out)


# ---- reading ------------------------------------------------------------------------
def _stat_value(wire_fields, stat_names: dict):
    mid, value = None, None
    for f, _, v in wire_fields:
        if f == 1:
            mid = v
        elif f == 2:
            value = W.as_double(v)
        elif f == 3:
            value = v
        elif f == 4:
            value = W.as_int64(v)
        elif f == 5:
            value = v.decode("utf-8", "replace")
        elif f == 6:
            value = v
        elif f == 7:
            value = stat_names.get(v, "")
    return stat_names.get(mid, str(mid)), value


def _metadata_map(raw: bytes, name_field: int = 2) -> tuple[int, str, str]:
    key, name, display = 0, "", ""
    for f, _, v in W.fields(raw):
        if f == 1:
            key = v
        elif f == 2:
            for g, _, w in W.fields(v):
                if g == name_field:
                    name = w.decode("utf-8", "replace")
                elif g == 4 and name_field == 2:
                    display = w.decode("utf-8", "replace")
    return key, name, display


class ProfileEvent:
    """One event of a :class:`ProfileLine` (as ``jax.profiler.ProfileEvent``): ``name``,
    ``start_ns``, ``duration_ns``, ``end_ns`` (floats, nanoseconds) and ``stats`` (a list
    of ``(name, value)``)."""

    __slots__ = ("name", "start_ns", "duration_ns", "stats")

    def __init__(self, name: str, start_ns: float, duration_ns: float, stats: list):
        self.name = name
        self.start_ns = start_ns
        self.duration_ns = duration_ns
        self.stats = stats

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns

    def __repr__(self):
        return f"ProfileEvent({self.name!r}, start_ns={self.start_ns}, " \
               f"duration_ns={self.duration_ns})"


class ProfileLine:
    """A timeline (one thread) of a :class:`ProfilePlane`: ``name`` and ``events``."""

    __slots__ = ("name", "id", "timestamp_ns", "events")

    def __init__(self, name, line_id, timestamp_ns, events):
        self.name = name
        self.id = line_id
        self.timestamp_ns = timestamp_ns
        self.events = events


class ProfilePlane:
    """A plane of a :class:`ProfileData` (as ``jax.profiler.ProfilePlane``): ``name``,
    ``lines`` and ``stats`` (a list of ``(name, value)``)."""

    __slots__ = ("name", "lines", "stats")

    def __init__(self, name, lines, stats):
        self.name = name
        self.lines = lines
        self.stats = stats

    def __repr__(self):
        return f"ProfilePlane({self.name!r}, {len(self.lines)} lines)"


def _decode_plane(raw: bytes) -> ProfilePlane:
    fs = W.fields(raw)
    name = ""
    ev_names: dict = {}
    stat_names: dict = {}
    for f, _, v in fs:
        if f == 2:
            name = v.decode("utf-8", "replace")
        elif f == 4:
            k, n, d = _metadata_map(v)
            ev_names[k] = d or n
        elif f == 5:
            k, n, _ = _metadata_map(v)
            stat_names[k] = n
    lines, stats = [], []
    for f, _, v in fs:
        if f == 3:
            lines.append(_decode_line(v, ev_names, stat_names))
        elif f == 6:
            stats.append(_stat_value(W.fields(v), stat_names))
    return ProfilePlane(name, lines, stats)


def _decode_line(raw: bytes, ev_names: dict, stat_names: dict) -> ProfileLine:
    name, display, line_id, ts = "", "", 0, 0
    events = []
    for f, _, v in W.fields(raw):
        if f == 1:
            line_id = W.as_int64(v)
        elif f == 2:
            name = v.decode("utf-8", "replace")
        elif f == 11:
            display = v.decode("utf-8", "replace")
        elif f == 3:
            ts = W.as_int64(v)
    for f, _, v in W.fields(raw):
        if f != 4:
            continue
        mid, off, dur, stats = 0, 0, 0, []
        for g, _, w in W.fields(v):
            if g == 1:
                mid = w
            elif g == 2:
                off = W.as_int64(w)
            elif g == 3:
                dur = W.as_int64(w)
            elif g == 4:
                stats.append(_stat_value(W.fields(w), stat_names))
        events.append(ProfileEvent(ev_names.get(mid, str(mid)), ts + off / 1000.0,
                                   dur / 1000.0, stats))
    return ProfileLine(display or name, line_id, ts, events)


class ProfileData:
    """A profile read from an XSpace (as ``jax.profiler.ProfileData``).

    Create with :meth:`from_file` (a ``.xplane.pb``) or :meth:`from_serialized_xspace`;
    ``planes`` lists its :class:`ProfilePlane` objects, :meth:`find_plane_with_name`
    picks one (``"/host:CPU"`` holds kiln's events, one line per thread)."""

    def __init__(self, planes: list, hostnames: list | None = None):
        self._planes = planes
        self.hostnames = hostnames or []

    @classmethod
    def from_serialized_xspace(cls, serialized_xspace: bytes) -> ProfileData:
        """Parse a serialized ``XSpace`` protocol buffer."""
        planes, hosts = [], []
        for f, _, v in W.fields(serialized_xspace):
            if f == 1:
                planes.append(_decode_plane(v))
            elif f == 4:
                hosts.append(v.decode("utf-8", "replace"))
        return cls(planes, hosts)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ProfileData:
        """Read an ``.xplane.pb`` file."""
        with open(path, "rb") as f:
            return cls.from_serialized_xspace(f.read())

    @classmethod
    def from_text_proto(cls, text: str) -> ProfileData:
        raise NotImplementedError("kiln.profiler.ProfileData.from_text_proto: the protobuf "
                                  "text format is not supported; use from_file or "
                                  "from_serialized_xspace")

    @property
    def planes(self) -> list[ProfilePlane]:
        return list(self._planes)

    def find_plane_with_name(self, name: str) -> ProfilePlane | None:
        """The first plane called ``name``, or None."""
        for p in self._planes:
            if p.name == name:
                return p
        return None
