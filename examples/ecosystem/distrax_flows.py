"""Distrax (with TensorFlow Probability's JAX substrate) on kiln: distributions,
a bijector chain, sampling and log-probabilities, agreeing with TFP.

``python -m kiln.as_jax examples/ecosystem/distrax_flows.py`` (kiln) or
``python examples/ecosystem/distrax_flows.py`` (JAX). Prints JSON on its last line.
"""
import json

import distrax
import jax
import jax.numpy as jnp
from tensorflow_probability.substrates import jax as tfp

tfd = tfp.distributions

loc = jnp.array([0.5, -1.0, 2.0])
scale = jnp.array([0.3, 1.5, 0.7])
mvn = distrax.MultivariateNormalDiag(loc, scale)
mvn_tfp = tfd.MultivariateNormalDiag(loc, scale)
key = jax.random.PRNGKey(11)
draws = mvn.sample(seed=key, sample_shape=(5,))

flow = distrax.Transformed(distrax.Normal(jnp.zeros(3), jnp.ones(3)),
                           distrax.Chain([distrax.ScalarAffine(shift=1.0, scale=2.0),
                                          distrax.Tanh()]))
fsamples, flogp = flow.sample_and_log_prob(seed=jax.random.PRNGKey(2), sample_shape=(4,))
grad_entropy = jax.grad(lambda s: distrax.Normal(0.0, s).entropy())(1.3)
print(json.dumps({
    "draws": draws.ravel().tolist(),
    "log_prob": mvn.log_prob(draws).tolist(),
    "log_prob_tfp": mvn_tfp.log_prob(draws).tolist(),
    "flow_samples": fsamples.ravel().tolist(),
    "flow_log_prob": flogp.ravel().tolist(),
    "grad_entropy": float(grad_entropy),
}))
