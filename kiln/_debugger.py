"""The debugger behind ``kiln.debug.breakpoint``: captured frames and the ``jdb`` CLI.

``breakpoint()`` records the user's stack frames when it is called (under ``jit`` or
``vmap`` that is while tracing). Each frame's locals are flattened: the traced values
(tracers of live transformations) become the operands of a debug callback, everything
else is kept as is. When the program runs, the callback rebuilds the frames with the
concrete values and hands them to a debugger backend; the default (and JAX's) is
``"cli"``, the ``jdb`` prompt: ``p``/``pp`` expression, ``l(ist)``, ``w(here)``/``bt``,
``u(p)``/``d(own)``, ``c(ontinue)``, ``q(uit)`` (any other line is evaluated and its
``repr`` printed). It reads ``sys.stdin``, so it also works with a non-interactive stdin.
"""
from __future__ import annotations

import cmd
import inspect
import os
import pprint
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO, Any

from kiln import tree_util
from kiln.core.trace import Tracer, current_trace


class _DictWrapper:
    """A dict as a pytree node with its keys in their original order (locals may have keys
    that do not sort)."""

    def __init__(self, keys, values):
        self._keys = keys
        self._values = values

    def to_dict(self) -> dict:
        return dict(zip(self._keys, self._values))


tree_util.register_pytree_node(
    _DictWrapper, lambda d: (d._values, tuple(d._keys)),
    lambda keys, values: _DictWrapper(list(keys), list(values)))


class _CantFlatten:
    def __repr__(self):
        return "<cant_flatten>"


cant_flatten = _CantFlatten()


def _safe_flatten_dict(dct: dict):
    keys, values = [], []
    for key, value in dct.items():
        try:
            tree_util.tree_leaves(value)
        except Exception:       # noqa: BLE001 - a value that cannot be flattened is shown as such
            value = cant_flatten
        keys.append(key)
        values.append(value)
    return tree_util.tree_flatten(_DictWrapper(keys, values))


def _usable_tracer(x) -> bool:
    """A tracer the breakpoint's callback may take as an operand: of a live trace that
    encloses the current one (a leaked tracer is shown as its text instead)."""
    if not isinstance(x, Tracer):
        return False
    t = x._trace
    return t.alive and t.is_ancestor_of(current_trace())


class DebuggerFrame:
    """A Python frame as the debugger shows it: file, line, source and locals (with the
    traced values made concrete when the program runs)."""

    __slots__ = ("filename", "locals", "globals", "code_context", "source", "lineno",
                 "offset")

    def __init__(self, filename, locals, globals, code_context, source, lineno, offset):  # noqa: A002
        self.filename = filename
        self.locals = locals
        self.globals = globals
        self.code_context = code_context
        self.source = source
        self.lineno = lineno
        self.offset = offset

    def tree_flatten(self):
        flat_locals, locals_tree = _safe_flatten_dict(self.locals)
        flat_globals, globals_tree = _safe_flatten_dict(self.globals)
        flat = flat_locals + flat_globals
        is_valid = [_usable_tracer(x) for x in flat]
        valid = [x for x, ok in zip(flat, is_valid) if ok]
        invalid = [x if not isinstance(x, Tracer) else repr(x)
                   for x, ok in zip(flat, is_valid) if not ok]
        return valid, (tuple(is_valid), _Opaque(invalid), locals_tree, globals_tree,
                       len(flat_locals), self.filename, _Opaque(self.code_context),
                       _Opaque(self.source), self.lineno, self.offset)

    @classmethod
    def tree_unflatten(cls, info, valid):
        (is_valid, invalid, locals_tree, globals_tree, n_locals, filename, code_context,
         source, lineno, offset) = info
        valid_it, invalid_it = iter(valid), iter(invalid.value)
        flat = [next(valid_it) if ok else next(invalid_it) for ok in is_valid]
        locals_ = tree_util.tree_unflatten(locals_tree, flat[:n_locals]).to_dict()
        globals_ = tree_util.tree_unflatten(globals_tree, flat[n_locals:]).to_dict()
        return cls(filename, locals_, globals_, code_context.value, source.value, lineno,
                   offset)

    @classmethod
    def from_frameinfo(cls, frame_info) -> DebuggerFrame:
        try:
            _, start = inspect.getsourcelines(frame_info.frame)
            source = inspect.getsource(frame_info.frame).split("\n")
            offset = frame_info.lineno - max(start, 1)
            if offset >= len(source):
                source, offset = [], None
        except (OSError, TypeError):
            source, offset = [], None
        return cls(frame_info.filename, dict(frame_info.frame.f_locals), {},
                   frame_info.code_context, source, frame_info.lineno, offset)


tree_util.register_pytree_node_class(DebuggerFrame)


