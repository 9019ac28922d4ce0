"""BlackJAX on kiln: NUTS on a two-parameter normal model, a jitted step in a Python loop.

``python -m kiln.as_jax examples/ecosystem/blackjax_nuts.py`` (kiln) or
``python examples/ecosystem/blackjax_nuts.py`` (JAX). Prints JSON on its last line.
"""
import json

import blackjax
import jax
import jax.numpy as jnp
import jax.scipy.stats as stats
import numpy as np

data = np.random.default_rng(5).normal(3.0, 2.0, size=50).astype(np.float32)


def logdensity(params):
    return jnp.sum(stats.norm.logpdf(data, params["mu"], jnp.exp(params["log_sigma"])))


nuts = blackjax.nuts(logdensity, step_size=0.02, inverse_mass_matrix=jnp.array([1.0, 1.0]))
state = nuts.init({"mu": 0.0, "log_sigma": 0.0})
step = jax.jit(nuts.step)
key = jax.random.key(4)
mus = []
for i in range(40):
    state, info = step(jax.random.fold_in(key, i), state)
    mus.append(float(state.position["mu"]))
print(json.dumps({"mu": mus, "log_sigma": float(state.position["log_sigma"]),
                  "logdensity": float(state.logdensity)}))
