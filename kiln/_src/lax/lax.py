"""``jax._src.lax.lax``: :mod:`kiln.lax`, plus the private helpers of JAX's module that
JAX's tests and libraries call (``asarray``, ``_const``, ``_delta``, ``remaining``)."""
from kiln.lax import *  # noqa: F401,F403
from kiln.lax.structural import asarray  # noqa: F401


def _const(example, val):
    """``val`` with ``example``'s dtype: a Python scalar of ``example``'s type when
    ``example`` is one (and that type keeps the dtype), else a NumPy array."""
    import numpy as np

    from kiln import dtypes
    dtype = dtypes.dtype(example)
    if type(example) in (bool, int, float, complex):
        out = type(example)(val)
        if dtypes.dtype(out) == dtype:
            return out
        return np.array(out, dtype)
    return np.array(val, dtype)


def remaining(original, *removed_lists):
    """The items of ``original`` in none of ``removed_lists``, in order."""
    removed = {i for lst in removed_lists for i in lst}
    return [i for i in original if i not in removed]


def _delta(dtype, shape, axes):
    """The generalized identity: ``shape``-shaped, 1 where the indices along ``axes`` are
    all equal and 0 elsewhere (rectangular when their sizes differ, as ``np.eye(3, 4)``),
    in ``dtype``; built from iotas, so it stays cheap under ``jit``."""
    import kiln.lax as lax
    shape = tuple(int(d) for d in shape)
    axes = tuple(int(a) for a in axes)
    sub = tuple(shape[a] for a in axes)
    iotas = [lax.broadcasted_iota("int32", sub, d) for d in range(len(sub))]
    eq = None
    for a, b in zip(iotas[:-1], iotas[1:]):
        e = lax.eq(a, b)
        eq = e if eq is None else lax.bitwise_and(eq, e)
    if eq is None:                  # one axis (or none): every element is on the diagonal
        eq = lax.full(sub, True, "bool")
    return lax.broadcast_in_dim(lax.convert_element_type(eq, dtype), shape, axes)


def __getattr__(name: str):
    # the rest of kiln.lax (its private names, e.g. ``_convert_element_type``)
    import kiln.lax as _lax
    try:
        return getattr(_lax, name)
    except AttributeError:
        raise AttributeError(f"module 'jax._src.lax.lax' (kiln) has no attribute {name!r}") \
            from None
