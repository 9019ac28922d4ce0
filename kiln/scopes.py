"""Context helpers of the public API: ``ensure_compile_time_eval`` (eager constant
folding while staging), ``named_scope`` and ``named_call`` (name stacks).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import kiln.core as _core_package
from kiln._wraps import wraps as _wraps


class ensure_compile_time_eval(contextlib.ContextDecorator):
    """Within this context, operations whose operands are all concrete run eagerly even
    inside ``jit``, ``scan`` and other staging transformations (JAX's eager constant
    folding): their results are concrete and can drive Python control flow. Operations on
    traced values are still traced, exactly as outside the context.

    Example::

      @jit
      def f(x):
        with ensure_compile_time_eval():
          y = jnp.sin(3.0)          # concrete: usable in `if y > 0:`
          z = x * 2                 # traced as usual
        return z.sum() + y
    """

    def __enter__(self):
        from kiln.core import trace as core
        self._cm = core.set_eager_folding(True)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


class named_scope:
    """Enter a named scope: equations staged inside it carry the name in their name stack
    (``eqn.source_info.name_stack``, ``outer/inner``), as in JAX. Usable as a decorator."""

    def __init__(self, name: str):
        if not isinstance(name, str):
            raise TypeError("named_scope name argument must be a string.")
        self.name = name

    def __enter__(self):
        from kiln.core import source_info
        self._cm = source_info.extend_name_stack(self.name)
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)

    def __call__(self, fun: Callable) -> Callable:
        """Used as a decorator: ``fun`` runs inside this scope (as JAX allows)."""
        @_wraps(fun)
        def wrapped(*args, **kwargs):
            with named_scope(self.name):
                return fun(*args, **kwargs)
        return wrapped


def named_call(fun: Callable, *, name: str | None = None) -> Callable:
    """``fun`` running inside :class:`named_scope` ``name`` (default: ``fun.__name__``): the
    equations it stages carry the name, as JAX's ``named_call`` (Haiku names its modules
    this way)."""
    if name is None:
        name = fun.__name__
    return named_scope(name)(fun)


# ``jax.core.ensure_compile_time_eval`` (``kiln.core`` sits below this module).
_core_package.install_public(ensure_compile_time_eval=ensure_compile_time_eval)
