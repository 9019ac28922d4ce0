"""``jit``: the jitted-function wrapper (``JitWrapped``), its trace caches keyed by the
function and the options that change a trace, argument checking and dispatch to the
backend; and ``make_jaxpr``.
"""
from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading as _threading
import time
import weakref
from collections.abc import Callable

import numpy as np

from kiln import _compile_log, _hijax, _traceback_util, _transfer_guard, dtypes
from kiln import _key_boundary as _kb
from kiln import tree_util as _tu
from kiln._async_dispatch import Pending as _Pending
from kiln._physical_tree import (
    tree_flatten,
    tree_unflatten,
)
from kiln._wraps import check_callable as _check_callable
from kiln._wraps import wraps as _wraps
from kiln.array import Array, make_array, to_array
from kiln.backends import cpu as _cpu
from kiln.callbacks import program_running
from kiln.config import _desc_count as _ctx_values_active
from kiln.config import config
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import ClosedJaxpr, check_jaxpr
from kiln.core.ref import AbstractRef, Ref
from kiln.core.trace import EvalTrace, Tracer, get_aval
from kiln.core.trace import current_trace as _current_trace
from kiln.distributed import _state as _dist_state
from kiln.interpreters import batching, staging
from kiln.interpreters.pjit import jit_p
from kiln.profiler import _recorder as _profiler
from kiln.shape_eval import ShapeDtypeStruct, eval_shape
from kiln.stages import Lowered, Traced
from kiln.transformations import (
    _arg_names,
    _array_types,
    _ensure_index_tuple,
    _float0_value,
    user_float0,
)

logger = logging.getLogger("kiln")


# ================================================================================================
# jit
# ================================================================================================

def _hashable_static(v, name):
    try:
        hash(v)
    except TypeError as e:
        raise ValueError(
            f"Non-hashable static arguments are not supported. An error occurred while trying "
            f"to hash an object of type {type(v)}, {v}. The error was:\n{e}\n"
            f"(static argument {name}: pass a hashable value such as a tuple, or make the "
            "argument non-static)") from None
    return v


def _extended_io(closed) -> bool:
    """Whether a jitted program takes or returns arrays of an extended dtype with rules
    (those go through ``jit_p`` and the eager trace, which handle their storage)."""
    from kiln._extended import has_rules
    return any(has_rules(a.dtype) for a in (*closed.in_avals, *closed.out_avals))


def _to_value(x):
    from kiln.errors import UnexpectedTracerError
    if isinstance(x, Tracer):
        raise UnexpectedTracerError(x)
    return to_array(x)._value


def _donated_reuse(entry, a_flat):
    """The (flat input, output) pairs whose output may be written into the donated
    input's memory on this call, or None (see ``kiln.donation.reusable``)."""
    from kiln.core.trace import _debug_checks
    if _debug_checks[0] or config.kiln_backend == "reference":
        return None     # a NaN check re-runs the program on the (intact) inputs
    from kiln import donation
    return donation.reusable(a_flat, entry.pairs) or None


class _HijaxArguments(Exception):
    """Raised while collecting a jit call's argument types: a hijax argument is present
    (the call goes through ``JitWrapped._call_hi``)."""


class _CacheEntry:
    __slots__ = ("jaxpr", "out_tree", "explain", "donated", "pairs", "ref_consts", "hi",
                 "float0_out")

    def __init__(self, jaxpr, out_tree):
        self.jaxpr = jaxpr
        self.out_tree = out_tree
        self.float0_out = any(a.dtype == dtypes.float0 for a in jaxpr.out_avals)
        self.donated = ()           # flat argument indices an output takes (donation)
        self.pairs = ()             # (flat argument, output index) for those
        self.ref_consts = ()        # closed-over mutable references (leading operands)
        self.hi = None              # hijax arguments: (number of outputs, final specs)


def _fun_src_info(wrapped) -> str:
    fun = wrapped._fun
    code = getattr(getattr(fun, "__wrapped__", fun), "__code__", None)
    name = getattr(fun, "__name__", "fun")
    if code is None:
        return name
    return f"{name} at {code.co_filename}:{code.co_firstlineno}"


def _flat_arg_names(wrapped, a_tree, n) -> list:
    """JAX's names of the flat arguments (``a``, ``args[1]``, ``x['w']``)."""
    from kiln.tree_util import keystr, tree_flatten_with_path
    try:
        params = [p.name for p in wrapped._params]
        (args, kwargs) = tree_unflatten(a_tree, list(range(n)))
        names = [None] * n
        for i, a in enumerate(args):
            base = params[i] if i < len(params) else f"args[{i}]"
            for path, leaf in tree_flatten_with_path(a)[0]:
                names[leaf] = base + keystr(path)
        for k, v in kwargs.items():
            for path, leaf in tree_flatten_with_path(v)[0]:
                names[leaf] = k + keystr(path)
        return [nm if nm is not None else f"flat index {i}" for i, nm in enumerate(names)]
    except Exception:   # noqa: BLE001 - names are only for the message
        return [f"flat index {i}" for i in range(n)]


def _check_no_aliased_ref_args(wrapped, a_flat, avals, a_tree):
    seen = {}
    for i, (x, a) in enumerate(zip(a_flat, avals)):
        if type(a) is AbstractRef:
            j = seen.setdefault(id(_referent(x)), i)
            if j != i:
                names = _flat_arg_names(wrapped, a_tree, len(a_flat))
                raise ValueError(
                    "only one reference to a mutable array may be passed as an argument to "
                    f"a function, but when tracing {_fun_src_info(wrapped)} for jit the "
                    f"mutable array reference of type {a.str_short(False)} appeared at both "
                    f"{names[j]} and {names[i]}.")


def _referent(x):
    return x


def _check_no_closed_over_ref_args(wrapped, consts, a_flat, a_tree):
    ids = {id(c) for c in consts}
    for i, x in enumerate(a_flat):
        if type(x) is Ref and id(x) in ids:
            names = _flat_arg_names(wrapped, a_tree, len(a_flat))
            raise ValueError(
                f"when tracing {_fun_src_info(wrapped)} for jit, a mutable array reference "
                f"of type {x._aval.str_short(False)} was both closed over and passed as the "
                f"argument {names[i]}")


