"""``kiln.test_util`` (``jax.test_util``): checking derivatives against finite differences.

``check_grads`` compares the forward-mode (``jvp``), reverse-mode (``vjp``) and, on request,
``linearize`` derivatives of a function with central finite differences in one random
direction, recursively up to the requested order, and raises ``AssertionError`` on a
mismatch. ``check_jvp`` and ``check_vjp`` are the single-order checks it is made of.
Default tolerances depend on the dtype, as in JAX.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from kiln import api
from kiln import dtypes as _dtypes
from kiln.config import config
from kiln.tree_util import tree_map, tree_reduce

__all__ = ["check_grads", "check_jvp", "check_vjp"]

EPS = 1e-4

#: A per-dtype tolerance table (JAX's ``ToleranceDict``).
ToleranceDict = dict


def _dtype(x: Any) -> np.dtype:
    if hasattr(x, "dtype"):
        return x.dtype
    dt = _dtypes.python_scalar_dtypes.get(type(x))
    if dt is not None:
        return dt
    return np.asarray(x).dtype


def _present(names_and_values):
    return {np.dtype(k): v for k, v in names_and_values if k is not None}


# Per-dtype tolerances used to compare primal outputs (and ints/bools exactly).
_default_tolerance: dict = _present([
    (_dtypes.float0, 0), (np.bool_, 0),
    (_dtypes.int1, 0), (_dtypes.int2, 0), (_dtypes.int4, 0),
    (np.int8, 0), (np.int16, 0), (np.int32, 0), (np.int64, 0),
    (_dtypes.uint1, 0), (_dtypes.uint2, 0), (_dtypes.uint4, 0),
    (np.uint8, 0), (np.uint16, 0), (np.uint32, 0), (np.uint64, 0),
    (_dtypes.float4_e2m1fn, 1e0), (_dtypes.float8_e3m4, 1e-1), (_dtypes.float8_e4m3, 1e-1),
    (_dtypes.float8_e8m0fnu, 1e0), (_dtypes.float8_e4m3b11fnuz, 1e-1),
    (_dtypes.float8_e4m3fn, 1e-1), (_dtypes.float8_e4m3fnuz, 1e-1),
    (_dtypes.float8_e5m2, 1e-1), (_dtypes.float8_e5m2fnuz, 1e-1),
    (_dtypes.bfloat16, 1e-2), (np.float16, 1e-3), (np.float32, 1e-6), (np.float64, 1e-15),
    (np.complex64, 1e-6), (np.complex128, 1e-15),
])

# Per-dtype tolerances used when comparing derivatives with finite differences.
default_gradient_tolerance: dict = _present([
    (_dtypes.float4_e2m1fn, 1e0), (_dtypes.float8_e3m4, 1e-1), (_dtypes.float8_e4m3, 1e-1),
    (_dtypes.float8_e8m0fnu, 1e0), (_dtypes.float8_e4m3b11fnuz, 1e-1),
    (_dtypes.float8_e4m3fn, 1e-1), (_dtypes.float8_e4m3fnuz, 1e-1),
    (_dtypes.float8_e5m2, 1e-1), (_dtypes.float8_e5m2fnuz, 1e-1),
    (_dtypes.bfloat16, 1e-1), (np.float16, 1e-2), (np.float32, 2e-3), (np.float64, 1e-5),
    (np.complex64, 1e-3), (np.complex128, 1e-5),
])


def default_tolerance() -> dict:
    """The per-dtype tolerances used to compare primal values."""
    return _default_tolerance


def is_python_scalar(val: Any) -> bool:
    """Whether ``val`` is a Python ``bool``/``int``/``float``/``complex`` (not a NumPy scalar)."""
    return not isinstance(val, np.generic) and isinstance(val, (bool, int, float, complex))


def _upcast_for_compare(x: np.ndarray) -> np.ndarray:
    if x.dtype in _dtypes._custom_float_dtypes:
        return x.astype(np.float32)
    if x.dtype in _dtypes._intn_dtypes:
        return x.astype(np.int8 if x.dtype in _dtypes._intn_signed_dtypes else np.uint8)
    return x


def _assert_numpy_allclose(a, b, atol=None, rtol=None, err_msg=""):
    if a.dtype == b.dtype == _dtypes.float0:
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
        return
    a, b = _upcast_for_compare(a), _upcast_for_compare(b)
    kw = {}
    if atol:
        kw["atol"] = atol
    if rtol:
        kw["rtol"] = rtol
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(a, b, **kw, err_msg=err_msg)


def tolerance(dtype, tol=None):
    """The tolerance for ``dtype``: ``tol`` itself if it is a number, else its entry for the
    (canonicalized) dtype in the dict ``tol`` or in the default table."""
    tol = {} if tol is None else tol
    if not isinstance(tol, dict):
        return tol
    tol = {np.dtype(k): v for k, v in tol.items()}
    dtype = _dtypes.canonicalize_dtype(np.dtype(dtype))
    return tol.get(dtype, default_tolerance()[dtype])


def _assert_numpy_close(a, b, atol=None, rtol=None, err_msg=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    atol = max(tolerance(a.dtype, atol), tolerance(b.dtype, atol))
    rtol = max(tolerance(a.dtype, rtol), tolerance(b.dtype, rtol))
    # Tolerances scale with the number of elements, as in JAX.
    _assert_numpy_allclose(a, b, atol=atol * a.size, rtol=rtol * b.size, err_msg=err_msg)


def check_close(xs, ys, atol=None, rtol=None, err_msg=""):
    """Assert that the pytrees ``xs`` and ``ys`` are leafwise close."""
    tree_map(partial(_assert_numpy_close, atol=atol, rtol=rtol, err_msg=err_msg), xs, ys)


def _check_dtypes_match(xs, ys):
    def same(x, y):
        if config.jax_enable_x64:
            assert _dtype(x) == _dtype(y)
        else:
            assert (_dtypes.canonicalize_dtype(_dtype(x))
                    == _dtypes.canonicalize_dtype(_dtype(y)))
    tree_map(same, xs, ys)


def inner_prod(xs, ys):
    """``sum(real(vdot(x, y)))`` over the leaves of two pytrees."""
    def contract(x, y):
        return np.real(np.dot(np.conj(x).reshape(-1), y.reshape(-1)))
    return tree_reduce(np.add, tree_map(contract, xs, ys))


def _safe_subtract(x, y, *, dtype):
    """``x - y`` in ``dtype``, with ``inf - inf == 0``."""
    with np.errstate(invalid="ignore"):
        return np.where(np.equal(x, y), np.array(0, dtype), np.subtract(x, y, dtype=dtype))


def _preserve_input_types(f):
    def wrapped(*args):
        result = np.array(f(*args), dtype=_dtype(args[0]))
        if all(is_python_scalar(a) for a in args):
            result = result.item()
        return result
    return wrapped


add = partial(tree_map, _preserve_input_types(operator.add))
sub = partial(tree_map, _preserve_input_types(operator.sub))
safe_sub = partial(tree_map, lambda x, y: _safe_subtract(x, y, dtype=_dtype(x)))
conj = partial(tree_map, _preserve_input_types(np.conj))


def scalar_mul(xs, a):
    """Multiply every leaf of ``xs`` by the scalar ``a`` in the leaf's own dtype."""
    def mul(x):
        dt = _dtype(x)
        out = np.multiply(x, np.array(a, dtype=dt), dtype=dt)
        return out.item() if is_python_scalar(x) else out
    return tree_map(mul, xs)


