"""``vectorize`` (NumPy's generalized-ufunc signatures, built on ``vmap``), the ``ufunc``
class with ``reduce``/``accumulate``/``at``/``reduceat``/``outer``, ``frompyfunc``, and the
ufunc objects JAX exposes (``jnp.add``, ``jnp.multiply``, ``jnp.maximum``, ...).

A ufunc object wraps one of the plain functions of ``_ufuncs``; calling it costs one extra
Python call. Methods use the matching ``jnp`` reduction where one exists (``add.reduce`` is
``sum``) and otherwise a ``fori_loop``/``scan`` over the axis, as JAX does.
"""
from __future__ import annotations

import functools
import math
import operator
import re
import warnings

import numpy as np

from kiln import lax
from kiln.array import ANY_COMMITTED as _ANY_COMMITTED
from kiln.array import Array as _Array
from kiln.array import make_array as _make_array
from kiln.core import trace as _core
from kiln.core.trace import get_aval
from kiln.lax._half_flush import max_min as _max_min
from kiln.numpy import _ufuncs, _util
from kiln.numpy._array_methods import _FAST

__all__ = ["vectorize", "ufunc", "frompyfunc"]

# the ufunc objects exported (by name) in place of the plain functions
UFUNC_NAMES = ("add", "subtract", "multiply", "maximum", "minimum", "logical_and",
               "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
               "logaddexp", "logaddexp2", "negative")


def _jnp():
    import kiln.numpy as jnp
    return jnp


# ----------------------------------------------------------------------------------------------
# vectorize

_DIM = r"\w+"
_CORE_DIMS = f"(?:{_DIM}(?:,{_DIM})*)?"
_ARG = rf"\({_CORE_DIMS}\)"
_ARGS = f"{_ARG}(?:,{_ARG})*"
_SIGNATURE = f"^{_ARGS}->{_ARGS}$"


def _parse_signature(signature):
    """``'(m,n),(n)->(m)'`` → ([('m', 'n'), ('n',)], [('m',)])."""
    if not re.match(_SIGNATURE, signature.replace(" ", "")):
        raise ValueError(f"not a valid gufunc signature: {signature}")
    ins, outs = ([tuple(re.findall(_DIM, arg)) for arg in re.findall(_ARG, part)]
                 for part in signature.replace(" ", "").split("->"))
    return ins, outs


def _update_sizes(sizes, shape, core, context, is_input):
    n = len(core)
    if is_input and len(shape) < n:
        raise ValueError(f"input with shape {shape!r} does not have enough dimensions for all "
                         f"core dimensions {core!r} {context}")
    if not is_input and len(shape) != n:
        raise ValueError(f"output shape {shape!r} does not match core dimensions {core!r} "
                         f"{context}")
    for dim, size in zip(core, shape[len(shape) - n:] if n else ()):
        if sizes.setdefault(dim, size) != size:
            raise ValueError(f"inconsistent size for core dimension {dim!r}: {size!r} vs "
                             f"{sizes[dim]!r} {context}")


