"""Chrome trace-event JSON (``perfetto_trace.json.gz``), which Perfetto UI and
``chrome://tracing`` open.

``{"displayTimeUnit": "ns", "traceEvents": [...]}``: ``M`` (metadata) events name the
process (``/host:CPU``, as JAX's) and each thread; every recorded span is one ``X``
(complete) event with ``ts``/``dur`` in microseconds from the start of the trace and its
details under ``args``. ``create_perfetto_link=True`` serves the file on
``127.0.0.1:9001`` until ui.perfetto.dev has fetched it (as JAX does).

What it must not hold: recording, or the XSpace format (``_xplane``).
"""
from __future__ import annotations

import gzip
import json
import os

from kiln.profiler._xplane import HOST_PLANE, sorted_events


def trace_events(session) -> dict:
    """The Chrome trace-event document of a finished session."""
    pid = os.getpid()
    t0 = session.start_ns
    events: list = [{"ph": "M", "pid": pid, "name": "process_name",
                     "args": {"name": HOST_PLANE}},
                    {"ph": "M", "pid": pid, "name": "process_sort_index",
                     "args": {"sort_index": 0}}]
    by_thread = sorted_events(session)
    for order, (ident, evs) in enumerate(by_thread.items()):
        tid, tname = session.threads.get(ident, (ident & 0x7FFFFFFF, f"thread {ident}"))
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                       "args": {"name": tname}})
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": order}})
        for _, s, e, name, cat, args in evs:
            ev = {"ph": "X", "pid": pid, "tid": tid, "ts": round((s - t0) / 1e3, 3),
                  "dur": round((e - s) / 1e3, 3), "name": name, "cat": cat}
            if args:
                ev["args"] = {k: v for k, v in args.items() if v is not None}
            events.append(ev)
    return {"displayTimeUnit": "ns", "traceEvents": events}


def write(session, path: str) -> str:
    """Write ``perfetto_trace.json.gz`` for ``session`` at ``path``; returns ``path``."""
    data = json.dumps(trace_events(session), separators=(",", ":")).encode("utf-8")
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(data)
    return path


def serve_for_perfetto_ui(path: str, port: int = 9001, ready=None) -> None:
    """Serve ``path`` on ``127.0.0.1:port`` (``0``: any free port) and print the
    ui.perfetto.dev link that loads it; returns once the file has been fetched.
    ``ready(url)``, when given, is called with the file's local URL once it is served."""
    import functools
    import http.server
    import socketserver

    directory, filename = os.path.split(os.path.abspath(path))

    class Handler(http.server.SimpleHTTPRequestHandler):
        def end_headers(self):
            self.send_header("Access-Control-Allow-Origin", "*")
            super().end_headers()

        def do_GET(self):
            self.server.last_request = self.path
            return super().do_GET()

        def do_POST(self):
            self.send_error(404, "File not found")

        def log_message(self, *args):
            pass

    socketserver.TCPServer.allow_reuse_address = True
    handler = functools.partial(Handler, directory=directory)
    with socketserver.TCPServer(("127.0.0.1", port), handler) as httpd:
        httpd.last_request = None
        local = f"http://127.0.0.1:{httpd.server_address[1]}/{filename}"
        print(f"Open URL in browser: https://ui.perfetto.dev/#!/?url={local}", flush=True)
        if ready is not None:
            ready(local)
        while httpd.last_request != "/" + filename:
            httpd.handle_request()
