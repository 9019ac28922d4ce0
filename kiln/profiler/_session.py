"""Starting and stopping traces, and writing their files.

``start_trace(log_dir)`` opens a :class:`~kiln.profiler._recorder.Session` and turns the
hooks on; ``stop_trace()`` turns them off and writes, under
``log_dir/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/``:

* ``<host>.xplane.pb``: the XSpace that TensorBoard's profile plugin lists and shows;
* ``perfetto_trace.json.gz``: Chrome trace-event JSON for Perfetto UI (always: it is
  cheap; ``create_perfetto_trace`` is accepted for JAX's API).

What it must not hold: the formats themselves (``_xplane``, ``_perfetto``).
"""
from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager

from kiln.profiler import _recorder

_lock = threading.Lock()
_state = {"link": False, "last_run_dir": None}


class ProfileOptions:
    """Options of a trace (as ``jax.profiler.ProfileOptions``).

    kiln accepts JAX's fields for compatibility and records the same events whatever
    they hold: its own host spans (tracing, compiler passes, builds, executions,
    annotations) and per-kernel times; there is no Python function tracer and no
    device tracer.
    """

    def __init__(self):
        self.host_tracer_level = 2
        self.python_tracer_level = 1
        self.enable_hlo_proto = True
        self.include_dataset_ops = True
        self.raise_error_on_start_failure = False
        self.duration_ms = 0
        self.start_timestamp_ns = 0
        self.session_id = ""
        self.repository_path = ""
        self.advanced_configuration = {}

    def __repr__(self):
        return f"ProfileOptions({self.__dict__})"


def start_trace(log_dir: os.PathLike | str, create_perfetto_link: bool = False,
                create_perfetto_trace: bool = False,
                profiler_options: ProfileOptions | None = None) -> None:
    """Starts a profiler trace.

    The trace captures kiln's host activity (tracing, compilation passes, C builds,
    executions of compiled programs, host islands, reference-backend runs, user
    annotations) and the time of each native kernel. Use :func:`stop_trace` to end it
    and save the results to ``log_dir``, which TensorBoard (with the profile plugin)
    and Perfetto UI can then show.

    Only one trace may be collected at a time: a ``RuntimeError`` is raised if
    :func:`start_trace` is called while another trace is running.

    Args:
      log_dir: the directory to save the trace to (usually the TensorBoard log dir).
      create_perfetto_link: if true, :func:`stop_trace` prints a link that opens the
        trace in Perfetto UI (https://ui.perfetto.dev) and blocks until it is loaded.
      create_perfetto_trace: if true, ``perfetto_trace.json.gz`` is written (kiln always
        writes it).
      profiler_options: a :class:`ProfileOptions` (accepted; see its docstring).
    """
    with _lock:
        if _recorder.session is not None:
            raise RuntimeError("Profile has already been started. "
                               "Only one profile may be run at a time.")
        _recorder.session = _recorder.Session(os.fspath(log_dir), profiler_options)
        _state["link"] = bool(create_perfetto_link)
        _recorder.set_active(True)


def stop_trace() -> None:
    """Stops the currently-running profiler trace.

    The trace is saved to the ``log_dir`` passed to the corresponding
    :func:`start_trace` call. Raises a ``RuntimeError`` if a trace hasn't been started.
    """
    with _lock:
        session = _recorder.session
        if session is None:
            raise RuntimeError("No profile started")
        _recorder.set_active(False)
        session.stop_ns = time.perf_counter_ns()
        session.stop_epoch_ns = time.time_ns()
        _recorder.session = None
        link = _state["link"]
        _state["link"] = False
        run_dir = write_session(session)
        _state["last_run_dir"] = run_dir
    if link:
        from kiln.profiler import _perfetto
        _perfetto.serve_for_perfetto_ui(os.path.join(run_dir, "perfetto_trace.json.gz"))


def _run_dir(log_dir: str, start_epoch_ns: int) -> str:
    base = os.path.join(log_dir, "plugins", "profile",
                        time.strftime("%Y_%m_%d_%H_%M_%S",
                                      time.localtime(start_epoch_ns / 1e9)))
    path, n = base, 1
    while os.path.exists(path):
        path = f"{base}_{n}"
        n += 1
    os.makedirs(path)
    return path


def write_session(session) -> str:
    """Write a finished session's files; returns the run directory."""
    from kiln import __version__
    from kiln.profiler import _perfetto, _xplane
    run_dir = _run_dir(session.log_dir, session.start_epoch_ns)
    host = socket.gethostname() or "localhost"
    with open(os.path.join(run_dir, f"{host}.xplane.pb"), "wb") as f:
        f.write(_xplane.encode_xspace(session, host, __version__))
    _perfetto.write(session, os.path.join(run_dir, "perfetto_trace.json.gz"))
    return run_dir


@contextmanager
def trace(log_dir: os.PathLike | str, create_perfetto_link=False, create_perfetto_trace=False,
          profiler_options: ProfileOptions | None = None):
    """Context manager to take a profiler trace.

    The trace captures kiln's host activity and the time of each native kernel (see
    :func:`start_trace`); the files are written to ``log_dir`` when the context exits.

    Only one trace may be collected at a time: a ``RuntimeError`` is raised if a trace
    is started while another trace is running.

    Args:
      log_dir: the directory to save the trace to (usually the TensorBoard log dir).
      create_perfetto_link: if true, print a link that opens the trace in Perfetto UI
        and block until it is loaded.
      create_perfetto_trace: if true, ``perfetto_trace.json.gz`` is written (kiln always
        writes it).
      profiler_options: a :class:`ProfileOptions` (accepted; see its docstring).
    """
    start_trace(log_dir, create_perfetto_link, create_perfetto_trace, profiler_options)
    try:
        yield
    finally:
        stop_trace()


def start_server(port: int, requires_backend: bool = True):
    """Not implemented in kiln: raises ``NotImplementedError``.

    JAX's ``start_server`` runs the gRPC profiler service that TensorBoard's "capture
    profile" button connects to; kiln has no such service. Use :func:`trace` or
    :func:`start_trace`/:func:`stop_trace`, which write the files TensorBoard reads.
    """
    raise NotImplementedError(
        "kiln.profiler.start_server: the gRPC profiler server (TensorBoard's 'capture "
        "profile') is not implemented in kiln; use kiln.profiler.trace(log_dir) or "
        "start_trace/stop_trace, whose files TensorBoard's profile plugin reads")


def stop_server() -> None:
    """Stops the running profiler server; as no server can run in kiln
    (:func:`start_server`), raises ``ValueError`` as JAX does when none is active."""
    raise ValueError("No active profiler server.")


def register_subprocess(pid: int, port: int):
    """Not implemented in kiln (it needs the profiler server): raises
    ``NotImplementedError``."""
    raise NotImplementedError("kiln.profiler.register_subprocess: profiling subprocesses "
                              "through their profiler servers is not implemented in kiln")