def _bind_excluded(func, excluded, args, kwargs):
    """Split off the excluded (static) arguments, returning a function of the others."""
    if not excluded:
        return func, list(args), kwargs
    static_pos = [(i, args[i]) for i in sorted(e for e in excluded if isinstance(e, int))
                  if i < len(args)]
    static_kw = {k: v for k, v in kwargs.items() if k in excluded}
    dyn = [a for i, a in enumerate(args) if i not in excluded]
    dyn_kw = {k: v for k, v in kwargs.items() if k not in excluded}

    def bound(*a, **kw):
        a = list(a)
        for i, v in static_pos:
            a.insert(i, v)
        return func(*a, **kw, **static_kw)
    return bound, dyn, dyn_kw


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """A function that maps ``pyfunc`` over the leading (broadcast) axes of its arguments
    with ``vmap``; ``signature`` (``'(n),(n)->()'``) names the core axes ``pyfunc`` sees,
    ``excluded`` the positional indices/keyword names passed through unchanged."""
    if any(not isinstance(e, (str, int)) for e in excluded):
        raise TypeError("jax.numpy.vectorize can only exclude integer or string arguments, "
                        f"but excluded={excluded!r}")
    if any(isinstance(e, int) and e < 0 for e in excluded):
        raise ValueError(f"excluded={excluded!r} contains negative numbers")
    parsed = _parse_signature(signature) if signature is not None else None

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        from kiln.config import config
        from kiln.transformations import vmap
        jnp = _jnp()
        context = f"on vectorized function with excluded={excluded!r} and " \
                  f"signature={signature!r}"
        func, args, kwargs = _bind_excluded(pyfunc, excluded, args, kwargs)
        if parsed is not None:
            in_core, out_core = parsed
        else:
            in_core, out_core = [()] * len(args), None
        none_args = {i for i, a in enumerate(args) if a is None}
        if none_args:
            if any(in_core[i] != () for i in none_args):
                raise ValueError(f"Cannot pass None at locations {none_args} with "
                                 f"{signature=}")
            func, args, _ = _bind_excluded(func, none_args, args, {})
            in_core = [c for i, c in enumerate(in_core) if i not in none_args]
        args = [jnp.asarray(a) for a in args]
        if len(args) != len(in_core):
            raise TypeError(f"wrong number of positional arguments: expected {len(in_core)}, "
                            f"got {len(args)} {context}")
        sizes = {}
        loop_shapes = []
        for a, core in zip(args, in_core):
            _update_sizes(sizes, a.shape, core, context, True)
            loop_shapes.append(a.shape[:a.ndim - len(core)])
        bshape = _util.broadcast_shapes(*loop_shapes) if loop_shapes else ()
        if config.jax_numpy_rank_promotion != "allow":
            ranks = {a.ndim - len(c) for a, c in zip(args, in_core) if a.ndim}
            if len(ranks) > 1:
                msg = (f"operands with shapes {[a.shape for a in args]} require rank "
                       f"promotion for jnp.vectorize function with signature {signature}. Set "
                       "the jax_numpy_rank_promotion config option to 'allow' to disable this "
                       "message.")
                if config.jax_numpy_rank_promotion == "raise":
                    raise ValueError(msg)
                warnings.warn(msg, stacklevel=2)

        checked = func
        if out_core is not None:
            def checked(*a, _f=func):
                out = _f(*a)
                outs = out if isinstance(out, tuple) else (out,)
                if len(out_core) > 1 and not isinstance(out, tuple):
                    raise TypeError(f"output must be a tuple when multiple outputs are "
                                    f"expected, got: {out!r}\n{context}")
                if len(outs) != len(out_core):
                    raise TypeError(f"wrong number of output arguments: expected "
                                    f"{len(out_core)}, got {len(outs)} {context}")
                s = dict(sizes)
                for o, core in zip(outs, out_core):
                    _update_sizes(s, np.shape(o) if not hasattr(o, "shape") else o.shape,
                                  core, context, False)
                return out

        squeezed, rev_shapes = [], []
        for a, core in zip(args, in_core):
            loop = a.shape[:a.ndim - len(core)]
            rev_shapes.append(((1,) * (len(bshape) - len(loop)) + loop)[::-1])
            sq = tuple(i for i, d in enumerate(loop) if d == 1)
            squeezed.append(jnp.squeeze(a, axis=sq) if sq else a)
        # Keyword arguments that are not excluded are passed through unmapped (JAX drops
        # them silently; NumPy would broadcast them).
        f = functools.partial(checked, **kwargs) if kwargs else checked
        expand = []
        for negdim, dims in enumerate(zip(*rev_shapes)):
            in_axes = tuple(None if d == 1 else 0 for d in dims)
            if all(ax is None for ax in in_axes):
                expand.append(len(bshape) - 1 - negdim)
            else:
                f = vmap(f, in_axes=in_axes)
        result = f(*squeezed)
        if not expand:
            return result
        if isinstance(result, tuple):
            return tuple(jnp.expand_dims(r, tuple(expand)) for r in result)
        return jnp.expand_dims(result, tuple(expand))

    return wrapped


# ----------------------------------------------------------------------------------------------
# ufunc


