"""``jax.fwd_and_bwd``: a function's forward and backward passes as two (jitted)
functions, the residuals passed between them as a pytree (the ``vjp`` function)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln._wraps import check_callable


def fwd_and_bwd(fun: Callable, argnums: int | Sequence[int], has_aux: bool = False,
                jitted: bool = True) -> tuple[Callable, Callable]:
    """Split ``fun`` into a forward and a backward function (``jax.fwd_and_bwd``).

    ``fwd(*args)`` is ``jax.vjp`` of ``fun`` with respect to the positional arguments
    ``argnums``: it returns ``(primals_out, residuals)`` (``(primals_out, residuals,
    aux)`` with ``has_aux``). ``bwd(residuals, cotangent)`` gives the cotangents of those
    arguments (one value when ``argnums`` is an int, else a tuple). Unless
    ``jitted=False`` both are compiled once: ``bwd`` is jitted, and ``fwd`` differentiates
    the jitted ``fun`` (kiln's ``vjp`` function holds concrete residuals, so unlike JAX
    the ``vjp`` call itself runs outside ``jit``; the values are the same).

    Args:
      fun: the function to differentiate.
      argnums: an int or a sequence of ints: the positional arguments differentiated.
      has_aux: whether ``fun`` returns ``(output, aux)``.
      jitted: whether to return ``jit`` of both functions (the default).

    Returns:
      The pair ``(fwd, bwd)``.
    """
    check_callable(fun)
    from kiln.jitting import jit
    from kiln.transformations import vjp
    single = isinstance(argnums, int)
    inner = jit(fun) if jitted else fun
    nums = (argnums,) if single else tuple(int(i) for i in argnums)

    def fwd(*args):
        for i in nums:
            if not -len(args) <= i < len(args):
                raise TypeError(f"fwd_and_bwd: argnums {i} is out of range for a call "
                                f"with {len(args)} positional arguments")
        pos = tuple(i % len(args) for i in nums)

        def partial_fun(*dyn):
            full = list(args)
            for i, v in zip(pos, dyn):
                full[i] = v
            return inner(*full)

        return vjp(partial_fun, *[args[i] for i in pos], has_aux=has_aux)

    def bwd(f_vjp, outgrad):
        g = f_vjp(outgrad)
        return g[0] if single else g

    if jitted:
        return fwd, jit(bwd)
    return fwd, bwd
