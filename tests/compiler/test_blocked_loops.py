"""Parallel elementwise loops over one flat extent are printed as blocks of a constant
size (``KernelMixin._blocked_nest``: gcc compiles them in half the time of the flat loop,
whose per-thread bounds it only knows at run time), the remainder in a loop of its own.
The bits are those of the flat loop."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.compiler.render import kernels

R = np.random.default_rng(5)


def _f(x, y):
    return jnp.tanh(x) * y - 0.1 * jnp.exp(y)


@pytest.mark.parametrize("n", [1 << 18, (1 << 18) + 77])
def test_blocked_loop_same_bits_as_flat(monkeypatch, n):
    x = R.standard_normal(n).astype(np.float32)
    y = R.standard_normal(n).astype(np.float32)
    text = kiln.jit(_f).lower(x, y).compile().as_text()
    assert "i0_blk < " in text and "for (int64_t i0_in = 0; i0_in < 1024;" in text
    assert (f"for (int64_t i0 = {n - n % 1024}; i0 < {n};" in text) == bool(n % 1024)
    blocked = np.asarray(kiln.jit(_f)(x, y))
    monkeypatch.setattr(kernels, "_blockable", lambda plan: False)
    g = lambda x, y: _f(x, y)       # noqa: E731 - a new function: compiled again
    assert "_blk" not in kiln.jit(g).lower(x, y).compile().as_text()
    flat = np.asarray(kiln.jit(g)(x, y))
    assert blocked.tobytes() == flat.tobytes()
    want = np.tanh(x.astype(np.float64)) * y - 0.1 * np.exp(y.astype(np.float64))
    np.testing.assert_allclose(blocked, want, rtol=1e-5, atol=1e-5)


def test_block_size():
    assert kernels._block(1 << 20) == 1024
    assert kernels._block(64 * 1024) == 1024
    assert kernels._block(64 * 1024 - 1) == 512
    assert kernels._block(100) == 16