def _raise_returned_ref(wrapped, leaf, args):
    aval = get_aval(leaf)
    origin = ""
    if any(leaf is a for a in args):
        origin = "\n\nThe returned mutable array was passed in as an argument."
    raise ValueError(
        f"function {_fun_src_info(wrapped)} traced for jit returned a mutable array "
        f"reference of type {aval.str_short(False)}, but mutable array references cannot "
        f"be returned.{origin}")


# The trace cache belongs to the function, as in JAX: ``jit(f)(x)`` written inline in a
# loop makes a new wrapper each time but traces once. Weak on ``f``, so the caches go
# when the function does; keyed by the options that change what a trace means.
_FUNCTION_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# First element of the pytree fast path's keys (the flat path's start with a bool); the
# native walk's keys (kiln_rt.tree_sig: another form of the same information) have their own.
_TREE_KEY = object()
_TREE_KEY_NATIVE = object()
_SIG_MARKERS = ("kiln.None", "kiln.tuple", "kiln.list", "kiln.dict", _Pending)
_MAIN_THREAD = _threading.main_thread().ident


# Host leaves the pytree fast path takes (converted as jit's tracing converts them).
_HOST_LEAVES = frozenset({np.ndarray, int, float, bool})


def _resolved(vals: list) -> list:
    """``vals`` with every ``Pending`` value of an asynchronous call waited for."""
    for v in vals:
        if type(v) is _Pending:
            return [w.wait() if type(w) is _Pending else w for w in vals]
    return vals
_tree_sig_fn: list = [None]

# Per x64 setting: the host leaves the native walk takes (kiln_rt.tree_sig's ``host``):
# NumPy dtype -> its canonical dtype; int/float/bool -> (dtype, weak_type) as traced.
_HOST_CANON: dict = {}


def _host_canon(x64: bool) -> dict:
    from kiln.config import config_context
    canon: dict = {}
    with config_context(jax_enable_x64=x64):
        for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                     "uint32", "uint64", "float16", "float32", "float64", "complex64",
                     "complex128"):
            dt = np.dtype(name)
            canon[dt] = np.dtype(get_aval(np.zeros((), dt)).dtype)
        for t in (int, float, bool):
            aval = get_aval(t(0))
            canon[t] = (np.dtype(aval.dtype), bool(aval.weak_type))
    _HOST_CANON[x64] = canon
    return canon


def _native_tree_sig():
    """``kiln_rt.tree_sig`` once the runtime extension is loaded (by the first native
    program), else None. Looked up, never loaded from here: plain eager use of kiln never
    imports the compiler."""
    rt = sys.modules.get("kiln.compiler.build.runtime")
    fn = rt.tree_sig() if rt is not None else None
    _tree_sig_fn[0] = fn
    return fn


def _trace_caches(fun, options) -> tuple[dict, dict]:
    try:
        per_fun = _FUNCTION_CACHES.get(fun)
        if per_fun is None:
            per_fun = _FUNCTION_CACHES[fun] = {}
    except TypeError:       # not weakly referenceable (or unhashable): a cache per wrapper
        caches = (_PrivateCache(), _PrivateCache())
        _PRIVATE_CACHES.update(caches)
        return caches
    caches = per_fun.get(options)
    if caches is None:
        caches = per_fun[options] = ({}, {})
    return caches


class _PrivateCache(dict):
    """The trace cache of a jitted function that cannot key ``_FUNCTION_CACHES``; weakly
    referenceable (and hashed by identity, unlike a dict) so that :func:`clear_caches`
    reaches it through a ``WeakSet``."""
    __slots__ = ("__weakref__",)
    __hash__ = object.__hash__
    __eq__ = object.__eq__


_PRIVATE_CACHES: weakref.WeakSet = weakref.WeakSet()


def clear_caches() -> None:
    """Clear all compilation and staging caches (JAX's ``jax.clear_caches``): every jitted
    function's traces and the compiled programs held in memory. The next call of a jitted
    function traces it again; kiln's on-disk cache of built C libraries is kept (as JAX keeps
    its persistent compilation cache), so rebuilding a program already built is quick."""
    for per_fun in list(_FUNCTION_CACHES.values()):
        for cache, fast in list(per_fun.values()):
            cache.clear()
            fast.clear()
    for cache in list(_PRIVATE_CACHES):
        cache.clear()
    from kiln import sharding
    sharding.common_devices_indices_map.cache_clear()
    from kiln.backends import cpu
    cpu.clear_cache()
    _compile_log.reset_counts()


def _clear_fast_caches(_value=None):
    """A tracing-context flag changed: the fast-path caches (keyed by argument types and
    x64 only) must not serve traces made under the old value."""
    for per_fun in list(_FUNCTION_CACHES.values()):
        for _, fast in list(per_fun.values()):
            fast.clear()


# The tracing-context flags other than x64, and flags registered as extra trace context
# (the random seed offset): the fast caches are keyed by x64 only, so they are cleared
# when one of these changes.
_CTX_NON_X64 = _compile_log.CONTEXT_FLAGS[1:] + ("jax_random_seed_offset",)
for _flag in _CTX_NON_X64:
    config.on_change(_flag, _clear_fast_caches)


def _validate_argnums(sig, argnums, what):
    """JAX's check of ``static_argnums``/``donate_argnums`` against the signature (any
    index is fine when the function takes ``*args``)."""
    n_pos = 0
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n_pos += 1
        elif p.kind is p.VAR_POSITIONAL:
            return
    if argnums and (-min(argnums) > n_pos or max(argnums) >= n_pos):
        raise ValueError(f"Jitted function has {what}={argnums}, "
                         f"but only accepts {n_pos} positional arguments.")


def _validate_argnames(sig, argnames, what):
    """JAX's check of ``static_argnames``/``donate_argnames`` against the signature."""
    valid, invalid, var_kw = set(), set(), False
    for name, p in sig.parameters.items():
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            valid.add(name)
        elif p.kind is p.VAR_KEYWORD:
            var_kw = True
        else:
            invalid.add(name)
    if bad := invalid & set(argnames):
        raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. "
                         "These are positional-only")
    if not var_kw and (bad := set(argnames) - valid):
        raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. "
                         "Function does not take these args.")


