"""``python -m kiln.demo``: the examples of JAX's README, run with kiln.

Each section prints what it computes; the expected JAX output is noted beside it.
"""
from __future__ import annotations

import time

import numpy as np

import kiln as jax
import kiln.numpy as jnp
from kiln import (
    demo_parallel,  # sets jax_num_cpu_devices = 8 before devices are used
    grad,
    jacfwd,
    jacrev,
    jit,
    vmap,
)


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 60 - len(title)))


def tanh(x):
    y = jnp.exp(-2.0 * x)
    return (1.0 - y) / (1.0 + y)


def abs_val(x):
    if x > 0:
        return x
    else:
        return -x


def hessian(fun):
    return jit(jacfwd(jacrev(fun)))


def predict(params, inputs):
    for W, b in params:
        outputs = jnp.dot(inputs, W) + b
        inputs = jnp.tanh(outputs)
    return outputs


def loss(params, inputs, targets):
    preds = predict(params, inputs)
    return jnp.sum((preds - targets) ** 2)


def slow_f(x):
    return x * x + x * 2.0


def _time(f, *args, n=3):
    jax.block_until_ready(f(*args))
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    section("grad")
    print("grad(tanh)(1.0)                =", grad(tanh)(1.0), "  (JAX: 0.4199743)")
    print("grad(grad(grad(tanh)))(1.0)    =", grad(grad(grad(tanh)))(1.0), "  (JAX: 0.62162673)")

    section("hessian = jit(jacfwd(jacrev(f)))")
    f = lambda x: jnp.sum(jnp.sin(x) * x ** 2)  # noqa: E731
    x = jnp.array([0.5, 1.0, 2.0])
    print("hessian(f)(x) =\n", hessian(f)(x))

    section("Python control flow under grad")
    print("grad(abs_val)(1.0)  =", grad(abs_val)(1.0), "  (JAX: 1.0)")
    print("grad(abs_val)(-1.0) =", grad(abs_val)(-1.0), "  (JAX: -1.0)")

    section("MLP: jit(grad(loss)) and per-example gradients")
    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    params = [(jnp.asarray(rng.normal(size=(m, n)).astype(np.float32) / np.sqrt(m)),
               jnp.zeros(n)) for m, n in zip(sizes[:-1], sizes[1:])]
    inputs = jnp.asarray(rng.normal(size=(8, 784)).astype(np.float32))
    targets = jnp.asarray(rng.normal(size=(8, 10)).astype(np.float32))
    grad_loss = jit(grad(loss))
    grads = grad_loss(params, inputs, targets)
    print("loss =", loss(params, inputs, targets))
    print("grad shapes:", [(g[0].shape, g[1].shape) for g in grads])
    perex_grads = jit(vmap(grad_loss, in_axes=(None, 0, 0)))
    pe = perex_grads(params, inputs, targets)
    print("per-example grad shapes:", [(g[0].shape, g[1].shape) for g in pe])
    summed = jnp.sum(pe[0][0], axis=0)
    print("sum of per-example grads == batch grad:",
          bool(jnp.allclose(summed, grads[0][0], rtol=1e-4, atol=1e-4)))

    section("vmap(predict, in_axes=(None, 0))")
    batch = jnp.asarray(rng.normal(size=(5, 3, 784)).astype(np.float32))
    preds = vmap(predict, in_axes=(None, 0))(params, batch)
    print("predictions shape:", preds.shape, "(5 batches of 3 examples, 10 outputs)")

    section("jit(slow_f) vs slow_f on a 5000x5000 array")
    x = jnp.ones((5000, 5000))
    fast_f = jit(slow_f)
    t_jit = _time(fast_f, x)
    t_eager = _time(slow_f, x)
    print(f"jit(slow_f): {t_jit * 1e3:8.1f} ms   slow_f: {t_eager * 1e3:8.1f} ms")
    print("results agree:", bool(jnp.allclose(fast_f(x), slow_f(x))))
    print("\nThe staged program of slow_f:")
    print(jax.make_jaxpr(slow_f)(jnp.ones(3)))

    section("kiln.random: key, subkey = random.split(key)")
    from kiln import random
    key = random.PRNGKey(0)
    key, subkey = random.split(key)
    print("key    =", key)
    print("subkey =", subkey)
    print("random.normal(subkey, (3,)) =", random.normal(subkey, (3,)))
    print("random.uniform(key, (3,))   =", random.uniform(key, (3,)))

    section("Control flow: lax.cond, fori_loop, scan, debug.print")
    from kiln import demo_control
    demo_control.main()

    demo_parallel.main()


if __name__ == "__main__":
    main()
