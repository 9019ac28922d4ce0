"""What the first (cold) build of a program compiles: C that costs gcc less for the same
bits. A single matrix product is one BLAS call, without a loop over a batch of one."""
from __future__ import annotations

import numpy as np

import kiln
import kiln.numpy as jnp

R = np.random.default_rng(3)


def _source(f, *args):
    return kiln.jit(f).lower(*args).compile().as_text()


def test_single_product_is_one_call_without_a_batch_loop():
    a = R.standard_normal((96, 80)).astype(np.float32)
    b = R.standard_normal((80, 72)).astype(np.float32)
    text = _source(lambda a, b: jnp.tanh(a @ b), a, b)
    calls = [ln for ln in text.splitlines() if "kiln_gemm_f32(" in ln and "typedef" not in ln
             and "kiln_gemm_f32_t" not in ln]
    assert len(calls) == 1
    assert "bt" not in calls[0]
    got = np.asarray(kiln.jit(lambda a, b: jnp.tanh(a @ b))(a, b))
    np.testing.assert_allclose(got, np.tanh(a @ b), rtol=1e-5, atol=1e-5)


def test_batched_products_keep_their_loop():
    a = R.standard_normal((3, 40, 48)).astype(np.float32)
    b = R.standard_normal((3, 48, 24)).astype(np.float32)
    f = lambda a, b: jnp.einsum("bij,bjk->bik", a, b)      # noqa: E731
    text = _source(f, a, b)
    assert "bt < 3" in text
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(a, b)), a @ b, rtol=1e-5, atol=1e-5)


def test_xla_math_is_in_the_precompiled_part(monkeypatch):
    from kiln.compiler.build.build import PCH_MARK, pch_enabled
    x = R.standard_normal((50, 30)).astype(np.float32)
    text = _source(lambda x: x * 2.0 + 1.0, x)       # no math function called
    head, _, rest = text.partition(PCH_MARK)
    if pch_enabled():
        assert "xtanh32" in head and "xtanh32" not in rest
    monkeypatch.setenv("KILN_PCH", "0")
    text = _source(lambda x: x * 3.0 + 1.0, x)
    assert "xtanh32" not in text                       # only what the program needs
    f = lambda x: jnp.tanh(x) * 0.5                     # noqa: E731
    text = _source(f, x)
    assert "xtanh32" in text.partition(PCH_MARK)[2]
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x)), np.tanh(x) * 0.5, rtol=1e-6,
                               atol=1e-6)
