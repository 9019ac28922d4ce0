"""Products that store into the buffer their result was copied to (``gemm_store.py``):
which copies go, which stay, and that the bits are the reference backend's."""
import numpy as np

import kiln
import kiln.numpy as jnp
from kiln.backends import cpu, reference
from kiln.compiler.lower import gemm_store
from kiln.compiler.lower.gemm_store import _as_view
from kiln.compiler.lower.program import Gemm, Kernel

R = np.random.default_rng(11)


def _prog(f, *args, monkeypatch):
    """The compiled program of ``f``, after checking that its outputs have the bits of
    the same program compiled without the pass, and are close to the reference
    backend's."""
    flat = [np.asarray(a) for a in args]
    exe = cpu.executable_for(kiln.make_jaxpr(f)(*args))
    got = exe(flat)
    with monkeypatch.context() as m:
        m.setattr(gemm_store, "store_products_in_place", lambda prog: 0)
        plain = cpu.executable_for(kiln.make_jaxpr(lambda *a: f(*a))(*args))
        assert not _redirected(plain.prog)
        base = plain(flat)
    closed = kiln.make_jaxpr(f)(*args)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    for g, b, w in zip(got, base, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(b))
        w = np.asarray(w)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
    return exe.prog


def _redirected(prog):
    return [g for g in prog.steps if isinstance(g, Gemm) and g.out_view is not None]


def _heads(y, b, t, h, d):
    return y.reshape(b, t, h, d).transpose(0, 2, 1, 3)


def test_attention_output_stored_in_model_layout(monkeypatch):
    """``einsum('bhqk,bhkd->bhqd') -> transpose -> reshape [b, t, h*d]`` read by the
    output projection and, transposed, by its weight gradient (which needs it stored):
    the per-head products write their rows at leading dimension ``h*d``, no copy
    kernel."""
    q, k, v = (R.standard_normal((2, 32, 2, 16)).astype(np.float32) for _ in range(3))
    wo = R.standard_normal((32, 32)).astype(np.float32)

    def f(q, k, v, wo):
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
        a = jnp.tanh(jnp.einsum("bhqd,bhkd->bhqk", q, k))
        y = jnp.einsum("bhqk,bhkd->bhqd", a, v).transpose(0, 2, 1, 3).reshape(2, 32, 32)
        return jnp.sum((y @ wo) ** 2)

    prog = _prog(kiln.grad(f, argnums=3), q, k, v, wo, monkeypatch=monkeypatch)
    (g,) = _redirected(prog)
    assert g.out_view == (32, ((2, 1024), (2, 16)), 0)
    assert not [s for s in prog.steps if isinstance(s, Kernel) and s.name == "copy"]


def test_gradient_of_fused_qkv_written_in_place(monkeypatch):
    """The transformer's case: the gradients of q, k, v (three per-head products) land in
    their thirds of the fused projection's gradient, with the bits they had before."""
    x = R.standard_normal((2, 32, 48)).astype(np.float32)
    w = R.standard_normal((48, 96)).astype(np.float32)

    def loss(w, x):
        q, k, v = (_heads(a, 2, 32, 2, 16) for a in jnp.split(x @ w, 3, axis=-1))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 3.0
        return jnp.sum(jnp.einsum("bhqk,bhkd->bhqd", kiln.nn.softmax(s), v) ** 2)

    prog = _prog(kiln.grad(loss), w, x, monkeypatch=monkeypatch)
    assert sorted(g.out_view[2] for g in _redirected(prog)) == [0, 32, 64]


def _copies(prog):
    return [k for k in prog.steps if isinstance(k, Kernel) and len(k.outs) == 1
            and k.outs[0][1].kind == "load"]


def _head_mix(y, reverse=False):
    """[b, t, d] per-batch products mixed into [t, b*d] rows (rows reversed if asked),
    then used by a product and by its weight gradient (so they are stored)."""
    if reverse:
        y = y[:, ::-1, :]
    return y.transpose(1, 0, 2).reshape(32, 128)


A = R.standard_normal((4, 32, 16)).astype(np.float32)
B = R.standard_normal((4, 16, 32)).astype(np.float32)
W = R.standard_normal((128, 8)).astype(np.float32)


def test_product_read_elsewhere_keeps_its_buffer(monkeypatch):
    """The product's result is also read by another kernel: it stays where it is, and
    the copy too."""
    def f(w, a, b):
        y = jnp.einsum("bij,bjk->bik", a, b)
        dw = kiln.grad(lambda w: jnp.sum((_head_mix(y) @ w) ** 2))(w)
        return dw, jnp.tanh(y)

    prog = _prog(f, W, A, B, monkeypatch=monkeypatch)
    assert not _redirected(prog) and _copies(prog)


def test_reversed_copy_is_not_a_view(monkeypatch):
    """A copy that reverses the rows is no leading-dimension layout: left as a copy."""
    def f(w, a, b):
        y = jnp.einsum("bij,bjk->bik", a, b)
        return kiln.grad(lambda w: jnp.sum((_head_mix(y, True) @ w) ** 2))(w)

    prog = _prog(f, W, A, B, monkeypatch=monkeypatch)
    assert not _redirected(prog) and _copies(prog)


def test_mixed_rows_stored_in_place(monkeypatch):
    """The same without the reversal: the products store at leading dimension 128."""
    def f(w, a, b):
        y = jnp.einsum("bij,bjk->bik", a, b)
        return kiln.grad(lambda w: jnp.sum((_head_mix(y) @ w) ** 2))(w)

    prog = _prog(f, W, A, B, monkeypatch=monkeypatch)
    (g,) = _redirected(prog)
    assert g.out_view == (128, ((4, 32),), 0) and not _copies(prog)


def test_as_view_recovers_strided_batches():
    batch, m, n = 6, 3, 4        # batch split as (2, 3) with strides (100, 4); ld 12
    want = np.array([[[7 + (bt // 3) * 100 + (bt % 3) * 4 + r * 12 + c for c in range(n)]
                      for r in range(m)] for bt in range(batch)]).reshape(-1)
    assert _as_view(want, batch, m, n) == (12, ((2, 100), (3, 4)), 7)
    contiguous = np.arange(batch * m * n)
    assert _as_view(contiguous, batch, m, n) == (4, ((6, 12),), 0)
    swapped = want.reshape(batch, m, n).transpose(0, 2, 1).reshape(-1)   # columns strided
    assert _as_view(swapped, batch, m, n) is None
    assert _as_view(np.arange(12)[::-1].copy(), 1, 3, 4) is None


def test_dot_product_attention_gradients_land_in_input_layout(monkeypatch):
    """``nn.dot_product_attention`` on ``[b, t, h, d]``: the per-head products giving the
    gradients of q and k write them in ``[b, t, h, d]`` directly (leading dimension h*d)."""
    q, k, v = (R.standard_normal((2, 32, 2, 16)).astype(np.float32) for _ in range(3))

    def loss(q, k, v):
        return jnp.mean(kiln.nn.dot_product_attention(q, k, v, is_causal=True) ** 2)

    prog = _prog(kiln.grad(loss, argnums=(0, 1, 2)), q, k, v, monkeypatch=monkeypatch)
    views = [g.out_view for g in _redirected(prog)]
    assert len(views) == 2 and all(v == (32, ((2, 1024), (2, 16)), 0) for v in views)
