"""The Bernoulli distribution, as ``jax.scipy.stats.bernoulli``."""
import numpy as np

from kiln.scipy.special import xlog1py, xlogy
from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpmf(k, p, loc=0):
    k, p, loc = promote_args_inexact("bernoulli.logpmf", k, p, loc)
    zero, one = _const(k, 0), _const(k, 1)
    x = lax.sub(k, loc)
    log_probs = xlogy(x, p) + xlog1py(lax.sub(one, x), -p)
    return jnp.where(jnp.logical_or(lax.lt(x, zero), lax.gt(x, one)), -np.inf, log_probs)


def pmf(k, p, loc=0):
    return jnp.exp(logpmf(k, p, loc))


def cdf(k, p):
    k, p = promote_args_inexact("bernoulli.cdf", k, p)
    zero, one = _const(k, 0), _const(k, 1)
    conds = [jnp.isnan(k) | jnp.isnan(p) | (p < zero) | (p > one),
             lax.lt(k, zero),
             jnp.logical_and(lax.ge(k, zero), lax.lt(k, one)),
             lax.ge(k, one)]
    vals = [jnp.nan, zero, one - p, one]
    return jnp.select(conds, vals)


def ppf(q, p):
    q, p = promote_args_inexact("bernoulli.ppf", q, p)
    zero, one = _const(q, 0), _const(q, 1)
    return jnp.where(
        jnp.isnan(q) | jnp.isnan(p) | (p < zero) | (p > one) | (q < zero) | (q > one),
        jnp.nan, jnp.where(lax.le(q, one - p), zero, one))
