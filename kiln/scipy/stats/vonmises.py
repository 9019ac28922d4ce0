"""The von Mises distribution, as ``jax.scipy.stats.vonmises``."""
import numpy as np

from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpdf(x, kappa):
    x, kappa = promote_args_inexact("vonmises.logpdf", x, kappa)
    zero = _const(kappa, 0)
    return jnp.where(lax.gt(kappa, zero),
                     kappa * (jnp.cos(x) - 1) - jnp.log(2 * np.pi * lax.bessel_i0e(kappa)),
                     np.nan)


def pdf(x, kappa):
    return lax.exp(logpdf(x, kappa))
