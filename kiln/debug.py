"""``kiln.debug``: printing and callbacks that work inside jit, vmap and grad.

``debug.print(fmt, *args, **kwargs)`` formats with ``str.format`` when the program runs
(not when it is traced), so it shows runtime values. ``debug.callback(fn, *args)`` calls
any Python function on runtime values. Both are effectful primitives (in
``staging.always_stage``): they are never removed as dead code and run once per
evaluation, in program order (the reference backend interprets equations in order).

Their rules follow JAX:

- ``vmap``: the callback runs once per batch element (unbatched operands are passed
  unchanged);
- ``jvp``/``grad``: the callback sees primal values only; under ``grad`` it runs once,
  during the forward pass (partial evaluation runs known effects right away);
- transpose: nothing (no cotangents flow through a callback).

The callback receives ``kiln.Array``s, so ``"{x:.3f}"`` formats a scalar like a float.

``debug.breakpoint()`` is a debug callback too: it opens JAX's ``jdb`` prompt on the
frames captured where it was called, with the traced values concrete (``kiln/_debugger.py``).
"""
from __future__ import annotations

import copy
import logging
import string
import sys

import numpy as np

from kiln._physical_tree import tree_flatten
from kiln._visualize import visualize_sharding
from kiln.callbacks import call_user_callback, flatten_callback, host_values, running_program
from kiln.core.trace import Primitive
from kiln.interpreters import ad, batching, staging

__all__ = ["print", "log", "callback", "breakpoint", "debug_callback_p", "debug_print_p",
           "inspect_array_sharding", "inspect_sharding_p", "visualize_array_sharding",
           "visualize_sharding"]

# ----------------------------------------------------------------------------------------------
# Primitives: debug_callback (any function) and debug_print (a format string).

def _impl(*args, callback, ordered, partitioned=False, **_):
    # Eagerly a failing callback raises its own exception; inside a jitted program,
    # JaxRuntimeError (as JAX's).
    call_user_callback("debug.callback", callback, host_values(args),
                       wrap=running_program())
    return []


def _abstract_eval(*avals, **_):
    return []


def _jvp(prim):
    def rule(primals, tangents, **params):
        return prim.bind(*primals, **params), []
    return rule


def _transpose(cts, *args, **params):
    return [None] * len(args)


def _batch(prim):
    def rule(axis_data, vals, dims, **params):
        from kiln import lax
        for i in range(axis_data.size):
            prim.bind(*[v if d is None else lax.index_in_dim(v, i, d, keepdims=False)
                        for v, d in zip(vals, dims)], **params)
        return [], []
    return rule


def _make(name):
    prim = Primitive(name)
    prim.multiple_results = True
    prim.impl = _impl
    prim.abstract_eval = _abstract_eval
    prim.weak_type_rule = lambda *w, **_: []
    ad.jvp_rules[prim] = _jvp(prim)
    ad.transpose_rules[prim] = _transpose
    batching.batch_rules[prim] = _batch(prim)
    staging.always_stage.add(prim)
    return prim


debug_callback_p = _make("debug_callback")
debug_print_p = _make("debug_print")


# ----------------------------------------------------------------------------------------------
# inspect_array_sharding: the layout of a value, as soon as it is known.
#
# Eagerly the value's ``sharding`` right away. Inside ``jit`` the layout is decided when
# the program is compiled: a ``jit`` partitioned over a mesh (``kiln.parallel.partition``)
# calls back with the ``NamedSharding`` it propagated to the value; a program run whole on
# one device calls back when the compiler's passes meet the equation (``at_compile``),
# with that device's ``SingleDeviceSharding``. Either way once per compilation, and the
# equation is then removed from the program (it computes nothing).

def _this_device_sharding():
    """The ``SingleDeviceSharding`` of the device running now (a device thread of an SPMD
    program: ``pmap``, ``shard_map``; else the default device)."""
    from kiln.devices import devices
    from kiln.parallel import spmd
    from kiln.sharding import SingleDeviceSharding
    ctx = spmd.current_context()
    dev = getattr(ctx, "device", None)
    return SingleDeviceSharding(dev if dev is not None else devices()[0])


def _inspect_impl(value, *, callback):
    sh = getattr(value, "sharding", None)     # an Array; a device thread's block is not
    callback(sh if sh is not None else _this_device_sharding())
    return []


def _inspect_at_compile(params) -> None:
    params["callback"](_this_device_sharding())