class ufunc:  # noqa: N801  (NumPy/JAX name)
    """A universal function: elementwise ``__call__`` plus ``reduce``, ``accumulate``,
    ``at``, ``reduceat`` and ``outer``, as ``jax.numpy.ufunc``."""

    def __init__(self, func, /, nin, nout, *, name=None, nargs=None, identity=None, call=None,
                 reduce=None, accumulate=None, at=None, reduceat=None):
        self.__doc__ = func.__doc__
        self.__name__ = name or func.__name__
        self._func = func
        self.nin = operator.index(nin)
        self.nout = operator.index(nout)
        self.nargs = operator.index(nargs or nin)
        self.identity = identity
        self._call = call
        self._reduce = reduce
        self._accumulate = accumulate
        self._at = at
        self._reduceat = reduceat

    def __hash__(self):
        return hash((self._func, self.__name__, self.identity, self.nin, self.nout,
                     self.nargs))

    def __eq__(self, other):
        return isinstance(other, ufunc) and (
            (self._func, self.__name__, self.identity, self.nin, self.nout, self.nargs)
            == (other._func, other.__name__, other.identity, other.nin, other.nout,
                other.nargs))

    def __repr__(self):
        return f"<jnp.ufunc '{self.__name__}'>"

    def __call__(self, *args, out=None, where=None):
        fast = _EAGER_FAST.get(self.__name__)
        if fast is not None and len(args) == 2 and out is None and where is None:
            # Eager Array (op) Array of one dtype: NumPy directly, as the operators do.
            a, b = args
            if type(a) is _Array and type(b) is _Array and _core._state.trace is \
                    _core.eval_trace and _FAST[0] and not (
                        _ANY_COMMITTED[0] and (a._committed or b._committed)):
                av, bv = a._value, b._value
                # Same shapes only: broadcasting goes the general way, which checks
                # jax_numpy_rank_promotion and raises JAX's errors.
                if av.dtype is bv.dtype and av.shape == bv.shape and \
                        av.dtype.kind in fast[1]:
                    w = False if fast[2] else (a.weak_type and b.weak_type)
                    return _make_array(fast[0](av, bv), w)
        if out is not None:
            raise NotImplementedError(f"out argument of {self}")
        if where is not None:
            raise NotImplementedError(f"where argument of {self}")
        if self._call is not None:
            return self._call(*args)
        _util.check_arraylike(self.__name__, *args)
        return vectorize(self._func)(*args)

    def _binary_only(self, what):
        if self.nin != 2:
            raise ValueError(f"{what} only supported for binary ufuncs")
        if self.nout != 1:
            raise ValueError(f"{what} only supported for functions returning a single value")

    def _result_dtype(self, *args):
        from kiln.shape_eval import eval_shape
        ones = [_jnp().ones((), _util.dtype_of(a)) for a in args]
        return eval_shape(self._func, *ones).dtype

    # -- reduce

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None,
               where=None):
        """Reduce ``a`` along ``axis`` by repeated application of this binary ufunc."""
        _util.check_arraylike(f"{self.__name__}.reduce", a)
        self._binary_only("reduce")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduce()")
        if initial is not None:
            _util.check_arraylike(f"{self.__name__}.reduce", initial)
        if where is not None:
            _util.check_arraylike(f"{self.__name__}.reduce", where)
            if self.identity is None and initial is None:
                raise ValueError(f"reduction operation {self.__name__!r} does not have an "
                                 "identity, so to use a where mask one has to specify "
                                 "'initial'.")
            if _util.dtype_of(where) != np.bool_:
                raise ValueError(f"where argument must have dtype=bool; got "
                                 f"dtype={_util.dtype_of(where)}")
        fn = self._reduce or self._reduce_via_loop
        return fn(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial, where=where)

    def _reduce_via_loop(self, arr, axis=0, dtype=None, keepdims=False, initial=None,
                         where=None):
        jnp = _jnp()
        arr = _util.as_operand(arr)
        if initial is None:
            initial = self.identity
        if dtype is None:
            dtype = self._result_dtype(arr, arr)
        if where is not None:
            where = jnp.broadcast_to(where, arr.shape)
        if isinstance(axis, tuple):
            arr, where, axis, final = self._merge_axes(arr, where, axis, keepdims)
        elif axis is None:
            final = (1,) * arr.ndim if keepdims else ()
            arr = jnp.ravel(arr)
            where = None if where is None else jnp.ravel(where)
            axis = 0
        else:
            axis = _util.canonicalize_axis(axis, arr.ndim)
            final = arr.shape[:axis] + ((1,) if keepdims else ()) + arr.shape[axis + 1:]
        if axis:
            arr = jnp.moveaxis(arr, axis, 0)
            where = None if where is None else jnp.moveaxis(where, axis, 0)
        n = arr.shape[0]
        if n == 0:
            if initial is None:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} "
                                 "which has no identity")
            return jnp.full(final, initial, dtype)

        def body(i, acc):
            new = self(acc, arr[i].astype(dtype))
            return new if where is None else jnp.where(where[i], new, acc)

        if initial is None:
            start, init = 1, arr[0]
        else:
            start, init = 0, initial
        init = jnp.broadcast_to(jnp.asarray(init).astype(dtype), arr.shape[1:])
        res = lax.fori_loop(start, n, body, init)
        return res.reshape(final) if keepdims else res

    def _merge_axes(self, arr, where, axis, keepdims):
        """For a tuple ``axis``: ``arr`` (and ``where``) with the reduced axes moved to the
        front and merged into one (in C order, so a tuple of all axes reduces in the order
        ``axis=None`` does), that axis (0) and the shape of the result."""
        jnp = _jnp()
        shape = arr.shape
        axes = tuple(_util.canonicalize_axis(a, arr.ndim) for a in axis)
        if len(set(axes)) != len(axes):
            raise ValueError(f"duplicate value in 'axis': {axis}")
        if len(axes) > 1 and self.identity is None:
            # NumPy's rule: without an identity the order of a multi-axis reduction matters
            raise ValueError(f"reduction operation {self.__name__!r} is not reorderable, so "
                             "at most one axis may be specified")
        kept = [d for d in range(arr.ndim) if d not in axes]
        if keepdims:
            final = tuple(1 if d in axes else shape[d] for d in range(arr.ndim))
        else:
            final = tuple(shape[d] for d in kept)
        perm = sorted(axes) + kept
        merged = (math.prod(shape[d] for d in axes),) + tuple(shape[d] for d in kept)
        arr = jnp.reshape(jnp.transpose(arr, perm), merged)
        if where is not None:
            where = jnp.reshape(jnp.transpose(where, perm), merged)
        return arr, where, 0, final

    # -- accumulate

    def accumulate(self, a, axis=0, dtype=None, out=None):
        """Running reduction of ``a`` along ``axis``."""
        self._binary_only("accumulate")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.accumulate()")
        fn = self._accumulate or self._accumulate_via_scan
        return fn(a, axis=axis, dtype=dtype)

    def _accumulate_via_scan(self, arr, axis=0, dtype=None):
        jnp = _jnp()
        _util.check_arraylike(f"{self.__name__}.accumulate", arr)
        arr = _util.as_operand(arr)
        if dtype is None:
            dtype = self._result_dtype(arr, arr)
        if axis is None or isinstance(axis, tuple):
            raise ValueError("accumulate does not allow multiple axes")
        axis = _util.canonicalize_axis(axis, arr.ndim)
        if arr.size == 0:
            return jnp.zeros(arr.shape, dtype)
        arr = jnp.moveaxis(arr, axis, 0)

        def step(carry, x):
            y = self(carry, x.astype(dtype))
            return y, y

        first = arr[0].astype(dtype)
        _, rest = lax.scan(step, first, arr[1:])
        res = jnp.concatenate([first[None], rest.astype(dtype)], axis=0)
        return jnp.moveaxis(res, 0, axis)

    # -- at

    def at(self, a, indices, b=None, /, *, inplace=True):
        """``a`` with this ufunc applied at ``indices`` (repeated indices apply repeatedly);
        only ``inplace=False`` is supported."""
        if inplace:
            raise NotImplementedError("jnp.ufunc.at cannot operate in-place, because JAX "
                                      "arrays are immutable. Pass inplace=False to return "
                                      "an updated array.")
        fn = self._at or self._at_via_scan
        return fn(a, indices) if b is None else fn(a, indices, b)

    def _at_via_scan(self, a, indices, *args):
        jnp = _jnp()
        _util.check_arraylike(f"{self.__name__}.at", a, *args)
        dtype = self._result_dtype(a, *args)
        a = jnp.asarray(a).astype(dtype)
        args = tuple(jnp.asarray(x).astype(dtype) for x in args)
        if not isinstance(indices, tuple):
            indices = (indices,)
        if not indices:
            return a
        shapes = [np.shape(i) if not hasattr(i, "shape") else i.shape
                  for i in indices if not isinstance(i, slice)]
        shape = _util.broadcast_shapes(*shapes) if shapes else ()
        if not shape:
            return a.at[indices].set(self(a.at[indices].get(), *args))
        m = math.prod(shape)
        if args:
            x = args[0]
            x = jnp.broadcast_to(x, shape + x.shape[len(shape):]) \
                if x.ndim >= len(shape) else jnp.broadcast_to(x, shape)
            args = (x.reshape((m,) + x.shape[len(shape):]),)
        flat = [i if isinstance(i, slice) else jnp.ravel(jnp.broadcast_to(i, shape))
                for i in indices]

        def body(k, acc):
            idx = tuple(i if isinstance(i, slice) else i[k] for i in flat)
            return acc.at[idx].set(self(acc.at[idx].get(), *(x[k] for x in args)))

        return lax.fori_loop(0, m, body, a)

    # -- reduceat

    def reduceat(self, a, indices, axis=0, dtype=None, out=None):
        """Reductions over the slices ``indices[i]:indices[i+1]`` along ``axis``."""
        self._binary_only("reduceat")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduceat()")
        fn = self._reduceat or self._reduceat_via_loop
        return fn(a, indices, axis=axis, dtype=dtype)

    def _reduceat_via_loop(self, a, indices, axis=0, dtype=None):
        jnp = _jnp()
        _util.check_arraylike(f"{self.__name__}.reduceat", a, indices)
        a = _util.as_operand(a)
        ind = jnp.asarray(indices)
        if a.ndim == 0:
            raise ValueError(f"reduceat: a must have 1 or more dimension, got {a.shape=}")
        if ind.ndim != 1:
            raise ValueError(f"reduceat: indices must be one-dimensional, got {ind.shape=}")
        if axis is None or isinstance(axis, (tuple, list)):
            raise ValueError("reduceat requires a single integer axis.")
        axis = _util.canonicalize_axis(axis, a.ndim)
        if dtype is not None:
            a = a.astype(dtype)
        out = jnp.take(a, ind, axis=axis)
        other = tuple(i for i in range(out.ndim) if i != axis)
        ends = jnp.append(ind, a.shape[axis])
        start = jnp.expand_dims(ends[:-1], other)
        stop = jnp.expand_dims(ends[1:], other)

        def body(i, acc):
            take = jnp.take(a, jnp.full((1,), i), axis=axis)
            return jnp.where((i > start) & (i < stop), self(acc, take), acc)

        return lax.fori_loop(0, a.shape[axis], body, out)

    # -- outer

    def outer(self, A, B, /):
        """``self(A[..., None...], B)``: the function on every pair of elements."""
        from kiln.transformations import vmap
        self._binary_only("outer")
        _util.check_arraylike(f"{self.__name__}.outer", A, B)
        jnp = _jnp()
        A, B = jnp.asarray(A), jnp.asarray(B)
        res = vmap(vmap(self, (None, 0)), (0, None))(jnp.ravel(A), jnp.ravel(B))
        return res.reshape(A.shape + B.shape)


