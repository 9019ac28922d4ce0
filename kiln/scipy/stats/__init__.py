"""``kiln.scipy.stats``: probability distributions and statistics, as ``jax.scipy.stats``.

Each distribution is a module (``norm.logpdf``, ``poisson.pmf``, ...); ``gaussian_kde`` is
the kernel density estimator class.
"""
from kiln.scipy.stats import (  # noqa: F401
    bernoulli,
    beta,
    betabinom,
    binom,
    cauchy,
    chi2,
    dirichlet,
    expon,
    gamma,
    gennorm,
    geom,
    gumbel_l,
    gumbel_r,
    laplace,
    logistic,
    multinomial,
    multivariate_normal,
    nbinom,
    norm,
    pareto,
    poisson,
    t,
    truncnorm,
    uniform,
    vonmises,
    wrapcauchy,
)
from kiln.scipy.stats._core import ModeResult, mode, rankdata, sem  # noqa: F401
from kiln.scipy.stats.kde import gaussian_kde  # noqa: F401
