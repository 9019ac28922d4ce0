"""``kiln.random``: JAX's counter-based PRNG (Threefry-2x32), bit for bit.

Keys are typed (``key(seed)``, dtype ``key<fry>``) or legacy (``PRNGKey(seed)``, a
``uint32[2]`` array); every sampler takes either. Splitting, folding-in and the
bits behind every sampler follow JAX in both settings of
``jax_threefry_partitionable``. See docs/random.md.
"""
from kiln.random import _out_sharding, prng  # noqa: F401
from kiln.random._distributions import (  # noqa: F401
    bernoulli,
    bits,
    categorical,
    cauchy,
    choice,
    double_sided_maxwell,
    exponential,
    geometric,
    gumbel,
    laplace,
    logistic,
    lognormal,
    maxwell,
    multivariate_normal,
    normal,
    orthogonal,
    pareto,
    permutation,
    rademacher,
    randint,
    rayleigh,
    shuffle,
    triangular,
    truncated_normal,
    uniform,
    wald,
    weibull_min,
)
from kiln.random._gamma import (  # noqa: F401
    ball,
    beta,
    binomial,
    chisquare,
    dirichlet,
    f,
    gamma,
    generalized_normal,
    loggamma,
    multinomial,
    poisson,
    random_gamma_p,
    t,
)
from kiln.random._keys import (  # noqa: F401
    KeyTy,
    PRNGImpl,
    PRNGKey,
    PRNGKeyArray,
    PRNGSpec,
    clone,
    default_prng_impl,
    fold_in,
    key,
    key_data,
    key_dtype,
    key_impl,
    resolve_prng_impl,
    split,
    wrap_key_data,
)
from kiln.random._threefry import threefry2x32_p, threefry_2x32  # noqa: F401

# Samplers with ``out_sharding=``: the result laid out as asked (``_out_sharding``).
for _name in ("bernoulli", "bits", "categorical", "cauchy", "choice", "double_sided_maxwell",
              "exponential", "geometric", "gumbel", "laplace", "logistic", "lognormal",
              "maxwell", "multivariate_normal", "normal", "orthogonal", "pareto",
              "permutation", "rademacher", "randint", "rayleigh", "shuffle", "triangular",
              "truncated_normal", "uniform", "wald", "weibull_min", "ball", "beta", "binomial",
              "chisquare", "dirichlet", "f", "gamma", "generalized_normal", "loggamma",
              "multinomial", "poisson", "t"):
    globals()[_name] = _out_sharding.obeying_out_sharding(globals()[_name])
del _name
