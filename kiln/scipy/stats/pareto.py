"""The Pareto distribution, as ``jax.scipy.stats.pareto``."""
import numpy as np

from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact


def logpdf(x, b, loc=0, scale=1):
    x, b, loc, scale = promote_args_inexact("pareto.logpdf", x, b, loc, scale)
    one = _const(x, 1)
    scaled_x = lax.div(lax.sub(x, loc), scale)
    normalize_term = lax.log(lax.div(scale, b))
    log_probs = lax.neg(lax.add(normalize_term, lax.mul(lax.add(b, one), lax.log(scaled_x))))
    return jnp.where(lax.lt(x, lax.add(loc, scale)), -np.inf, log_probs)


def pdf(x, b, loc=0, scale=1):
    return lax.exp(logpdf(x, b, loc, scale))


def cdf(x, b, loc=0, scale=1):
    x, b, loc, scale = promote_args_inexact("pareto.cdf", x, b, loc, scale)
    scaled_x = lax.div(lax.sub(x, loc), scale)
    val = lax.sub(_const(x, 1), lax.pow(scaled_x, lax.neg(b)))
    return jnp.where(lax.lt(x, lax.add(loc, scale)), _const(x, 0), val)


def logcdf(x, b, loc=0, scale=1):
    x, b, loc, scale = promote_args_inexact("pareto.logcdf", x, b, loc, scale)
    scaled_x = lax.div(lax.sub(x, loc), scale)
    val = lax.log1p(lax.neg(lax.pow(scaled_x, lax.neg(b))))
    return jnp.where(lax.lt(x, lax.add(loc, scale)), -np.inf, val)


def logsf(x, b, loc=0, scale=1):
    x, b, loc, scale = promote_args_inexact("pareto.logsf", x, b, loc, scale)
    scaled_x = lax.div(lax.sub(x, loc), scale)
    val = lax.neg(lax.mul(b, lax.log(scaled_x)))
    return jnp.where(lax.lt(x, lax.add(loc, scale)), _const(x, 0), val)


def sf(x, b, loc=0, scale=1):
    return lax.exp(logsf(x, b, loc, scale))


def ppf(q, b, loc=0, scale=1):
    q, b, loc, scale = promote_args_inexact("pareto.ppf", q, b, loc, scale)
    one = _const(q, 1)
    val = lax.add(loc, lax.mul(scale, lax.pow(lax.sub(one, q), lax.neg(lax.div(one, b)))))
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), np.nan, val)
