"""Error classes users see, named and nested as in ``jax.errors``.

Each message says what went wrong, where (the user's line when we can find it)
and what to do about it.
"""
from __future__ import annotations

import os
import traceback

_KILN_DIR = os.path.dirname(os.path.abspath(__file__))
# Further files or folders whose frames are not the user's (libraries built on kiln register
# theirs with ``kiln._src.traceback_util.register_exclusion``, as with JAX).
_excluded_paths: list = []


def user_frame_summary() -> str:
    """The innermost stack frame outside kiln (and outside registered library paths), as
    ``file:line (function)``."""
    for frame in reversed(traceback.extract_stack()):
        fname = os.path.abspath(frame.filename)
        if (not fname.startswith(_KILN_DIR) and "/contextlib.py" not in fname
                and not any(fname.startswith(p) for p in _excluded_paths)):
            line = f"\n    {frame.line}" if frame.line else ""
            return f"{frame.filename}:{frame.lineno} ({frame.name}){line}"
    return "<unknown>"


class JAXTypeError(TypeError):
    """Base of kiln's TypeErrors raised for misuse of traced values."""


class JAXIndexError(IndexError):
    """Base of kiln's IndexErrors (as ``jax.errors.JAXIndexError``)."""


class JaxprTypeError(TypeError):
    """A jaxpr failed its type check (``jax.errors.JaxprTypeError``)."""


class InconclusiveDimensionOperation(Exception):
    """A comparison of symbolic dimensions has no definite answer (as in JAX; kiln has no
    symbolic shapes, so it is only here for ``except`` clauses)."""


class ConcretizationTypeError(JAXTypeError):
    """A traced (abstract) value was used where a concrete value is needed."""

    def __init__(self, tracer, context: str = ""):
        where = user_frame_summary()
        msg = (
            f"Abstract tracer value encountered where concrete value is expected: {tracer}\n"
            f"{context}\n" if context else
            f"Abstract tracer value encountered where concrete value is expected: {tracer}\n"
        )
        msg += (
            f"The problem arose at {where}\n"
            "The value depends on an argument that is traced (by jit, grad, vmap, ...), so its "
            "value is not known while the function is being traced.\n"
            "Fixes: mark the argument static with `static_argnums`/`static_argnames` in jit, "
            "use structured control flow (`lax.cond`, `lax.switch`, `lax.while_loop`, "
            "`lax.fori_loop`) instead of Python control flow, or compute the value with NumPy "
            "outside the traced function."
        )
        super().__init__(msg)


class NonConcreteBooleanIndexError(JAXIndexError):
    """Boolean mask indexing on a traced mask: its result shape is unknown."""

    def __init__(self, tracer):
        super().__init__(
            f"Array boolean indices must be concrete; got {tracer}\n"
            f"at {user_frame_summary()}\n"
            "Use `jnp.where(mask, x, fill)` to keep the shape static, or pass `size=` to "
            "`jnp.nonzero`/`jnp.where(cond)` so the output shape is known.")


class TracerArrayConversionError(JAXTypeError):
    """A tracer was converted to a NumPy array (``np.asarray(tracer)``)."""

    def __init__(self, tracer):
        super().__init__(
            f"The numpy.ndarray conversion method __array__() was called on {tracer}\n"
            f"at {user_frame_summary()}\n"
            "This happens when a NumPy function (`np.*`) is applied to a traced value inside "
            "jit/grad/vmap. Use the `kiln.numpy` (jnp) version of the function instead.")


class TracerIntegerConversionError(JAXTypeError):
    """A tracer was used where Python needs an ``int`` (``__index__``)."""

    def __init__(self, tracer):
        super().__init__(
            f"The __index__() method was called on {tracer}\n"
            f"at {user_frame_summary()}\n"
            "A traced value cannot be used as a Python integer (for example as a list index, a "
            "shape or a range bound). Mark the argument static with `static_argnums`/"
            "`static_argnames`, or use `lax.dynamic_slice`/`lax.fori_loop` for traced indices.")


class TracerBoolConversionError(ConcretizationTypeError):
    """A tracer was used as a Python ``bool`` (``if x > 0:``)."""

    def __init__(self, tracer):
        JAXTypeError.__init__(
            self,
            f"Attempted boolean conversion of traced array with shape "
            f"{tracer.aval.str_short()}.\n"
            f"The error occurred at {user_frame_summary()}\n"
            "Python control flow (`if`, `while`, `and`, `or`, `not`) needs a concrete bool, but "
            "this value is traced. Use `lax.cond`/`jnp.where` for branches, `lax.while_loop` "
            "for loops, or mark the argument static with `static_argnums`/`static_argnames`.")


class UnexpectedTracerError(JAXTypeError):
    """A tracer escaped the transformation that created it and was used later."""

    def __init__(self, tracer_or_msg):
        if isinstance(tracer_or_msg, str):
            self.tracer = None
            super().__init__(tracer_or_msg)
            return
        t = tracer_or_msg
        self.tracer = t         # which tracer (a batching trace recognizes its own)
        try:
            ty = t.aval.str_short(short_dtypes=False)
        except Exception:  # noqa: BLE001 - the message must not fail
            ty = "?"
        name = t._jax_type_name() if hasattr(t, "_jax_type_name") else type(t).__name__
        msg = (f"Encountered an unexpected tracer: {t}\n"
               f"at {user_frame_summary()}\n"
               "A function transformed by JAX had a side effect, allowing for a reference to "
               f"an intermediate value with type {ty} wrapped in a {name} to escape the scope "
               "of the transformation.\nJAX transformations require that functions explicitly "
               "return their outputs, and disallow saving intermediate values to global state "
               "(e.g. stored in a global, a class attribute or a list defined outside): return "
               "the value from the function instead, or use the transformation's `has_aux` "
               "output.")
        created = _creation_site(t)
        if created is not None:
            divider = "\n" + "-" * 30 + "\n"
            msg += (f"{divider}The leaked intermediate value was created on line {created}. "
                    f"{divider}")
        msg += ("\nTo catch the leak earlier, try setting the environment variable "
                "JAX_CHECK_TRACER_LEAKS or using the `jax.checking_leaks` context manager.")
        super().__init__(msg)


def _creation_site(tracer):
    """Where a staged tracer was made: the source of the equation defining it (found in
    its trace's equations), or None."""
    var = getattr(tracer, "_var", None)
    eqns = getattr(getattr(tracer, "_trace", None), "eqns", None)
    if var is None or not eqns:
        return None
    for eqn in reversed(eqns):
        if any(v is var for v in eqn.outvars):
            return eqn.source_info
    return None


class KeyReuseError(JAXTypeError):
    """A PRNG key was used twice where reuse checking is enabled."""


class JaxRuntimeError(RuntimeError):
    """A failure while executing a compiled program."""


class FloatingPointError_(FloatingPointError):
    """Raised under ``jax_debug_nans``/``jax_debug_infs`` when a NaN/inf appears."""