def rand_like(rng, x):
    """A standard-normal value with the shape and dtype of ``x`` (complex: both parts)."""
    shape, dt = np.shape(x), _dtype(x)

    def randn():
        return np.asarray(rng.randn(*shape), dtype=dt)

    if _dtypes.issubdtype(dt, np.complexfloating):
        out = randn() + dt.type(1.0j) * randn()
    else:
        out = randn()
    return out.item() if is_python_scalar(x) else out


def numerical_jvp(f, primals, tangents, eps=EPS):
    """The central finite difference ``(f(x + eps t) - f(x - eps t)) / (2 eps)``."""
    delta = scalar_mul(tangents, eps)
    f_pos = f(*add(primals, delta))
    f_neg = f(*sub(primals, delta))
    return scalar_mul(safe_sub(f_pos, f_neg), 0.5 / eps)


def _merge_tolerance(tol, default):
    if tol is None:
        return default
    if not isinstance(tol, dict):
        return tol
    out = dict(default)
    for k, v in tol.items():
        out[np.dtype(k)] = v
    return out


def check_jvp(f: Callable, f_jvp: Callable, args: Sequence[Any], atol=None, rtol=None,
              eps: float = EPS, err_msg: str = "") -> None:
    """Check a JVP from automatic differentiation against finite differences.

    The tangent is checked in one random direction, so the cost does not grow with the
    size of the inputs or outputs.

    Args:
      f: the function, checked at ``f(*args)``.
      f_jvp: a function computing ``jvp`` of ``f``, typically ``functools.partial(kiln.jvp, f)``.
      args: tuple of argument values.
      atol: absolute tolerance (a number, or a dict from dtype to number).
      rtol: relative tolerance (a number, or a dict from dtype to number).
      eps: finite-difference step.
      err_msg: text added to the error message on failure.

    Raises:
      AssertionError: if the derivatives do not match.
    """
    atol = _merge_tolerance(atol, default_gradient_tolerance)
    rtol = _merge_tolerance(rtol, default_gradient_tolerance)
    rng = np.random.RandomState(0)
    tangent = tree_map(partial(rand_like, rng), args)
    v_out, t_out = f_jvp(args, tangent)
    _check_dtypes_match(v_out, t_out)
    v_out_expected = f(*args)
    _check_dtypes_match(v_out, v_out_expected)
    t_out_expected = numerical_jvp(f, args, tangent, eps=eps)
    check_close(v_out, v_out_expected, atol=atol, rtol=rtol,
                err_msg=f"{err_msg} primal" if err_msg else "primal")
    check_close(t_out, t_out_expected, atol=atol, rtol=rtol,
                err_msg=f"{err_msg} tangent" if err_msg else "tangent")


