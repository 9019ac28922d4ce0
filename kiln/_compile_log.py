"""Compile visibility: what ``jax_log_compiles``, ``jax_explain_cache_misses`` and
``kiln_warn_retrace`` report about ``jit``'s trace cache.

* ``log_trace(name, seconds)``: ``Finished tracing f for jit in 0.0012 sec`` on the
  ``kiln`` logger (WARNING under ``jax_log_compiles``, DEBUG otherwise, as JAX's
  ``jax._src.dispatch`` messages); the compiler's messages are in ``kiln.backends.cpu``.
* ``explain_miss(wrapped, key)``: JAX's ``TRACING CACHE MISS at file:line:col (fn):``
  explanation, comparing the new cache key with every key the function was traced for
  and describing the closest one (tracing context, then argument pytree, then argument
  types: shape, dtype and weak type; static argument values appear in the pytree, as in
  JAX).
* ``note_trace(wrapped, key)``: counts the traces of each function (by its code, so a
  ``jit(lambda ...)`` re-created in a loop counts too) and warns once, with
  :class:`RetraceWarning`, when the count passes ``kiln_retrace_warning_threshold``; only
  with ``kiln_warn_retrace`` on (off by default: JAX emits no such warning).

A ``jit`` cache key is ``(input treedef, avals, static positional args, static keyword
args, tracing context)`` (``kiln.jitting.JitWrapped._trace``); everything here is derived from
keys, so nothing is recorded while the flags are off.
"""
from __future__ import annotations

import logging
import os
import warnings

from kiln import _physical_tree as tree_util
from kiln.config import config
from kiln.core.source_info import current as _current_source

logger = logging.getLogger("kiln")

# The flags that change what a trace means (JAX's "trace context" among kiln's flags), in
# the order of the context tuple that ends each cache key.
CONTEXT_FLAGS = ("jax_enable_x64", "jax_numpy_dtype_promotion", "jax_numpy_rank_promotion",
                 "jax_default_matmul_precision", "jax_threefry_partitionable",
                 "jax_default_prng_impl", "jax_explicit_x64_dtypes", "jax_auto_pcast",
                 "jax_remove_size_one_mesh_axis_from_type", "jax_error_checking_behavior_nan",
                 "jax_error_checking_behavior_divide", "jax_error_checking_behavior_oob")


# Other state that changes what a trace means, registered by the modules that own it:
# ``(name, fn)``; ``fn()`` is a hashable value (e.g. checkify's "functionalizing" flag).
_extra_context: list = []


def register_trace_context(name: str, fn) -> None:
    """Make ``fn()`` part of the tracing context (so of every ``jit`` cache key)."""
    _extra_context.append((name, fn))


def trace_context() -> tuple:
    """The current values of :data:`CONTEXT_FLAGS` and of the registered extra context
    (part of every ``jit`` cache key)."""
    c = config
    base = (c.jax_enable_x64, c.jax_numpy_dtype_promotion, c.jax_numpy_rank_promotion,
            c.jax_default_matmul_precision, c.jax_threefry_partitionable,
            c.jax_default_prng_impl, c.jax_explicit_x64_dtypes, c.jax_auto_pcast,
            c.jax_remove_size_one_mesh_axis_from_type, c.jax_error_checking_behavior_nan,
            c.jax_error_checking_behavior_divide, c.jax_error_checking_behavior_oob)
    if _extra_context:
        return base + tuple([fn() for _, fn in _extra_context])
    return base


class RetraceWarning(UserWarning):
    """A jitted function was traced more times than ``kiln_retrace_warning_threshold``."""


# ----------------------------------------------------------------------------------------------
# jax_log_compiles

def log_trace(name: str, seconds: float) -> None:
    """Log the time ``jit`` spent tracing ``name`` (JAX's wording)."""
    level = logging.WARNING if config.jax_log_compiles else logging.DEBUG
    if logger.isEnabledFor(level):
        logger.log(level, "Finished tracing %s for jit in %s sec", name, seconds)


# ----------------------------------------------------------------------------------------------
# Rebuilding JAX's view of a cache key: the (args, kwargs) pytree with static arguments in
# place, the name of each dynamic leaf, and the leaf types.

class Static:
    """A static argument's place in the argument pytree (its value is the node's
    metadata, so a changed value is a metadata difference, as in JAX)."""

    __slots__ = ("val",)

    def __init__(self, val):
        self.val = val

    def __eq__(self, other):
        if type(other) is not Static:
            return NotImplemented
        try:
            return bool(self.val == other.val)
        except Exception:      # noqa: BLE001 - values without a usable == differ
            return False

    def __hash__(self):
        return hash(self.val)

    def __repr__(self):
        return f"Static(val={self.val!r})"


