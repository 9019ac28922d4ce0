"""``python -m kiln.demo_parallel``: JAX's ``pmap`` examples on kiln's virtual CPU devices.

kiln gives each of its ``jax_num_cpu_devices`` devices a worker thread; ``pmap`` runs
one program per device on them and collectives meet between the threads. Each line
shows what JAX prints for the same program. ``kiln.demo`` calls ``main()`` from here.
"""
from __future__ import annotations

import time
from functools import partial

import kiln as jax
import kiln.numpy as jnp
from kiln import grad, lax, pmap, random

try:        # before any device is used (as in JAX); a no-op if already 8
    jax.config.update("jax_num_cpu_devices", 8)
except RuntimeError:
    pass


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 60 - len(title)))


@partial(pmap, axis_name="i")
def normalize(x):
    return x / lax.psum(x, "i")


def parallel_fn(x):
    return jnp.sum(x)


@pmap
def f(x):
    y = jnp.sin(x)

    @pmap
    def g(z):
        return jnp.cos(z) * jnp.tan(y.sum()) * jnp.tan(x)

    return grad(lambda w: jnp.sum(g(w)))(x)


def main(big: bool = False) -> None:
    section(f"pmap over {jax.device_count()} virtual CPU devices")
    print("devices:", jax.devices())

    section("normalize: x / lax.psum(x, 'i')")
    print("normalize(jnp.arange(4.)) =", normalize(jnp.arange(4.)))
    print("   (JAX: [0.         0.16666667 0.33333334 0.5       ])")

    section("pmap(parallel_fn) over 4 devices: one sum per device")
    x = jnp.array([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5], [2.0, 2.0]])
    sums = pmap(parallel_fn)(x)
    print("pmap(parallel_fn)(x) =", sums, "  (JAX: [1. 2. 3. 4.])")
    print("sharding:", sums.sharding)

    # JAX's README uses 5000x6000 (about a minute here on 2 cores: 2.4 TFLOP);
    # `python -m kiln.demo_parallel --big` runs that size.
    n, m = (5000, 6000) if big else (1000, 1200)
    section(f"8 random {n}x{m} matrices multiplied in parallel")
    t0 = time.perf_counter()
    keys = random.split(random.key(0), 8)
    mats = pmap(lambda key: random.normal(key, (n, m)))(keys)
    result = pmap(lambda x: jnp.dot(x, x.T))(mats)
    means = pmap(jnp.mean)(result)
    print("result.shape =", result.shape)
    print("pmap(jnp.mean)(result) =", means)
    print(f"   (the same bits as JAX's random.normal; {time.perf_counter() - t0:.1f} s)")

    section("nested pmap under grad")
    x = jnp.arange(8.).reshape(4, 2) / 8
    print("f(x) =\n", f(x))
    print("grad(lambda x: jnp.sum(f(x)))(x) =\n", grad(lambda x: jnp.sum(f(x)))(x))
    print("   (JAX 0.10 no longer nests pmap; the values equal vmap's, which JAX computes)")


if __name__ == "__main__":
    import sys
    main(big="--big" in sys.argv[1:])
