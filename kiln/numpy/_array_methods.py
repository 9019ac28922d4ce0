"""Operators and methods shared by ``kiln.Array`` and every tracer.

They forward to ``kiln.numpy`` so that ``x + y`` means ``jnp.add(x, y)`` whatever
``x`` is. ``Array`` additionally gets fast eager paths for the commonest binary
operators on same-dtype operands (no promotion needed, NumPy broadcasting equals
jnp broadcasting), which keeps eager small-op overhead near NumPy's own.
"""
from __future__ import annotations

import warnings as _warnings

import numpy as np

from kiln._fp_warnings import FILTER as _FILTER
from kiln._fp_warnings import NO_FILTER as _NO_FILTER
from kiln._fp_warnings import call_quietly
from kiln.array import ANY_COMMITTED as _ANY_COMMITTED
from kiln.array import Array, make_array
from kiln.config import config
from kiln.core import trace as core
from kiln.core.trace import Tracer
from kiln.lax import _half_flush
from kiln.lax._xla_eager import complex_binary as _xla_complex_binary
from kiln.lax.arith import xla_true_divide

_jnp = None


def _np_mod():
    global _jnp
    if _jnp is None:
        import kiln.numpy as jnp
        _jnp = jnp
    return _jnp


_accepted = (Array, Tracer, np.ndarray, np.generic, int, float, complex, bool)


def _binop(name, reflected=False):
    def op(self, other):
        if not isinstance(other, _accepted):
            # JAX converts an operand that defines ``__jax_array__`` (Flax's Variable);
            # anything else defers to the other operand's reflected operator.
            jax_array = getattr(other, "__jax_array__", None)
            if jax_array is None:
                return NotImplemented
            other = jax_array()
            if not isinstance(other, _accepted):
                return NotImplemented
        f = getattr(_np_mod(), name)
        return f(other, self) if reflected else f(self, other)
    op.__name__ = name
    return op


def _unop(name):
    def op(self):
        return getattr(_np_mod(), name)(self)
    op.__name__ = name
    return op


def _method(name):
    def method(self, *args, **kwargs):
        return getattr(_np_mod(), name)(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"Equivalent to ``kiln.numpy.{name}(self, ...)``."
    return method


_BINOPS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "matmul": "matmul",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "left_shift", "rshift": "right_shift", "divmod": "divmod",
}
_CMPOPS = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
           "gt": "greater", "ge": "greater_equal"}
_UNOPS = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "invert"}
_METHODS = [
    "all", "any", "argmax", "argmin", "argpartition", "argsort", "astype", "choose", "clip",
    "conj", "conjugate", "cumprod", "cumsum", "diagonal", "dot", "flatten", "max",
    "mean", "min", "nonzero", "prod", "ptp", "ravel", "repeat", "reshape", "round",
    "searchsorted", "sort", "squeeze", "std", "sum", "swapaxes", "take", "trace",
    "transpose", "var", "view", "cumulative_sum",
]


def _getitem(self, idx):
    return _np_mod()._rewriting_take(self, idx)


def _compress(self, condition, axis=None, *, out=None, size=None, fill_value=0):
    """``jnp.compress(condition, self, axis)``: the array is the second argument."""
    return _np_mod().compress(condition, self, axis, out=out, size=size,
                              fill_value=fill_value)


def _T(self):
    return _np_mod().transpose(self)


def _mT(self):
    return _np_mod().matrix_transpose(self)


def _real(self):
    return _np_mod().real(self)


def _imag(self):
    return _np_mod().imag(self)


def _at(self):
    from kiln.numpy._indexing_at import _IndexUpdateHelper
    return _IndexUpdateHelper(self)


def _reshape(self, *args, order="C", **kw):
    if len(args) == 1 and not isinstance(args[0], int):
        args = args[0]
    if "shape" in kw:
        args = kw.pop("shape")
    return _np_mod().reshape(self, args, order=order, out_sharding=kw.pop("out_sharding", None))


def _transpose(self, *args):
    if not args:
        axes = None
    elif len(args) == 1 and (args[0] is None or not isinstance(args[0], int)):
        axes = args[0]
    else:
        axes = args
    return _np_mod().transpose(self, axes)


def _setitem(self, idx, value):
    raise TypeError(f"'{type(self).__name__}' object does not support item assignment. JAX "
                    "arrays are immutable. Instead of ``x[idx] = y``, use "
                    "``x = x.at[idx].set(y)`` or another .at[] method: "
                    "https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html")


def _copy(self):
    """A copy (``x.copy()``), as ``jnp.array(x, copy=True)``."""
    return _np_mod().array(self, copy=True)


def _round(self, ndigits=None):
    """``round(x)``: to the nearest integer (half to even) as an integer array, as JAX;
    ``round(x, n)``: ``jnp.round(x, n)``."""
    np_mod = _np_mod()
    if ndigits is None:
        return np_mod.round(self).astype(np_mod.int_)
    return np_mod.round(self, ndigits)