_layout_seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _alone_call(closed):
    """The program's one equation when it is a call its primitive runs by itself
    eagerly (``run_alone``: a ``shard_map`` with unreduced operands or results) on the
    program's inputs, giving its outputs; else None."""
    j = closed.jaxpr
    if len(j.eqns) != 1 or closed.consts:
        return None
    eqn = j.eqns[0]
    wants = getattr(eqn.primitive, "runs_alone", None)
    if (wants is None or list(eqn.invars) != list(j.invars)
            or list(eqn.outvars) != list(j.outvars) or not wants(eqn)):
        return None
    return eqn


def _observes_layout(closed) -> bool:
    """Whether the staged program looks at its values' layout (memoized per program)."""
    try:
        return _layout_seen[closed]
    except KeyError:
        pass
    from kiln.parallel.partition import observes_layout
    out = _layout_seen[closed] = observes_layout(closed.jaxpr)
    return out


class JitWrapped:
    """``jit(fun)``: traces once per argument signature, then runs the staged program."""

    def __init__(self, fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
                 inline, keep_unused):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._inline = inline
        try:
            sig = inspect.signature(fun)
            self._params = list(sig.parameters.values())
        except (TypeError, ValueError):
            sig, self._params = None, []
        self._sig = sig
        if sig is None and donate_argnames is not None:
            raise ValueError(f"Getting the signature of function {fun} failed. Pass "
                             "donate_argnums instead of donate_argnames.")
        both = (set((static_argnames,) if isinstance(static_argnames, str)
                    else static_argnames or ())
                & set((donate_argnames,) if isinstance(donate_argnames, str)
                      else donate_argnames or ()))
        if both:
            raise ValueError("static_argnames and donate_argnames cannot intersect. Argument "
                             f"names {both} appear in both static_argnames and "
                             "donate_argnames")
        # JAX infers static_argnums from static_argnames and back through the signature
        # only when one of them is not given (both given: each is taken as it is).
        infer = static_argnums is None or static_argnames is None
        if static_argnums is None:
            static_argnums = ()
        static_argnums = _ensure_index_tuple(static_argnums)
        if isinstance(static_argnames, str):
            static_argnames = (static_argnames,)
        static_argnames = tuple(static_argnames or ())
        if sig is not None:  # as JAX, when jit wraps the function (not at call time)
            _validate_argnums(sig, static_argnums, "static_argnums")
            _validate_argnames(sig, static_argnames, "static_argnames")
            if donate_argnums is not None:
                _validate_argnums(sig, _ensure_index_tuple(donate_argnums), "donate_argnums")
            if donate_argnames is not None:
                _validate_argnames(sig, (donate_argnames,) if isinstance(donate_argnames, str)
                                   else tuple(donate_argnames), "donate_argnames")
        nums = set(static_argnums)
        names = set(static_argnames)
        kw_pos = [p.name if p.kind == p.POSITIONAL_OR_KEYWORD else None
                  for p in self._params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for i in (static_argnums if infer else ()):
            if 0 <= i < len(kw_pos) and kw_pos[i] is not None:
                names.add(kw_pos[i])
        for nm in (static_argnames if infer else ()):
            if nm in kw_pos:
                nums.add(kw_pos.index(nm))
        self._static_argnums = tuple(sorted(nums))
        self._static_argnames = tuple(sorted(names))
        self._name = getattr(fun, "__name__", "fun")
        from kiln import donation
        self._donate_argnums, self._donate_argnames = donation.resolve_donation(
            self._params, donate_argnums, donate_argnames, self._static_argnums)
        self._donating = bool(self._donate_argnums or self._donate_argnames)
        self._cache, self._fast = _trace_caches(
            fun, (self._static_argnums, self._static_argnames, bool(inline), bool(keep_unused),
                  self._donate_argnums, self._donate_argnames))

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _split(self, args, kwargs):
        if not self._static_argnums and not self._static_argnames:
            return (), (), args, kwargs
        nargs = len(args)
        static_pos = []
        dyn_args = []
        for i, a in enumerate(args):
            if i in self._static_argnums or (i - nargs) in self._static_argnums:
                static_pos.append((i, _hashable_static(a, f"at position {i}")))
            else:
                dyn_args.append(a)
        static_kw = []
        dyn_kw = {}
        for k, v in kwargs.items():
            if k in self._static_argnames:
                static_kw.append((k, _hashable_static(v, f"'{k}'")))
            else:
                dyn_kw[k] = v
        return tuple(static_pos), tuple(sorted(static_kw)), dyn_args, dyn_kw

    def _trace(self, args, kwargs, abstract: bool = False):
        """Trace (or find in the cache) for ``args``; with ``abstract`` (``lower``/``trace``)
        a ``ShapeDtypeStruct`` stands for an array of its shape and dtype."""
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        a_flat, a_tree = tree_flatten((tuple(dyn_args), dyn_kw))
        avals = []
        for x in a_flat:
            if isinstance(x, Tracer):
                avals.append(x.aval)
            elif type(x) is Array:
                avals.append(ShapedArray(x._value.shape, x._value.dtype, x.weak_type))
            elif abstract and isinstance(x, (ShapeDtypeStruct, ShapedArray)):
                # ``lower``/``trace`` of abstract arguments: JAX takes its avals too
                avals.append(ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype),
                                         getattr(x, "weak_type", False)))
            else:
                if type(x) in _hijax.hi_types and not abstract:
                    raise _HijaxArguments
                _check_arg_jit(x, self._name, self._fun, args, kwargs)
                avals.append(get_aval(x))
                if not abstract and _transfer_guard.active() and \
                        type(_current_trace()) is EvalTrace:
                    _transfer_guard.host_to_device(avals[-1])    # a host argument
        arg_types = _explicit_arg_types(a_flat)
        key = (a_tree, tuple(avals), static_pos, static_kw, _compile_log.trace_context())
        if arg_types is not None:
            key = key + (arg_types,)
        entry = self._cache.get(key)
        tconsts = []
        if any(type(a) is AbstractRef for a in avals):
            _check_no_aliased_ref_args(self, a_flat, avals, a_tree)
        if entry is not None and entry.ref_consts:
            tconsts = list(entry.ref_consts)
        if entry is None:
            if config.jax_explain_cache_misses:
                _compile_log.explain_miss(self, key)
            t_start = time.perf_counter()
            store = {}
            nargs = len(args)

            def flat_fun(*xs):
                if arg_types is not None:
                    _record_arg_types(xs, arg_types)
                d_args, d_kw = tree_unflatten(a_tree, list(xs))
                full = []
                it = iter(d_args)
                sp = dict(static_pos)
                for i in range(nargs):
                    full.append(sp[i] if i in sp else next(it))
                kw = dict(d_kw)
                kw.update(dict(static_kw))
                out = self._fun(*full, **kw)
                leaves, tree = tree_flatten(out)
                for leaf in leaves:
                    if not isinstance(leaf, _array_types):
                        raise TypeError(f"function {self._name} traced for jit returned a value "
                                        f"of type {type(leaf)}, which is not a valid JAX type")
                    if isinstance(leaf, Ref):
                        _raise_returned_ref(self, leaf, xs)
                store["tree"] = tree
                return leaves

            with _profiler.span(f"trace {self._name}", "trace", function=self._name):
                jaxpr, consts = staging.trace_to_jaxpr(flat_fun, avals)
            _compile_log.log_trace(self._name, time.perf_counter() - t_start)
            if config.jax_enable_checks:
                check_jaxpr(jaxpr)
            closed, tconsts = staging.split_concrete_consts(jaxpr, consts)
            _profiler.note_source(closed, self._fun, self._name)
            entry = _CacheEntry(closed, store["tree"])
            if tconsts and all(type(c) is Ref for c in tconsts):
                # Closed-over references are operands of the call; they stay the same
                # objects from call to call, so the trace is cached with them.
                _check_no_closed_over_ref_args(self, tconsts, a_flat, a_tree)
                entry.ref_consts = tuple(tconsts)
            if self._donating:
                from kiln import donation
                flags = self._donated_flags(args, kwargs, static_pos, dyn_kw)
                entry.donated, unusable = donation.plan(avals, closed.out_avals, flags)
                entry.pairs = donation.pair_outputs(avals, closed.out_avals, entry.donated)
                donation.warn_unusable(unusable)
            if not tconsts or entry.ref_consts:
                self._cache[key] = entry
                _compile_log.note_trace(self, key)
        return entry, tconsts, a_flat, a_tree

    def _call_inline(self, args, kwargs):
        """``jit(f, inline=True)`` under a jaxpr trace: ``f`` runs on the outer trace, so its
        equations land in the enclosing jaxpr. Its dynamic arguments are still arrays, as in
        a traced call (a Python scalar is a weak Array, a NumPy value a canonical one), and
        its outputs must be JAX types."""
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        a_flat, a_tree = tree_flatten((tuple(dyn_args), dyn_kw))
        conv = []
        for x in a_flat:
            if type(x) in _inline_convert:
                _check_arg_jit(x, self._name)
                x = _to_array(x)
            conv.append(x)
        d_args, d_kw = tree_unflatten(a_tree, conv)
        it = iter(d_args)
        sp = dict(static_pos)
        full = [sp[i] if i in sp else next(it) for i in range(len(args))]
        out = self._fun(*full, **dict(d_kw), **dict(static_kw))
        for leaf in tree_flatten(out)[0]:
            if not isinstance(leaf, _array_types):
                raise TypeError(f"function {self._name} traced for jit returned a value of type "
                                f"{type(leaf)}, which is not a valid JAX type")
        return out

    def _donated_flags(self, args, kwargs, static_pos, dyn_kw) -> list[bool]:
        """Per flat dynamic argument leaf: whether it is donated."""
        static = {i for i, _ in static_pos}
        flags = []
        for i, a in enumerate(args):
            if i in static:
                continue
            d = i in self._donate_argnums or (i - len(args)) in self._donate_argnums
            flags += [d] * len(tree_flatten(a)[0])
        for k in sorted(dyn_kw):
            flags += [k in self._donate_argnames] * len(tree_flatten(dyn_kw[k])[0])
        return flags

    def __call__(self, *args, **kwargs):
        # The API boundary of jit, inline: a wrapper frame would cost more than the
        # try, which is free on the success path (see kiln/_traceback_util.py).
        try:
            if config.jax_disable_jit:
                return self._fun(*args, **kwargs)
            if _dist_state["process_count"] > 1 and _spans_processes(args, kwargs):
                # global arrays of several processes: run the function eagerly (its
                # shard_maps and sharded jits are SPMD calls; kiln.parallel.global_array)
                return self._fun(*args, **kwargs)
            # Fast path: concrete Array arguments only, outside any transformation: one dict
            # lookup, then straight to the backend (no pytree flattening, no bind).
            # (Not in a thread with a context value of a tracing-context flag other than
            # x64: the fast caches are keyed by x64 only, and shared by all threads.)
            fast_ok = (not (_ctx_values_active and config.overrides_any(_CTX_NON_X64))
                       and type(_current_trace()) is EvalTrace)
            if not kwargs and not self._donating and fast_ok:
                key = None
                for a in args:
                    if type(a) is not Array:
                        break
                else:       # (a raised AttributeError would cost more than this loop)
                    key = (config.jax_enable_x64,) + tuple(
                        [(a._v.shape, a._v.dtype, a.weak_type) for a in args])
                hit = self._fast.get(key) if key is not None else None
                if hit is not None:
                    return self._run_hit(hit, [a._v for a in args], args, kwargs)
            else:
                key = None
            tree_key = None
            if key is None and fast_ok:
                # Fast path for pytrees of concrete Arrays (static arguments allowed, no
                # donated leaves): the same lookup keyed by the tree and leaf types.
                tree_key, vals, borrowed = self._tree_key(args, kwargs)
                if tree_key is not None:
                    try:
                        hit = self._fast.get(tree_key)
                    except TypeError:       # an unhashable static: _trace says so
                        tree_key = hit = None
                    if hit is not None:
                        return self._run_hit(hit, vals, args, kwargs, borrowed)
            if self._inline and isinstance(_current_trace(), staging.JaxprTrace):
                return self._call_inline(args, kwargs)
            try:
                entry, tconsts, a_flat, _ = self._trace(args, kwargs)
            except _HijaxArguments:
                return self._call_hi(args, kwargs)
            layout = _observes_layout(entry.jaxpr)
            alone = (_alone_call(entry.jaxpr)
                     if not tconsts and type(_current_trace()) is EvalTrace else None)
            if alone is not None:
                # the program is one shard_map over unreduced values: run per device as
                # the eager shard_map is (each device's partials kept)
                outs = alone.primitive.run_alone(alone, a_flat)
                _lay_out(outs, _out_layout(entry.jaxpr), a_flat)
                return tree_unflatten(entry.out_tree, outs)
            if layout and not tconsts and type(_current_trace()) is EvalTrace:
                # The program looks at its values' layout (a partitioned callback,
                # inspect_array_sharding): over split arguments it runs partitioned.
                from kiln.parallel.placement import ShardedJit
                done, out = ShardedJit(self, None, None)._spmd_call(args, kwargs)
                if done:
                    return out
            reuse = None
            if entry.pairs and not tconsts and type(_current_trace()) is EvalTrace \
                    and not _extended_io(entry.jaxpr):
                reuse = _donated_reuse(entry, a_flat)
            if reuse:
                # Outputs written into donated inputs' memory (kiln.donation).
                vals = [a._value if type(a) is Array else _to_value(a) for a in a_flat]
                outs = [make_array(o, a.weak_type) for o, a in
                        zip(_cpu.run(entry.jaxpr, vals, self._name, reuse=reuse),
                            entry.jaxpr.out_avals)]
                del vals
            else:
                try:
                    outs = jit_p.bind(*tconsts, *a_flat, jaxpr=entry.jaxpr, name=self._name)
                except FloatingPointError as e:
                    _rerun_deoptimized(self, e, args, kwargs)
            if entry.donated and type(_current_trace()) is EvalTrace:
                from kiln import donation
                donation.delete_donated(a_flat, entry.donated)
            if layout:
                pass        # not on the fast paths: every call checks the layouts
            elif (key is not None and not tconsts and not self._static_argnums
                    and all(type(a) is Array for a in args) and len(a_flat) == len(args)
                    and len(self._fast) < 64 and not _extended_io(entry.jaxpr)):
                self._fast[key] = (entry.jaxpr, entry.out_tree,
                                   [None if a.dtype == dtypes.float0 else a.weak_type
                                    for a in entry.jaxpr.out_avals], [],
                                   _out_layout(entry.jaxpr))
            elif (tree_key is not None and not tconsts and len(self._fast) < 64
                    and not _extended_io(entry.jaxpr)):
                self._fast[tree_key] = (entry.jaxpr, entry.out_tree,
                                        [None if a.dtype == dtypes.float0 else a.weak_type
                                         for a in entry.jaxpr.out_avals], [],
                                        _out_layout(entry.jaxpr))
            if entry.float0_out and type(_current_trace()) is EvalTrace:
                outs = user_float0(outs)
            if type(_current_trace()) is EvalTrace:
                _lay_out(outs, _out_layout(entry.jaxpr), a_flat)
            return tree_unflatten(entry.out_tree, outs)
        except Exception as e:
            _traceback_util.filter_exception(e)
            if _traceback_util._BARE_RAISE_KEEPS_OLD_TB:
                raise e  # noqa: B904  (Python 3.10)
            raise

    def _call_hi(self, args, kwargs):
        """A call with hijax arguments (Flax NNX's ``HijaxVariable``): they are passed as
        their low-level values, the traced function gets new hijax values over the traced
        ones, and mutable ones get their final values back after the call (``kiln._hijax``)."""
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        a_flat, a_tree = tree_flatten((tuple(dyn_args), dyn_kw))
        specs, lo_vals = _hijax.lower_args(a_flat)
        lo_flat, lo_tree = tree_flatten(lo_vals)    # (key arrays cross as their data)
        lo_avals = [get_aval(x) for x in lo_flat]
        key = ("hijax", a_tree, tuple(lo_avals), tuple(None if s is None else s.key()
                                                       for s in specs),
               static_pos, static_kw, _compile_log.trace_context())
        try:
            entry = self._cache.get(key)
        except TypeError:       # unhashable quasi-dynamic data: no caching
            key, entry = None, None
        tconsts = []
        if entry is None:
            store = {}
            nargs = len(args)

            def flat_fun(*xs):
                inner = _hijax.raise_args(specs, tree_unflatten(lo_tree, list(xs)))
                d_args, d_kw = tree_unflatten(a_tree, inner)
                full, it, sp = [], iter(d_args), dict(static_pos)
                for i in range(nargs):
                    full.append(sp[i] if i in sp else next(it))
                kw = dict(d_kw)
                kw.update(dict(static_kw))
                out = self._fun(*full, **kw)
                leaves, tree = tree_flatten(out)
                for leaf in leaves:
                    if _hijax.is_hi(leaf):
                        raise NotImplementedError(
                            f"kiln: function {self._name} traced for jit returned a hijax "
                            "value; returning hijax values from jit is not supported")
                    if not isinstance(leaf, _array_types):
                        raise TypeError(f"function {self._name} traced for jit returned a "
                                        f"value of type {type(leaf)}, which is not a valid "
                                        "JAX type")
                finals, extra = [], []
                for s, obj in zip(specs, inner):
                    f = None if s is None else _hijax.final(s, obj)
                    finals.append(None if f is None else (f[0], len(f[1])))
                    if f is not None:
                        extra.extend(f[1])
                extra, store["extra_tree"] = tree_flatten(extra)
                store["tree"], store["n_out"], store["finals"] = tree, len(leaves), finals
                return leaves + extra

            jaxpr, consts = staging.trace_to_jaxpr(flat_fun, lo_avals)
            closed, tconsts = staging.split_concrete_consts(jaxpr, consts)
            entry = _CacheEntry(closed, store["tree"])
            entry.hi = (store["n_out"], store["finals"], store["extra_tree"])
            if key is not None and not tconsts:
                self._cache[key] = entry
        n_out, finals, extra_tree = entry.hi
        outs = jit_p.bind(*tconsts, *lo_flat, jaxpr=entry.jaxpr, name=self._name)
        it = iter(tree_unflatten(extra_tree, outs[n_out:]))
        for s, obj, f in zip(specs, a_flat, finals):
            if f is not None:
                _hijax.write_back(s, obj, f[0], [next(it) for _ in range(f[1])])
        return tree_unflatten(entry.out_tree, outs[:n_out])

    def _run_hit(self, hit, vals, args, kwargs, borrowed=None):
        """Run a fast-path cache entry on the flat argument values (raw: a value may be
        a ``Pending`` output of an earlier asynchronous call). ``borrowed``: indices of
        values that are the caller's own NumPy arrays (``_tree_key``), copied unless the
        program reads them before the call returns and no output shares their memory."""
        closed, out_tree, weaks, exe, layout = hit
        e = exe[0].exe if exe else None
        if e is not None and e.no_host_code and _cpu.plain_mode():
            # native code only (no callback can run: no program_running mark needed)
            outs = None
            if (e._heavy and layout is None and not _sharding_mod._mesh_stack
                    and config.jax_cpu_enable_async_dispatch
                    and _threading.get_ident() == _MAIN_THREAD and None not in weaks):
                outs = _cpu.submit_ready(exe[0], closed, vals, borrowed)
            if outs is None:
                outs = _cpu.run_ready(exe[0], closed, _resolved(vals), self._name, borrowed)
        else:
            outs = self._run_hit_marked(closed, weaks, exe, layout, vals, args, kwargs,
                                        borrowed)
        outs = [make_array(o, w) if w is not None else _float0_value(o)
                for o, w in zip(outs, weaks)]
        if layout is not None or _sharding_mod._mesh_stack:
            _lay_out(outs, layout, args)
        return tree_unflatten(out_tree, outs)

    def _run_hit_marked(self, closed, weaks, exe, layout, vals, args, kwargs, borrowed):
        """``_run_hit``'s outputs for a program that may run Python code (host islands,
        the reference backend, an evicted executable): marked as a running program."""
        with program_running():
            if exe and _cpu.plain_mode():
                # the cache entry, not the executable: an evicted one reloads (cpu LRU)
                outs = None
                if (layout is None and not _sharding_mod._mesh_stack
                        and config.jax_cpu_enable_async_dispatch
                        and _threading.get_ident() == _MAIN_THREAD and None not in weaks):
                    outs = _cpu.submit_ready(exe[0], closed, vals, borrowed)
                if outs is None:
                    outs = _cpu.run_ready(exe[0], closed, _resolved(vals), self._name,
                                          borrowed)
            else:
                if borrowed:
                    vals = _cpu.owned(vals, borrowed)
                vals = _resolved(vals)
                try:
                    outs = _cpu.run(closed, vals, self._name)
                except FloatingPointError as e:
                    _rerun_deoptimized(self, e, args, kwargs)
                ready = _cpu.ready_entry(closed)
                if ready is not None and not exe:
                    exe.append(ready)
        return outs

    def _tree_key(self, args, kwargs):
        """``(key, values, borrowed)`` of the pytree fast path, or ``(None, None, None)``
        when the call cannot take it (a leaf that is neither a concrete Array nor a NumPy
        array or Python scalar jit takes, or a donated leaf). ``values``: the leaves' raw
        values (an Array's ``_v``; a host leaf converted as tracing converts it);
        ``borrowed``: indices of values that are the caller's NumPy arrays themselves
        (already of their canonical dtype, C-contiguous and aligned), which the call
        copies only when the program may run after it returns (``_run_hit``)."""
        if self._donating and self._donates_leaves(args, kwargs):
            return None, None, None
        static_pos, static_kw, dyn_args, dyn_kw = self._split(args, kwargs)
        tree = (tuple(dyn_args), dyn_kw)
        walk = _tree_sig_fn[0] or _native_tree_sig()
        x64 = config.jax_enable_x64
        if walk is not None:
            guard = config.jax_transfer_guard_host_to_device        # _transfer_guard.active
            if guard is None:
                guard = config.jax_transfer_guard
            host = (None if guard and guard != "allow"
                    else _HOST_CANON.get(x64) or _host_canon(x64))
            r = walk(tree, Array, _tu.native_walk_types, _SIG_MARKERS, host)
            if r is not None:
                return (_TREE_KEY_NATIVE, x64, r[0], static_pos, static_kw), r[1], r[2]
        leaves, a_tree = tree_flatten(tree)
        sig = []
        vals = []
        borrowed = []
        for a in leaves:
            t = type(a)
            if t is Array:
                v = a._v
                sig.append((v.shape, v.dtype, a.weak_type))
            elif t in _HOST_LEAVES:
                # A host value (a NumPy batch, a Python step counter): its abstract value
                # as tracing takes it, and its data in that dtype (the caller's array
                # itself when it already is so, else a copy).
                if _transfer_guard.active() or (t is int and not -2**31 <= a < 2**31):
                    return None, None, None
                aval = get_aval(a)
                if t is np.ndarray:
                    if a.dtype.kind not in "biufc":
                        return None, None, None
                    fl = a.flags
                    if a.dtype == aval.dtype and fl.c_contiguous and fl.aligned:
                        v = a
                        borrowed.append(len(vals))
                    else:
                        v = np.array(a, dtype=aval.dtype, order="C")
                else:
                    v = np.array(a, dtype=aval.dtype)
                sig.append((aval.shape, aval.dtype, aval.weak_type))
            else:
                return None, None, None
            vals.append(v)
        return (_TREE_KEY, x64, a_tree, tuple(sig), static_pos, static_kw), vals, borrowed

    def _donates_leaves(self, args, kwargs) -> bool:
        n = len(args)
        for i, a in enumerate(args):
            if (i in self._donate_argnums or (i - n) in self._donate_argnums) and \
                    tree_flatten(a)[0]:
                return True
        return any(k in self._donate_argnames and tree_flatten(v)[0]
                   for k, v in kwargs.items())

    @_traceback_util.api_boundary
    def lower(self, *args, **kwargs) -> Lowered:
        args, kwargs = _kb.specs_to_keys((args, kwargs))
        entry, tconsts, _, a_tree = self._trace(args, kwargs, abstract=True)
        if tconsts:
            raise TypeError("jit(f).lower() of a function closing over traced values")
        return Lowered(entry.jaxpr, a_tree, entry.out_tree, self._name,
                       donated=entry.donated)

    @_traceback_util.api_boundary
    def trace(self, *args, **kwargs) -> Traced:
        lowered = self.lower(*args, **kwargs)
        return Traced(lowered.jaxpr, lowered)

    def eval_shape(self, *args, **kwargs):
        return eval_shape(self, *args, **kwargs)

    def clear_cache(self):
        self._cache.clear()
        self._fast.clear()

    def _cache_size(self):
        return len(self._cache)