def frompyfunc(func, /, nin, nout, *, identity=None):
    """A :class:`ufunc` from a function of scalars (vectorized with ``vmap``)."""
    return ufunc(func, nin, nout, identity=identity)


# ----------------------------------------------------------------------------------------------
# the ufunc objects


def _bool_as_int_at(op):
    def at(a, indices, b):
        jnp = _jnp()
        a = jnp.asarray(a)
        if a.dtype == np.bool_:
            a = a.astype(np.int32)
            b = jnp.asarray(b).astype(bool).astype(np.int32)
            return getattr(a.at[indices], op)(b).astype(bool)
        return getattr(a.at[indices], op)(b)
    return at


def _subtract_at(a, indices, b):
    return _jnp().asarray(a).at[indices].subtract(b)


def _sum(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
    return _jnp().sum(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial,
                      where=where)


def _prod(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
    return _jnp().prod(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial,
                       where=where)


def _minmax(name):
    def red(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        jnp = _jnp()
        out = getattr(jnp, name)(a, axis=axis, keepdims=keepdims, initial=initial, where=where)
        return out if dtype is None else out.astype(dtype)
    return red


def _logical(name):
    def red(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        jnp = _jnp()
        a = jnp.asarray(a).astype(bool)
        if name == "xor":
            # parity of the number of true entries
            n = jnp.sum(a, axis=axis, keepdims=keepdims, where=where)
            out = (n % 2) == 1
            if initial is not None:
                out = jnp.logical_xor(out, jnp.asarray(initial).astype(bool))
        else:
            fn = jnp.all if name == "and" else jnp.any
            out = fn(a, axis=axis, keepdims=keepdims, where=where)
            if initial is not None:
                comb = jnp.logical_and if name == "and" else jnp.logical_or
                out = comb(out, jnp.asarray(initial).astype(bool))
        return out if dtype is None else out.astype(dtype)
    return red


def _bitwise(name):
    prims = {"and": lax.reduce_and, "or": lax.reduce_or, "xor": lax.reduce_xor}
    ident = {"and": -1, "or": 0, "xor": 0}

    def red(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        jnp = _jnp()
        a = jnp.asarray(a)
        if not (a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"integer argument required; got dtype={a.dtype}")
        if dtype is not None:
            a = a.astype(dtype)
        axes = _util.canonicalize_axes(axis, a.ndim)
        if where is not None:
            a = jnp.where(where, a, jnp.asarray(ident[name]).astype(a.dtype))
        out = prims[name](a, axes)
        if initial is not None:
            out = getattr(jnp, f"bitwise_{name}")(out, jnp.asarray(initial).astype(a.dtype))
        if keepdims:
            out = jnp.expand_dims(out, axes)
        return out
    return red


def _logaddexp_reduce(base2):
    def red(a, axis=0, dtype=None, keepdims=False, initial=None, where=None):
        jnp = _jnp()
        (a,) = _util.promote_dtypes_inexact(_util.ensure_arraylike("logaddexp.reduce", a))
        if dtype is not None:
            a = a.astype(dtype)
        if base2:
            a = a * np.log(2)
        if where is not None:
            a = jnp.where(where, a, -np.inf)
        m = jnp.max(a, axis=axis, keepdims=True, initial=-np.inf)
        m = lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0))
        out = jnp.log(jnp.sum(jnp.exp(a - m), axis=axis, keepdims=True)) + m
        if initial is not None:
            out = jnp.logaddexp(out, jnp.asarray(initial) * (np.log(2) if base2 else 1))
        if not keepdims:
            axes = _util.canonicalize_axes(axis, get_aval(a).ndim)
            out = jnp.squeeze(out, axes)
        return out / np.log(2) if base2 else out
    return red


_SPECS = {
    "add": dict(identity=0, reduce=_sum, accumulate=lambda a, axis=0, dtype=None:
                _jnp().cumsum(a, axis=axis, dtype=dtype), at=_bool_as_int_at("add")),
    "multiply": dict(identity=1, reduce=_prod, accumulate=lambda a, axis=0, dtype=None:
                     _jnp().cumprod(a, axis=axis, dtype=dtype),
                     at=_bool_as_int_at("multiply")),
    "subtract": dict(identity=None, at=_subtract_at),
    "maximum": dict(identity=None, reduce=_minmax("max")),
    "minimum": dict(identity=None, reduce=_minmax("min")),
    "logical_and": dict(identity=True, reduce=_logical("and")),
    "logical_or": dict(identity=False, reduce=_logical("or")),
    "logical_xor": dict(identity=False, reduce=_logical("xor")),
    "bitwise_and": dict(identity=-1, reduce=_bitwise("and")),
    "bitwise_or": dict(identity=0, reduce=_bitwise("or")),
    "bitwise_xor": dict(identity=0, reduce=_bitwise("xor")),
    "logaddexp": dict(identity=-np.inf, reduce=_logaddexp_reduce(False)),
    "logaddexp2": dict(identity=-np.inf, reduce=_logaddexp_reduce(True)),
}


def _maximum(a, b):
    # float16: XLA orders -0 below +0 (NumPy keeps the first of two zeros); float32 and
    # float64 keep NumPy's tie, as lax.max does (kiln/lax/arith.py).
    if a.dtype.kind == "f" and a.dtype.itemsize == 2:
        return _max_min(np.maximum, a, b)
    return np.maximum(a, b)


def _minimum(a, b):
    if a.dtype.kind == "f" and a.dtype.itemsize == 2:
        return _max_min(np.minimum, a, b)
    return np.minimum(a, b)


# name -> (NumPy function, dtype kinds where it equals the lax op bit for bit, is comparison)
_EAGER_FAST = {
    "add": (np.add, "fiu", False), "subtract": (np.subtract, "fiu", False),
    "multiply": (np.multiply, "fiu", False),
    # XLA's max/min order -0 below +0 (kiln/lax/_half_flush.py), NumPy's keep the first.
    "maximum": (_maximum, "fiu", False), "minimum": (_minimum, "fiu", False),
    "equal": (np.equal, "fiub", True),
    "not_equal": (np.not_equal, "fiub", True), "less": (np.less, "fiu", True),
    "less_equal": (np.less_equal, "fiu", True), "greater": (np.greater, "fiu", True),
    "greater_equal": (np.greater_equal, "fiu", True),
}


def _make(name):
    fn = getattr(_ufuncs, name)
    if name == "negative":
        return ufunc(fn, 1, 1, name=name, call=fn)
    return ufunc(fn, 2, 1, name=name, call=fn, **_SPECS[name])


UFUNCS = {name: _make(name) for name in UFUNC_NAMES}