def _inspect_batch(axis_data, vals, dims, *, callback):
    inspect_sharding_p.bind(vals[0], callback=callback)
    return [], []


inspect_sharding_p = Primitive("inspect_sharding")
inspect_sharding_p.multiple_results = True
inspect_sharding_p.impl = _inspect_impl
inspect_sharding_p.abstract_eval = _abstract_eval
inspect_sharding_p.weak_type_rule = lambda *w, **_: []
inspect_sharding_p.at_compile = _inspect_at_compile
ad.jvp_rules[inspect_sharding_p] = _jvp(inspect_sharding_p)
ad.transpose_rules[inspect_sharding_p] = _transpose
batching.batch_rules[inspect_sharding_p] = _inspect_batch
staging.always_stage.add(inspect_sharding_p)


def inspect_array_sharding(value, *, callback) -> None:
    """Call ``callback(sharding)`` with the ``Sharding`` of each array in the pytree
    ``value`` (``jax.debug.inspect_array_sharding``): at once for a concrete array; inside
    ``jit`` when the program is compiled (the layout kiln's partitioner gives the value,
    or the one device the program runs on), so a cached program does not call again."""
    from kiln.array import Array
    from kiln.core import trace as core
    eager = core.current_trace() is core.eval_trace
    for leaf in tree_flatten(value)[0]:
        if eager and isinstance(leaf, Array):
            callback(leaf.sharding)     # known now (eager impls see the values alone)
        else:
            inspect_sharding_p.bind(leaf, callback=callback)


def visualize_array_sharding(arr, **kwargs) -> None:
    """``visualize_sharding(arr.shape, sharding)`` with ``arr``'s sharding, found by
    :func:`inspect_array_sharding` (so inside ``jit`` too, at compile time)."""
    shape = arr.shape
    inspect_array_sharding(arr, callback=lambda s: visualize_sharding(shape, s, **kwargs))


# ----------------------------------------------------------------------------------------------
# debug.callback

def callback(callback=None, *args, ordered: bool = False, partitioned: bool = False, **kwargs):
    """Call ``callback(*args, **kwargs)`` with the runtime values of ``args``; returns None.

    Also usable in JAX's two-call form: ``debug.callback(ordered=True)(fn, *args)``."""
    def _debug_callback(cb, *c_args, **c_kwargs):
        if not callable(cb):
            raise TypeError("first argument to jax.debug.callback must be callable, but got "
                            f"an object of type {type(cb)}")
        flat_cb, dyn = flatten_callback(cb, c_args, c_kwargs)
        debug_callback_p.bind(*dyn, callback=flat_cb, ordered=bool(ordered),
                              partitioned=bool(partitioned))

    if callback is not None:
        _debug_callback(callback, *args, **kwargs)
        return None
    if args or kwargs:
        raise TypeError("debug_callback received unexpected arguments in the two-call form: "
                        f"args={args} kwargs={kwargs}")
    return _debug_callback


# ----------------------------------------------------------------------------------------------
# debug.print

class _FormatChecker(string.Formatter):
    """Checks a format string against its arguments at trace time (no formatting)."""

    def format_field(self, value, format_spec):
        return ""

    def check_unused_args(self, used_args, args, kwargs):
        unused_args = [a for i, a in enumerate(args) if i not in used_args]
        unused_kwargs = [k for k in kwargs if k not in used_args]
        if unused_args:
            raise ValueError(f"Unused positional arguments to `jax.debug.print`: {unused_args}")
        if unused_kwargs:
            raise ValueError(
                f"Unused keyword arguments to `jax.debug.print`: {unused_kwargs}. You may be "
                "passing an f-string (i.e, `f\"{x}\"`) into `jax.debug.print` and instead "
                "should pass in a regular string.")


_checker = _FormatChecker()


class _PrintFormatted:
    """The callback of ``debug.print``: format with the print options of trace time and
    write one line to ``sys.stdout``."""

    __slots__ = ("fmt", "np_printoptions", "has_placeholders", "record")

    def __init__(self, fmt, np_printoptions, has_placeholders, record=None):
        self.fmt = fmt
        self.np_printoptions = np_printoptions
        self.has_placeholders = has_placeholders
        self.record = record        # debug.log: a logging record to send the line as

    def __call__(self, *args, **kwargs):
        if self.has_placeholders:
            with np.printoptions(**dict(self.np_printoptions)):
                msg = self.fmt.format(*args, **kwargs)
        else:
            msg = " ".join((self.fmt, *(str(a) for a in args)))
        if self.record is not None:
            record = copy.copy(self.record)
            record.msg = msg
            logger.handle(record)
        else:
            sys.stdout.write(msg + "\n")

    def __repr__(self):
        return f"_PrintFormatted({self.fmt!r})"


