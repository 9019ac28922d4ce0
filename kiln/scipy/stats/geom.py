"""The geometric distribution, as ``jax.scipy.stats.geom``."""
import numpy as np

from kiln.scipy.special import xlog1py
from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpmf(k, p, loc=0):
    k, p, loc = promote_args_inexact("geom.logpmf", k, p, loc)
    zero, one = _const(k, 0), _const(k, 1)
    x = lax.sub(k, loc)
    log_probs = xlog1py(lax.sub(x, one), -p) + lax.log(p)
    return jnp.where(lax.le(x, zero), -np.inf, log_probs)


def pmf(k, p, loc=0):
    return jnp.exp(logpmf(k, p, loc))
