"""Foundation benchmarks (issue: kiln core), measured side by side in one run.

1. Eager small op: ``x + y`` on two 10-element float32 arrays — NumPy, kiln, JAX.
   Also ``jnp.add(x, y)`` and ``jnp.sin(x)`` through the full promotion path.
2. Tracing the README MLP ``grad(loss)`` (784-512-512-10) to a jaxpr:
   ``kiln.make_jaxpr`` vs ``jax.make_jaxpr``.

Run: ``python benchmarks/bench_foundation.py`` (JAX optional; ratios printed).
"""
from __future__ import annotations

import platform
import timeit

import numpy as np


def best_per_call(stmt, number, repeat=7):
    times = timeit.repeat(stmt, number=number, repeat=repeat)
    return min(times) / number


def eager_small_op():
    import kiln.numpy as knp
    a = np.arange(10, dtype=np.float32)
    b = np.ones(10, dtype=np.float32)
    ka, kb = knp.asarray(a), knp.asarray(b)
    res = {}
    res["numpy a+b"] = best_per_call(lambda: a + b, 20000)
    res["kiln a+b"] = best_per_call(lambda: ka + kb, 20000)
    res["kiln jnp.add"] = best_per_call(lambda: knp.add(ka, kb), 20000)
    res["numpy sin"] = best_per_call(lambda: np.sin(a), 20000)
    res["kiln jnp.sin"] = best_per_call(lambda: knp.sin(ka), 20000)
    try:
        import jax.numpy as jnp
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        (ja + jb).block_until_ready()
        res["jax a+b"] = best_per_call(lambda: (ja + jb).block_until_ready(), 2000)
        res["jax jnp.sin"] = best_per_call(lambda: jnp.sin(ja).block_until_ready(), 2000)
    except ImportError:
        pass
    return res


def mlp_params(np_mod, rng):
    sizes = [784, 512, 512, 10]
    return [(np_mod.asarray(rng.normal(size=(m, n)).astype(np.float32)),
             np_mod.asarray(np.zeros(n, np.float32))) for m, n in zip(sizes[:-1], sizes[1:])]


def tracing_mlp():
    import kiln
    import kiln.numpy as knp
    rng = np.random.default_rng(0)
    res = {}

    def make(jnp_mod, make_jaxpr, grad):
        def predict(params, inputs):
            for W, b in params:
                outputs = jnp_mod.dot(inputs, W) + b
                inputs = jnp_mod.tanh(outputs)
            return outputs

        def loss(params, inputs, targets):
            return jnp_mod.sum((predict(params, inputs) - targets) ** 2)

        params = mlp_params(jnp_mod, rng)
        x = jnp_mod.asarray(rng.normal(size=(128, 784)).astype(np.float32))
        y = jnp_mod.asarray(rng.normal(size=(128, 10)).astype(np.float32))
        return lambda: make_jaxpr(grad(loss))(params, x, y)

    kf = make(knp, kiln.make_jaxpr, kiln.grad)
    res["kiln make_jaxpr(grad(loss))"] = best_per_call(kf, 20, repeat=5)
    try:
        import jax
        import jax.numpy as jnp
        jf = make(jnp, jax.make_jaxpr, jax.grad)
        res["jax make_jaxpr(grad(loss))"] = best_per_call(jf, 20, repeat=5)
    except ImportError:
        pass
    return res


def main():
    print(f"machine: {platform.machine()} {platform.processor() or ''} "
          f"python {platform.python_version()} numpy {np.__version__}")
    try:
        import jax
        print(f"jax {jax.__version__}")
    except ImportError:
        print("jax not installed: JAX columns omitted")
    r1 = eager_small_op()
    print("\n## Eager small op (10-element float32), µs per call")
    for k, v in r1.items():
        print(f"  {k:24s} {v * 1e6:8.2f}")
    print(f"  ratio kiln a+b / numpy a+b     = {r1['kiln a+b'] / r1['numpy a+b']:.2f}x")
    print(f"  ratio kiln jnp.add / numpy a+b = {r1['kiln jnp.add'] / r1['numpy a+b']:.2f}x")
    if "jax a+b" in r1:
        print(f"  ratio kiln a+b / jax a+b       = {r1['kiln a+b'] / r1['jax a+b']:.3f}x")
    r2 = tracing_mlp()
    print("\n## Tracing grad(loss) of the 784-512-512-10 MLP, ms per trace")
    for k, v in r2.items():
        print(f"  {k:30s} {v * 1e3:8.2f}")
    if len(r2) == 2:
        k, j = r2.values()
        print(f"  ratio kiln / jax = {k / j:.2f}x")


if __name__ == "__main__":
    main()