def _array_namespace(self, *, api_version=None):
    np_mod = _np_mod()
    if api_version is not None and api_version != np_mod.__array_api_version__:
        raise ValueError(f"{api_version=!r} is not available; available versions are: "
                         f"{[np_mod.__array_api_version__]}")
    return np_mod


def _install(cls):
    for k, v in _BINOPS.items():
        setattr(cls, f"__{k}__", _binop(v))
        setattr(cls, f"__r{k}__", _binop(v, reflected=True))
    for k, v in _CMPOPS.items():
        setattr(cls, f"__{k}__", _binop(v))
    for k, v in _UNOPS.items():
        setattr(cls, f"__{k}__", _unop(v))
    for name in _METHODS:
        setattr(cls, name, _method(name))
    cls.__getitem__ = _getitem
    cls.__setitem__ = _setitem
    cls.compress = _compress
    cls.reshape = _reshape
    cls.transpose = _transpose
    cls.T = property(_T)
    cls.mT = property(_mT)
    cls.real = property(_real)
    cls.imag = property(_imag)
    cls.at = property(_at)
    cls.__array_namespace__ = _array_namespace
    cls.copy = _copy
    cls.__round__ = _round


_install(Array)
_install(Tracer)


# Tracers standing for mutable references (``kiln.core.ref``): indexing reads and writes the
# reference, ``.at[...]`` makes a view, as JAX's tracers of ``AbstractRef`` type do.
def _tracer_getitem(self, idx):
    if type(self.aval) is _AbstractRef:
        from kiln.state.primitives import ref_get
        return ref_get(self, idx)
    return _np_mod()._rewriting_take(self, idx)


def _tracer_setitem(self, idx, value):
    if type(self.aval) is _AbstractRef:
        from kiln.state.primitives import ref_set
        return ref_set(self, idx, value)
    return _setitem(self, idx, value)


def _tracer_at(self):
    if type(self.aval) is _AbstractRef:
        from kiln.state.types import RefIndexer
        return RefIndexer(self)
    return _at(self)


def _tracer_addupdate(self, value, idx=()):
    from kiln.state.primitives import ref_addupdate
    ref_addupdate(self, idx, value)


from kiln.core.ref import AbstractRef as _AbstractRef  # noqa: E402


def _tracer_deepcopy(self, memo):
    # As JAX: a deep copy of a traced array is the ``copy`` operation (a new value), never a
    # copy of the tracer object (which would belong to no trace).
    return _copy(self)


Tracer.__deepcopy__ = _tracer_deepcopy
Tracer.__getitem__ = _tracer_getitem
Tracer.__setitem__ = _tracer_setitem
Tracer.at = property(_tracer_at)
Tracer.addupdate = _tracer_addupdate


# ----------------------------------------------------------------------------------------------
# Eager fast paths for Array ∘ Array with equal dtypes. Anything unusual takes the general path.

# Python ints taken by the fast path: those in range of the array's dtype and of int32
# (the default integer type without x64); the general path handles the rest exactly.
_INT_BOUNDS = {np.dtype(t): (max(int(np.iinfo(t).min), -2 ** 31),
                             min(int(np.iinfo(t).max), 2 ** 31 - 1))
               for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                         np.uint32, np.uint64)}


def _scalar_ok(dt, other) -> bool:
    """A Python scalar that promotes weakly to ``dt`` without changing it (JAX's rule):
    floats and ints into float arrays, ints into int arrays. An int must be in range of
    ``dt`` and of int32: others wrap or raise on the general path, as in JAX."""
    t = type(other)
    k = dt.kind
    if t is int:
        if k == "f":
            return -2147483648 <= other <= 2147483647
        bounds = _INT_BOUNDS.get(dt)
        return bounds is not None and bounds[0] <= other <= bounds[1]
    return k == "f" and t is float


def _bf16_fn(npfn, cmp):
    """``npfn`` on two bfloat16 arrays as the primitive computes it: in float32 under
    XLA's flushing of subnormals (``kiln/lax/_half_flush.py``; NumPy keeps them)."""
    if cmp:
        return lambda a, b: npfn(_half_flush.flush_bf16(a), _half_flush.flush_bf16(b))
    if npfn is xla_true_divide:
        return lambda a, b: _half_flush.divide(a, b, _BF16)
    return lambda a, b: _half_flush.f32_binary(npfn, a, b, _BF16)


_BF16 = _half_flush.BF16


