"""Op records: one entry per operation drives value, jit, jvp/vjp and vmap tests.

An ``OpRecord`` names a kiln function, how to sample its array arguments, a NumPy
(or SciPy) reference, and tolerances. ``tests/lax/test_op_records.py`` turns every record
in ``tests/lax/records/*.py`` (each module exports ``RECORDS``) into generic tests:

- value: kiln result equals the reference (values and dtype);
- jit: ``jit(fun)`` equals eager;
- jvp / vjp: against central finite differences (first and second order);
- vjp vs jvp: ``<u, J v> == <J^T u, v>``;
- vmap: ``vmap(fun)`` over axis 0 (and in_axes=1 where rank allows) equals a Python loop.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class OpRecord:
    name: str
    fun: Callable                      # kiln function of the array arguments
    args: Callable                     # rng -> tuple of NumPy arrays (inputs)
    ref: Callable | None = None        # NumPy reference of the same arguments
    tol: float = 1e-5                  # value tolerance (rtol and atol)
    diff_argnums: tuple = (0,)         # arguments to differentiate; () for none
    grad_tol: float = 2e-2             # finite-difference tolerance
    grad_order: int = 2                # check derivatives up to this order
    eps: float = 1e-3                  # finite-difference step
    vmap: bool = True                  # run the vmap test
    jit: bool = True                   # run the jit test
    # jit vs eager tolerance for float32 results (default 1e-6): loops compile natively,
    # and compiled sin/cos differ from NumPy's by an ulp, which a recurrence amplifies.
    jit_tol: float | None = None
    check_dtype: bool = True           # compare result dtypes with the reference
    tags: tuple = field(default_factory=tuple)

    def __repr__(self):
        return f"OpRecord({self.name})"


# Common samplers -------------------------------------------------------------------------------

def f32(*shape, low=-2.0, high=2.0):
    def sample(rng):
        return rng.uniform(low, high, size=shape).astype(np.float32)
    return sample


def pos32(*shape, low=0.5, high=2.0):
    return f32(*shape, low=low, high=high)


def i32(*shape, low=-10, high=10):
    def sample(rng):
        return rng.integers(low, high, size=shape).astype(np.int32)
    return sample


def boolean(*shape):
    def sample(rng):
        return rng.random(size=shape) < 0.5
    return sample


def c64(*shape):
    def sample(rng):
        return (rng.uniform(-2, 2, size=shape) + 1j * rng.uniform(-2, 2, size=shape)).astype(
            np.complex64)
    return sample


def args_of(*samplers):
    def sample(rng):
        return tuple(s(rng) for s in samplers)
    return sample
