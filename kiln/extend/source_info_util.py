"""``jax.extend.source_info_util``: where in the user's program an operation comes from.

kiln reports the innermost stack frame that is neither kiln's own nor in a file or folder
registered with :func:`register_exclusion` (libraries built on kiln register theirs, so
errors point at their users' code). The name stack (``jax.named_scope``, and the
transformations around it) is kiln's own: what :func:`extend_name_stack` and the others
set is what staged equations record in ``eqn.source_info.name_stack``.
"""
from __future__ import annotations

import contextlib
import os
import traceback
from typing import NamedTuple

from kiln import errors
from kiln.core.source_info import (  # noqa: F401
    EMPTY_NAME_STACK,
    NameStack,
    current_name_stack,
    extend_name_stack,
    reset_name_stack,
    set_name_stack,
    transform_name_stack,
)

__all__ = ["NameStack", "SourceInfo", "current", "current_name_stack", "extend_name_stack",
           "new_name_stack", "new_source_info", "register_exclusion", "reset_name_stack",
           "set_name_stack", "summarize", "transform_name_stack", "user_context",
           "user_frame"]


def register_exclusion(path: str) -> None:
    """Treat frames from ``path`` (a file, or a folder prefix) as library frames: they are
    never reported as the user's line."""
    path = os.path.abspath(path)
    if path not in errors._excluded_paths:
        errors._excluded_paths.append(path)


class SourceInfo(NamedTuple):
    """The Python stack at some point (a ``traceback.StackSummary``, or None) and the name
    stack then."""

    traceback: traceback.StackSummary | None
    name_stack: NameStack = EMPTY_NAME_STACK

    def replace(self, *, traceback=None, name_stack=None) -> SourceInfo:
        return SourceInfo(self.traceback if traceback is None else traceback,
                          self.name_stack if name_stack is None else name_stack)


def new_source_info() -> SourceInfo:
    """A source info without a stack."""
    return SourceInfo(None, EMPTY_NAME_STACK)


def current() -> SourceInfo:
    """The source info of the caller's current Python stack and name stack."""
    return SourceInfo(traceback.extract_stack()[:-1], current_name_stack())


def new_name_stack(name: str = "") -> NameStack:
    """An empty name stack, or one holding the scope ``name``."""
    return EMPTY_NAME_STACK.extend(name) if name else EMPTY_NAME_STACK


@contextlib.contextmanager
def user_context(traceback_=None, *, name_stack: NameStack | None = None):
    """Stage what runs inside under ``name_stack`` (when given). kiln finds the user's
    line from the Python stack itself, so the traceback is not used."""
    del traceback_
    if name_stack is None:
        yield
    else:
        with set_name_stack(name_stack):
            yield


def _excluded(filename: str) -> bool:
    fname = os.path.abspath(filename)
    return (fname.startswith(errors._KILN_DIR)
            or any(fname.startswith(p) for p in errors._excluded_paths))


def user_frame(source_info: SourceInfo) -> traceback.FrameSummary | None:
    """The innermost frame of ``source_info`` that is not a library frame, or None."""
    if source_info.traceback is None:
        return None
    for frame in reversed(source_info.traceback):
        if not _excluded(frame.filename):
            return frame
    return None


def summarize(source_info: SourceInfo, num_frames: int = 1) -> str:
    """``file:line (function)`` of the innermost ``num_frames`` user frames, innermost
    first, one per line (``"unknown"`` without a stack)."""
    if source_info.traceback is None:
        return "unknown"
    frames = [f for f in reversed(source_info.traceback) if not _excluded(f.filename)]
    frames = frames[:num_frames]
    if not frames:
        return "unknown"
    return "\n".join(f"{f.filename}:{f.lineno} ({f.name})" for f in frames)