_traceback_util.register_boundary(JitWrapped.__call__)


def _spans_processes(args, kwargs) -> bool:
    """Whether a jit argument is a global array over several processes (eager calls only)."""
    if type(_current_trace()) is not EvalTrace:
        return False
    from kiln.parallel.global_array import any_spans
    return any_spans(tree_flatten((args, kwargs))[0])


def _rerun_deoptimized(wrapped: JitWrapped, err: FloatingPointError, args, kwargs):
    """``jax_debug_nans``/``jax_debug_infs``: the jitted call raised ``err`` (a NaN/Inf in
    its outputs, located op by op on the reference backend). As JAX does, say so and call
    the Python function again without this ``jit``, so that the error is raised again by
    the operation itself, with the user's frames in the traceback; raise that error (or
    ``err`` when the de-optimized call runs clean)."""
    if getattr(err, "_kiln_deoptimized", False) or not (config.jax_debug_nans
                                                         or config.jax_debug_infs):
        raise err
    print("Invalid nan value encountered in the output of a jax.jit function. Calling the "
          "de-optimized version.")
    try:
        wrapped._fun(*args, **kwargs)
    except FloatingPointError as e2:
        e2._kiln_deoptimized = True
        raise e2 from None
    err._kiln_deoptimized = True
    raise err


