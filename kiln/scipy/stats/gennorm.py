"""The generalized normal distribution, as ``jax.scipy.stats.gennorm``."""
from kiln.scipy.stats._common import lax, promote_args_inexact


def logpdf(x, beta):
    x, beta = promote_args_inexact("gennorm.logpdf", x, beta)
    return lax.log(.5 * beta) - lax.lgamma(1 / beta) - lax.abs(x) ** beta


def cdf(x, beta):
    x, beta = promote_args_inexact("gennorm.cdf", x, beta)
    return .5 * (1 + lax.sign(x) * lax.igamma(1 / beta, lax.abs(x) ** beta))


def pdf(x, beta):
    return lax.exp(logpdf(x, beta))
