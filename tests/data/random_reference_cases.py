"""The sampler calls whose outputs are checked against JAX's, bit for bit.

Shared by ``make_random_reference.py`` (which runs them with ``jax.random`` and
stores the outputs in ``random_reference.npz``) and the tests (which run them with
``kiln.random``). Each case is ``(name, fn, kind)``: ``fn(r, key)`` uses only the
API common to both modules (``r`` is ``jax.random`` or ``kiln.random``, ``key`` a
legacy key of seed 1234 unless the case makes its own).

``kind``:
  * ``"exact"``: kiln computes JAX's bits on any machine (XLA's float arithmetic is
    emulated in software).
  * ``"hw"``: JAX's bits depend on the processor (XLA's rsqrt uses the CPU's
    reciprocal-square-root estimate; LAPACK's kernels differ between processors):
    exact where kiln's native kernel runs on the processor the reference was made
    on, within a few ulps elsewhere.
  * ``"close"``: XLA's vectorized reductions of large inputs use an exp kernel kiln
    does not reproduce, and whether XLA fuses a matrix product's multiply-adds into FMAs
    depends on the processor; equal to a few ulps.
"""
import numpy as np

F32 = np.float32


def _cov():
    return np.array([[2.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 1.5]], F32)


CASES = [
    # keys
    ("split", lambda r, k: r.split(k), "exact"),
    ("split_5", lambda r, k: r.split(k, 5), "exact"),
    ("split_shape", lambda r, k: r.split(k, (2, 3)), "exact"),
    ("fold_in", lambda r, k: r.fold_in(k, 77), "exact"),
    ("fold_in_big", lambda r, k: r.fold_in(k, 2 ** 32 - 1), "exact"),
    ("key_data", lambda r, k: r.key_data(r.split(r.key(7), 3)), "exact"),
    ("prngkey_neg", lambda r, k: r.PRNGKey(-5), "exact"),
    ("prngkey_big", lambda r, k: r.PRNGKey(2 ** 40 + 3), "exact"),
    ("prngkey_int8", lambda r, k: r.PRNGKey(np.int8(-3)), "exact"),
    ("split_fold_chain", lambda r, k: r.split(r.fold_in(r.split(k)[1], 3), 4), "exact"),
    # bits
    ("bits_u8", lambda r, k: r.bits(k, (7, 13), "uint8"), "exact"),
    ("bits_u16", lambda r, k: r.bits(k, (5, 3), "uint16"), "exact"),
    ("bits_u32", lambda r, k: r.bits(k, (9, 11), "uint32"), "exact"),
    ("bits_default", lambda r, k: r.bits(k, (17,)), "exact"),
    ("bits_scalar", lambda r, k: r.bits(k), "exact"),
    ("bits_odd", lambda r, k: r.bits(k, (3, 5), "uint32"), "exact"),
    # uniform / normal
    ("uniform", lambda r, k: r.uniform(k, (64,)), "exact"),
    ("uniform_f16", lambda r, k: r.uniform(k, (64,), "float16"), "exact"),
    ("uniform_bf16", lambda r, k: r.uniform(k, (64,), "bfloat16"), "exact"),
    ("uniform_f32", lambda r, k: r.uniform(k, (64,), "float32"), "exact"),
    ("uniform_minmax", lambda r, k: r.uniform(k, (64,), minval=-0.3, maxval=1.7), "exact"),
    ("uniform_arr_bounds", lambda r, k: r.uniform(
        k, (3, 4), minval=np.linspace(0, 1, 4).astype(F32), maxval=F32(3.3)), "exact"),
    ("normal", lambda r, k: r.normal(k, (64,)), "exact"),
    ("normal_f16", lambda r, k: r.normal(k, (32,), "float16"), "exact"),
    ("normal_bf16", lambda r, k: r.normal(k, (32,), "bfloat16"), "exact"),
    ("normal_2d", lambda r, k: r.normal(k, (4, 6)), "exact"),
    ("normal_c64", lambda r, k: r.normal(k, (16,), "complex64"), "exact"),
    ("truncated_normal", lambda r, k: r.truncated_normal(k, -1.5, 2.0, (64,)), "exact"),
    ("truncated_normal_arr", lambda r, k: r.truncated_normal(
        k, np.array([-1., 0.], F32), np.array([1., 3.], F32), (5, 2)), "exact"),
    ("multivariate_normal", lambda r, k: r.multivariate_normal(
        k, np.array([0.3, -1, 2], F32), _cov(), (20,)), "close"),
    ("multivariate_normal_eigh", lambda r, k: r.multivariate_normal(
        k, np.zeros(3, F32), _cov(), (20,), method="eigh"), "close"),
    ("multivariate_normal_svd", lambda r, k: r.multivariate_normal(
        k, np.zeros(3, F32), _cov(), (20,), method="svd"), "close"),
    ("lognormal", lambda r, k: r.lognormal(k, 0.7, (64,)), "exact"),
    ("lognormal_arr", lambda r, k: r.lognormal(k, np.linspace(0.1, 2, 8).astype(F32)), "exact"),
    # integers
    ("randint", lambda r, k: r.randint(k, (64,), 0, 100), "exact"),
    ("randint_neg", lambda r, k: r.randint(k, (64,), -1000, 7), "exact"),
    ("randint_full", lambda r, k: r.randint(k, (64,), -2 ** 31, 2 ** 31 - 1), "exact"),
    ("randint_u8_256", lambda r, k: r.randint(k, (64,), 0, 256, "uint8"), "exact"),
    ("randint_i16", lambda r, k: r.randint(k, (64,), -5, 5, "int16"), "exact"),
    ("randint_u32", lambda r, k: r.randint(k, (64,), 3, np.uint32(2 ** 31 + 5), "uint32"), "exact"),
    ("randint_arr", lambda r, k: r.randint(k, (3, 4), np.arange(4), 10), "exact"),
    ("randint_empty_range", lambda r, k: r.randint(k, (8,), 5, 5), "exact"),
    ("bernoulli", lambda r, k: r.bernoulli(k, 0.3, (64,)), "exact"),
    ("bernoulli_high", lambda r, k: r.bernoulli(k, 0.3, (64,), mode="high"), "exact"),
    ("bernoulli_arr", lambda r, k: r.bernoulli(k, np.linspace(0, 1, 16).astype(F32)), "exact"),
    ("rademacher", lambda r, k: r.rademacher(k, (64,)), "exact"),
    ("rademacher_f32", lambda r, k: r.rademacher(k, (16,), "float32"), "exact"),
    ("geometric", lambda r, k: r.geometric(k, 0.3, (64,)), "exact"),
    ("geometric_arr", lambda r, k: r.geometric(k, np.linspace(0.05, 0.95, 16).astype(F32)),
     "exact"),
    # permutations, choices, categorical
    ("permutation_int", lambda r, k: r.permutation(k, 100), "exact"),
    ("permutation_big", lambda r, k: r.permutation(k, 2000), "exact"),
    ("permutation_arr", lambda r, k: r.permutation(k, np.arange(20).reshape(4, 5), axis=1),
     "exact"),
    ("permutation_independent", lambda r, k: r.permutation(
        k, np.arange(20).reshape(4, 5), axis=1, independent=True), "exact"),
    ("choice", lambda r, k: r.choice(k, 10, (20,)), "exact"),
    ("choice_arr", lambda r, k: r.choice(k, np.arange(30.).reshape(10, 3).astype(F32), (4,)),
     "exact"),
    ("choice_axis1", lambda r, k: r.choice(k, np.arange(30).reshape(3, 10), (2, 2), axis=1),
     "exact"),
    ("choice_noreplace", lambda r, k: r.choice(k, 10, (5,), replace=False), "exact"),
    ("choice_p", lambda r, k: r.choice(k, 10, (20,), p=np.linspace(0.1, 1, 10).astype(F32)),
     "exact"),
    ("choice_p_noreplace", lambda r, k: r.choice(
        k, 10, (5,), replace=False, p=np.linspace(0.1, 1, 10).astype(F32)), "exact"),
    ("categorical", lambda r, k: r.categorical(
        k, np.log(np.linspace(0.1, 1, 7)).astype(F32), shape=(64,)), "exact"),
    ("categorical_axis0", lambda r, k: r.categorical(
        k, np.random.RandomState(0).randn(4, 6).astype(F32), axis=0), "exact"),
    ("categorical_noreplace", lambda r, k: r.categorical(
        k, np.random.RandomState(0).randn(4, 6).astype(F32), shape=(3, 4), replace=False),
     "exact"),
    # one-uniform transforms
    ("cauchy", lambda r, k: r.cauchy(k, (64,)), "exact"),
    ("exponential", lambda r, k: r.exponential(k, (64,)), "exact"),
    ("gumbel", lambda r, k: r.gumbel(k, (64,)), "exact"),
    ("gumbel_high", lambda r, k: r.gumbel(k, (64,), mode="high"), "exact"),
    ("gumbel_highest", lambda r, k: r.gumbel(k, (64,), mode="highest"), "exact"),
    ("laplace", lambda r, k: r.laplace(k, (64,)), "exact"),
    ("logistic", lambda r, k: r.logistic(k, (64,)), "exact"),
    ("pareto", lambda r, k: r.pareto(k, 2.5, (64,)), "exact"),
    ("pareto_arr", lambda r, k: r.pareto(k, np.linspace(1, 4, 16).astype(F32)), "exact"),
    ("maxwell", lambda r, k: r.maxwell(k, (64,)), "exact"),
    ("maxwell_large", lambda r, k: r.maxwell(k, (1500,)), "exact"),
    ("double_sided_maxwell", lambda r, k: r.double_sided_maxwell(k, 1.5, 2.5, (64,)), "exact"),
    ("weibull_min", lambda r, k: r.weibull_min(k, 1.5, 2.3, (64,)), "exact"),
    ("rayleigh", lambda r, k: r.rayleigh(k, 1.7, (64,)), "exact"),
    ("wald", lambda r, k: r.wald(k, 1.3, (64,)), "exact"),
    ("triangular", lambda r, k: r.triangular(k, -1., 0.3, 2., (64,)), "exact"),
    ("orthogonal", lambda r, k: r.orthogonal(k, 4, (2,)), "hw"),
    ("orthogonal_rect", lambda r, k: r.orthogonal(k, 3, m=5), "hw"),
    # gamma family (XLA's rsqrt in the Marsaglia-Tsang constant)
    ("gamma", lambda r, k: r.gamma(k, 2.5, (64,)), "hw"),
    ("gamma_small", lambda r, k: r.gamma(k, 0.3, (64,)), "hw"),
    ("gamma_arr", lambda r, k: r.gamma(k, np.linspace(0.1, 5, 64).astype(F32)), "hw"),
    ("gamma_scalar", lambda r, k: r.gamma(k, 1.7), "hw"),
    ("loggamma", lambda r, k: r.loggamma(k, 0.3, (64,)), "hw"),
    ("loggamma_arr", lambda r, k: r.loggamma(k, np.linspace(0.01, 5, 64).astype(F32)), "hw"),
    ("beta", lambda r, k: r.beta(k, 2.0, 3.0, (64,)), "hw"),
    ("beta_arr", lambda r, k: r.beta(k, np.linspace(0.1, 5, 16).astype(F32), 0.7), "hw"),
    ("dirichlet", lambda r, k: r.dirichlet(k, np.array([0.5, 1.0, 2.0], F32), (20,)), "hw"),
    ("t", lambda r, k: r.t(k, 3.0, (64,)), "hw"),
    ("chisquare", lambda r, k: r.chisquare(k, 4.0, (64,)), "hw"),
    ("f", lambda r, k: r.f(k, 3.0, 5.0, (64,)), "hw"),
    ("generalized_normal", lambda r, k: r.generalized_normal(k, 1.5, (64,)), "hw"),
    ("ball", lambda r, k: r.ball(k, 3, 2, (20,)), "hw"),
    # rejection samplers with whole-sample loops
    ("poisson", lambda r, k: r.poisson(k, 3.0, (64,)), "exact"),
    ("poisson_large_rate", lambda r, k: r.poisson(k, 50.0, (64,)), "exact"),
    ("poisson_arr", lambda r, k: r.poisson(k, np.linspace(0, 100, 64).astype(F32)), "exact"),
    ("poisson_scalar", lambda r, k: r.poisson(k, 12.0), "exact"),
    ("binomial", lambda r, k: r.binomial(k, 10, 0.3, (64,)), "exact"),
    ("binomial_large", lambda r, k: r.binomial(k, 1000, 0.3, (64,)), "exact"),
    ("binomial_p_high", lambda r, k: r.binomial(k, 1000, 0.8, (64,)), "exact"),
    ("binomial_arr", lambda r, k: r.binomial(k, np.arange(64).astype(F32) * 10, 0.4), "exact"),
    ("binomial_arr_p", lambda r, k: r.binomial(k, 200., np.linspace(0, 1, 64).astype(F32)),
     "exact"),
    ("multinomial", lambda r, k: r.multinomial(k, 100., np.array([0.2, 0.3, 0.5], F32)),
     "exact"),
    ("multinomial_batch", lambda r, k: r.multinomial(
        k, np.array([10., 500.], F32), np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], F32)),
     "exact"),
]

CONFIGS = [(x64, part) for x64 in (False, True) for part in (True, False)]


def config_name(x64, partitionable):
    return f"{'x64' if x64 else 'x32'}_{'part' if partitionable else 'orig'}"


SEED = 1234