# Argument types an inlined jit converts to Arrays (Python scalars weak, NumPy canonical).
_inline_convert = frozenset([bool, int, float, complex, np.ndarray]) | frozenset(
    np.sctypeDict.values())


def _to_array(x):
    return to_array(x)


def _check_arg_jit(x, name, fun=None, args=(), kwargs=None):
    if not isinstance(x, _array_types):
        path = _arg_path(x, fun, args, kwargs or {}) if fun is not None else repr(x)
        raise TypeError(f"Error interpreting argument to {name} as an abstract array. The "
                        f"problematic value is of type {type(x)} and was passed to the function "
                        f"at path {path}.\nThis typically means that a jit-wrapped function was "
                        "called with a non-array argument, and this argument was not marked as "
                        "static using the static_argnums or static_argnames parameters of jit.")


def _arg_path(leaf, fun, args, kwargs) -> str:
    """Where ``leaf`` sits in a call's arguments, as JAX names it: the parameter's name
    followed by the key path inside it (``m.activation``, ``b['k'][1]``)."""
    from kiln.tree_util import keystr, tree_flatten_with_path
    names = _arg_names(fun, len(args))
    for group, tree in ((0, tuple(args)), (1, kwargs)):
        for path, x in tree_flatten_with_path(tree)[0]:
            if x is leaf and path:
                head = path[0]
                first = (names[head.idx] if group == 0 else str(head.key))
                return first + keystr(tuple(path[1:]))
    return repr(leaf)


