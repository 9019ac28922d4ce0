"""The chi-squared distribution, as ``jax.scipy.stats.chi2``."""
import numpy as np

from kiln.scipy.special import gammainc, gammaincc
from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpdf(x, df, loc=0, scale=1):
    x, df, loc, scale = promote_args_inexact("chi2.logpdf", x, df, loc, scale)
    one, two = _const(x, 1), _const(x, 2)
    y = lax.div(lax.sub(x, loc), scale)
    df_on_two = lax.div(df, two)
    kernel = lax.sub(lax.mul(lax.sub(df_on_two, one), lax.log(y)), lax.div(y, two))
    nrml_cnst = lax.neg(lax.add(lax.lgamma(df_on_two), lax.div(lax.mul(lax.log(two), df), two)))
    log_probs = lax.add(lax.sub(nrml_cnst, lax.log(scale)), kernel)
    return jnp.where(lax.lt(x, loc), -np.inf, log_probs)


def pdf(x, df, loc=0, scale=1):
    return lax.exp(logpdf(x, df, loc, scale))


def _half_y(x, loc, scale):
    two = _const(scale, 2)
    return lax.clamp(_const(x, 0), lax.div(lax.sub(x, loc), lax.mul(scale, two)),
                     _const(x, np.inf))


def cdf(x, df, loc=0, scale=1):
    x, df, loc, scale = promote_args_inexact("chi2.cdf", x, df, loc, scale)
    return gammainc(lax.div(df, _const(scale, 2)), _half_y(x, loc, scale))


def logcdf(x, df, loc=0, scale=1):
    return lax.log(cdf(x, df, loc, scale))


def sf(x, df, loc=0, scale=1):
    x, df, loc, scale = promote_args_inexact("chi2.sf", x, df, loc, scale)
    return gammaincc(lax.div(df, _const(scale, 2)), _half_y(x, loc, scale))


def logsf(x, df, loc=0, scale=1):
    return lax.log(sf(x, df, loc, scale))