tree_util.register_pytree_node(Static, lambda s: ((), s), lambda aux, _: aux)

_LEAF = object()


def _key_parts(key):
    a_tree, avals, static_pos, static_kw = key[:4]
    ctx = key[4] if len(key) > 4 else ()
    return a_tree, avals, static_pos, static_kw, ctx


def _full_tree(key):
    """``(args_tuple, kwargs_dict)`` of the call the key stands for: dynamic leaves are a
    placeholder, static arguments :class:`Static` nodes."""
    a_tree, _, static_pos, static_kw, _ = _key_parts(key)
    dyn_args, dyn_kw = tree_util.tree_unflatten(a_tree, [_LEAF] * a_tree.num_leaves)
    sp = dict(static_pos)
    it = iter(dyn_args)
    args = tuple(Static(sp[i]) if i in sp else next(it)
                 for i in range(len(dyn_args) + len(sp)))
    kwargs = dict(dyn_kw)
    kwargs.update({k: Static(v) for k, v in static_kw})
    return args, kwargs


def _leaf_names(wrapped, key) -> list[str]:
    """The name of each dynamic leaf as JAX prints it: ``x``, ``b['p']``, ``args[0]``,
    ``kw['z']``."""
    a_tree, _, static_pos, _, _ = _key_parts(key)
    dyn_args, dyn_kw = tree_util.tree_unflatten(a_tree, list(range(a_tree.num_leaves)))
    params = getattr(wrapped, "_params", [])
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
    var_pos = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
    var_kw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), "kwargs")
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    static = {i for i, _ in static_pos}
    positions = [i for i in range(len(dyn_args) + len(static)) if i not in static]
    names = [""] * a_tree.num_leaves
    for k, arg in enumerate(dyn_args):
        i = positions[k]
        base = positional[i] if i < len(positional) else f"{var_pos}[{i - len(positional)}]"
        for path, leaf in tree_util.tree_flatten_with_path(arg)[0]:
            names[leaf] = base + tree_util.keystr(path)
    for kname, arg in dyn_kw.items():
        base = kname if kname in named else f"{var_kw}[{kname!r}]"
        for path, leaf in tree_util.tree_flatten_with_path(arg)[0]:
            names[leaf] = base + tree_util.keystr(path)
    return names


def _diff_context(new, old):
    if new == old:
        return None
    lines = ["Tracing context doesn't match, e.g. due to config or context manager."]
    names = CONTEXT_FLAGS + tuple(name for name, _ in _extra_context)
    for name, a, b in zip(names, new, old):
        if a != b:
            lines.append(f"  * {name} differs: now {a} and before {b}")
    return 0, sum(a != b for a, b in zip(new, old)), "\n".join(lines)


def _diff_trees(new_key, old_key):
    errs = list(tree_util.equality_errors(_full_tree(new_key), _full_tree(old_key)))
    if not errs:
        return None
    lines = [f"  * at input path {tree_util.keystr(tuple(path))}, now {a} and before {b}, "
             f"so {why}" for path, a, b, why in errs]
    return 1, len(lines), "different input pytree:\n" + "\n".join(lines)


def _type_str(aval, weak: bool) -> str:
    s = aval.str_short(True)
    return s + f"{{weak_type={aval.weak_type}}}" if weak else s


def _diff_types(names, new_avals, old_avals):
    if tuple(new_avals) == tuple(old_avals):
        return None
    lines, weak_hint = [], False
    for name, a, b in zip(names, new_avals, old_avals):
        if a != b:
            weak = a.weak_type != b.weak_type
            weak_hint |= weak
            lines.append(f"  * at {name}, now {_type_str(a, weak)} and before "
                         f"{_type_str(b, weak)}")
    msg = "different input types:\n" + "\n".join(lines)
    if weak_hint:
        msg += "https://docs.jax.dev/en/latest/type_promotion.html#weak-types"
    return 3, len(lines), msg


def diff_keys(wrapped, new_key, old_key) -> tuple[int, int, str]:
    """``(severity, number of differences, explanation)`` of two cache keys, as JAX ranks
    them (context 0, pytree 1, types 3)."""
    _, new_avals, _, _, new_ctx = _key_parts(new_key)
    _, old_avals, _, _, old_ctx = _key_parts(old_key)
    return (_diff_context(new_ctx, old_ctx) or _diff_trees(new_key, old_key)
            or _diff_types(_leaf_names(wrapped, new_key), new_avals, old_avals)
            or (4, 0, "cache miss explanation unavailable"))


