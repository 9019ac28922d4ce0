"""``jax.extend.source_info_util``: where in the user's program an operation comes from.

kiln reports the innermost stack frame that is neither kiln's own nor in a file or folder
registered with :func:`register_exclusion` (libraries built on kiln register theirs, so
errors point at their users' code). JAX's name-stack functions are not provided: kiln
does not record name stacks in jaxprs.
"""
from __future__ import annotations

import os
import traceback
from typing import NamedTuple

from kiln import errors

__all__ = ["SourceInfo", "current", "new_source_info", "register_exclusion", "summarize",
           "user_frame"]


def register_exclusion(path: str) -> None:
    """Treat frames from ``path`` (a file, or a folder prefix) as library frames: they are
    never reported as the user's line."""
    path = os.path.abspath(path)
    if path not in errors._excluded_paths:
        errors._excluded_paths.append(path)


class SourceInfo(NamedTuple):
    """The Python stack at some point (a ``traceback.StackSummary``, or None)."""

    traceback: traceback.StackSummary | None

    def replace(self, *, traceback=None) -> SourceInfo:
        return SourceInfo(self.traceback if traceback is None else traceback)


def new_source_info() -> SourceInfo:
    """A source info without a stack."""
    return SourceInfo(None)


def current() -> SourceInfo:
    """The source info of the caller's current Python stack."""
    return SourceInfo(traceback.extract_stack()[:-1])


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