def _explicit_arg_types(flat) -> tuple | None:
    """The shardings of the arguments laid out over a mesh with ``Explicit`` axes (their
    types' shardings, JAX's), or None when there is none: traced arguments carry them
    (``placement.arg_type_sharding``), e.g. for ``shard_map``'s inferred ``in_specs``."""
    from kiln.parallel.placement import arg_type_sharding
    out = [arg_type_sharding(x) if type(x) is Array or isinstance(x, Tracer) else None
           for x in flat]
    return tuple(out) if any(o is not None for o in out) else None


def _record_arg_types(xs, arg_types) -> None:
    from kiln.parallel.placement import record_arg_type
    for x, t in zip(xs, arg_types):
        if t is not None:
            record_arg_type(x, t)


def _out_layout(closed) -> list | None:
    """The layout of each output of a jitted program that ends in a sharding constraint
    (``with_sharding_constraint``, or the outputs of a ``shard_map``): that
    ``NamedSharding`` (``None`` for the others; an ``AbstractMesh`` one is resolved at
    call time, ``_lay_out``); ``None`` when there is none. As in JAX, such an output is
    laid out as constrained. Computed once per traced program."""
    try:
        return _OUT_LAYOUTS[closed]
    except (KeyError, TypeError):
        pass
    out = _scan_out_layout(closed)
    try:
        _OUT_LAYOUTS[closed] = out
    except TypeError:
        pass
    return out


