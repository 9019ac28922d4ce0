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
