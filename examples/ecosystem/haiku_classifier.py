"""dm-haiku on kiln: a transformed MLP classifier, its parameters initialised and trained
with ``grad`` and ``jax.tree.map``.

``python -m kiln.as_jax examples/ecosystem/haiku_classifier.py`` (kiln) or
``python examples/ecosystem/haiku_classifier.py`` (JAX). Prints JSON on its last line.
"""
import json

import haiku as hk
import jax
import jax.numpy as jnp


def forward(x):
    net = hk.Sequential([hk.Linear(32), jax.nn.gelu, hk.Linear(16), jax.nn.relu,
                         hk.Linear(4)])
    return net(x)


def loss(params, x, labels):
    logits = model.apply(params, x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(labels, 4), -1))


model = hk.without_apply_rng(hk.transform(forward))
kx, kl, kp = jax.random.split(jax.random.PRNGKey(7), 3)
x = jax.random.normal(kx, (128, 8))
labels = jax.random.randint(kl, (128,), 0, 4)
params = model.init(kp, x)
update = jax.jit(lambda p, x, l: jax.tree.map(lambda a, g: a - 0.1 * g, p,
                                              jax.grad(loss)(p, x, l)))
losses = []
for _ in range(20):
    losses.append(float(loss(params, x, labels)))
    params = update(params, x, labels)
print(json.dumps({"losses": losses,
                  "param_sums": [float(jnp.sum(v)) for v in jax.tree.leaves(params)]}))