class _Opaque:
    """Aux data compared by identity (frames hold unhashable values)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


# ----------------------------------------------------------------------------------------------
# Backends

Debugger = Callable[..., None]
_debugger_registry: dict[str, tuple[int, Debugger]] = {}
debug_lock = threading.Lock()


def register_debugger(name: str, debugger: Debugger, priority: int) -> None:
    """Register a debugger backend: ``debugger(frames, thread_id, **kwargs)``."""
    if name in _debugger_registry:
        raise ValueError(f'Debugger with name "{name}" already registered.')
    _debugger_registry[name] = (priority, debugger)


def get_debugger(backend: str | None = None) -> Debugger:
    """The backend named ``backend`` if registered, else the highest-priority one."""
    if backend is not None and backend in _debugger_registry:
        return _debugger_registry[backend][1]
    debuggers = sorted(_debugger_registry.values(), key=lambda x: -x[0])
    if not debuggers:
        raise ValueError("No debuggers registered!")
    return debuggers[0][1]


class CliDebugger(cmd.Cmd):
    """``jdb``: a text debugger over captured frames (JAX's CLI debugger)."""

    prompt = "(jdb) "

    def __init__(self, frames: list[DebuggerFrame], thread_id, stdin: IO[str] | None = None,
                 stdout: IO[str] | None = None, completekey: str = "tab"):
        super().__init__(stdin=stdin, stdout=stdout, completekey=completekey)
        self.use_rawinput = stdin is None
        self.frames = frames
        self.frame_index = 0
        self.thread_id = thread_id
        self.intro = "Entering jdb:"

    def current_frame(self) -> DebuggerFrame:
        return self.frames[self.frame_index]

    def evaluate(self, expr):
        frame = self.frames[self.frame_index]
        env = dict(frame.globals)
        env.update(frame.locals)
        return eval(expr, {}, env)     # noqa: S307 - the debugger's purpose

    def default(self, line):
        """Evaluate an expression and print its ``repr``."""
        try:
            print(repr(self.evaluate(line)), file=self.stdout)
        except Exception:  # noqa: BLE001 - shown to the user
            self._error_message()

    def print_backtrace(self):
        lines = ["Traceback:"]
        for frame in self.frames[::-1]:
            lines.append(f'  File "{frame.filename}", line {frame.lineno}')
            if frame.offset is None:
                lines.append("    <no source>")
            else:
                lines.append(f"    {frame.source[frame.offset].strip()}")
        print("\n".join(lines), file=self.stdout)

    def print_context(self, num_lines: int = 2):
        frame = self.frames[self.frame_index]
        lines = [f"> {frame.filename}({frame.lineno})"]
        if frame.offset is not None:
            for i, line in enumerate(frame.source):
                if frame.offset - 1 - num_lines <= i <= frame.offset + num_lines:
                    lines.append(f"->  {line}" if i == frame.offset else f"    {line}")
        print("\n".join(lines), file=self.stdout)

    def _error_message(self):
        exc_type, exc = sys.exc_info()[:2]
        msg = traceback.format_exception_only(exc_type, exc)[-1].strip()
        print("***", msg, file=self.stdout)

    def do_p(self, arg):
        """p expression
        Evaluates and prints the value of an expression
        """
        try:
            print(repr(self.evaluate(arg)), file=self.stdout)
        except Exception:  # noqa: BLE001
            self._error_message()

    def do_pp(self, arg):
        """pp expression
        Evaluates and pretty-prints the value of an expression
        """
        try:
            print(pprint.pformat(self.evaluate(arg)), file=self.stdout)
        except Exception:  # noqa: BLE001
            self._error_message()

    def do_up(self, arg, /):
        """u(p)
        Move up a stack frame.
        """
        if self.frame_index == len(self.frames) - 1:
            print("At topmost frame.", file=self.stdout)
        else:
            self.frame_index += 1
        self.print_context()
    do_u = do_up

    def do_down(self, arg, /):
        """d(own)
        Move down a stack frame.
        """
        if self.frame_index == 0:
            print("At bottommost frame.", file=self.stdout)
        else:
            self.frame_index -= 1
        self.print_context()
    do_d = do_down

    def do_list(self, _):
        """l(ist)
        List source code for the current file.
        """
        self.print_context(num_lines=5)
    do_l = do_list

    def do_continue(self, _):
        """c(ont(inue))
        Continue the program's execution.
        """
        return True
    do_c = do_cont = do_continue

    def do_quit(self, _):
        """q(uit)\n(exit)
        Quit the debugger. The program is given an exit command.
        """
        sys.exit(0)
    do_q = do_EOF = do_exit = do_quit

    def do_where(self, _):
        """w(here)
        Prints a stack trace with the most recent frame on the bottom.
        'bt' is an alias for this command.
        """
        self.print_backtrace()
    do_w = do_bt = do_where

    def run(self):
        while True:
            try:
                self.cmdloop()
                break
            except KeyboardInterrupt:
                print("--KeyboardInterrupt--", file=sys.stdout)


def run_cli_debugger(frames: list[DebuggerFrame], thread_id: int | None, **kwargs: Any):
    """The ``"cli"`` backend: run ``jdb`` on ``frames`` until ``c``."""
    CliDebugger(frames, thread_id, **kwargs).run()


register_debugger("cli", run_cli_debugger, -1)


# ----------------------------------------------------------------------------------------------
# Capturing frames

def _include_frame(filename: str) -> bool:
    from kiln import errors
    from kiln.core.source_info import _is_internal
    path = os.path.abspath(filename)
    return not (_is_internal(path) or any(path.startswith(p) for p in errors._excluded_paths))


def capture_frames(depth: int, filter_frames: bool, num_frames: int | None):
    """The caller's frames (innermost first), ``depth`` frames up from here."""
    frame_infos = inspect.stack()[depth + 1:]
    if filter_frames:
        frame_infos = [fi for fi in frame_infos if _include_frame(fi.filename)]
    frames = [DebuggerFrame.from_frameinfo(fi) for fi in frame_infos]
    del frame_infos
    if num_frames is not None:
        frames = frames[:num_frames]
    return frames


def make_callback(frames_tree, backend, kwargs):
    """The debug callback: frames from the concrete operands, then the debugger."""
    def _breakpoint_callback(*flat_args):
        frames = tree_util.tree_unflatten(frames_tree, list(flat_args))
        thread_id = None
        if threading.current_thread() is not threading.main_thread():
            thread_id = threading.get_ident()
        debugger = get_debugger(backend=backend)
        with debug_lock:
            debugger(frames, thread_id, **kwargs)
    return _breakpoint_callback