def _fast(npfn, name, float_only=False, cmp=False):
    general = _binop(name)
    bf16fn = _bf16_fn(npfn, cmp)
    # Arithmetic can raise NumPy's floating-point warnings (comparisons never do): kiln's
    # filter ignores them while it is the first filter, else NumPy's error state is set
    # (kiln/_fp_warnings.py). Checking the filter costs less than setting the state.
    guard = not cmp

    def op(self, other):
        if core._state.trace is core.eval_trace and _FAST[0] and not (
                _ANY_COMMITTED[0] and _committed(self, other)):
            a = self._value
            dt = a.dtype
            if type(other) is Array:
                b = other._value
                if dt is b.dtype and (not float_only or dt.kind == "f" or dt == _BF16):
                    fn = npfn
                    if dt.kind == "V":        # bfloat16 flushes; float8 & co.: general
                        if dt != _BF16:
                            return general(self, other)
                        fn = bf16fn
                    try:
                        if guard and (_warnings.filters or _NO_FILTER)[0] is not _FILTER:
                            r = call_quietly(fn, a, b)
                        else:
                            r = fn(a, b)
                    except ValueError:  # shapes don't broadcast: the general path raises
                        return general(self, other)  # JAX's error
                    # Comparisons too: weak when both operands are (JAX's rule).
                    return make_array(r, self.weak_type and other.weak_type)
            elif _scalar_ok(dt, other) and (not float_only or dt.kind == "f") \
                    and dt.kind != "V":
                if guard and (_warnings.filters or _NO_FILTER)[0] is not _FILTER:
                    return make_array(call_quietly(npfn, a, dt.type(other)), self.weak_type)
                return make_array(npfn(a, dt.type(other)), self.weak_type)
        return general(self, other)
    op.__name__ = name
    return op


def _fast_r(npfn, name):
    general = _binop(name, reflected=True)

    def op(self, other):
        if core._state.trace is core.eval_trace and _FAST[0] and not (
                _ANY_COMMITTED[0] and _committed(self, other)):
            b = self._value
            if type(other) is Array:
                a = other._value
                if a.dtype is b.dtype and b.dtype.kind != "V":    # as in _fast
                    try:
                        if (_warnings.filters or _NO_FILTER)[0] is not _FILTER:
                            r = call_quietly(npfn, a, b)
                        else:
                            r = npfn(a, b)
                    except ValueError:  # shapes don't broadcast: the general path raises
                        return general(self, other)  # JAX's error
                    return make_array(r, self.weak_type and other.weak_type)
            elif _scalar_ok(b.dtype, other) and b.dtype.kind != "V":
                if (_warnings.filters or _NO_FILTER)[0] is not _FILTER:
                    return make_array(call_quietly(npfn, b.dtype.type(other), b),
                                      self.weak_type)
                return make_array(npfn(b.dtype.type(other), b), self.weak_type)
        return general(self, other)
    return op


def _multiply(a, b):
    """``np.multiply``; complex operands through XLA's complex product, as ``lax.mul``'s
    impl (``_xla_eager.complex_binary``: JAX's bits; NumPy's differs in the last bit)."""
    if a.dtype.kind == "c":
        out = _xla_complex_binary("mul", a, b)
        if out is not None:
            return out
    return np.multiply(a, b)


# _FAST[0] is turned off by jax_debug_nans/jax_debug_infs (see kiln.config hooks in kiln/__init__).
_FAST = [True]


def _committed(a, b) -> bool:
    """Whether an operand is a committed array: its result's layout is the primitive's
    eager layout rule's (``kiln.parallel.eager_layout``), so the fast path is not taken."""
    return a._committed or (type(b) is Array and b._committed)
Array.__add__ = _fast(np.add, "add")
Array.__sub__ = _fast(np.subtract, "subtract")
Array.__mul__ = _fast(_multiply, "multiply")
Array.__truediv__ = _fast(xla_true_divide, "true_divide", float_only=True)
Array.__radd__ = _fast_r(np.add, "add")
Array.__rmul__ = _fast_r(_multiply, "multiply")
Array.__rsub__ = _fast_r(np.subtract, "subtract")
def _fast_int(npfn, name, zero_ok):
    """Eager integer ``//``/``%`` straight to NumPy: its integer ``floor_divide`` and
    ``remainder`` give JAX's values (INT_MIN // -1 wraps to INT_MIN, x % 0 is 0), except
    ``floor_divide`` by zero (``zero_ok=False``: those take the general path)."""
    general = _binop(name)
    rgeneral = _binop(name, reflected=True)

    def op(self, other):
        if core._state.trace is core.eval_trace and _FAST[0] and not (
                _ANY_COMMITTED[0] and _committed(self, other)):
            a = self._value
            dt = a.dtype
            if dt.kind in "iu":
                if type(other) is Array:
                    b = other._value
                    if b.dtype is dt and (zero_ok or b.all()):
                        try:
                            r = call_quietly(npfn, a, b)    # x % 0: NumPy would warn
                        except ValueError:  # shapes don't broadcast: JAX's error
                            return general(self, other)
                        return make_array(r, self.weak_type and other.weak_type)
                elif _scalar_ok(dt, other) and (zero_ok or other != 0):
                    return make_array(call_quietly(npfn, a, dt.type(other)), self.weak_type)
        return general(self, other)

    def rop(self, other):
        if core._state.trace is core.eval_trace and _FAST[0] and not (
                _ANY_COMMITTED[0] and _committed(self, other)):
            b = self._value
            dt = b.dtype
            if dt.kind in "iu" and _scalar_ok(dt, other) and (zero_ok or b.all()):
                return make_array(call_quietly(npfn, dt.type(other), b), self.weak_type)
        return rgeneral(self, other)
    op.__name__, rop.__name__ = name, "r" + name
    return op, rop


