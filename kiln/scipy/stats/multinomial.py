"""The multinomial distribution, as ``jax.scipy.stats.multinomial``."""
import numpy as np

from kiln.numpy._util import check_arraylike, promote_dtypes_numeric
from kiln.scipy.special import gammaln, xlogy
from kiln.scipy.stats._common import dtypes, jnp, lax, promote_args_inexact


def logpmf(x, n, p):
    p, = promote_args_inexact("multinomial.logpmf", p)
    check_arraylike("multinomial.logpmf", x, n)
    # Dtype promotion only: n stays a scalar next to a vector x (as JAX's rank promotion).
    x, n = promote_dtypes_numeric(x, n)
    if not dtypes.issubdtype(x.dtype, np.integer):
        raise ValueError(f"x and n must be of integer type; got x.dtype={x.dtype}, "
                         f"n.dtype={n.dtype}")
    x = x.astype(p.dtype)
    n = n.astype(p.dtype)
    logprobs = gammaln(n + 1) + jnp.sum(xlogy(x, p) - gammaln(x + 1), axis=-1)
    return jnp.where(jnp.equal(jnp.sum(x), n), logprobs, -np.inf)


def pmf(x, n, p):
    return lax.exp(logpmf(x, n, p))
