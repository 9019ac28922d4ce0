"""A kernel over a column reduction's loop stored by the reduction as it folds
(``reduce_side.py``): the dense layer's ``dz = g * (1 - t*t)`` and its bias gradient."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu, reference
from kiln.compiler.lower import reduce_side
from kiln.compiler.lower.program import Kernel, Reduce

R = np.random.default_rng(5)


def _prog(f, *args, monkeypatch):
    """The compiled program of ``f``; its outputs have the bits of the program compiled
    without the merge and are close to the reference backend's."""
    flat = [np.asarray(a) for a in args]
    exe = cpu.executable_for(kiln.make_jaxpr(f)(*args))
    got = exe(flat)
    with monkeypatch.context() as m:
        m.setattr(reduce_side, "merge_side_stores", lambda prog: 0)
        plain = cpu.executable_for(kiln.make_jaxpr(lambda *a: f(*a))(*args))
        assert not [s for s in plain.prog.steps if isinstance(s, Reduce) and s.side]
        base = plain(flat)
    closed = kiln.make_jaxpr(f)(*args)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    for g, b, w in zip(got, base, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(b))
        w = np.asarray(w)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
    return exe.prog


def _dense_grad(w2, b2, h, g):
    """The backward of ``tanh(h @ w2 + b2)`` given its output's cotangent ``g``: the
    weight, bias and input gradients."""
    def f(w2, b2, h):
        return jnp.sum(jnp.tanh(h @ w2 + b2) * g)
    return kiln.grad(f, argnums=(0, 1, 2))(w2, b2, h)


def test_bias_gradient_stores_the_activation_gradient(monkeypatch):
    w2 = R.standard_normal((96, 64)).astype(np.float32) / 8
    b2 = R.standard_normal(64).astype(np.float32)
    h = R.standard_normal((128, 96)).astype(np.float32)
    g = R.standard_normal((128, 64)).astype(np.float32)
    prog = _prog(lambda w2, b2, h: _dense_grad(w2, b2, h, g), w2, b2, h,
                 monkeypatch=monkeypatch)
    merged = [s for s in prog.steps if isinstance(s, Reduce) and s.side]
    assert len(merged) == 1
    (r,) = merged
    assert r.in_shape == (128, 64) and tuple(r.axes) == (0,) and len(r.side) == 1
    # dz is stored once, by the reduction: no kernel of its own writes it.
    dz = r.side[0][0]
    assert not [k for k in prog.steps if isinstance(k, Kernel)
                and any(b is dz for b, _ in k.outs)]


def test_kernel_reading_the_sum_is_not_merged(monkeypatch):
    """A kernel that needs the column sums (here: centred values) must wait for them."""
    x = R.standard_normal((128, 64)).astype(np.float32)
    w = R.standard_normal((64, 32)).astype(np.float32)

    def f(x, w):
        y = jnp.tanh(x) * 2.0
        return (y - jnp.sum(y, axis=0)) @ w

    prog = _prog(f, x, w, monkeypatch=monkeypatch)
    assert not [s for s in prog.steps if isinstance(s, Reduce) and s.side]
