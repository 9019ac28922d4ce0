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

A ``SourceInfo`` also carries the *name stack* current when the equation was staged, as
JAX's does: the scopes entered with ``jax.named_scope``/``jax.named_call`` (Haiku names
its modules so) and the transformations around them, printed ``jvp(model)/linear``
(``transpose(jvp(model))/linear`` for the backward pass of ``grad``). A staging trace
records names relative to where it started (``jit`` and ``make_jaxpr`` start empty).
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import NamedTuple

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIP = ("contextlib.py", "functools.py")


class Scope(NamedTuple):
    """A named region (``named_scope``): one more ``/``-separated name."""
    name: str

    def wrap(self, names: list) -> None:
        names.append(self.name)


class Transform(NamedTuple):
    """A transformation (``jvp``, ``vmap``, ``transpose``): wraps the next scope's name."""
    name: str

    def wrap(self, names: list) -> None:
        if names:
            names[-1] = f"{self.name}({names[-1]})"
        else:
            names.append(f"{self.name}()")


class NameStack:
    """The scopes and transformations an equation was staged under (JAX's ``NameStack``):
    ``str`` gives ``jvp(model)/linear``."""

    __slots__ = ("stack",)

    def __init__(self, stack: tuple = ()):
        self.stack = tuple(stack)

    def extend(self, name: str) -> NameStack:
        return NameStack((*self.stack, Scope(name)))

    def transform(self, name: str) -> NameStack:
        return NameStack((*self.stack, Transform(name)))

    def __getitem__(self, idx: slice) -> NameStack:
        return NameStack(self.stack[idx])

    def __len__(self) -> int:
        return len(self.stack)

    def __add__(self, other: NameStack) -> NameStack:
        return NameStack(self.stack + other.stack)

    def __eq__(self, other) -> bool:
        return isinstance(other, NameStack) and self.stack == other.stack

    def __hash__(self) -> int:
        return hash(self.stack)

    def __str__(self) -> str:
        names: list = []
        for elem in reversed(self.stack):
            elem.wrap(names)
        return "/".join(reversed(names))

    def __repr__(self) -> str:
        return f"NameStack({self.stack!r})"


EMPTY_NAME_STACK = NameStack()


class SourceInfo:
    """A user's source position: ``file:line:col (function)``, and the name stack."""

    __slots__ = ("code", "lasti", "lineno", "name_stack")

    def __init__(self, code, lasti: int, lineno: int, name_stack: NameStack = EMPTY_NAME_STACK):
        self.code = code
        self.lasti = lasti
        self.lineno = lineno
        self.name_stack = name_stack

    def replace(self, *, name_stack: NameStack | None = None) -> SourceInfo:
        return SourceInfo(self.code, self.lasti, self.lineno,
                          self.name_stack if name_stack is None else name_stack)

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
    backward pass stages each transposed equation's work at its forward line), and the
    current name stack."""
    value = None
    name_stack = EMPTY_NAME_STACK


_override = _Override()


def current(depth: int = 1, name_stack: NameStack | None = None):
    """The innermost frame outside kiln, as a :class:`SourceInfo` (``None`` if none),
    or the position set in ``_override`` (by the backward pass); with ``name_stack``
    (default: the current one)."""
    ns = _override.name_stack if name_stack is None else name_stack
    o = _override.value
    if o is not None:
        return o if o.name_stack is ns else o.replace(name_stack=ns)
    f = sys._getframe(depth)
    while f is not None:
        code = f.f_code
        if not _is_internal(code.co_filename):
            return SourceInfo(code, f.f_lasti, f.f_lineno, ns)
        f = f.f_back
    return None


# ----------------------------------------------------------------------------------------------
# The current name stack.

def current_name_stack() -> NameStack:
    return _override.name_stack


@contextmanager
def set_name_stack(name_stack: NameStack):
    """Make ``name_stack`` the current name stack inside the block."""
    prev = _override.name_stack
    _override.name_stack = name_stack
    try:
        yield name_stack
    finally:
        _override.name_stack = prev


def extend_name_stack(name: str):
    """Enter the scope ``name`` (``jax.named_scope``)."""
    return set_name_stack(_override.name_stack.extend(name))


def transform_name_stack(name: str):
    """Mark what is staged inside the block as transformed by ``name`` (``jvp``, ...)."""
    return set_name_stack(_override.name_stack.transform(name))


def reset_name_stack():
    """An empty name stack inside the block (a new staged program starts from it)."""
    return set_name_stack(EMPTY_NAME_STACK)
