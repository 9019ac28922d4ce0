"""Mutable array references at the core: their abstract value, their concrete value and
the primitives that create, read and write them.

``AbstractRef(inner_aval)`` is the type of a reference to a mutable buffer of type
``inner_aval`` (JAX's ``jax.ref.AbstractRef``, printed ``Ref{f32[3]}``). ``Ref`` is the
concrete reference (``jax.Ref``): a Python object holding the buffer's current value, an
immutable kiln ``Array`` that every write replaces (so values read earlier never change).
A tracer whose abstract value is an ``AbstractRef`` stands for a reference inside a
transformation; ``isinstance(tracer, Ref)`` is then true, as in JAX.

The primitives (``new_ref``, ``get``, ``swap``, ``addupdate``, ``freeze``, ``empty_ref``,
``free_ref``) are defined here, without rules, because the interpreters need to know them
(reverse mode creates cotangent references; the backends execute them); their abstract
evaluation, implementations and transformation rules live in ``kiln.state``.

What it must not hold: indexing semantics or rules (``kiln.state``).
"""
from __future__ import annotations

import math

from kiln.core.avals import AbstractValue, ShapedArray
from kiln.core.trace import Primitive, Tracer, pytype_aval_mappings


class AbstractRef(AbstractValue):
    """The abstract value of a mutable array reference: ``Ref{<inner aval>}``.

    Args:
      inner_aval: the abstract value of the referenced buffer (a ``ShapedArray``).
      memory_space: accepted as JAX's constructor takes it; kiln has one memory space.
      kind: JAX's mutation kind under rematerialization (``None`` or
        ``'no_grad_no_remat'``).
    """

    __slots__ = ("inner_aval", "memory_space", "kind")

    def __init__(self, inner_aval, memory_space=None, kind=None):
        self.inner_aval = inner_aval
        self.memory_space = memory_space
        self.kind = kind

    is_high = False

    def update(self, inner_aval=None, memory_space=None, kind=None) -> AbstractRef:
        return AbstractRef(self.inner_aval if inner_aval is None else inner_aval,
                           self.memory_space if memory_space is None else memory_space,
                           self.kind if kind is None else kind)

    @property
    def shape(self):
        try:
            return self.inner_aval.shape
        except AttributeError:
            raise AttributeError(f"{self!r} has no `shape`.") from None

    @property
    def dtype(self):
        try:
            return self.inner_aval.dtype
        except AttributeError:
            raise AttributeError(f"{self!r} has no `dtype`.") from None

    @property
    def weak_type(self) -> bool:
        return getattr(self.inner_aval, "weak_type", False)

    @property
    def sharding(self):
        return self.inner_aval.sharding

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))

    def update_weak_type(self, weak_type: bool) -> AbstractRef:
        return self.update(inner_aval=self.inner_aval.update(weak_type=weak_type))

    def strip_weak_type(self) -> AbstractRef:
        return self.update_weak_type(False)

    def to_tangent_aval(self) -> AbstractRef:
        return AbstractRef(self.inner_aval.to_tangent_aval(), self.memory_space, self.kind)

    to_ct_aval = to_tangent_aval
    to_cotangent_aval = to_tangent_aval

    def _len(self, _tracer) -> int:
        try:
            return self.shape[0]
        except IndexError:
            raise TypeError("len() of unsized object") from None

    def str_short(self, short_dtypes: bool = True, **_kw) -> str:
        inner = self.inner_aval.str_short(short_dtypes)
        if self.memory_space is not None:
            return f"Ref<{self.memory_space}>{{{inner}}}"
        return f"Ref{{{inner}}}"

    def __repr__(self):
        return self.str_short(False)

    __str__ = __repr__

    def __eq__(self, other):
        return (type(other) is AbstractRef and self.inner_aval == other.inner_aval
                and self.memory_space == other.memory_space)

    def __hash__(self):
        return hash((AbstractRef, self.inner_aval, self.memory_space))


def is_ref_aval(aval) -> bool:
    return type(aval) is AbstractRef


