"""The right-skewed Gumbel distribution, as ``jax.scipy.stats.gumbel_r``."""
import numpy as np

from kiln.scipy.special import xlogy
from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpdf(x, loc=0, scale=1):
    x, loc, scale = promote_args_inexact("gumbel_r.logpdf", x, loc, scale)
    ok = lax.gt(scale, _const(scale, 0))
    z = lax.div(lax.sub(x, loc), scale)
    log_pdf = lax.add(xlogy(-1, scale), lax.neg(lax.add(z, lax.exp(lax.neg(z)))))
    return jnp.where(ok, log_pdf, np.nan)


def pdf(x, loc=0, scale=1):
    return lax.exp(logpdf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    x, loc, scale = promote_args_inexact("gumbel_r.logcdf", x, loc, scale)
    ok = lax.gt(scale, _const(scale, 0))
    z = lax.div(lax.sub(x, loc), scale)
    return jnp.where(ok, lax.neg(lax.exp(lax.neg(z))), np.nan)


def cdf(x, loc=0, scale=1):
    return lax.exp(logcdf(x, loc, scale))


def ppf(p, loc=0, scale=1):
    p, loc, scale = promote_args_inexact("gumbel_r.ppf", p, loc, scale)
    ok = lax.bitwise_and(lax.gt(p, _const(p, 0)), lax.lt(p, _const(p, 1)))
    t = lax.mul(scale, lax.log(xlogy(-1, p)))
    return jnp.where(ok, lax.sub(loc, t), np.nan)


def sf(x, loc=0, scale=1):
    x, loc, scale = promote_args_inexact("gumbel_r.sf", x, loc, scale)
    ok = lax.gt(scale, _const(scale, 0))
    neg_z = lax.div(lax.sub(loc, x), scale)
    _sf = lax.sub(_const(x, 1), lax.exp(lax.neg(lax.exp(neg_z))))
    return jnp.where(ok, _sf, np.nan)


def logsf(x, loc=0, scale=1):
    from kiln.nn.functions import log1mexp
    x, loc, scale = promote_args_inexact("gumbel_r.logsf", x, loc, scale)
    ok = lax.gt(scale, _const(scale, 0))
    neg_z = lax.div(lax.sub(loc, x), scale)
    return jnp.where(ok, log1mexp(lax.exp(neg_z)), np.nan)
