"""Loop and branch bodies with an equation that has no native lowering (``sort``,
``qr``, ``pure_callback``, ...) compile natively and call back into Python for it
(``kiln/compiler/lower/host_calls.py``, ``kiln/compiler/build/host_entry.py``): results
agree with the reference backend, failures raise without hanging, and calls from
several threads keep their own buffers."""
import threading

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.backends import cpu, reference
from kiln.compiler.lower.program import Island, Loop

R = np.random.default_rng(0)
V = R.standard_normal(16).astype(np.float32)
W = (R.standard_normal((16, 16)) / 4).astype(np.float32)


def _hosted(f, *args):
    """``f`` compiled: its loop native with host calls inside; checked against the
    reference backend (the compiler's accuracy contract: products and fused elementwise
    code may differ by an ulp or so). Returns the executable."""
    closed = kiln.make_jaxpr(f)(*args)
    exe = cpu.executable_for(closed)
    assert exe is not None
    assert any(isinstance(s, Loop) for s in exe.prog.steps)
    assert exe.prog.host_calls
    assert all(isinstance(s, Island) and s.host_id == k
               for k, s in enumerate(exe.prog.host_calls))
    flat = [np.asarray(a) for a in args]
    got = exe(flat)
    want = reference.run_jaxpr(closed.jaxpr, closed.consts, flat)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=2e-6)
    return exe


def test_scan_with_sort_and_ys():
    def f(x):
        def body(c, _):
            c = jnp.sort(jnp.tanh(W @ c) + 0.1)
            return c, c[0] + c[-1]
        return lax.scan(body, x, None, length=7)
    _hosted(f, V)


def test_while_whose_condition_reads_a_host_result():
    def f(x):
        def body(carry):
            i, c = carry
            return i + 1, jnp.sort(c * -1.5)      # the trip count depends on the sorts
        return lax.while_loop(lambda ic: jnp.abs(ic[1][0]) < 100.0, body, (0, x))
    exe = _hosted(f, V)
    i, _ = exe([V])
    assert int(i) > 3


def test_host_call_in_a_branch_and_a_nested_loop():
    def f(x):
        def inner(j, c):
            return lax.cond(j % 2 == 0, lambda c: jnp.sort(c), lambda c: -c, c) + 0.25
        return lax.fori_loop(0, 3, lambda i, c: lax.fori_loop(0, 4, inner, c) * 0.5, x)
    _hosted(f, V)


def test_several_host_calls_and_linear_algebra():
    a = (R.standard_normal((5, 4, 4)) + 4 * np.eye(4)).astype(np.float32)

    def f(a):
        def body(c, x):
            q, r = jnp.linalg.qr(x + c)               # a host call (qr has no native form)
            w = jnp.linalg.eigvalsh(q @ q.T)          # another one
            return c + r * 0.1, w
        return lax.scan(body, jnp.zeros((4, 4)), a)
    exe = _hosted(f, a)
    assert len(exe.prog.host_calls) >= 2


def test_pure_callback_in_a_loop_and_jit_matches_eager():
    calls = []

    def host(x):
        calls.append(1)
        return np.cumsum(x).astype(np.float32)

    def f(x):
        def body(i, c):
            return kiln.pure_callback(host, kiln.ShapeDtypeStruct(c.shape, c.dtype), c) * 0.5
        return lax.fori_loop(0, 5, body, x)
    out = kiln.jit(f)(V)
    assert len(calls) == 5
    want = V
    for _ in range(5):
        want = np.cumsum(want).astype(np.float32) * np.float32(0.5)
    np.testing.assert_array_equal(np.asarray(out), want)


def test_a_failing_host_call_raises_and_the_next_call_is_clean():
    state = {"fail": True}

    def host(x):
        if state["fail"] and x[0] > 2:
            raise ValueError("boom from the host")
        return x + 1

    def f(x):
        # without the failure flag this loop would never end on the stale carry
        def body(c):
            return kiln.pure_callback(host, kiln.ShapeDtypeStruct(c.shape, c.dtype), c)
        return lax.while_loop(lambda c: c[0] < 10.0, body, x)
    g = kiln.jit(f)
    x = np.zeros(3, np.float32)
    with pytest.raises(Exception, match="boom from the host"):
        np.asarray(g(x))
    state["fail"] = False
    np.testing.assert_array_equal(np.asarray(g(x)), np.full(3, 10.0, np.float32))


def test_threads_calling_one_program():
    def f(x):
        return lax.fori_loop(0, 20, lambda i, c: jnp.sort(c[::-1] * 1.01 + i), x)
    g = kiln.jit(f)
    xs = [R.standard_normal(64).astype(np.float32) for _ in range(4)]
    want = [np.asarray(f(x)) for x in xs]
    got = [None] * 4

    def run(k):
        for _ in range(5):
            got[k] = np.asarray(g(xs[k]))
    ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for a, b in zip(got, want):       # jit vs eager: FMA contraction, an ulp or so
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_grad_and_vmap_through_a_hosted_loop():
    def f(x):
        return lax.fori_loop(0, 3, lambda i, c: jnp.sort(jnp.sin(c) * 2.0), x).sum()
    np.testing.assert_allclose(kiln.jit(kiln.grad(f))(V), kiln.grad(f)(V), rtol=1e-6)
    xs = np.stack([V, V[::-1], 2 * V])
    np.testing.assert_allclose(np.asarray(kiln.jit(kiln.vmap(f))(xs)),
                               np.asarray(kiln.vmap(f)(xs)), rtol=1e-6)


def test_debug_print_in_a_native_loop_keeps_program_order(capsys):
    def f(x):
        kiln.debug.print("before {}", x[0])

        def body(i, c):
            kiln.debug.print("step {} {}", i, c[0])
            return c * 0.5
        out = lax.fori_loop(0, 3, body, x)
        kiln.debug.print("after {}", out[0])
        return out
    exe = cpu.executable_for(kiln.make_jaxpr(f)(V))
    assert [s.eqn.primitive.name for s in exe.prog.host_calls] == ["debug_print"]
    capsys.readouterr()
    kiln.jit(f)(np.full(4, 8.0, np.float32)).block_until_ready()
    assert capsys.readouterr().out.split("\n")[:5] == [
        "before 8.0", "step 0 8.0", "step 1 4.0", "step 2 2.0", "after 1.0"]


def test_other_effects_keep_the_loop_on_the_host():
    def f(x):
        def body(i, c):
            kiln.experimental.io_callback(lambda v: None, None, c[0])
            return c * 0.5
        return lax.fori_loop(0, 2, body, x)
    exe = cpu.executable_for(kiln.make_jaxpr(f)(V))
    assert exe is None or not exe.prog.host_calls