_OUT_LAYOUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _scan_out_layout(closed) -> list | None:
    from kiln.sharding import AbstractMesh, Mesh, NamedSharding
    made = {}
    for eqn in closed.jaxpr.eqns:
        if eqn.primitive.name == "sharding_constraint":
            sh = eqn.params.get("sharding")
            if isinstance(sh, NamedSharding) and type(sh.mesh) in (Mesh, AbstractMesh):
                made[id(eqn.outvars[0])] = sh
        elif (eqn.primitive.name in ("jit", "pjit") and "jaxpr" in eqn.params
              or hasattr(eqn.primitive, "expand")):
            # a nested jit's outputs laid out by its own constraints (a shard_map's by
            # those of its expansion: its out_specs)
            inner = (eqn.primitive.expand(eqn) if hasattr(eqn.primitive, "expand")
                     else eqn.params["jaxpr"])
            if hasattr(inner, "jaxpr"):
                for v, sh in zip(eqn.outvars, _scan_out_layout(inner) or ()):
                    if sh is not None:
                        made[id(v)] = sh
    out = [made.get(id(v)) for v in closed.jaxpr.outvars]
    for k, v in enumerate(closed.jaxpr.outvars):
        # an output whose type has a sharding (JAX's explicit mode) is laid out as it says
        t = getattr(getattr(v, "aval", None), "_tsh", None)
        if out[k] is None and t is not None and not t.mesh.empty:
            out[k] = t
    return out if any(s is not None for s in out) else None