Array.__floordiv__, Array.__rfloordiv__ = _fast_int(np.floor_divide, "floor_divide", False)
Array.__mod__, Array.__rmod__ = _fast_int(np.remainder, "remainder", True)
for _k, _npf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                 ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(Array, f"__{_k}__", _fast(_npf, _CMPOPS[_k], cmp=True))


# ----------------------------------------------------------------------------------------------
# Eager fast path for ``Array.__getitem__``: the commonest indexes on a concrete array with no
# transformation active are answered by NumPy directly, with JAX's semantics (integers in
# bounds, slices with static bounds, integer arrays clamped after wrapping negatives, boolean
# masks). Everything else (out-of-bound integers, traced indices, mode=...) goes to
# ``jnp._rewriting_take``.

_new = object.__new__
_ndarray = np.ndarray


def _getitem_fast(self, idx, _new=_new, _Array=Array, _nd=_ndarray, _ell=(Ellipsis,)):
    # NumPy answers ints, slices and tuples of them (with None/Ellipsis/index arrays) with
    # JAX's semantics whenever it does not raise; where it raises (out-of-bound integers,
    # which JAX clamps; float or zero-step slices; too many indices) the general path gives
    # JAX's answer or JAX's error. Lists are excluded (JAX rejects them as indices), and so
    # are list/tuple entries of a tuple (JAX converts them to index arrays; a tuple of
    # booleans is no mask for JAX): the general path answers those.
    # ``self`` is concrete, so the answer is the same whatever trace is current (under jit
    # it is a constant); no trace check is needed. Defaults bind globals as fast locals.
    if _ANY_COMMITTED[0] and self._committed:     # laid out by the primitives' rules
        return _np_mod()._rewriting_take(self, idx)
    t = type(idx)
    v = self._value
    try:
        if t is int:
            out = v[idx, ...]                    # a 0-d view, never a NumPy scalar
        elif t is slice:
            out = v[idx]
        elif t is tuple:
            has_ell = False
            for e in idx:
                if type(e) is list or type(e) is tuple:
                    return _np_mod()._rewriting_take(self, idx)
                if e is Ellipsis:
                    has_ell = True
            out = v[idx] if has_ell else v[idx + _ell]
        elif t is _Array:
            if core.current_trace() is not core.eval_trace:
                # staged (make_jaxpr, checkify): a gather equation, as JAX stages it
                return _np_mod()._rewriting_take(self, idx)
            out = _take_concrete(v, idx._value)
            if out is None:
                return _np_mod()._rewriting_take(self, idx)
            if type(out) is not _nd:             # a 0-d index on a 1-D array
                out = out.__array__()
        else:
            return _np_mod()._rewriting_take(self, idx)
    except (IndexError, TypeError, ValueError):
        return _np_mod()._rewriting_take(self, idx)
    a = _new(_Array)
    a._value = out
    a.weak_type = self.weak_type
    return a


def _take_concrete(v, iv):
    """``v[iv]`` for a concrete integer index array (JAX's clamping) or boolean mask, or
    None for anything else."""
    k = iv.dtype.kind
    if k == "b":
        if iv.ndim and iv.shape == v.shape[:iv.ndim]:
            return v[iv]
        return None
    if k not in "iu" or not v.ndim or not v.shape[0]:
        return None
    try:                  # in-bounds indices (negatives wrap once): NumPy's answer is JAX's
        # NumPy's fancy indexing has less fixed cost; np.take streams large index arrays
        # faster (and gives a 0-d array, not a scalar, for a 0-d index).
        return v[iv] if 0 < iv.size < 4096 and iv.ndim else np.take(v, iv, axis=0)
    except IndexError:    # some out of bounds: JAX clamps them after wrapping negatives
        if config.jax_error_checking_behavior_oob == "raise":
            return None       # the general path sets the error (kiln/numpy/_error.py)
        if k == "i":
            iv = np.where(iv < 0, iv + v.shape[0], iv)
        return np.take(v, iv, axis=0, mode="clip")


Array.__getitem__ = _getitem_fast