def closest_difference(wrapped, key) -> str | None:
    """The explanation against the closest key ``wrapped`` was traced for (None if none)."""
    old = [k for k in list(wrapped._cache) if k != key]
    if not old:
        return None
    return min(diff_keys(wrapped, key, k) for k in old)[-1]


# ----------------------------------------------------------------------------------------------
# jax_explain_cache_misses

_callsites_with_miss: set = set()


def _defined_at(fun) -> str:
    fun = getattr(fun, "__wrapped__", fun)
    code = getattr(fun, "__code__", None)
    if code is None:
        return ""
    return f" defined at {code.co_filename}:{code.co_firstlineno}"


def _is_user_function(fun) -> bool:
    code = getattr(getattr(fun, "__wrapped__", fun), "__code__", None)
    if code is None:
        return True
    kiln_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep
    return not os.path.abspath(code.co_filename).startswith(kiln_dir)


def explain_miss(wrapped, key) -> None:
    """Log why ``wrapped`` (a ``JitWrapped``) is traced again for ``key`` (JAX's
    ``TRACING CACHE MISS`` message). Functions defined inside kiln are not explained."""
    fun = wrapped._fun
    if not _is_user_function(fun):
        return
    where = _current_source()
    callsite = str(where) if where is not None else "<unknown>"
    lines = [f"TRACING CACHE MISS at {callsite}:"]
    name = getattr(fun, "__name__", wrapped._name)
    if not [k for k in list(wrapped._cache) if k != key]:
        lines.append(f"  never seen function:\n    {name} id={id(fun)}{_defined_at(fun)}")
        if callsite in _callsites_with_miss:
            lines.append("  but seen another function defined on the same line; maybe the "
                         "function is\n  being re-defined repeatedly, preventing caching?")
        else:
            _callsites_with_miss.add(callsite)
    else:
        lines.append(f"  for {name}{_defined_at(fun)}")
        lines.append("  all previously seen cache keys differ. For the closest previous key:")
        lines.append("  " + closest_difference(wrapped, key))
    logger.warning("\n".join(lines))


# ----------------------------------------------------------------------------------------------
# kiln_warn_retrace / kiln_retrace_warning_threshold

_trace_counts: dict = {}


def note_trace(wrapped, key) -> None:
    """Count one more trace of ``wrapped``'s function; past the threshold, warn once."""
    if not config.kiln_warn_retrace:
        return
    limit = config.kiln_retrace_warning_threshold
    if limit <= 0:
        return
    fun = wrapped._fun
    if not _is_user_function(fun):
        return
    code = getattr(getattr(fun, "__wrapped__", fun), "__code__", None)
    counter_key = code if code is not None else id(wrapped._cache)
    n = _trace_counts.get(counter_key, 0) + 1
    if len(_trace_counts) < 100_000:
        _trace_counts[counter_key] = n
    if n != limit + 1:
        return
    name = getattr(fun, "__name__", wrapped._name)
    previous = [k for k in list(wrapped._cache) if k != key]
    if not previous:
        why = ("it is a new function object each time (for example `jit(lambda ...)`, or a "
               "function defined inside a loop or another function), so its trace cache "
               "starts empty. Create the jitted function once and reuse it.")
    else:
        severity, _, diff = diff_keys(wrapped, key, previous[-1])
        if severity == 0:
            hint = "A flag that changes tracing (see above) was changed between calls."
        elif severity == 1 and "Static(val=" in diff:
            hint = ("A static argument's value changed: a value that varies from call to "
                    "call should be a traced (non-static) argument.")
        elif severity == 1:
            hint = "The structure (pytree) of the arguments changed between calls."
        else:
            hint = ("An argument's shape, dtype or weak type changed: each new type is a new "
                    "program; keep them fixed (for example pad to a few sizes).")
        why = ("its arguments differ from the previous trace's: "
               + diff.replace("\n", "\n    ") + "\n" + hint)
    warnings.warn(
        f"kiln: the jitted function {name}{_defined_at(fun)} has been traced {n} times "
        f"(kiln_retrace_warning_threshold={limit}); each trace runs the Python function "
        f"again and compiles a new program. The latest trace happened because {why}\n"
        "(config.update('kiln_warn_retrace', False) turns this warning off.)",
        RetraceWarning, stacklevel=4)


def reset_counts() -> None:
    """Forget the trace counts (tests)."""
    _trace_counts.clear()
    _callsites_with_miss.clear()
