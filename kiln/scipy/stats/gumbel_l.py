"""The left-skewed Gumbel distribution, as ``jax.scipy.stats.gumbel_l``."""
import numpy as np

from kiln.scipy.special import xlog1py, xlogy
from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpdf(x, loc=0, scale=1):
    x, loc, scale = promote_args_inexact("gumbel_l.logpdf", x, loc, scale)
    ok = lax.gt(scale, _const(scale, 0))
    z = lax.div(lax.sub(x, loc), scale)
    log_pdf = lax.add(xlogy(-1, scale), lax.sub(z, lax.exp(z)))
    return jnp.where(ok, log_pdf, np.nan)


def pdf(x, loc=0, scale=1):
    return lax.exp(logpdf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    x, loc, scale = promote_args_inexact("gumbel_l.logcdf", x, loc, scale)
    ok = lax.gt(scale, _const(scale, 0))
    z = lax.div(lax.sub(x, loc), scale)
    log_cdf = lax.log(-lax.expm1(lax.neg(lax.exp(z))))
    return jnp.where(ok, log_cdf, np.nan)


def cdf(x, loc=0, scale=1):
    return lax.exp(logcdf(x, loc, scale))


def ppf(p, loc=0, scale=1):
    p, loc, scale = promote_args_inexact("gumbel_l.ppf", p, loc, scale)
    ok = lax.bitwise_and(lax.gt(p, _const(p, 0)), lax.lt(p, _const(p, 1)))
    t = lax.mul(scale, lax.log(xlog1py(-1, lax.neg(p))))
    return jnp.where(ok, lax.add(loc, t), np.nan)


def sf(x, loc=0, scale=1):
    return jnp.exp(logsf(x, loc, scale))


def logsf(x, loc=0, scale=1):
    x, loc, scale = promote_args_inexact("gumbel_l.logsf", x, loc, scale)
    ok = lax.gt(scale, _const(scale, 0))
    z = lax.div(lax.sub(x, loc), scale)
    return jnp.where(ok, lax.neg(lax.exp(z)), np.nan)
