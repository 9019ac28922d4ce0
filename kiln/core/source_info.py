"""Where the user's code staged an equation: ``SourceInfo`` and ``current()``.

``current()`` walks up from the caller to the first frame outside kiln (and outside
``contextlib``), keeping only the code object and instruction offset (no frame, so no
locals stay alive); the file, line, column and function are read from them when
printed; while ``_override.value`` is set it is that position (reverse-mode
differentiation stages the transpose of each equation at that equation's line, as JAX
does). Each equation
of a staged jaxpr carries one (``JaxprEqn.source_info``):
``make_jaxpr(f)(x).pretty_print(source_info=True)`` shows them, and the compiler's and
debugging tools' messages name the user's line from them.
"""
from __future__ import annotations

import os
import sys
import threading

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIP = ("contextlib.py", "functools.py")


class SourceInfo:
    """A user's source position: ``file:line:col (function)``."""

    __slots__ = ("code", "lasti", "lineno")

    def __init__(self, code, lasti: int, lineno: int):
        self.code = code
        self.lasti = lasti
        self.lineno = lineno

    @property
    def file(self) -> str:
        return self.code.co_filename

    @property
    def function(self) -> str:
        return self.code.co_name

    @property
    def column(self) -> int | None:
        positions = getattr(self.code, "co_positions", None)
        if positions is None:
            return None
        for i, pos in enumerate(positions()):
            if i == self.lasti // 2:
                return pos[2]
        return None

    def __str__(self) -> str:
        col = self.column
        where = f"{self.file}:{self.lineno}" + (f":{col}" if col is not None else "")
        return f"{where} ({self.function})"

    __repr__ = __str__


def _is_internal(filename: str) -> bool:
    return filename.startswith(_KILN_DIR) or filename.endswith(_SKIP)


class _Override(threading.local):
    """The source position equations staged now are attributed to, when set (a
    backward pass stages each transposed equation's work at its forward line)."""
    value = None


_override = _Override()


def current(depth: int = 1):
    """The innermost frame outside kiln, as a :class:`SourceInfo` (``None`` if none),
    or the position set in ``_override`` (by the backward pass)."""
    o = _override.value
    if o is not None:
        return o
    f = sys._getframe(depth)
    while f is not None:
        code = f.f_code
        if not _is_internal(code.co_filename):
            return SourceInfo(code, f.f_lasti, f.f_lineno)
        f = f.f_back
    return None
