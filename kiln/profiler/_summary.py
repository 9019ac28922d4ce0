"""``kiln.profiler.summary(log_dir)``: the top kernels, ops and host spans of a trace.

Reads the newest run's ``.xplane.pb`` (or a given run directory or file) with
:class:`~kiln.profiler._xplane.ProfileData` and totals its events:

* **kernels**: each native kernel (or host island) of each compiled program, by total
  time, with the primitives it computes and the user's source line behind it;
* **ops**: the same time grouped by what the kernels do (``dot_general``,
  ``reduce_sum``, an elementwise ``fusion``, an island's primitive...);
* **host spans**: tracing, compiler passes, builds, program executions, annotations.

What it must not hold: recording or writing.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from kiln.profiler._xplane import HOST_PLANE, TASK_PLANE, ProfileData


@dataclass
class Row:
    """One line of a summary table: ``name``, total and per-call time, call count, share
    of the table's total time, and (for kernels) program, kind and source line."""

    name: str
    total_ns: float = 0.0
    calls: int = 0
    program: str = ""
    kind: str = ""
    primitives: str = ""
    source: str = ""
    percent: float = 0.0

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0


@dataclass
class Summary:
    """What :func:`summary` returns; ``str()`` of it is the printed report."""

    path: str
    kernels: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    spans: list = field(default_factory=list)
    loop_kernels: list = field(default_factory=list)
    top: int = 20

    def __str__(self) -> str:
        out = [f"kiln profile summary: {self.path}"]
        out += _table("Kernels (compiled code), by total time", self.kernels[:self.top],
                      kernel=True)
        if self.loop_kernels:
            out += _table("Steps of native loop bodies (inside the loops' kernels above; "
                          "calls = runs)", self.loop_kernels[:self.top], kernel=True)
        out += _table("Ops (kernel time by what the kernels compute)", self.ops[:self.top])
        out += _table("Host spans (trace, compile, build, execute, annotations; % of the "
                      "trace's wall time)",
                      self.spans[:self.top])
        return "\n".join(out)


def _fmt_time(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def _short_source(src: str) -> str:
    if not src:
        return ""
    path, sep, rest = src.partition(":")
    if sep and os.sep in path:
        try:
            rel = os.path.relpath(path)
            path = rel if not rel.startswith("..") else os.path.basename(path)
        except ValueError:
            path = os.path.basename(path)
    return path + sep + rest


def _table(title: str, rows: list, kernel: bool = False) -> list[str]:
    lines = ["", title]
    if not rows:
        return lines + ["  (none)"]
    hdr = f"  {'total':>10} {'calls':>6} {'avg':>10} {'%':>6}  name"
    lines.append(hdr + ("  [program] source" if kernel else ""))
    for r in rows:
        s = (f"  {_fmt_time(r.total_ns):>10} {r.calls:>6} {_fmt_time(r.avg_ns):>10} "
             f"{r.percent:>5.1f}%  {r.name}")
        if kernel:
            s += f"  [{r.program}] {_short_source(r.source)}"
        lines.append(s)
    return lines


def _find_xplane(path: str) -> str:
    if os.path.isfile(path):
        return path
    files = glob.glob(os.path.join(path, "*.xplane.pb"))
    if not files:
        files = glob.glob(os.path.join(path, "plugins", "profile", "*", "*.xplane.pb"))
    if not files:
        raise FileNotFoundError(f"no .xplane.pb under {path!r} (expected "
                                f"{os.path.join(path, 'plugins', 'profile', '<run>')})")
    return max(files, key=lambda f: (os.path.getmtime(f), f))


def _op_of(kind: str, primitives: str) -> str:
    prims = primitives.split(",") if primitives else []
    if kind in ("fusion", "copy"):
        return "fusion(" + ",".join(prims[:4]) + (",..." if len(prims) > 4 else "") + ")" \
            if kind == "fusion" else "copy"
    if kind == "island":
        return f"{prims[0]} (host)" if prims else "island"
    if kind == "segment":
        return "segment(" + ",".join(prims[:4]) + (",..." if len(prims) > 4 else "") + ")"
    return prims[0] if prims else kind


def summary(log_dir: str | os.PathLike, top: int = 20) -> Summary:
    """Summarize a trace written by :func:`kiln.profiler.trace`.

    Args:
      log_dir: the trace's ``log_dir`` (its newest run is read), a run directory
        (``log_dir/plugins/profile/<run>``) or an ``.xplane.pb`` file.
      top: how many rows each table prints.

    Returns:
      A :class:`Summary`: ``kernels``, ``ops`` and ``spans`` (lists of :class:`Row`,
      longest total first); ``print()`` it for the report.
    """
    path = _find_xplane(os.fspath(log_dir))
    data = ProfileData.from_file(path)
    plane = data.find_plane_with_name(HOST_PLANE)
    kernels: dict = {}
    ops: dict = {}
    spans: dict = {}
    loops: dict = {}
    for line in (plane.lines if plane is not None else []):
        for ev in line.events:
            st = dict(ev.stats)
            cat = st.get("category", "")
            if cat in ("kernel", "island"):
                key = (st.get("program", ""), st.get("index", 0), ev.name)
                r = kernels.get(key)
                if r is None:
                    r = kernels[key] = Row(ev.name, program=str(st.get("program", "")),
                                           kind=str(st.get("kind", "")),
                                           primitives=str(st.get("primitives", "")),
                                           source=str(st.get("source", "")))
                r.total_ns += ev.duration_ns
                r.calls += 1
                op = _op_of(r.kind, r.primitives)
                o = ops.get(op)
                if o is None:
                    o = ops[op] = Row(op, kind=r.kind, primitives=r.primitives)
                o.total_ns += ev.duration_ns
                o.calls += 1
            elif cat == "loop kernel":
                base = ev.name.rsplit(" (loop body, ", 1)[0]
                key = (st.get("program", ""), base, st.get("source", ""))
                r = loops.get(key)
                if r is None:
                    r = loops[key] = Row(base, program=str(st.get("program", "")),
                                         kind=str(st.get("kind", "")),
                                         primitives=str(st.get("primitives", "")),
                                         source=str(st.get("source", "")))
                r.total_ns += ev.duration_ns
                r.calls += int(st.get("runs", 1))
            else:
                r = spans.get((cat, ev.name))
                if r is None:
                    r = spans[(cat, ev.name)] = Row(ev.name, kind=cat)
                r.total_ns += ev.duration_ns
                r.calls += 1
    task = dict(data.find_plane_with_name(TASK_PLANE).stats) \
        if data.find_plane_with_name(TASK_PLANE) is not None else {}
    wall = float(task.get("profile_stop_time", 0) - task.get("profile_start_time", 0))
    out = Summary(path, top=top)
    for name, table in (("kernels", kernels), ("ops", ops), ("spans", spans),
                        ("loop_kernels", loops)):
        rows = sorted(table.values(), key=lambda r: -r.total_ns)
        # Kernels do not overlap: shares of their total. Spans nest: shares of the trace.
        total = (wall if name == "spans" else sum(r.total_ns for r in rows)) or 1.0
        for r in rows:
            r.percent = 100.0 * r.total_ns / total
        setattr(out, name, rows)
    return out
