"""``python -m kiln.demo_control``: structured control flow and debug printing, run with
kiln. Each line shows what JAX prints for the same program.

``kiln.demo`` calls ``main()`` from here.
"""
from __future__ import annotations

import numpy as np

import kiln as jax
import kiln.debug
import kiln.numpy as jnp
from kiln import grad, jit, lax, vmap


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 60 - len(title)))


def conditional_abs(x):
    """|x| with a traced branch: works under jit, grad and vmap (a Python ``if`` would not)."""
    return lax.cond(x >= 0, lambda x: x, lambda x: -x, x)


def sum_of_squares(n):
    """0^2 + 1^2 + ... + (n-1)^2 with a fori_loop (one traced body, whatever n is)."""
    return lax.fori_loop(0, n, lambda i, total: total + i * i, 0)


def cumulative_sum(xs):
    """A running sum with scan: the carry is the sum so far, each step also emits it."""
    def step(total, x):
        total = total + x
        return total, total
    return lax.scan(step, 0.0, xs)


@jit
def show_and_double(x):
    kiln.debug.print("x = {x}", x=x)      # runs when the compiled program runs
    return x * 2


def main() -> None:
    section("lax.cond: conditional_abs")
    print("conditional_abs(-3.0)       =", conditional_abs(-3.0), "  (JAX: 3.0)")
    print("jit(conditional_abs)(2.5)   =", jit(conditional_abs)(2.5), "  (JAX: 2.5)")
    print("grad(conditional_abs)(-3.0) =", grad(conditional_abs)(-3.0), "  (JAX: -1.0)")
    print("grad(conditional_abs)(2.0)  =", grad(conditional_abs)(2.0), "  (JAX: 1.0)")
    xs = jnp.array([-2.0, 0.5, -0.25])
    print("vmap(conditional_abs)(xs)   =", vmap(conditional_abs)(xs),
          "  (JAX: [2.   0.5  0.25])")
    print("vmap(grad(conditional_abs)) =", vmap(grad(conditional_abs))(xs),
          "  (JAX: [-1.  1. -1.])")

    section("lax.fori_loop: sum of squares")
    print("sum_of_squares(10)          =", sum_of_squares(10), "  (JAX: 285)")
    print("jit(sum_of_squares)(10)     =", jit(sum_of_squares)(10), "  (JAX: 285)")
    power = lambda x: lax.fori_loop(0, 5, lambda i, p: p * x, 1.0)  # noqa: E731
    print("grad(x -> x**5 by fori_loop)(2.0) =", grad(power)(2.0), "  (JAX: 80.0)")

    section("lax.scan: cumulative sum")
    total, running = cumulative_sum(jnp.arange(1.0, 6.0))
    print("total   =", total, "  (JAX: 15.0)")
    print("running =", running, "  (JAX: [ 1.  3.  6. 10. 15.])")
    print("grad(last running sum) =",
          grad(lambda xs: cumulative_sum(xs)[1][-1])(jnp.ones(3)), "  (JAX: [1. 1. 1.])")

    section("jax.debug.print inside jit")
    y = show_and_double(np.float32(3.0))
    print("show_and_double(3.0) =", y, "  (JAX prints 'x = 3.0' first, then 6.0)")
    print("\nThe staged program of cumulative_sum:")
    print(jax.make_jaxpr(cumulative_sum)(jnp.arange(3.0)))


if __name__ == "__main__":
    main()