class _RefMeta(type):
    """``isinstance(x, Ref)`` is also true for tracers standing for references."""

    def __instancecheck__(cls, inst):
        return (type.__instancecheck__(cls, inst)
                or (isinstance(inst, Tracer) and type(inst.aval) is AbstractRef))


class Ref(metaclass=_RefMeta):
    """A mutable array reference (``jax.Ref``): create one with ``kiln.new_ref(x)``.

    ``ref[idx]`` reads (an ``Array``), ``ref[idx] = v`` writes, ``ref[idx] += v`` reads then
    writes; ``kiln.ref.freeze(ref)`` gives the final value. References may be passed to and
    closed over by ``jit``-compiled functions, which mutate them in place.
    """

    __slots__ = ("_aval", "_buf", "__weakref__")

    def __init__(self, aval: AbstractRef, buf):
        if type(aval) is not AbstractRef:
            raise TypeError(f"Ref needs an AbstractRef, got {aval!r}")
        self._aval = aval
        self._buf = buf

    aval = property(lambda self: self._aval)
    shape = property(lambda self: self._aval.shape)
    dtype = property(lambda self: self._aval.dtype)
    size = property(lambda self: self._aval.size)
    ndim = property(lambda self: len(self._aval.shape))
    weak_type = property(lambda self: self._aval.weak_type)

    def __len__(self) -> int:
        return self._aval._len(self)

    def __getitem__(self, idx):
        return _state_api().ref_get(self, idx)

    def __setitem__(self, idx, value):
        _state_api().ref_set(self, idx, value)

    def get(self, idx=()):
        return _state_api().ref_get(self, idx)

    def set(self, value, idx=()):
        _state_api().ref_set(self, idx, value)

    def swap(self, value, idx=()):
        return _state_api().ref_swap(self, idx, value)

    def addupdate(self, value, idx=()):
        _state_api().ref_addupdate(self, idx, value)

    @property
    def at(self):
        # JAX 0.10.2 has no ``.at`` on concrete references yet (only on traced ones).
        raise NotImplementedError("Ref.at is not implemented for concrete references "
                                  "(as in JAX 0.10.2); index the reference directly")

    @property
    def sharding(self):
        from kiln.devices import devices
        from kiln.sharding import SingleDeviceSharding
        return SingleDeviceSharding(devices()[0])

    committed = property(lambda self: True)
    _committed = committed

    def block_until_ready(self):
        return self

    def __repr__(self):
        return "Ref" + repr(self._buf)[5:]

    __str__ = __repr__


# ``Ref``'s indexing methods bind the state primitives, whose rules live above the core
# (``kiln.state.primitives``, which installs itself here when imported).
_state_primitives = None


def set_state_api(module) -> None:
    """Install the module of ``ref_get``/``ref_set``/``ref_swap``/``ref_addupdate``."""
    global _state_primitives
    _state_primitives = module


def _state_api():
    if _state_primitives is None:
        raise RuntimeError("Ref indexing needs kiln.state: import kiln")
    return _state_primitives


pytype_aval_mappings[Ref] = lambda r: r._aval


# -- the primitives (rules: kiln.state) --------------------------------------------------------

def _ref_primitive(name: str, multiple_results: bool = False) -> Primitive:
    p = Primitive(name)
    p.ref_primitive = True
    p.multiple_results = multiple_results
    return p


new_ref_p = _ref_primitive("new_ref")
get_p = _ref_primitive("get")
swap_p = _ref_primitive("swap")
addupdate_p = _ref_primitive("addupdate", multiple_results=True)
freeze_p = _ref_primitive("freeze")
empty_ref_p = _ref_primitive("empty_ref")
free_ref_p = _ref_primitive("free_ref", multiple_results=True)

#: Every primitive that creates, reads or writes a reference.
ref_primitives = frozenset({new_ref_p, get_p, swap_p, addupdate_p, freeze_p, empty_ref_p,
                            free_ref_p})


def inner_shaped(aval) -> ShapedArray:
    """The value type behind a reference type (``aval`` itself for any other type)."""
    return aval.inner_aval if type(aval) is AbstractRef else aval


def _install():
    from kiln.core import trace
    trace._Ref = Ref


_install()
