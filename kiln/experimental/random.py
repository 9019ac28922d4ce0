"""``kiln.experimental.random`` (``jax.experimental.random``): a stateful PRNG in the style
of ``numpy.random.default_rng`` whose state updates itself.

A :class:`StatefulPRNG` holds a typed base key and a counter in a mutable array
reference (``kiln.new_ref``). Every draw takes the key ``fold_in(base_key, counter)``
and adds one to the counter, in place, so repeated draws differ eagerly, under ``jit``
(the reference is updated by the compiled program) and in closures of ``scan``.
``split`` gives a generator of many keys and counters for ``vmap``; ``spawn`` a list of
independent generators.
"""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln import dtypes, random
from kiln import numpy as jnp
from kiln.array import Array
from kiln.core.ref import AbstractRef, Ref
from kiln.core.trace import EvalTrace, Tracer, current_trace
from kiln.random._keys import PRNGKeyArray
from kiln.state.primitives import new_ref, ref_addupdate, ref_get
from kiln.tree_util import register_dataclass

__all__ = ["StatefulPRNG", "stateful_rng"]


def _size_shape(size, *args) -> tuple:
    """The shape of a draw: ``size`` (an int or a sequence of ints), or when it is None
    the broadcast shape of the distribution's parameters ``args``."""
    if size is None:
        return tuple(np.broadcast_shapes(*(np.shape(a) for a in args)))
    if isinstance(size, (int, np.integer)):
        return (operator.index(size),)
    return tuple(operator.index(d) for d in size)


def _is_key(x) -> bool:
    return isinstance(x, PRNGKeyArray) and dtypes.issubdtype(x.dtype, dtypes.prng_key)


def _is_ref(x) -> bool:
    return isinstance(x, Ref) or (isinstance(x, Tracer) and isinstance(x.aval, AbstractRef))


@dataclasses.dataclass(frozen=True, slots=True)
class StatefulPRNG:
    """A stateful random generator (make one with :func:`stateful_rng`).

    Attributes:
      _base_key: a typed PRNG key (``kiln.random.key``); a key array after ``split``.
      _counter: the number of keys drawn so far, an integer in a ``kiln.Ref`` (of the
        key array's shape after ``split``).
    """
    _base_key: Any
    _counter: Any

    def __post_init__(self):
        if _placeholder(self._base_key) or _placeholder(self._counter):
            return
        if not _is_key(self._base_key):
            raise ValueError(f"Expected base_key to be a typed PRNG key; got {self._base_key}")
        if not _is_ref(self._counter):
            raise ValueError(f"Expected counter to be a scalar integer ref; got {self._counter}")

    def key(self, shape: int | Sequence[int] = ()):
        """A new, independent key (or keys of ``shape``); advances the state.

        Args:
          shape: the shape of the keys to return; ``()`` (the default) for one key.

        Returns:
          A typed key array of ``shape`` with this generator's PRNG implementation.
        """
        if self._base_key.shape:
            raise ValueError("cannot operate on split stateful generator: its keys have "
                             f"shape {self._base_key.shape}; map over it with jax.vmap")
        k = random.fold_in(self._base_key, ref_get(self._counter))
        _check_mapped_counter(self._counter)
        ref_addupdate(self._counter, ..., 1)
        shape = _size_shape(shape)
        return random.split(k, shape) if shape else k

    def random(self, size: int | Sequence[int] | None = None, dtype=float):
        """Uniform floats in the half-open interval ``[0.0, 1.0)`` of shape ``size``."""
        return random.uniform(self.key(), shape=_size_shape(size), dtype=dtype)

    def uniform(self, low=0, high=1, size: int | Sequence[int] | None = None, *,
                dtype=float):
        """Uniform values in ``[low, high)``; the shape is ``size``, or the broadcast shape
        of ``low`` and ``high`` when ``size`` is None."""
        return random.uniform(self.key(), _size_shape(size, low, high), minval=low,
                              maxval=high, dtype=dtype)

    def normal(self, loc=0, scale=1, size: int | Sequence[int] | None = None, *,
               dtype=float):
        """Normal values of mean ``loc`` and standard deviation ``scale``; the shape is
        ``size``, or the broadcast shape of ``loc`` and ``scale``."""
        z = random.normal(self.key(), _size_shape(size, loc, scale), dtype)
        return (jnp.asarray(loc) + jnp.asarray(scale) * z).astype(dtype)

    def integers(self, low, high=None, size: int | Sequence[int] | None = None, *,
                 dtype=int):
        """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is None); the shape is
        ``size``, or the broadcast shape of ``low`` and ``high``."""
        if high is None:
            low, high = 0, low
        return random.randint(self.key(), _size_shape(size, low, high), minval=low,
                              maxval=high, dtype=dtype)

    def split(self, num: int | Sequence[int]) -> StatefulPRNG:
        """One generator holding ``num`` (an int or a shape) independent generators, to be
        mapped over with ``jax.vmap``; advances this generator's state.

        See also :meth:`spawn`, which returns a list of generators instead.
        """
        return StatefulPRNG(self.key(num), new_ref(jnp.zeros(num, dtype=int)))

    def spawn(self, n_children: int) -> list[StatefulPRNG]:
        """A list of ``n_children`` new independent generators; advances this generator's
        state.

        See also :meth:`split`, which returns one generator for ``jax.vmap``.
        """
        return [type(self)(k, new_ref(0)) for k in self.key(n_children)]


