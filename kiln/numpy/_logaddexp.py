"""``logaddexp`` and ``logaddexp2`` with JAX's derivative rule.

Differentiating the overflow-safe formula ``max(a, b) + log1p(exp(-|a - b|))`` directly
gives a one-sided answer at ties (``d/da`` is 0 or 1 at ``a == b`` instead of 1/2), so, as
in JAX, both functions carry a ``custom_jvp``: the tangent is ``t1 * exp(x1 - out) +
t2 * exp(x2 - out)`` (base 2 for ``logaddexp2``), with ``+inf`` replaced by 0 on both sides
of each difference so that infinite inputs give finite weights. Complex inputs use the
principal branch, with the imaginary part wrapped into ``(-pi, pi]`` (scaled by
``1 / ln 2`` for base 2).
"""
from __future__ import annotations

import numpy as np

from kiln import dtypes, lax
from kiln.custom_derivatives import custom_jvp
from kiln.numpy._util import promote_args_inexact


def _const(x, value):
    return np.array(value, dtype=x.dtype)


def _wrap_between(x, a):
    """``x`` wrapped into ``[-a, a)``."""
    two_a = _const(x, 2 * a)
    rem = lax.rem(lax.add(x, _const(x, a)), two_a)
    rem = lax.select(lax.lt(rem, _const(x, 0)), lax.add(rem, two_a), rem)
    return lax.sub(rem, _const(x, a))


def _replace_posinf(x):
    re = lax.real(x) if dtypes.issubdtype(x.dtype, np.complexfloating) else x
    return lax.select(lax.eq(re, _const(re, np.inf)), lax.full_like(x, 0), x)


def _impl(x1, x2, base2: bool):
    amax = lax.max(x1, x2)
    exp = lax.exp2 if base2 else lax.exp
    if dtypes.issubdtype(x1.dtype, np.complexfloating):
        delta = lax.sub(lax.add(x1, x2), lax.mul(amax, _const(amax, 2)))
        tail = lax.log1p(exp(delta))
        if base2:
            tail = lax.mul(_const(amax, 1 / np.log(2)), tail)
        out = lax.add(amax, tail)
        period = np.pi / np.log(2) if base2 else np.pi
        return lax.complex(lax.real(out), _wrap_between(lax.imag(out), period))
    delta = lax.sub(x1, x2)
    # delta is NaN for NaN inputs and for infinities of one sign: x1 + x2 is then right.
    # (Operations are issued in JAX's order so that staged jaxprs print identically.)
    is_nan = lax.ne(delta, delta)
    nan_case = lax.add(x1, x2)
    if base2:
        inv_ln2 = _const(amax, 1 / np.log(2))
        tail = lax.mul(inv_ln2, lax.log1p(exp(lax.neg(lax.abs(delta)))))
    else:
        tail = lax.log1p(exp(lax.neg(lax.abs(delta))))
    return lax.select(is_nan, nan_case, lax.add(amax, tail))


def _tangent(exp, out, x1, x2, t1, t2):
    r_out = _replace_posinf(out)
    return lax.add(lax.mul(t1, exp(lax.sub(_replace_posinf(x1), r_out))),
                   lax.mul(t2, exp(lax.sub(_replace_posinf(x2), r_out))))


def _logaddexp_value(x1, x2):
    return _impl(x1, x2, False)


def _logaddexp2_value(x1, x2):
    return _impl(x1, x2, True)


# Named as JAX names them in printed jaxprs (custom_jvp_call[name=logaddexp ...]).
_logaddexp_value.__name__ = "logaddexp"
_logaddexp2_value.__name__ = "logaddexp2"
_logaddexp = custom_jvp(_logaddexp_value)
_logaddexp2 = custom_jvp(_logaddexp2_value)


@_logaddexp.defjvp
def _logaddexp_jvp(primals, tangents):
    # Python-scalar primals reach the rule as given (as in JAX): promote them as the
    # public function does.
    primals = promote_args_inexact("logaddexp", *primals)
    out = _logaddexp(*primals)
    return out, _tangent(lax.exp, out, *primals, *tangents)


@_logaddexp2.defjvp
def _logaddexp2_jvp(primals, tangents):
    primals = promote_args_inexact("logaddexp2", *primals)
    out = _logaddexp2(*primals)
    return out, _tangent(lax.exp2, out, *primals, *tangents)


def logaddexp(x1, x2, /):
    """Compute ``log(exp(x1) + exp(x2))`` elementwise, avoiding overflow.

    JAX implementation of :obj:`numpy.logaddexp`. Its derivative is exact at ``x1 == x2``
    (1/2 for each input) and finite for infinite inputs.

    Args:
      x1: input array or scalar.
      x2: input array or scalar, broadcast-compatible with ``x1``.

    Returns:
      An array of the promoted inexact dtype.
    """
    x1, x2 = promote_args_inexact("logaddexp", x1, x2)
    return _logaddexp(x1, x2)


def logaddexp2(x1, x2, /):
    """Compute ``log2(2**x1 + 2**x2)`` elementwise, avoiding overflow.

    JAX implementation of :obj:`numpy.logaddexp2`, with the same derivative rule as
    :func:`logaddexp` in base 2.

    Args:
      x1: input array or scalar.
      x2: input array or scalar, broadcast-compatible with ``x1``.

    Returns:
      An array of the promoted inexact dtype.
    """
    x1, x2 = promote_args_inexact("logaddexp2", x1, x2)
    return _logaddexp2(x1, x2)