def _lay_out(outs, layout, args) -> None:
    """Set the outputs' layouts; a sharding over an ``AbstractMesh`` is resolved against
    the concrete mesh of an argument's sharding (or the mesh context) with its axes.
    Under a mesh context with ``Explicit`` axes a scalar output with no layout of its own
    is replicated over that mesh (its type's sharding, ``P()``, as JAX's)."""
    from kiln.sharding import _mesh_stack
    if _mesh_stack:
        _lay_out_scalars(outs, layout)
    if layout is None:
        return
    from kiln.sharding import AbstractMesh, NamedSharding, context_mesh
    for o, sh in zip(outs, layout):
        if sh is None or type(o) is not Array:
            continue
        if isinstance(sh.mesh, AbstractMesh):
            am = sh.mesh
            meshes = [getattr(a, "_sharding", None) for a in tree_flatten(args)[0]]
            meshes = [m.mesh for m in meshes if isinstance(m, NamedSharding)]
            meshes.append(context_mesh())
            found = [m for m in meshes if m is not None and not isinstance(m, AbstractMesh)
                     and tuple(m.axis_names) == tuple(am.axis_names)
                     and tuple(m.axis_sizes) == tuple(am.axis_sizes)]
            if not found:
                continue
            sh = NamedSharding(found[0], sh.spec)
        o._sharding = sh


from kiln import sharding as _sharding_mod  # noqa: E402


def _lay_out_scalars(outs, layout) -> None:
    from kiln.sharding import AxisType, NamedSharding, PartitionSpec, context_mesh
    mesh = context_mesh()
    if mesh is None or AxisType.Explicit not in tuple(mesh.axis_types or ()):
        return
    for k, o in enumerate(outs):
        if (type(o) is Array and not o._value.shape and (layout is None or layout[k] is None)
                and getattr(o, "_sharding", None) is None):
            o._sharding = NamedSharding(mesh, PartitionSpec())


def _drop_unspecified(shardings):
    """``shardings`` with JAX's ``UNSPECIFIED`` leaves (``kiln.sharding.UNSPECIFIED``) made
    ``None``, which means the same in ``jit``."""
    from kiln.sharding import UnspecifiedValue
    if isinstance(shardings, UnspecifiedValue):
        return None
    if isinstance(shardings, (tuple, list)):
        return type(shardings)(_drop_unspecified(s) for s in shardings)
    if isinstance(shardings, dict):
        return {k: _drop_unspecified(v) for k, v in shardings.items()}
    return shardings


def jit(fun: Callable | None = None, *, in_shardings=None, out_shardings=None,
        static_argnums=None, static_argnames=None, donate_argnums=None, donate_argnames=None,
        keep_unused: bool = False, device=None, backend=None, inline: bool = False,
        abstracted_axes=None, compiler_options=None):
    """Compile ``fun``: trace it to a jaxpr once per argument signature and run that.

    ``static_argnums``/``static_argnames`` mark arguments that are Python values baked
    into the trace (they must be hashable). ``donate_argnums`` is accepted.
    """
    if fun is None:
        return lambda f: jit(f, in_shardings=in_shardings, out_shardings=out_shardings,
                             static_argnums=static_argnums, static_argnames=static_argnames,
                             donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                             keep_unused=keep_unused, inline=inline)
    _check_callable(fun)
    jitted = JitWrapped(fun, static_argnums, static_argnames, donate_argnums, donate_argnames,
                        inline, keep_unused)
    in_shardings = _drop_unspecified(in_shardings)
    out_shardings = _drop_unspecified(out_shardings)
    if in_shardings is not None or out_shardings is not None:
        from kiln.parallel.placement import ShardedJit
        return ShardedJit(jitted, in_shardings, out_shardings)
    return jitted


@_traceback_util.api_boundary
def make_jaxpr(fun: Callable, static_argnums=(), axis_env=None, return_shape: bool = False,
               abstracted_axes=None) -> Callable:
    """Returns a function that gives the ClosedJaxpr of ``fun`` for given example args."""
    static_argnums = _ensure_index_tuple(static_argnums)

    @_wraps(fun)
    @_traceback_util.api_boundary
    def make(*args, **kwargs):
        dyn = [a for i, a in enumerate(args) if i not in static_argnums]
        a_flat, a_tree = tree_flatten((tuple(dyn), kwargs))
        for x in a_flat:
            if not isinstance(x, ShapeDtypeStruct):
                _check_arg_jit(x, repr(fun), fun, args, kwargs)
        avals = [x.aval if isinstance(x, ShapeDtypeStruct) else get_aval(x) for x in a_flat]
        store = {}

        def flat_fun(*xs):
            d_args, d_kw = tree_unflatten(a_tree, list(xs))
            it = iter(d_args)
            full = [a if i in static_argnums else next(it) for i, a in enumerate(args)]
            out = fun(*full, **d_kw)
            leaves, tree = tree_flatten(out)
            store["tree"] = tree
            return leaves

        if axis_env:
            batching.axis_env.extend(axis_env)
        try:
            jaxpr, consts = staging.trace_to_jaxpr(flat_fun, avals)
            if config.jax_enable_checks:    # collectives check their axes are bound
                check_jaxpr(jaxpr)
        finally:
            for _ in axis_env or ():
                batching.axis_env.pop()
        closed = ClosedJaxpr(jaxpr, consts)
        if return_shape:
            shapes = tree_unflatten(store["tree"], [ShapeDtypeStruct(a.shape, a.dtype,
                                                                     weak_type=a.weak_type)
                                                    for a in jaxpr.out_avals])
            return closed, shapes
        return closed

    # Named as in JAX: ``make_jaxpr(f)``.
    if hasattr(fun, "__qualname__"):
        make.__qualname__ = f"make_jaxpr({fun.__qualname__})"
    if hasattr(fun, "__name__"):
        make.__name__ = f"make_jaxpr({fun.__name__})"
    return make


def _eager_jit_layout(outs, args, params) -> None:
    """An eager application of a ``jit`` equation (e.g. a transposed ``jit`` run by an
    eager ``grad``) whose outputs end in sharding constraints: the outputs are laid out
    as those say (as a ``jit`` call's). Installed here, not in ``kiln.interpreters.pjit``:
    the low layer holds the hook, this module the layout rules."""
    layout = _out_layout(params["jaxpr"])
    if layout is not None:
        _lay_out(outs, layout, args)


jit_p.eager_layout = _eager_jit_layout