def _check_mapped_counter(counter) -> None:
    """JAX's error for a draw inside ``vmap`` from a generator the ``vmap`` does not map
    (its counter, one reference, cannot take every lane's update): walks the ``vmap``
    levels enclosing the current trace (down to the first non-``vmap`` trace), each of
    which must map the counter."""
    from kiln.core.trace import get_aval
    from kiln.interpreters.batching import BatchTrace, BatchTracer
    x, trace = counter, current_trace()
    while isinstance(trace, BatchTrace):
        if not (isinstance(x, BatchTracer) and x._trace is trace and x.bdim is not None):
            raise Exception(  # noqa: TRY002  (JAX raises a plain Exception here)
                "performing an addupdate operation with vmapped value on an unbatched array "
                f"reference of type {get_aval(counter).str_short(False)}. Move the array "
                "reference to be an argument to the vmapped function?")
        x, trace = x.val, trace.parent


def _placeholder(x) -> bool:
    """Whether ``x`` is a stand-in leaf a transformation put in the tree (the proxies of
    ``in_axes`` specs and tree comparisons: bare ``object()`` sentinels or None, and a
    key node rebuilt over one) rather than a value."""
    if isinstance(x, PRNGKeyArray):
        return not isinstance(x._base_array, (Array, Tracer, np.ndarray))
    return x is None or type(x) is object


register_dataclass(StatefulPRNG, data_fields=["_base_key", "_counter"], meta_fields=[])


def stateful_rng(seed=None, *, impl=None) -> StatefulPRNG:
    """A stateful PRNG whose state updates itself (``numpy.random.default_rng``'s style).

    Args:
      seed: a 32- or 64-bit integer seed. It may be left out only at the top level
        (outside every transformation): the generator is then seeded from NumPy's
        entropy.
      impl: the PRNG implementation (a name such as ``'threefry2x32'`` or
        ``'philox4x32'``); the default one when None.

    Returns:
      A :class:`StatefulPRNG` over ``kiln.random.key(seed, impl=impl)`` and a counter
      reference starting at 0.

    Raises:
      TypeError: ``seed`` left out inside ``jit``, ``grad``, ``vmap`` or another
        transformation.

    Notes:
      The counter is a ``kiln.Ref``, so a generator cannot be returned from a
      transformed function or be a ``scan``/``while_loop`` carry; with
      ``checkpoint``/``remat`` draw a key with :meth:`StatefulPRNG.key` and use it.
    """
    if seed is None:
        if not isinstance(current_trace(), EvalTrace):
            raise TypeError("When used within transformed code, "
                            "jax.experimental.random.stateful_rng() requires an explicit "
                            "seed to be set.")
        entropy = np.random.SeedSequence().entropy
        seed = np.int64(int(entropy) & np.iinfo(np.int64).max)
    return StatefulPRNG(random.key(seed, impl=impl), new_ref(0))
