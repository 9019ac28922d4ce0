"""JAX's transfer guards (``jax.transfer_guard``, ``jax_transfer_guard_*`` options) for
kiln's host-to-device direction.

kiln's arrays live in host memory, but it distinguishes host values (NumPy arrays and
scalars, Python scalars, sequences) from kiln arrays as JAX does, and a host value
becoming an array is JAX's host-to-device transfer: *implicit* when it is an argument of a
``jit`` call or an operand of a ``jax.numpy`` function or ``jnp.array``/``asarray``,
*explicit* through ``device_put``. Constants computed by kiln itself (``jnp.arange(5)``,
a value closed over by a traced function) are not transfers, as in JAX. Levels:
``'allow'``; ``'log'`` / ``'disallow'`` log or refuse implicit transfers;
``'log_explicit'`` / ``'disallow_explicit'`` also explicit ones. Refusing raises JAX's
``JaxRuntimeError`` (a RuntimeError). Device-to-host reads (``np.asarray(x)``, printing)
and device-to-device copies are not transfers for kiln's CPU devices, as they are not for
JAX's CPU devices.
"""
from __future__ import annotations

import logging

from kiln.config import config

logger = logging.getLogger("kiln")


def _level() -> str:
    lvl = config.jax_transfer_guard_host_to_device
    if lvl is None:
        lvl = config.jax_transfer_guard
    return lvl or "allow"


def active() -> bool:
    """Whether the host-to-device guard does anything (checked before building messages)."""
    return _level() != "allow"


def host_to_device(aval, explicit: bool = False) -> None:
    """A host value of abstract value ``aval`` becomes a kiln array: log or refuse it as
    the guard level says."""
    lvl = _level()
    if lvl == "allow" or (explicit and lvl in ("log", "disallow")):
        return
    what = "explicit" if explicit else "implicit"
    desc = getattr(aval, "str_short", None)
    desc = f"ShapedArray({desc()})" if desc is not None else repr(aval)
    if lvl.startswith("log"):
        logger.warning("host-to-device transfer (%s): aval=%s", what, desc)
        return
    from kiln.errors import JaxRuntimeError
    raise JaxRuntimeError(f"INVALID_ARGUMENT: Disallowed host-to-device transfer: "
                          f"aval={desc}")


def check_value(x, explicit: bool = False) -> None:
    """:func:`host_to_device` for the host value ``x`` (its aval computed only when the
    guard is on)."""
    if _level() == "allow":
        return
    import numpy as np

    from kiln import dtypes
    from kiln.core.avals import ShapedArray
    weak = type(x) in (int, float, complex)
    try:
        arr = dtypes.coerce_to_array(x)
    except Exception:   # not array-like: the conversion itself reports it
        return
    host_to_device(ShapedArray(np.shape(arr), arr.dtype, weak), explicit)
