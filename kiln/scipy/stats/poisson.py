"""The Poisson distribution, as ``jax.scipy.stats.poisson``."""
import numpy as np

from kiln.numpy._util import ensure_arraylike
from kiln.scipy.special import entr, gammaincc, gammaln, xlogy
from kiln.scipy.stats._common import _const, jnp, lax, promote_args_inexact, promote_dtypes_inexact


def logpmf(k, mu, loc=0):
    k, mu, loc = promote_args_inexact("poisson.logpmf", k, mu, loc)
    x = lax.sub(k, loc)
    log_probs = xlogy(x, mu) - gammaln(x + 1) - mu
    return jnp.where(jnp.logical_or(lax.lt(x, _const(k, 0)), lax.ne(jnp.round(k), k)),
                     -np.inf, log_probs)


def pmf(k, mu, loc=0):
    return jnp.exp(logpmf(k, mu, loc))


def cdf(k, mu, loc=0):
    k, mu, loc = promote_args_inexact("poisson.logpmf", k, mu, loc)
    zero = _const(k, 0)
    x = lax.sub(k, loc)
    p = gammaincc(jnp.floor(1 + x), mu)
    return jnp.where(lax.lt(x, zero), zero, p)


def entropy(mu, loc=0):
    """The entropy of the Poisson distribution (``loc`` only broadcasts)."""
    mu, loc = ensure_arraylike("poisson.entropy", mu, loc)
    mu, loc = promote_dtypes_inexact(mu, loc)
    result_shape = jnp.broadcast_shapes(mu.shape, loc.shape)
    mu_flat = jnp.ravel(mu)
    result = jnp.where(
        mu_flat == 0, jnp.zeros_like(mu_flat),
        jnp.where(mu_flat < 10, _entropy_sum(mu_flat, 35, mu_flat + 20),
                  jnp.where(mu_flat < 100,
                            _entropy_sum(mu_flat, 250, mu_flat + 10 * jnp.sqrt(mu_flat) + 20),
                            0.5 * jnp.log(2 * np.pi * np.e * mu_flat) - 1.0 / (12 * mu_flat))))
    return jnp.broadcast_to(jnp.reshape(result, mu.shape), result_shape)


def _entropy_sum(mu, max_k, upper):
    # Sum -p log p over k < min(max_k, ceil(upper)) (a static bound for jit).
    k = jnp.arange(max_k, dtype=mu.dtype)[:, None]
    probs = pmf(k, mu, 0)
    mask = k < jnp.ceil(upper).astype(k.dtype)[None, :]
    return jnp.sum(entr(jnp.where(mask, probs, 0.0)), axis=0)
