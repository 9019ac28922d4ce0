"""JAX's ``philox2x32``, ``philox4x32`` and ``threefry4x32`` PRNGs: keys, splits, fold-ins,
bits (all widths, x64 too) and samplers, bit for bit against JAX, eagerly and under
``jit``/``vmap``."""
import numpy as np
import pytest

import kiln
import kiln.numpy as kjnp
from kiln import random as krandom

jax = pytest.importorskip("jax")
import jax.numpy as jjnp  # noqa: E402
from jax import random as jrandom  # noqa: E402

IMPLS = ["philox2x32", "philox4x32", "threefry4x32"]


def _cases(jx, jnp, random, impl):
    k = random.key(42, impl=impl)
    ks = random.split(k, 3)
    cases = {f"key{seed}": (lambda s=seed: random.key(s, impl=impl))
             for seed in (0, -3, 2 ** 31 - 1)}
    cases.update({
        "PRNGKey": lambda: random.PRNGKey(42, impl=impl),
        "key_impl": lambda: str(random.key_impl(k)),
        "split": lambda: random.split(k, 3),
        "split_2d": lambda: random.split(k, (2, 3)),
        "fold_in": lambda: random.fold_in(k, 7),
        "bits8": lambda: random.bits(k, (3, 5), jnp.uint8),
        "bits16": lambda: random.bits(k, (3, 5), jnp.uint16),
        "bits32": lambda: random.bits(k, (3, 5)),
        "uniform": lambda: random.uniform(k, (6,)),
        "normal": lambda: random.normal(k, (2, 3)),
        "gamma": lambda: random.gamma(k, jnp.array([0.5, 3.0])),
        "binomial": lambda: random.binomial(k, 20, 0.3, (3,)),
        "poisson": lambda: random.poisson(k, 3.0, (3,)),
        "permutation": lambda: random.permutation(k, 8),
        "vmap_normal": lambda: jx.vmap(lambda k: random.normal(k, (2,)))(ks),
        "vmap_fold_in": lambda: jx.vmap(random.fold_in, (None, 0))(k, jnp.arange(3)),
        "vmap_binomial": lambda: jx.vmap(lambda k: random.binomial(k, 20, 0.3, (2,)))(ks),
        "jit_split": lambda: jx.jit(lambda k: random.split(k, 2))(k),
    })
    return cases


def _run(jx, random, f):
    try:
        r = f()
    except Exception as e:  # noqa: BLE001 - the class is compared with JAX's
        return ("raise", type(e).__name__)
    if hasattr(r, "dtype") and jx.dtypes.issubdtype(r.dtype, jx.dtypes.prng_key):
        return ("key", str(r.dtype), np.asarray(random.key_data(r)).tolist())
    if isinstance(r, str):
        return r
    return (str(r.dtype), np.asarray(r).tolist())


# philox2x32 in the default tier; the 4x32 PRNGs (~10-20 s each: JAX compiles every case)
# in the full tier (their keys and 64-bit bits are checked by test_counter_prngs_64_bit).
@pytest.mark.parametrize("impl", [pytest.param(i, marks=() if i == "philox2x32" else pytest.mark.slow)
                                  for i in IMPLS])
def test_counter_prngs_are_jax(impl):
    kc = _cases(kiln, kjnp, krandom, impl)
    jc = _cases(jax, jjnp, jrandom, impl)
    for name in jc:
        got, want = _run(kiln, krandom, kc[name]), _run(jax, jrandom, jc[name])
        if name == "gamma" and got[0] == want[0] == "float32":    # the rsqrt estimate's ulp
            np.testing.assert_allclose(got[1], want[1], rtol=2e-6)
            continue
        assert got == want, f"{impl} {name}: kiln {got} != jax {want}"


@pytest.mark.parametrize("impl", IMPLS)
def test_counter_prngs_64_bit(impl):
    with jax.enable_x64(True), kiln.enable_x64(True):
        for seed in (5, 2 ** 40 + 3):
            kk, jk = krandom.key(seed, impl=impl), jrandom.key(seed, impl=impl)
            np.testing.assert_array_equal(np.asarray(krandom.key_data(kk)),
                                          np.asarray(jrandom.key_data(jk)))
            kb = krandom.bits(kk, (4,), kjnp.uint64)
            jb = jrandom.bits(jk, (4,), jjnp.uint64)
            assert kb.dtype == jb.dtype == np.uint64
            np.testing.assert_array_equal(np.asarray(kb), np.asarray(jb))


def test_key_shapes_and_dtypes():
    for impl, tag, n in (("philox2x32", "phx2", 1), ("philox4x32", "phx4", 2),
                         ("threefry4x32", "fry4", 4)):
        k = krandom.key(0, impl=impl)
        assert str(k.dtype) == str(jrandom.key(0, impl=impl).dtype) == f"key<{tag}>"
        assert krandom.key_data(k).shape == (n,)
        assert krandom.PRNGKey(0, impl=impl).shape == (n,)
        with kiln.default_prng_impl(impl):
            assert krandom.key(1).dtype == k.dtype