#: The logger ``debug.log`` writes to, under JAX's name for it (users configure it by name).
logger = logging.getLogger("jax._src.debugging")


def _logging_record(level):
    from kiln.core.source_info import current
    si = current()
    file, line = ("(unknown file)", 0) if si is None else (si.file, si.lineno)
    return logger.makeRecord(logger.name, level, file, line, "", (), None)


def log(fmt=None, *args, ordered: bool = False, partitioned: bool = False,
        skip_format_check: bool = False, **kwargs):
    """``debug.print`` whose line goes to the logger ``jax._src.debugging`` at level INFO
    (a record naming the caller's file and line) instead of ``sys.stdout``
    (``jax.debug.log``)."""
    return print(fmt, *args, ordered=ordered, partitioned=partitioned,
                 skip_format_check=skip_format_check, _use_logging=True, **kwargs)


def print(fmt=None, *args, ordered: bool = False, partitioned: bool = False,  # noqa: A001
          skip_format_check: bool = False, _use_logging: bool = False, **kwargs):
    """Print ``fmt.format(*args, **kwargs)`` with runtime values (works under jit, vmap,
    grad, and inside control flow). Use a plain format string, not an f-string:
    ``debug.print("x = {x}", x=x)``. Also usable as ``debug.print(ordered=True)(fmt, ...)``."""
    def _debug_print(fmt, *c_args, **c_kwargs):
        if not skip_format_check:
            _checker.format(fmt, *c_args, **c_kwargs)
        has_placeholders = False
        if fmt:
            _, field, *_ = next(iter(string.Formatter().parse(fmt)))
            has_placeholders = field is not None
        cb = _PrintFormatted(fmt, tuple(np.get_printoptions().items()), has_placeholders,
                             _logging_record(logging.INFO) if _use_logging else None)
        flat_cb, dyn = flatten_callback(cb, c_args, c_kwargs)
        debug_print_p.bind(*dyn, fmt=fmt, ordered=bool(ordered), partitioned=bool(partitioned),
                           callback=flat_cb)

    if fmt is not None:
        _debug_print(fmt, *args, **kwargs)
        return None
    if args or kwargs:
        raise TypeError("debug_print received unexpected arguments in the two-call form: "
                        f"args={args} kwargs={kwargs}")
    return _debug_print


def breakpoint(*, backend: str | None = None, filter_frames: bool = True,  # noqa: A001
               num_frames: int | None = None, ordered: bool = False, token=None, **kwargs):
    """Stop at this point of the program in an interactive debugger, with the runtime
    values of the traced variables (works eagerly and under ``jit``, ``vmap`` and ``grad``).

    The frames of the call stack are captured when ``breakpoint`` is called (while tracing,
    under ``jit``); when the program runs, the debugger ``backend`` opens on them with the
    traced locals made concrete. The default backend, ``"cli"``, is JAX's ``jdb`` prompt
    (commands ``p``, ``pp``, ``l``, ``w``, ``u``, ``d``, ``c``, ``q``), reading ``sys.stdin``.
    Under ``vmap`` it stops once per batch element; under ``grad`` it sees primal values.

    Args:
      backend: the debugger backend (``"cli"``); an unknown name falls back to the
        default, as in JAX.
      filter_frames: leave kiln's own frames out.
      num_frames: how many frames (innermost first) to make available.
      ordered: order it with other ordered debug effects.
      token: instead of ``ordered``: an array (or pytree) returned unchanged; the
        breakpoint runs once its value is computed.

    Returns:
      ``token`` when it is given, else None.
    """
    from kiln import _debugger
    if token is not None and ordered:
        raise ValueError("`ordered` and `token` are mutually exclusive arguments.")
    frames = _debugger.capture_frames(1, filter_frames, num_frames)
    flat_args, frames_tree = tree_flatten(frames)
    cb = _debugger.make_callback(frames_tree, backend, kwargs)
    if token is None:
        callback(cb, *flat_args, ordered=ordered)
        return None
    from kiln.callbacks import pure_callback
    from kiln.lax import stop_gradient

    def _with_token(x, *args):
        cb(*args)
        return x
    token, flat_args = stop_gradient((token, flat_args))
    return pure_callback(_with_token, token, token, *flat_args, vmap_method="sequential")
