"""Silence NumPy's floating-point warnings raised from inside kiln.

JAX computes inf and nan silently. kiln's NumPy kernels would warn ("divide by zero
encountered in divide", ...); wrapping every call in ``np.errstate`` costs more than a small
operation itself, so instead this filter ignores exactly those RuntimeWarnings when NumPy
raises them from a frame in one of kiln's own modules. The user's own NumPy calls still warn.
Imported first by ``kiln/__init__.py``.
"""
import warnings

warnings.filterwarnings(
    "ignore", message=r"(invalid value|divide by zero|overflow|underflow) encountered",
    category=RuntimeWarning, module=r"kiln(\..*)?$")

_FP_MESSAGE = ("invalid value", "divide by zero", "overflow", "underflow")


def is_fp_warning(err: BaseException) -> bool:
    """Whether ``err`` is NumPy's floating-point RuntimeWarning, raised as an exception
    (warnings turned into errors: ``-W error``, pytest's ``filterwarnings = error``, which
    shadow the filter above) from a NumPy call in one of kiln's own modules."""
    if not isinstance(err, RuntimeWarning):
        return False
    msg = str(err)
    if not any(m in msg for m in _FP_MESSAGE) or "encountered" not in msg:
        return False
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    name = last.tb_frame.f_globals.get("__name__", "") if last is not None else ""
    return name == "kiln" or name.startswith("kiln.")


def quietly(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with NumPy's floating-point warnings off (JAX computes inf
    and nan silently): what a kiln NumPy kernel reruns when its warning became an error."""
    import numpy as np
    with np.errstate(all="ignore"):
        return fn(*args, **kwargs)
