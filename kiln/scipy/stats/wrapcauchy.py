"""The wrapped Cauchy distribution, as ``jax.scipy.stats.wrapcauchy``."""
import numpy as np

from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpdf(x, c):
    x, c = promote_args_inexact("wrapcauchy.logpdf", x, c)
    return jnp.where(
        lax.gt(c, _const(c, 0)) & lax.lt(c, _const(c, 1)),
        jnp.where(lax.ge(x, _const(x, 0)) & lax.le(x, _const(x, np.pi * 2)),
                  jnp.log(1 - c * c) - jnp.log(2 * np.pi)
                  - jnp.log(1 + c * c - 2 * c * jnp.cos(x)),
                  -np.inf),
        np.nan)


def pdf(x, c):
    return lax.exp(logpdf(x, c))
