"""Operations on typed key arrays that JAX allows and Flax uses, against JAX:
``keys.at[i].set/get``, ``jnp.equal``/``not_equal``, ``jnp.result_type``, and key-typed
unknown inputs of ``interpreters.partial_eval`` tracing (Flax's ``nn.scan``)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.core.avals import ShapedArray
from kiln.interpreters import partial_eval as pe

jax = pytest.importorskip("jax")
jnp = jax.numpy


def _data(m, k):
    return np.asarray(m.random.key_data(k))


def test_at_set_and_get():
    def run(m):
        k = m.random.split(m.random.key(0), 4)
        outs = [k.at[1].set(m.random.key(5)), k.at[1:3].set(m.random.key(7)),
                k.at[..., 2].set(m.random.key(3)),
                m.jit(lambda k, i: k.at[i].set(m.random.key(9)))(k, 2)]
        return [_data(m, o) for o in outs] + [_data(m, k.at[2].get())]
    for a, b in zip(run(kiln), run(jax)):
        np.testing.assert_array_equal(a, b)
    k = kiln.random.split(kiln.random.key(0), 4)
    with pytest.raises(TypeError):
        k.at[1].set(knp.ones(2, np.uint32))
    with pytest.raises(TypeError):
        k.at[1].add(kiln.random.key(1))
    # vmap over a batch of key arrays
    ks = kiln.random.split(kiln.random.key(1), (3, 2))
    out = kiln.vmap(lambda k: k.at[0].set(kiln.random.key(4)))(ks)
    jks = jax.random.split(jax.random.key(1), (3, 2))
    jout = jax.vmap(lambda k: k.at[0].set(jax.random.key(4)))(jks)
    np.testing.assert_array_equal(_data(kiln, out), _data(jax, jout))


def test_equal_of_keys():
    k = kiln.random.split(kiln.random.key(0), 3)
    jk = jax.random.split(jax.random.key(0), 3)
    for f in ("equal", "not_equal"):
        got = getattr(knp, f)(k, k[::-1])
        want = getattr(jnp, f)(jk, jk[::-1])
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        with pytest.raises(TypeError) as ke:
            getattr(knp, f)(k, knp.ones(3))
        with pytest.raises(TypeError) as je:
            getattr(jnp, f)(jk, jnp.ones(3))
        assert str(ke.value) == str(je.value)
    assert bool(kiln.jit(knp.equal)(k[0], k[0]))


def test_result_type_of_keys():
    k = kiln.random.key(0)
    assert knp.result_type(k) == k.dtype
    assert str(knp.result_type(k, k)) == str(jnp.result_type(jax.random.key(0))) == "key<fry>"


def test_partial_eval_with_key_typed_unknowns():
    """An unknown key-typed input is a key inside the function (its data traced)."""
    k = kiln.random.key(3)
    seen = []

    def f(key, x):
        seen.append(type(key).__name__)
        sub = kiln.random.fold_in(key, 1)
        return [kiln.random.uniform(sub, (2,)) + x, x * 2.0, sub]

    pvals = [pe.PartialVal.unknown(ShapedArray((), k.dtype)),
             pe.PartialVal.known(kiln.numpy.float32(1.0))]
    jaxpr, out_pvals, consts = pe.trace_to_jaxpr_nounits(f, pvals)
    assert seen == ["PRNGKeyArray"]
    assert not out_pvals[0].is_known() and out_pvals[1].is_known()
    assert float(out_pvals[1].get_known()) == 2.0
    assert str(out_pvals[2][0].dtype) == "key<fry>"
    # the jaxpr takes the key's data
    assert jaxpr.invars[0].aval.shape == (2,) and jaxpr.invars[0].aval.dtype == np.uint32
    jaxpr2, out_avals, _ = pe.trace_to_jaxpr_dynamic(lambda key: [kiln.random.normal(key)],
                                                     [ShapedArray((), k.dtype)])
    assert out_avals[0].shape == () and jaxpr2.invars[0].aval.shape == (2,)