def check_vjp(f: Callable, f_vjp: Callable, args: Sequence[Any], atol=None, rtol=None,
              eps: float = EPS, err_msg: str = "") -> None:
    """Check a VJP from automatic differentiation against finite differences.

    A random cotangent is pulled back and its inner product with a random tangent is
    compared with the inner product of the cotangent and the finite-difference JVP.

    Args:
      f: the function, checked at ``f(*args)``.
      f_vjp: a function computing ``vjp`` of ``f``, typically ``functools.partial(kiln.vjp, f)``.
      args: tuple of argument values.
      atol: absolute tolerance (a number, or a dict from dtype to number).
      rtol: relative tolerance (a number, or a dict from dtype to number).
      eps: finite-difference step.
      err_msg: text added to the error message on failure.

    Raises:
      AssertionError: if the derivatives do not match.
    """
    atol = _merge_tolerance(atol, default_gradient_tolerance)
    rtol = _merge_tolerance(rtol, default_gradient_tolerance)
    _rand_like = partial(rand_like, np.random.RandomState(0))
    v_out, vjpfun = f_vjp(*args)
    v_out_expected = f(*args)
    check_close(v_out, v_out_expected, atol=atol, rtol=rtol,
                err_msg=f"{err_msg} primal" if err_msg else "primal")
    tangent = tree_map(_rand_like, args)
    tangent_out = numerical_jvp(f, args, tangent, eps=eps)
    cotangent = tree_map(_rand_like, v_out)
    cotangent_out = conj(vjpfun(conj(cotangent)))
    ip = inner_prod(tangent, cotangent_out)
    ip_expected = inner_prod(tangent_out, cotangent)
    check_close(ip, ip_expected, atol=atol, rtol=rtol,
                err_msg=(f"{err_msg} cotangent projection" if err_msg
                         else "cotangent projection"))


def check_grads(f: Callable, args: Sequence[Any], order: int,
                modes: Sequence[str] = ("fwd", "rev"), atol=None, rtol=None,
                eps: float | None = None) -> None:
    """Check derivatives from automatic differentiation against finite differences.

    Each order is checked in one random direction. For ``order > 1`` the check recurses
    on the JVP (``"fwd"``), the VJP (``"rev"``) or the linearized function (``"lin"``).

    Args:
      f: the function, checked at ``f(*args)``.
      args: tuple of argument values.
      order: derivatives up to this order are checked.
      modes: the modes to check: any of ``"fwd"``, ``"rev"`` and ``"lin"``.
      atol: absolute tolerance (a number, or a dict from dtype to number).
      rtol: relative tolerance (a number, or a dict from dtype to number).
      eps: finite-difference step (default ``1e-4``).

    Raises:
      AssertionError: if the derivatives do not match.
    """
    args = tuple(args)
    eps = eps or EPS
    _check_jvp = partial(check_jvp, atol=atol, rtol=rtol, eps=eps)
    _check_vjp = partial(check_vjp, atol=atol, rtol=rtol, eps=eps)

    def recurse(f, args, order, err_msg=""):
        if "fwd" in modes:
            msg = f"JVP of {err_msg}" if err_msg else "JVP"
            _check_jvp(f, partial(api.jvp, f), args, err_msg=msg)
            if order > 1:
                recurse(partial(api.jvp, f), (args, args), order - 1, msg)
        if "rev" in modes:
            msg = f"VJP of {err_msg}" if err_msg else "VJP"
            _check_vjp(f, partial(api.vjp, f), args, err_msg=msg)
            if order > 1:
                def f_vjp(*args):
                    out, pullback = api.vjp(f, *args)
                    return pullback(out)
                recurse(f_vjp, args, order - 1, msg)
        if "lin" in modes:
            msg = f"LIN of {err_msg}" if err_msg else "LIN"
            _check_jvp(f, partial(_jvp_from_lin, f), args, err_msg=msg)
            if order > 1:
                recurse(partial(_jvp_from_lin, f), (args, args), order - 1, msg)

    recurse(f, args, order)


def _jvp_from_lin(f, primals, tangents):
    out, f_lin = api.linearize(f, *primals)
    return out, f_lin(*tangents)
