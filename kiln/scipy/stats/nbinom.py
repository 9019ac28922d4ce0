"""The negative binomial distribution, as ``jax.scipy.stats.nbinom``."""
import numpy as np

from kiln.scipy.special import gammaln, xlogy
from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpmf(k, n, p, loc=0):
    k, n, p, loc = promote_args_inexact("nbinom.logpmf", k, n, p, loc)
    one = _const(k, 1)
    y = lax.sub(k, loc)
    comb_term = lax.sub(lax.sub(gammaln(lax.add(y, n)), gammaln(n)), gammaln(lax.add(y, one)))
    log_linear_term = lax.add(xlogy(n, p), xlogy(y, lax.sub(one, p)))
    return jnp.where(lax.lt(k, loc), -np.inf, lax.add(comb_term, log_linear_term))


def pmf(k, n, p, loc=0):
    return lax.exp(logpmf(k, n, p, loc))
