"""JAX's four built-in counter PRNGs (``threefry2x32``, ``threefry4x32``, ``philox2x32``,
``philox4x32``) on kiln: the hash primitives against Random123's known-answer vectors
(eagerly, under ``jit`` and ``vmap``), their errors, JAX's per-key functions, and the bits
of the key operations and samplers per implementation against values computed once with
JAX 0.10.2 (seed 42; stored here, so the tests run without JAX).
"""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import random
from kiln._src.random import philox2x32 as p2
from kiln._src.random import philox4x32 as p4
from kiln._src.random import threefry4x32 as t4
from kiln.random.prng import threefry2x32_p

U = np.uint32

# (primitive, key words, counter words, expected words): Random123's kat_vectors.
KAT = [
    (threefry2x32_p, [0, 0], [0, 0], [0x6B200159, 0x99BA4EFE]),
    (threefry2x32_p, [0xFFFFFFFF] * 2, [0xFFFFFFFF] * 2, [0x1CB996FC, 0xBB002BE7]),
    (threefry2x32_p, [0x13198A2E, 0x03707344], [0x243F6A88, 0x85A308D3],
     [0xC4923A9C, 0x483DF7A0]),
    (p2.philox2x32_p, [0], [0, 0], [0xFF1DAE59, 0x6CD10DF2]),
    (p2.philox2x32_p, [0xFFFFFFFF], [0xFFFFFFFF] * 2, [0x2C3F628B, 0xAB4FD7AD]),
    (p2.philox2x32_p, [0x13198A2E], [0x243F6A88, 0x85A308D3], [0xDD7CE038, 0xF62A4C12]),
    (p4.philox4x32_p, [0, 0], [0] * 4, [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    (p4.philox4x32_p, [0xFFFFFFFF] * 2, [0xFFFFFFFF] * 4,
     [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (p4.philox4x32_p, [0xA4093822, 0x299F31D0], [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    (t4.threefry4x32_p, [0] * 4, [0] * 4, [0x9C6CA96A, 0xE17EAE66, 0xFC10ECD4, 0x5256A7D8]),
    (t4.threefry4x32_p, [0xFFFFFFFF] * 4, [0xFFFFFFFF] * 4,
     [0x2A881696, 0x57012287, 0xF6C7446E, 0xA16A6732]),
    (t4.threefry4x32_p, [0xA4093822, 0x299F31D0, 0x082EFA98, 0xEC4E6C89],
     [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
     [0x59CD1DBB, 0xB8879579, 0x86B5D00C, 0xAC8B6D84]),
]
_KAT_IDS = [f"{p.name}-{i % 3}" for i, (p, *_) in enumerate(KAT)]


def _words(ws):
    return [np.asarray(w, U) for w in ws]


@pytest.mark.parametrize("prim,key,ctr,want", KAT, ids=_KAT_IDS)
def test_kat_eager_and_jit(prim, key, ctr, want):
    args = _words(key + ctr)
    for out in (prim.bind(*args), kiln.jit(prim.bind)(*args)):
        assert [int(o) for o in out] == want
        assert all(o.dtype == U and o.shape == () for o in out)


@pytest.mark.parametrize("prim,nkey,nctr", [(p2.philox2x32_p, 1, 2), (p4.philox4x32_p, 2, 4),
                                            (t4.threefry4x32_p, 4, 4), (threefry2x32_p, 2, 2)],
                         ids=["philox2x32", "philox4x32", "threefry4x32", "threefry2x32"])
def test_hash_vmap_jit_eager_agree(prim, nkey, nctr):
    """Scalar key words broadcast against (5, 3) counters: eager, jit, vmap (over the
    counters' columns) and jit-of-vmap give the same bits, and each column is the hash of
    that column alone."""
    rng = np.random.default_rng(1)
    key = [np.asarray(w, U) for w in rng.integers(0, 2 ** 32, nkey, dtype=np.uint64)]
    lanes = [rng.integers(0, 2 ** 32, (5, 3), dtype=np.uint64).astype(U) for _ in range(nctr)]
    eager = prim.bind(*key, *lanes)
    jitted = kiln.jit(prim.bind)(*key, *lanes)
    axes = [None] * nkey + [1] * nctr
    mapped = kiln.vmap(lambda *a: prim.bind(*a), in_axes=axes)(*key, *lanes)
    jit_mapped = kiln.jit(kiln.vmap(lambda *a: prim.bind(*a), in_axes=axes))(*key, *lanes)
    for e, jt, m, jm in zip(eager, jitted, mapped, jit_mapped):
        np.testing.assert_array_equal(np.asarray(jt), np.asarray(e))
        np.testing.assert_array_equal(np.asarray(m), np.asarray(e).T)
        np.testing.assert_array_equal(np.asarray(jm), np.asarray(e).T)
    col = prim.bind(*key, *[a[:, 2] for a in lanes])
    for e, c in zip(eager, col):
        np.testing.assert_array_equal(np.asarray(e)[:, 2], np.asarray(c))


def test_hash_broadcasting_size_one():
    k = np.asarray(7, U)
    a = np.arange(3, dtype=U).reshape(1, 3)
    b = np.arange(6, dtype=U).reshape(2, 3)
    y0, y1 = p2.philox2x32_p.bind(k, a, b)
    assert y0.shape == y1.shape == (2, 3)
    z0, z1 = p2.philox2x32_p.bind(k, np.broadcast_to(a, (2, 3)).copy(), b)
    np.testing.assert_array_equal(np.asarray(y0), np.asarray(z0))
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(z1))


@pytest.mark.parametrize("args,match", [
    ((U(0), U(0)), r"philox2x32_p expects 3 arguments, got 2\."),
    ((U(0), np.zeros(2, U), np.zeros(3, U)),
     r"philox2x32 got incompatible shapes for broadcasting: \(2,\), \(3,\)\."),
    ((U(0), np.zeros(2, U), np.zeros((1, 2), U)),
     r"philox2x32: arrays must have the same number of dimensions, got \{1, 2\}"),
    ((U(0), np.zeros(2, U), np.zeros(2, np.int32)), r"Arguments to philox2x32 must have uint32"),
])
def test_hash_errors(args, match):
    with pytest.raises(TypeError, match=match):
        p2.philox2x32_p.bind(*args)
    with pytest.raises(TypeError, match=match):
        kiln.jit(p2.philox2x32_p.bind)(*args)


def test_hash_errors_4x32():
    with pytest.raises(TypeError, match=r"philox4x32_p expects 6 arguments, got 4\."):
        p4.philox4x32_p.bind(*[U(0)] * 4)
    with pytest.raises(TypeError, match=r"threefry4x32_p expects 8 arguments, got 6\."):
        t4.threefry4x32_p.bind(*[U(0)] * 6)
    with pytest.raises(TypeError, match="Arguments to threefry4x32 must have uint32 type"):
        t4.threefry4x32_p.bind(*[U(0)] * 7, np.float32(0))


def test_hash_jaxpr_and_grad():
    j = kiln.make_jaxpr(p2.philox2x32_p.bind)(U(1), U(2), np.zeros(3, U))
    assert [e.primitive.name for e in j.jaxpr.eqns] == ["philox2x32"]
    # integer outputs: differentiating through the hash gives zero (float0) tangents
    out, tan = kiln.jvp(lambda x: t4.threefry4x32_p.bind(*[x] * 8)[0], (U(3),),
                        (np.zeros((), kiln.dtypes.float0),))
    assert out.dtype == U and tan.dtype == kiln.dtypes.float0


# -- the implementations through jax.random ------------------------------------------------------

IMPLS = {"threefry2x32": ("key<fry>", (2,)), "threefry4x32": ("key<fry4>", (4,)),
         "philox2x32": ("key<phx2>", (1,)), "philox4x32": ("key<phx4>", (2,))}

# jax.random with ``jax.random.key(42, impl=...)``, computed once with JAX 0.10.2.
EXPECTED = {
    'threefry2x32': {
        'key_data': ('uint32', [0, 42]),
        'split': ('uint32', [[1832780943, 270669613], [64467757, 2916123636]]),
        'fold_in': ('uint32', [2547012911, 1371500959]),
        'bits8': ('uint8', [162, 217, 249]),
        'bits16': ('uint16', [5026, 12505, 63993]),
        'bits32': ('uint32', [2098992034, 2919706841, 2646866425, 2409546199]),
        'uniform': ('float32', [0.48870956897735596, 0.6797971725463867, 0.6162714958190918]),
        'normal': ('float32', [-0.02830461598932743, 0.4671318531036377, 0.2957029640674591]),
        'randint': ('int32', [44, 14, 71, 69]),
        'permutation': ('int32', [4, 2, 5, 3, 0, 1]),
        'bernoulli': ('bool', [True, False, False, False, True, False]),
        'exponential': ('float32', [0.670817494392395, 1.1388006210327148]),
        'gamma': ('float32', [4.378075122833252, 1.5007864236831665]),
        'poisson': ('int32', [6, 3, 2]),
        'choice': ('int32', [7, 4, 2]),
        'truncated_normal': ('float32', [-0.01932193711400032, 0.3126998543739319]),
        'bits64': ('uint64', [7871734211187709741, 276886910877598708]),
        'key_2**40+3': ('uint32', [256, 3]),
    },
    'threefry4x32': {
        'key_data': ('uint32', [1605953687, 3689221460, 1722219033, 3178796034]),
        'split': ('uint32', [[3188509147, 2083947553, 1469629592, 921930771], [361144456, 1418825268, 1547191614, 2559243763]]),
        'fold_in': ('uint32', [2445197787, 3874293641, 4221169969, 2984886860]),
        'bits8': ('uint8', [113, 145, 86]),
        'bits16': ('uint16', [1393, 31377, 61782]),
        'bits32': ('uint32', [2739996017, 3649338001, 3087855958, 731494402]),
        'uniform': ('float32', [0.6379549503326416, 0.8496776819229126, 0.7189474105834961]),
        'normal': ('float32', [0.35299789905548096, 1.0350520610809326, 0.5797175765037537]),
        'randint': ('int32', [19, 22, 51, 31]),
        'permutation': ('int32', [5, 1, 4, 2, 0, 3]),
        'bernoulli': ('bool', [False, False, False, True, True, False]),
        'exponential': ('float32', [1.015986680984497, 1.8949735164642334]),
        'gamma': ('float32', [0.6110256314277649, 4.2259297370910645]),
        'poisson': ('NotImplementedError', '`poisson` is only implemented for the threefry2x32 RNG, not fry4'),
        'choice': ('int32', [6, 8, 5]),
        'truncated_normal': ('float32', [0.23831188678741455, 0.6394082307815552]),
        'bits64': ('uint64', [16831092290058782770, 15459856458627681051]),
        'key_2**40+3': ('uint32', [3617711967, 3739764675, 2917855108, 609554591]),
    },
    'philox2x32': {
        'key_data': ('uint32', [3991259024]),
        'split': ('uint32', [[2171499443], [413155073]]),
        'fold_in': ('uint32', [684560128]),
        'bits8': ('uint8', [75, 107, 150]),
        'bits16': ('uint16', [65355, 8299, 37782]),
        'bits32': ('uint32', [944504651, 856563819, 3743454102, 2331796311]),
        'uniform': ('float32', [0.21990954875946045, 0.1994342803955078, 0.8715907335281372]),
        'normal': ('float32', [-0.7724985480308533, -0.8436434864997864, 1.1339428424835205]),
        'randint': ('int32', [84, 10, 62, 0]),
        'permutation': ('int32', [3, 4, 0, 5, 2, 1]),
        'bernoulli': ('bool', [True, True, False, False, True, False]),
        'exponential': ('float32', [0.24834540486335754, 0.22243665158748627]),
        'gamma': ('float32', [0.9861677289009094, 2.1234564781188965]),
        'poisson': ('NotImplementedError', '`poisson` is only implemented for the threefry2x32 RNG, not phx2'),
        'choice': ('int32', [3, 4, 8]),
        'truncated_normal': ('float32', [-0.49929672479629517, -0.5393956899642944]),
        'bits64': ('uint64', [9326519094073462008, 1774487527444324202]),
        'key_2**40+3': ('uint32', [326457608]),
    },
    'philox4x32': {
        'key_data': ('uint32', [3717705800, 533567081]),
        'split': ('uint32', [[2181901948, 3341115038], [969239790, 3857553174]]),
        'fold_in': ('uint32', [41828760, 81464021]),
        'bits8': ('uint8', [5, 207, 255]),
        'bits16': ('uint16', [12805, 58575, 44543]),
        'bits32': ('uint32', [1373712901, 3223971023, 2207559167, 2345961807]),
        'uniform': ('float32', [0.31984245777130127, 0.7506392002105713, 0.5139873027801514]),
        'normal': ('float32', [-0.4681393802165985, 0.6765027046203613, 0.03506822511553764]),
        'randint': ('int32', [61, 44, 58, 0]),
        'permutation': ('int32', [2, 5, 4, 3, 0, 1]),
        'bernoulli': ('bool', [True, False, False, False, False, True]),
        'exponential': ('float32', [0.38543081283569336, 1.3888543844223022]),
        'gamma': ('float32', [2.0343079566955566, 2.731879949569702]),
        'poisson': ('NotImplementedError', '`poisson` is only implemented for the threefry2x32 RNG, not phx4'),
        'choice': ('int32', [2, 5, 4]),
        'truncated_normal': ('float32', [-0.3133475184440613, 0.4429768919944763]),
        'bits64': ('uint64', [9371197513079807646, 6039109255449763556]),
        'key_2**40+3': ('uint32', [3070865155, 1409865214]),
    },
}


def _cases(k):
    return {
        "key_data": lambda: random.key_data(k),
        "split": lambda: random.key_data(random.split(k, 2)),
        "fold_in": lambda: random.key_data(random.fold_in(k, 7)),
        "bits8": lambda: random.bits(k, (3,), jnp.uint8),
        "bits16": lambda: random.bits(k, (3,), jnp.uint16),
        "bits32": lambda: random.bits(k, (4,)),
        "uniform": lambda: random.uniform(k, (3,)),
        "normal": lambda: random.normal(k, (3,)),
        "randint": lambda: random.randint(k, (4,), 0, 100),
        "permutation": lambda: random.permutation(k, 6),
        "bernoulli": lambda: random.bernoulli(k, 0.5, (6,)),
        "exponential": lambda: random.exponential(k, (2,)),
        "gamma": lambda: random.gamma(k, 2.5, (2,)),
        "poisson": lambda: random.poisson(k, 4.0, (3,)),
        "choice": lambda: random.choice(k, 10, (3,), replace=False),
        "truncated_normal": lambda: random.truncated_normal(k, -1.0, 1.0, (2,)),
    }


def _check(name, got, want):
    dtype, values = want
    assert got.dtype == np.dtype(dtype), name
    if name == "gamma":     # the rsqrt estimate may differ by an ulp on other processors
        np.testing.assert_allclose(np.asarray(got).tolist(), values, rtol=2e-6)
    else:
        assert np.asarray(got).tolist() == values, name


@pytest.mark.parametrize("impl", list(IMPLS))
def test_bits_match_jax(impl):
    k = random.key(42, impl=impl)
    assert k.dtype.name == IMPLS[impl][0]
    assert str(random.key_impl(k)) == impl
    want = EXPECTED[impl]
    for name, f in _cases(k).items():
        if isinstance(want[name][1], str):      # JAX raises: the same class and message
            assert want[name][0] == "NotImplementedError"
            with pytest.raises(NotImplementedError, match=want[name][1]):
                f()
            continue
        _check(name, f(), want[name])


@pytest.mark.parametrize("impl", list(IMPLS))
def test_bits_match_jax_x64(impl):
    with kiln.enable_x64(True):
        _check("bits64", random.bits(random.key(42, impl=impl), (2,), jnp.uint64),
               EXPECTED[impl]["bits64"])
        _check("key", random.key_data(random.key(2 ** 40 + 3, impl=impl)),
               EXPECTED[impl]["key_2**40+3"])


@pytest.mark.parametrize("impl", list(IMPLS))
def test_jit_vmap_eager_agree(impl):
    k = random.key(42, impl=impl)
    ks = random.split(k, 4)

    def draw(key):
        return (random.normal(key, (3,)), random.uniform(key, (2,)),
                random.key_data(random.split(key, 3)), random.key_data(random.fold_in(key, 9)),
                random.bits(key, (5,), jnp.uint16))
    eager = [draw(kk) for kk in ks]
    for got in (kiln.vmap(draw)(ks), kiln.jit(kiln.vmap(draw))(ks)):
        for i in range(4):
            for g, e in zip(got, eager[i]):
                np.testing.assert_array_equal(np.asarray(g)[i], np.asarray(e))
    for g, e in zip(kiln.jit(draw)(k), draw(k)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))
    # under jit from the seed, as a traced value
    np.testing.assert_array_equal(
        np.asarray(kiln.jit(lambda s: random.uniform(random.key(s, impl=impl), (3,)))(42)),
        np.asarray(EXPECTED[impl]["uniform"][1], np.float32))


@pytest.mark.parametrize("impl", list(IMPLS))
def test_split_is_vmapped_fold_in(impl):
    k = random.key(0, impl=impl)
    folded = kiln.vmap(lambda i: random.fold_in(k, i))(jnp.arange(5))
    np.testing.assert_array_equal(np.asarray(random.key_data(random.split(k, 5))),
                                  np.asarray(random.key_data(folded)))


@pytest.mark.parametrize("impl", list(IMPLS))
def test_key_shapes_and_wrap(impl):
    dtype_name, key_shape = IMPLS[impl]
    data = random.key_data(random.split(random.key(1, impl=impl), (2, 3)))
    assert data.shape == (2, 3) + key_shape and data.dtype == U
    k = random.wrap_key_data(data, impl=impl)
    assert k.shape == (2, 3) and k.dtype.name == dtype_name
    assert random.key_dtype(impl).name == dtype_name


def test_unknown_impl():
    with pytest.raises(ValueError, match='unrecognized PRNG implementation "philox8x32"'):
        random.key(0, impl="philox8x32")


# -- JAX's per-key functions (jax._src.random.<impl>) ------------------------------------------

@pytest.mark.parametrize("mod,name", [(p2, "philox2x32"), (p4, "philox4x32"),
                                      (t4, "threefry4x32")])
def test_per_key_functions(mod, name):
    impl = getattr(mod, f"{name}_prng_impl")
    assert impl.name == name and impl is random.resolve_prng_impl(name)
    raw = getattr(mod, f"{name}_seed")(np.int32(42))
    assert np.asarray(raw).tolist() == EXPECTED[name]["key_data"][1]
    split = getattr(mod, f"{name}_split")(raw, (2,))
    assert np.asarray(split).tolist() == EXPECTED[name]["split"][1]
    folded = getattr(mod, f"{name}_fold_in")(raw, np.uint32(7))
    assert np.asarray(folded).tolist() == EXPECTED[name]["fold_in"][1]
    bits = getattr(mod, f"{name}_random_bits")(raw, 32, (4,))
    assert np.asarray(bits).tolist() == EXPECTED[name]["bits32"][1]
    with pytest.raises(TypeError, match=f"{name}_random_bits got invalid prng key"):
        getattr(mod, f"{name}_random_bits")(np.zeros(7, U), 32, (2,))
    with pytest.raises(TypeError, match="requires 8-, 16-, 32- or 64-bit field width"):
        getattr(mod, f"{name}_random_bits")(raw, 12, (2,))
    with pytest.raises(TypeError, match="PRNG key seed must be a scalar"):
        getattr(mod, f"{name}_seed")(np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="PRNG key seed must be an integer"):
        getattr(mod, f"{name}_seed")(np.float32(1))
