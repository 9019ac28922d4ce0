"""The truncated normal distribution, as ``jax.scipy.stats.truncnorm``."""
import numpy as np

from kiln.scipy.special import log_ndtr, logsumexp, ndtr
from kiln.scipy.stats import norm
from kiln.scipy.stats._common import jnp, lax, promote_args_inexact


def _log_diff(x, y):
    return logsumexp(jnp.array([x, y]), b=jnp.array([jnp.ones_like(x), -jnp.ones_like(y)]),
                     axis=0)


def _log_gauss_mass(a, b):
    """``log(ndtr(b) - ndtr(a))``, computed in whichever tail keeps precision."""
    a, b = jnp.broadcast_arrays(jnp.array(a), jnp.array(b))
    case_left = b <= 0
    case_right = a > 0
    case_central = ~(case_left | case_right)
    a_tail = jnp.where(case_right, -b, a)
    b_tail = jnp.where(case_right, -a, b)
    mass_tail = _log_diff(log_ndtr(b_tail), log_ndtr(a_tail))
    mass_central = jnp.log1p(-ndtr(a) - ndtr(-b))
    return jnp.where(case_central, mass_central, mass_tail)


def logpdf(x, a, b, loc=0, scale=1):
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logpdf", x, a, b, loc, scale)
    val = lax.sub(norm.logpdf(x, loc, scale), _log_gauss_mass(a, b))
    x_scaled = lax.div(lax.sub(x, loc), scale)
    val = jnp.where((x_scaled < a) | (x_scaled > b), -np.inf, val)
    return jnp.where(a >= b, np.nan, val)


def pdf(x, a, b, loc=0, scale=1):
    return lax.exp(logpdf(x, a, b, loc, scale))


def logsf(x, a, b, loc=0, scale=1):
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logsf", x, a, b, loc, scale)
    return logcdf(-x, -b, -a, -loc, scale)


def sf(x, a, b, loc=0, scale=1):
    return lax.exp(logsf(x, a, b, loc, scale))


def logcdf(x, a, b, loc=0, scale=1):
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logcdf", x, a, b, loc, scale)
    x, a, b = jnp.broadcast_arrays(x, a, b)
    x = lax.div(lax.sub(x, loc), scale)
    lgm_ab = _log_gauss_mass(a, b)
    logcdf = _log_gauss_mass(a, x) - lgm_ab
    logsf = _log_gauss_mass(x, b) - lgm_ab
    logcdf = jnp.select([x >= b, x <= a, logcdf > -0.1, x > a],
                        [0, -np.inf, jnp.log1p(-jnp.exp(logsf)), logcdf])
    return jnp.where(a >= b, np.nan, logcdf)


def cdf(x, a, b, loc=0, scale=1):
    return lax.exp(logcdf(x, a, b, loc, scale))
