"""``JAXSparse``: the abstract base of kiln's sparse array classes (``BCOO``, ``BCSR``,
``COO``, ``CSR``, ``CSC``).

It holds what every format shares: ``shape``/``ndim``/``size``/``len``, the repr, ``T``,
``block_until_ready`` and the operator slots a format may fill in. Sparse arrays are not
hashable (their buffers are arrays).
"""
from __future__ import annotations

import abc
import math

from kiln.core.trace import Tracer

__all__ = ["JAXSparse", "tracer_name"]


def tracer_name(x) -> str:
    """The tracer's class name as JAX prints it (kiln's ``jit`` staging tracer is JAX's
    ``DynamicJaxprTracer``)."""
    name = type(x).__name__
    return "DynamicJaxprTracer" if name == "JaxprTracer" else name


class JAXSparse(abc.ABC):
    """Base class of kiln's sparse arrays (``jax.experimental.sparse.JAXSparse``)."""

    data: object
    shape: tuple

    __hash__ = None  # type: ignore[assignment]
    # NumPy arrays defer their operators (``ndarray @ sparse``, ``ndarray * sparse``) to us.
    __array_ufunc__ = None

    @property
    def dtype(self):
        """The dtype of the stored values."""
        return self.data.dtype

    @property
    def nse(self) -> int:
        """The number of specified (stored) elements (the batched formats count them per
        batch element)."""
        return self.data.size

    def __init__(self, args, *, shape):
        from kiln.numpy._util import canonicalize_shape
        del args
        self.shape = canonicalize_shape(shape, "The sparse array's shape must be static.")

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        """The number of elements of the dense array this one stands for."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def __repr__(self) -> str:
        name = type(self).__name__
        try:
            extra = f", nse={self.nse}"
            if getattr(self, "n_batch", 0):         # BCOO, BCSR
                extra += f", n_batch={self.n_batch}"
            if getattr(self, "n_dense", 0):
                extra += f", n_dense={self.n_dense}"
            text = f"{name}({self.dtype}{list(self.shape)}{extra})"
        except Exception:
            text = f"{name}(<invalid>)"
        if isinstance(self.data, Tracer):
            text = f"{tracer_name(self.data)}[{text}]"
        return text

    @abc.abstractmethod
    def tree_flatten(self):
        """The pytree children (buffers) and static auxiliary data."""

    @classmethod
    @abc.abstractmethod
    def tree_unflatten(cls, aux_data, children):
        """Rebuild from ``tree_flatten``'s output."""

    @abc.abstractmethod
    def transpose(self, axes=None):
        """The array with its axes permuted."""

    @abc.abstractmethod
    def todense(self):
        """The equivalent dense array."""

    @property
    def T(self):
        """The transpose (all axes reversed)."""
        return self.transpose()

    def block_until_ready(self):
        """Wait for every buffer; returns ``self``."""
        for buf in self.tree_flatten()[0]:
            buf.block_until_ready()
        return self

    def _unsupported(self, what):
        raise NotImplementedError(f"{type(self).__name__}.{what}")

    def sum(self, *args, **kwargs):
        self._unsupported("sum")

    def __matmul__(self, other):
        self._unsupported("__matmul__")

    def __rmatmul__(self, other):
        self._unsupported("__rmatmul__")

    def __mul__(self, other):
        self._unsupported("__mul__")

    def __rmul__(self, other):
        self._unsupported("__rmul__")

    def __add__(self, other):
        self._unsupported("__add__")

    def __radd__(self, other):
        self._unsupported("__radd__")

    def __sub__(self, other):
        self._unsupported("__sub__")

    def __rsub__(self, other):
        self._unsupported("__rsub__")

    def __neg__(self):
        self._unsupported("__neg__")

    def __pos__(self):
        self._unsupported("__pos__")

    def __getitem__(self, item):
        self._unsupported("__getitem__")
