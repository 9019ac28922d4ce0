"""Structured control flow: cond, switch, while_loop, fori_loop, scan, map and
associative_scan, alone and nested under jit / grad / vmap / jacfwd.

Covers JAX's rules (carry type checks and their messages, weak-type promotion of
initial carries, index clamping, reverse mode through while loops being an error),
programs compared with ``jax`` when it is installed, and the costs that must not grow
with the trip count (tracing a loop of 10 or 10,000 steps gives the same jaxpr).
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import errors, lax
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr

F = np.float32


def _prims(jaxpr, acc=None):
    """Names of all primitives in a jaxpr, including sub-jaxprs."""
    acc = set() if acc is None else acc
    jaxpr = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
    for eqn in jaxpr.eqns:
        acc.add(eqn.primitive.name)
        for p in eqn.params.values():
            for s in (p if isinstance(p, (tuple, list)) else [p]):
                if isinstance(s, (ClosedJaxpr, Jaxpr)):
                    _prims(s, acc)
    return acc


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=tol, atol=tol)


# ================================================================================================
# cond / switch
# ================================================================================================

def test_cond_pytree_operands_and_outputs():
    def f(p, x):
        return lax.cond(p, lambda a: (a[0] + 1, {"b": a[1] * 2}),
                        lambda a: (a[0] - 1, {"b": a[1] * 3}), (x, x))
    out = f(True, F(1.5))
    assert float(out[0]) == 2.5 and float(out[1]["b"]) == 3.0
    out = kiln.jit(f)(False, F(1.5))
    assert float(out[0]) == 0.5 and float(out[1]["b"]) == 4.5


def test_cond_operand_keyword_and_old_signature():
    assert float(lax.cond(True, lambda x: x + 1, lambda x: x - 1, operand=F(2))) == 3.0
    # operand=None is an operand (an empty pytree), not "no operand".
    assert float(lax.cond(False, lambda x: 1.0, lambda x: 2.0, operand=None)) == 2.0
    with pytest.raises(TypeError, match="if 'operand' keyword is passed then no positional"):
        lax.cond(True, lambda x: x, lambda x: x, F(1), operand=F(2))
    # The deprecated five-argument form cond(pred, x_true, f_true, x_false, f_false).
    assert float(lax.cond(True, F(1), lambda x: x + 1, F(5), lambda x: x - 1)) == 2.0
    assert float(lax.cond(False, F(1), lambda x: x + 1, F(5), lambda x: x - 1)) == 4.0


def test_cond_numeric_predicates_and_errors():
    assert float(lax.cond(F(0.5), lambda: 1.0, lambda: 2.0)) == 1.0
    assert float(lax.cond(0, lambda: 1.0, lambda: 2.0)) == 2.0
    with pytest.raises(TypeError, match=r"Pred must be a scalar, got \[ True  True\] of shape"):
        lax.cond(np.array([True, True]), lambda: 1.0, lambda: 2.0)
    with pytest.raises(TypeError, match="Pred must be a scalar, got a of type <class 'str'>"):
        lax.cond("a", lambda: 1.0, lambda: 2.0)
    with pytest.raises(TypeError, match="true_fun and false_fun arguments should be callable"):
        lax.cond(True, 1, 2)


def test_cond_branch_type_errors_name_the_functions():
    def t():
        return F(1)

    def f():
        return np.int32(1)

    with pytest.raises(TypeError) as e:
        lax.cond(True, t, f)
    msg = str(e.value)
    assert msg.startswith("cond branches must have equal output types but they differ.")
    assert f"true_fun is t at {__file__}:" in msg and f"false_fun is f at {__file__}:" in msg
    assert ("The output of true_fun has type float32[] but the corresponding output of "
            "false_fun has type int32[], so the dtypes do not match.") in msg
    with pytest.raises(TypeError, match="cond branch outputs must have the same pytree "
                                        "structure"):
        lax.cond(True, lambda: (F(1),), lambda: F(1))
    with pytest.raises(TypeError, match=r"output of branch 0 has type float32\[\] but the "
                                        r"corresponding output of branch1 has type "
                                        r"float32\[2\], so the shapes do not match"):
        lax.switch(0, [lambda: F(1), lambda: np.ones(2, F)])


def test_cond_output_weak_types_are_jax_s():
    # As in JAX: an output takes branch 0's type (cond: false_fun's), weak type included,
    # whichever branch runs; one that every branch forwards from the same operand is that
    # operand. Each branch is traced once.
    for pred in (True, False):
        out = lax.cond(pred, lambda: 1.0, lambda: F(2))
        assert not out.weak_type and out.dtype == np.float32
        out = lax.cond(pred, lambda: F(2), lambda: 1.0)
        assert out.weak_type and out.dtype == np.float32
        assert lax.cond(pred, lambda: 1.0, lambda: 2.0).weak_type
        out = lax.cond(pred, lambda a, b: a, lambda a, b: a, 1.0, F(2))
        assert out.weak_type
        out = lax.switch(int(pred), [lambda a: a * 2.0, lambda a: F(3)], 1.0)
        assert out.weak_type
        out = kiln.jit(lambda p: lax.cond(p, lambda: F(2), lambda: 1.0))(pred)
        assert out.weak_type
    calls = []
    lax.cond(True, lambda x: calls.append("t") or x, lambda x: calls.append("f") or x * 1.0,
             F(1))
    assert sorted(calls) == ["f", "t"]


def test_switch_clamps_index_eager_jit_vmap():
    branches = [lambda x: x, lambda x: x + 10, lambda x: x + 20]
    for i, want in [(-5, 1), (0, 1), (1, 11), (2, 21), (7, 21)]:
        assert float(lax.switch(i, branches, F(1))) == want
        assert float(kiln.jit(lambda i: lax.switch(i, branches, F(1)))(i)) == want
    got = kiln.vmap(lambda i: lax.switch(i, branches, F(1)))(np.array([-5, 0, 1, 2, 7],
                                                                      np.int32))
    np.testing.assert_array_equal(got, [1, 1, 11, 21, 21])
    with pytest.raises(TypeError, match="Index type must be an integer, got 1.0 as float32"):
        lax.switch(F(1), branches, F(1))
    with pytest.raises(ValueError, match="Empty branch sequence"):
        lax.switch(0, [], F(1))


def test_batched_predicate_becomes_select():
    def f(x):
        return lax.cond(x > 0, lambda x: x * 2, lambda x: -x, x)
    xs = np.array([-1.0, 2.0, -3.0], F)
    np.testing.assert_array_equal(kiln.vmap(f)(xs), [1.0, 4.0, 3.0])
    prims = _prims(kiln.make_jaxpr(kiln.vmap(f))(xs))
    assert "cond" not in prims and "select_n" in prims
    # An unbatched predicate keeps the cond (only the operands are batched).
    g = kiln.vmap(lambda x, p: lax.cond(p > 0, lambda x: x * 2, lambda x: -x, x), (0, None))
    assert "cond" in _prims(kiln.make_jaxpr(g)(xs, F(1)))
    np.testing.assert_array_equal(g(xs, F(1)), xs * 2)


def test_grad_of_cond_follows_the_taken_branch():
    f = lambda x: lax.cond(x > 0, lambda x: x * x, lambda x: jnp.sin(x), x)  # noqa: E731
    assert float(kiln.grad(f)(F(3))) == 6.0
    _close(kiln.grad(f)(F(-1)), np.cos(-1.0))
    _close(kiln.vmap(kiln.grad(f))(np.array([3.0, -1.0], F)), [6.0, np.cos(-1.0)])
    # Closed-over values get gradients too.
    g = kiln.grad(lambda x, y: lax.cond(x > 0, lambda: x * y, lambda: y), argnums=(0, 1))
    gx, gy = g(F(2), F(5))
    assert (float(gx), float(gy)) == (5.0, 2.0)


# ================================================================================================
# while_loop / fori_loop
# ================================================================================================

def test_grad_of_while_loop_is_an_error_pointing_to_scan():
    def f(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x), (0, x))[1]
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                                         "lax.while_loop or lax.fori_loop with dynamic "
                                         "start/stop values. Try using lax.scan, or using "
                                         "fori_loop with static start/stop."):
        kiln.grad(f)(F(2))
    # fori_loop with traced bounds is a while loop: the same error...
    with pytest.raises(ValueError, match="Try using lax.scan"):
        kiln.jit(kiln.grad(lambda x, n: lax.fori_loop(0, n, lambda i, c: c * x, x)))(F(2), 3)
    # ...while static bounds make it a scan, which reverse mode handles.
    assert float(kiln.grad(lambda x: lax.fori_loop(0, 3, lambda i, c: c * x, x))(F(2))) == 32.0


def test_linearize_through_while_loop_closing_over_the_input():
    # Partial evaluation splits the loop: the counter runs now, the rest is staged.
    def f(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x), (0, x))[1]
    y, f_lin = kiln.linearize(f, F(2))
    assert float(y) == 16.0 and float(f_lin(F(1))) == 32.0


def test_forward_mode_through_while_loop():
    def f(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * c[1]), (0, x))[1]
    y, t = kiln.jvp(f, (F(1.5),), (F(1),))
    _close(y, 1.5 ** 8)
    _close(t, 8 * 1.5 ** 7)
    _close(kiln.jacfwd(f)(F(1.5)), 8 * 1.5 ** 7)
    # jacfwd of a vector function, under jit, closing over the input.
    g = kiln.jit(kiln.jacfwd(lambda a: lax.while_loop(
        lambda c: c[1] < 4, lambda c: (c[0] * jnp.sin(a), c[1] + 1), (jnp.ones(3), 0))[0]))
    a = np.array([0.3, 0.5, 0.7], F)
    _close(g(a), np.diag(4 * np.sin(a) ** 3 * np.cos(a)), 1e-5)
    # vmap of jacfwd of a while loop.
    h = kiln.vmap(kiln.jacfwd(lambda x: lax.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x), (0, F(1)))[1]))
    _close(h(np.linspace(-1, 1, 5).astype(F)), 3 * np.linspace(-1, 1, 5) ** 2)


def newton_sqrt(a):
    def cond(c):
        x, i = c
        return (jnp.abs(x * x - a) > 1e-5 * a) & (i < 100)

    def body(c):
        x, i = c
        return 0.5 * (x + a / x), i + 1
    return lax.while_loop(cond, body, (a, 0))


def test_newton_sqrt_under_vmap_has_per_lane_trip_counts():
    a = np.array([1.0, 2.0, 100.0, 1e4, 0.25], F)
    roots, iters = kiln.vmap(newton_sqrt)(a)
    _close(roots, np.sqrt(a), 1e-5)
    expected = [int(newton_sqrt(v)[1]) for v in a]      # each lane alone
    np.testing.assert_array_equal(iters, expected)
    assert len(set(expected)) > 2                        # lanes really stop at different times
    roots2, iters2 = kiln.jit(kiln.vmap(newton_sqrt))(a)
    np.testing.assert_array_equal(iters2, expected)
    # Derivative of the converged root, by forward mode (d sqrt(a) / da = 1 / (2 sqrt(a))).
    # (Not at a = 1: there the loop runs zero iterations and returns a itself.)
    b = a[1:]
    d = kiln.vmap(kiln.jacfwd(lambda v: newton_sqrt(v)[0]))(b)
    _close(d, 0.5 / np.sqrt(b), 1e-3)


def test_fori_loop_bounds_choose_scan_or_while():
    body = lambda i, c: c + i  # noqa: E731
    assert "scan" in _prims(kiln.make_jaxpr(lambda x: lax.fori_loop(0, 5, body, x))(F(0)))
    j = kiln.make_jaxpr(lambda x, n: lax.fori_loop(0, n, body, x))(F(0), 5)
    assert "while" in _prims(j) and "scan" not in _prims(j)
    assert float(kiln.jit(lambda x, n: lax.fori_loop(0, n, body, x))(F(0), 5)) == 10.0
    assert float(lax.fori_loop(3, 1, body, F(7))) == 7.0        # empty range
    with pytest.raises(ValueError, match="Can only use `unroll` in `fori_loop` if the loop "
                                         "bounds are statically known."):
        kiln.jit(lambda n: lax.fori_loop(0, n, body, F(0), unroll=2))(3)


def test_fori_loop_index_is_a_weak_int():
    # As in JAX, a static-bounds fori_loop index is a weak int32: it does not widen an
    # int8 carry, and its float carry stays weak.
    out = lax.fori_loop(0, 3, lambda i, c: c + i, np.int8(1))
    assert out.dtype == np.int8 and int(out) == 4
    out = lax.fori_loop(0, 3, lambda i, c: c + i, 0.0)
    assert out.dtype == np.float32 and out.weak_type
    # Bounds of different dtypes: allowed when one is a Python int, else a TypeError.
    assert int(lax.fori_loop(np.int16(0), 3, lambda i, c: c + 1, 0)) == 3
    with pytest.raises(TypeError, match="lower and upper arguments to fori_loop must have "
                                        "equal types, got int16 and int8"):
        lax.fori_loop(np.int16(0), np.int8(3), lambda i, c: c, 0)


def test_fori_loop_ten_thousand_iterations():
    f = kiln.jit(lambda x: lax.fori_loop(0, 10_000, lambda i, c: c * F(0.999) + F(1), x))
    expected = np.float32(0)
    for _ in range(10_000):
        expected = np.float32(expected * np.float32(0.999) + np.float32(1))
    _close(f(F(0)), expected, 1e-5)
    # The integer index counts all the way (no float drift).
    assert int(lax.fori_loop(0, 10_000, lambda i, c: c + i, 0)) == 10_000 * 9_999 // 2


@pytest.mark.parametrize("kind", ["scan", "fori_loop", "fori_loop_traced", "while_loop"])
def test_tracing_cost_does_not_depend_on_trip_count(kind):
    def program(n):
        if kind == "scan":
            return lambda x: lax.scan(lambda c, _: (jnp.sin(c) + c, c * 2), x, None, length=n)
        if kind == "fori_loop":
            return lambda x: lax.fori_loop(0, n, lambda i, c: jnp.sin(c) * i, x)
        if kind == "fori_loop_traced":
            return lambda x, m: lax.fori_loop(0, m, lambda i, c: jnp.sin(c) * i, x)
        return lambda x: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2),
                                        (0, x))

    def count(n):
        args = (F(1), np.int32(n)) if kind == "fori_loop_traced" else (F(1),)
        j = kiln.make_jaxpr(program(n))(*args)
        total = 0
        stack = [j.jaxpr]
        while stack:
            jx = stack.pop()
            total += len(jx.eqns)
            for e in jx.eqns:
                for p in e.params.values():
                    for s in (p if isinstance(p, (tuple, list)) else [p]):
                        if isinstance(s, ClosedJaxpr):
                            stack.append(s.jaxpr)
        return total

    assert count(10) == count(10_000)


# ================================================================================================
# scan / map
# ================================================================================================

def test_scan_length_reverse_unroll_and_no_xs():
    xs = np.arange(5, dtype=F)
    c, ys = lax.scan(lambda c, x: (c + x, c * x), F(0), xs)
    assert float(c) == 10.0 and ys.tolist() == [0, 0, 2, 9, 24]
    c, ys = lax.scan(lambda c, x: (c + x, c * x), F(0), xs, reverse=True)
    assert float(c) == 10.0 and ys.tolist() == [0, 9, 14, 12, 0]
    for unroll in (2, 3, True, False):
        c2, ys2 = lax.scan(lambda c, x: (c + x, c * x), F(0), xs, unroll=unroll)
        assert float(c2) == 10.0 and ys2.tolist() == [0, 0, 2, 9, 24]
    c, ys = lax.scan(lambda c, _: (c * 2, c), F(1.5), None, length=4)
    assert float(c) == 24.0 and ys.tolist() == [1.5, 3, 6, 12]
    # ys may be None; a zero-length scan returns the initial carry and empty ys.
    c, ys = lax.scan(lambda c, x: (c + x, None), F(0), xs)
    assert float(c) == 10.0 and ys is None
    c, ys = lax.scan(lambda c, x: (c + x.sum(), x * 2), F(3), np.zeros((0, 2), F))
    assert float(c) == 3.0 and ys.shape == (0, 2)


def test_scan_pytree_carry_and_outputs():
    def body(carry, x):
        a, (b, d) = carry["a"], carry["bd"]
        return {"a": a + x[0], "bd": (b * x[1], d)}, [a * x[0], {"z": b.sum()}]
    xs = (np.arange(3, dtype=F), np.full((3, 2), 2, F))
    carry, ys = lax.scan(body, {"a": F(0), "bd": (np.ones(2, F), np.int32(7))}, xs)
    assert float(carry["a"]) == 3.0 and carry["bd"][0].tolist() == [8, 8]
    assert int(carry["bd"][1]) == 7
    assert ys[0].tolist() == [0, 0, 2] and ys[1]["z"].tolist() == [2, 4, 8]


def test_scan_argument_errors():
    with pytest.raises(ValueError, match="scan got no values to scan over and `length` not "
                                         "provided."):
        lax.scan(lambda c, x: (c, x), F(0), None)
    with pytest.raises(ValueError, match="scan got `length` argument of 4 which disagrees "
                                         r"with leading axis sizes \[3\]."):
        lax.scan(lambda c, x: (c, x), F(0), np.ones(3, F), length=4)
    with pytest.raises(ValueError, match="scan got values with different leading axis sizes: "
                                         "3, 4."):
        lax.scan(lambda c, x: (c, x), F(0), (np.ones(3, F), np.ones(4, F)))
    with pytest.raises(TypeError, match="scan body output must be a pair"):
        lax.scan(lambda c, x: c, F(0), np.ones(3, F))


def test_carry_type_errors_read_like_jax():
    with pytest.raises(TypeError) as e:
        lax.scan(lambda c, x: ((c[0], c[1].astype("int32")), x), (F(0), F(1)), np.ones(3, F))
    assert str(e.value) == (
        "scan body function carry input and carry output must have equal types, but they "
        "differ:\n\nThe input carry component c[1] has type float32[] but the corresponding "
        "output carry component has type int32[], so the dtypes do not match.\n\nRevise the "
        "function so that all output types match the corresponding input types.")
    with pytest.raises(TypeError) as e:
        lax.scan(lambda c, x: ((c[0][None], c[1].astype("int32")), x), (F(0), F(1)),
                 np.ones(3, F))
    assert ("  * the input carry component c[0] has type float32[] but the corresponding "
            "output carry component has type float32[1], so the shapes do not match;\n"
            "  * the input carry component c[1] has type float32[] but the corresponding output "
            "carry component has type int32[], so the dtypes do not match.\n") in str(e.value)
    with pytest.raises(TypeError) as e:
        lax.fori_loop(0, 3, lambda i, c: c.astype("int32"), F(1))
    assert "The input carry component loop_carry[1] has type float32[]" in str(e.value)
    with pytest.raises(TypeError) as e:
        kiln.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c.astype("int32"), F(1)))(3)
    assert str(e.value).startswith("while_loop body function carry input and carry output "
                                   "must have equal types")
    assert "loop_carry[2]" in str(e.value)
    with pytest.raises(TypeError) as e:
        lax.while_loop(lambda c: c[0] < 3, lambda c: [c[0] + 1], (0,))
    assert str(e.value) == (
        "while_loop body function carry input and carry output must have the same pytree "
        "structure, but they differ:\n\nThe input carry c is a <class 'tuple'> but the "
        "corresponding component of the carry output is a <class 'list'>, so their Python "
        "types differ.\n\nRevise the function so that the carry output has the same pytree "
        "structure as the carry input.")
    with pytest.raises(TypeError, match="the pytree node metadata does not match"):
        lax.while_loop(lambda c: c["a"] < 3, lambda c: {"b": c["a"] + 1}, {"a": 0})
    with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar, but got "
                                        r"output type\(s\) \[ShapedArray\(bool\[2\]\)\]"):
        lax.while_loop(lambda c: jnp.ones(2) > 0, lambda c: c, F(1))


def test_weakly_typed_initial_carries_are_promoted():
    # A Python scalar carry takes the type the body gives it (JAX promotes weak inputs).
    c, ys = lax.scan(lambda c, x: (c + 1.5, c), 0, None, length=3)
    assert c.dtype == np.float32 and float(c) == 4.5 and ys.tolist() == [0, 1.5, 3]
    out = lax.while_loop(lambda c: c < 3, lambda c: c + 1.5, 0)
    assert out.dtype == np.float32 and float(out) == 3.0
    assert float(lax.fori_loop(0, 3, lambda i, c: c + 1.5, 0)) == 4.5
    # Strongly typed carries are not promoted.
    with pytest.raises(TypeError, match="so the dtypes do not match"):
        lax.scan(lambda c, x: (c + 1.5, c), np.int32(0), None, length=3)


def test_weak_strong_carry_difference_traces_the_body_once():
    # A weak carry the body makes strong (same dtype) is no promotion: JAX traces the body
    # once (a body that advances state held on an object must see one trace; BlackJAX's
    # tests split a key stored on the test case inside a scan body).
    calls = {"scan": 0, "while": 0, "jit": 0}
    key = [kiln.random.key(0)]

    def body(c, x):
        calls["scan"] += 1
        key[0], sub = kiln.random.split(key[0])
        i, s = c
        return (i + 1, s + x.astype(np.float32)), s * kiln.random.uniform(sub)

    (i, s), ys = lax.scan(body, (0, 0.0), jnp.arange(3.0, dtype=jnp.float16))
    assert calls["scan"] == 1 and int(i) == 3 and float(s) == 3.0
    assert s.dtype == np.float32 and not s.weak_type and i.weak_type
    assert ys.dtype == np.float32 and ys.shape == (3,)

    def wbody(c):
        calls["while"] += 1
        return c[0] + 1, c[1] + F(1)
    out = lax.while_loop(lambda c: c[0] < 3, wbody, (0, 1.0))
    assert calls["while"] == 1 and float(out[1]) == 4.0 and not out[1].weak_type

    def jbody(c, x):
        calls["jit"] += 1
        key[0], sub = kiln.random.split(key[0])
        return c + kiln.random.normal(sub), c
    key[0] = kiln.random.key(1)     # the eager scan's trace left a tracer there (as in JAX)
    kiln.jit(lambda: lax.scan(jbody, 0.0, None, length=4))()
    assert calls["jit"] == 1


def test_map_and_batch_size():
    xs = np.arange(7, dtype=F)
    for bs in (None, 1, 2, 3, 7, 10):
        np.testing.assert_array_equal(lax.map(lambda x: x * 2 + 1, xs, batch_size=bs),
                                      xs * 2 + 1)
    # batch_size vmaps the function over chunks: the jaxpr holds a scan over 3 chunks of 2
    # and a vmapped call for the remainder.
    j = kiln.make_jaxpr(lambda xs: lax.map(lambda x: x * 2, xs, batch_size=2))(xs)
    assert "scan" in _prims(j)
    pytree = lax.map(lambda p: {"s": p[0] + p[1], "d": p[0] - p[1]}, (xs, xs * 2),
                     batch_size=3)
    np.testing.assert_array_equal(pytree["s"], xs * 3)
    g = kiln.grad(lambda xs: lax.map(lambda x: jnp.sin(x) * x, xs, batch_size=3).sum())(xs)
    _close(g, np.sin(xs) + xs * np.cos(xs), 1e-5)


def test_disable_jit_runs_python_loops():
    calls = []

    def body(c, x):
        calls.append(1)
        return c + x, c
    with kiln.disable_jit():
        c, ys = lax.scan(body, F(0), np.arange(4, dtype=F))
        assert float(c) == 6.0 and ys.tolist() == [0, 0, 1, 3]
        assert len(calls) == 4                          # one Python call per iteration
        n = lax.while_loop(lambda c: c < 5, lambda c: c + 1, 0)
        assert int(n) == 5
        assert float(lax.cond(True, lambda: 1.0, lambda: 2.0)) == 1.0
        assert float(lax.switch(9, [lambda: 1.0, lambda: 2.0])) == 2.0
    calls.clear()
    lax.scan(body, F(0), np.arange(4, dtype=F))
    assert len(calls) == 1                              # traced once


# ================================================================================================
# Nesting
# ================================================================================================

def _cond_in_scan(w, xs):
    def body(c, x):
        c = lax.cond(x > 0, lambda c: c * w + x, lambda c: c - w * x, c)
        return c, c * x
    c, ys = lax.scan(body, F(0.5), xs)
    return c + ys.sum()


def _cond_in_scan_ref(w, xs):
    c, total = 0.5, 0.0
    for x in xs:
        c = c * w + x if x > 0 else c - w * x
        total += c * x
    return c + total


def test_cond_in_scan_in_jit_under_grad_and_vmap():
    xs = np.linspace(-1, 1, 6).astype(F)
    w = F(0.7)
    _close(kiln.jit(_cond_in_scan)(w, xs), _cond_in_scan_ref(0.7, xs.astype(np.float64)))
    eps = 1e-3
    fd = (_cond_in_scan_ref(0.7 + eps, xs.astype(np.float64))
          - _cond_in_scan_ref(0.7 - eps, xs.astype(np.float64))) / (2 * eps)
    g = kiln.jit(kiln.grad(_cond_in_scan))
    _close(g(w, xs), fd, 1e-3)
    ws = np.array([0.3, 0.7, 1.1], F)
    batched = kiln.vmap(g, (0, None))(ws, xs)
    _close(batched, [g(v, xs) for v in ws], 1e-6)
    # vmap over the scanned values too: the predicate is batched inside the scan body.
    xss = np.stack([xs, -xs, xs * 2])
    _close(kiln.vmap(kiln.grad(_cond_in_scan))(ws, xss),
           [kiln.grad(_cond_in_scan)(v, x) for v, x in zip(ws, xss)], 1e-6)
    # Gradient with respect to the scanned values.
    gx = kiln.grad(_cond_in_scan, argnums=1)(w, xs)
    fdx = [(_cond_in_scan_ref(0.7, xs + eps * e) - _cond_in_scan_ref(0.7, xs - eps * e))
           / (2 * eps) for e in np.eye(6)]
    _close(gx, fdx, 2e-2)


def _scan_of_scan(a, xs):
    def outer(c, row):
        def inner(ci, x):
            return ci * a + x, jnp.sin(ci)
        ci, ys = lax.scan(inner, c, row)
        return ci, ys.sum()
    return lax.scan(outer, F(0.1), xs)


def test_scan_of_scan():
    a, xs = F(0.9), np.linspace(0, 1, 12).reshape(3, 4).astype(F)
    c, ys = _scan_of_scan(a, xs)
    cr, ysr = 0.1, []
    for row in xs.astype(np.float64):
        tot = 0.0
        for x in row:
            tot += np.sin(cr)
            cr = cr * 0.9 + x
        ysr.append(tot)
    _close(c, cr, 1e-5)
    _close(ys, ysr, 1e-5)
    loss = lambda a, xs: (lambda r: r[0] + r[1].sum())(_scan_of_scan(a, xs))  # noqa: E731
    ga, gxs = kiln.grad(loss, (0, 1))(a, xs)
    eps = 1e-3
    _close(ga, (loss(a + eps, xs) - loss(a - eps, xs)) / (2 * eps), 1e-2)
    j = kiln.jacfwd(loss, 1)(a, xs)
    _close(gxs, j, 1e-5)
    vm = kiln.vmap(_scan_of_scan)(np.array([0.5, 0.9], F), np.stack([xs, 2 * xs]))
    for k, (av, xv) in enumerate([(F(0.5), xs), (F(0.9), 2 * xs)]):
        single = _scan_of_scan(av, xv)
        _close(vm[0][k], single[0], 1e-6)
        _close(vm[1][k], single[1], 1e-6)


def test_while_and_cond_inside_scan_forward_mode():
    xs = np.linspace(-1, 1, 6).astype(F)

    def f(a):
        def body(c, x):
            v = lax.while_loop(lambda v: v < 10.0, lambda v: v * a, c)
            return lax.cond(x > 0, lambda: c + x, lambda: c), v
        return lax.scan(body, F(1), xs)[1]
    eps = 1e-3
    _close(kiln.jacfwd(f)(F(2)), (f(F(2 + eps)) - f(F(2 - eps))) / (2 * eps), 2e-2)


def test_vmap_of_loops_with_batched_bounds_axes_and_indices():
    # Per-lane fori_loop bounds: a batched while predicate.
    f = kiln.vmap(lambda n, x: lax.fori_loop(0, n, lambda i, c: c * x, F(1)))
    np.testing.assert_array_equal(f(np.array([1, 2, 3], np.int32), np.array([2, 3, 4], F)),
                                  [2, 9, 64])
    # Scanned values batched along axis 1 of the input, output batched along axis 1.
    xs = np.arange(12, dtype=F).reshape(3, 4)
    g = kiln.vmap(lambda col: lax.scan(lambda c, x: (c + x, c), F(0), col)[1], 1, 1)
    np.testing.assert_array_equal(g(xs), np.cumsum(xs, 0) - xs)
    # grad through a switch whose index is batched (the select path transposes).
    idx = np.array([-1, 0, 1, 2, 5], np.int32)
    x = np.linspace(0.1, 0.9, 5).astype(F)
    h = kiln.grad(lambda x: kiln.vmap(lambda i, v: lax.switch(
        i, [lambda v: v * v, jnp.sin, jnp.cos], v))(idx, x).sum())
    _close(h(x), [2 * x[0], 2 * x[1], np.cos(x[2]), -np.sin(x[3]), -np.sin(x[4])], 1e-6)
    # A while loop whose predicate is batched only through a closed-over limit.
    lim = np.array([3.0, 10.0, 50.0], F)
    k = kiln.vmap(lambda m: lax.while_loop(lambda c: c < m, lambda c: c * 2, F(1)))
    np.testing.assert_array_equal(k(lim), [4, 16, 64])


def test_hessian_through_scan():
    def f(x):
        return lax.scan(lambda c, x: (c * x + jnp.sin(c), c), F(1), x)[0]
    x = np.array([0.3, 0.5, 0.7], F)
    h = kiln.hessian(f)(x)
    hf = kiln.jacfwd(kiln.jacfwd(f))(x)
    _close(h, hf, 1e-4)
    _close(h, h.T, 1e-5)


def test_rnn_trained_with_scan_under_jit_grad():
    rng = np.random.default_rng(0)
    T, B, D, H = 8, 16, 3, 8
    xs = rng.normal(size=(T, B, D)).astype(F)
    target = np.tanh(xs.sum(axis=(0, 2)) / 3).astype(F)        # a function of the sequence
    params = {"Wx": (rng.normal(size=(D, H)) * 0.3).astype(F),
              "Wh": (rng.normal(size=(H, H)) * 0.3).astype(F),
              "b": np.zeros(H, F), "Wo": (rng.normal(size=(H,)) * 0.3).astype(F)}

    def loss(p, xs, y):
        def step(h, x):
            h = jnp.tanh(x @ p["Wx"] + h @ p["Wh"] + p["b"])
            return h, h @ p["Wo"]
        h, outs = lax.scan(step, jnp.zeros((B, H)), xs)
        return jnp.mean((outs[-1] - y) ** 2)

    @kiln.jit
    def sgd(p, xs, y):
        val, g = kiln.value_and_grad(loss)(p, xs, y)
        return kiln.tree_util.tree_map(lambda a, b: a - 0.5 * b, p, g), val

    losses = []
    for _ in range(20):
        params, val = sgd(params, xs, target)
        losses.append(float(val))
    assert losses[-1] < 0.5 * losses[0], losses
    assert sgd._cache_size() == 1                              # traced once


# ================================================================================================
# associative_scan
# ================================================================================================

def test_associative_scan_matches_sequential_scans():
    rng = np.random.default_rng(1)
    for n in range(0, 18):
        x = rng.normal(size=(n, 2)).astype(F)
        _close(lax.associative_scan(jnp.add, x), np.cumsum(x, 0), 1e-5)
        _close(lax.associative_scan(jnp.add, x, reverse=True),
               np.cumsum(x[::-1], 0)[::-1], 1e-5)
    x = rng.normal(size=(3, 9)).astype(F)
    np.testing.assert_array_equal(lax.associative_scan(jnp.maximum, x, axis=1),
                                  np.maximum.accumulate(x, 1))
    np.testing.assert_array_equal(lax.associative_scan(jnp.minimum, x, axis=-1, reverse=True),
                                  np.minimum.accumulate(x[:, ::-1], 1)[:, ::-1])
    # Non-commutative: matrix products keep their order.
    ms = rng.normal(size=(6, 2, 2)).astype(F)
    prefix = lax.associative_scan(lambda a, b: jnp.matmul(a, b), ms)
    ref = [ms[0]]
    for m in ms[1:]:
        ref.append(ref[-1] @ m)
    _close(prefix, np.stack(ref), 1e-4)


def test_associative_scan_pytree_linear_recurrence_under_transformations():
    rng = np.random.default_rng(2)
    a = rng.uniform(0.5, 1.0, size=(11, 3)).astype(F)
    b = rng.normal(size=(11, 3)).astype(F)

    def combine(p, q):
        return {"a": p["a"] * q["a"], "b": q["a"] * p["b"] + q["b"]}

    def via_assoc(a, b):
        return lax.associative_scan(combine, {"a": a, "b": b})["b"]

    def via_scan(a, b):
        return lax.scan(lambda h, ab: (ab[0] * h + ab[1],) * 2, jnp.zeros(3), (a, b))[1]

    _close(via_assoc(a, b), via_scan(a, b), 1e-5)
    _close(kiln.jit(via_assoc)(a, b), via_scan(a, b), 1e-5)
    loss = lambda f: lambda a, b: (f(a, b) ** 2).sum()  # noqa: E731
    for g1, g2 in zip(kiln.grad(loss(via_assoc), (0, 1))(a, b),
                      kiln.grad(loss(via_scan), (0, 1))(a, b)):
        _close(g1, g2, 1e-4)
    batched = kiln.vmap(via_assoc, in_axes=(1, 1), out_axes=1)(a, b)
    _close(batched, via_scan(a, b), 1e-5)


def test_associative_scan_staging_is_logarithmic_and_errors():
    def n_eqns(n):
        return len(kiln.make_jaxpr(lambda x: lax.associative_scan(jnp.add, x))(
            np.ones(n, F)).eqns)
    assert n_eqns(1024) < 4 * n_eqns(32)             # O(log n) rounds, not O(n)
    with pytest.raises(ValueError, match="Array inputs to associative_scan must have the same "
                                         "first dimension"):
        lax.associative_scan(lambda a, b: (a[0] + b[0], a[1] + b[1]),
                             (np.ones(3, F), np.ones(4, F)))
    with pytest.raises(TypeError, match="fn argument should be callable"):
        lax.associative_scan(1, np.ones(3, F))


def test_cumlogsumexp_is_available():
    x = np.array([0.1, -1.0, 2.0], F)
    _close(lax.cumlogsumexp(x), np.logaddexp.accumulate(x.astype(np.float64)), 1e-5)


# ================================================================================================
# Python control flow on tracers: errors that name the line and the fix
# ================================================================================================

def _line_of(fn, text):
    src, start = inspect.getsourcelines(fn)
    for k, line in enumerate(src):
        if text in line:
            return start + k
    raise AssertionError(text)


def _python_if(x):
    if x > 0:  # the offending line
        return x
    return -x


def _python_while(x):
    while x < 10:  # loop on a traced value
        x = x * 2
    return x


def _python_range(x, n):
    for _ in range(n):  # traced trip count
        x = x + 1
    return x


def test_python_if_on_tracer_names_the_line_and_suggests_cond():
    with pytest.raises(errors.TracerBoolConversionError) as e:
        kiln.jit(_python_if)(F(1))
    msg = str(e.value)
    assert f"{__file__}:{_line_of(_python_if, 'the offending line')}" in msg
    assert "lax.cond" in msg and "static_argnums" in msg
    # Also inside the body of a structured loop (the body is traced).
    with pytest.raises(errors.TracerBoolConversionError) as e:
        lax.fori_loop(0, 3, lambda i, c: _python_if(c), F(1))
    assert f":{_line_of(_python_if, 'the offending line')}" in str(e.value)


def test_python_while_on_tracer_suggests_while_loop():
    with pytest.raises(errors.ConcretizationTypeError) as e:
        kiln.jit(_python_while)(F(1))
    msg = str(e.value)
    assert f"{__file__}:{_line_of(_python_while, 'loop on a traced value')}" in msg
    assert "lax.while_loop" in msg
    # The suggested fix works.
    fixed = kiln.jit(lambda x: lax.while_loop(lambda x: x < 10, lambda x: x * 2, x))
    assert float(fixed(F(1))) == 16.0
    # Under vmap the value is a tracer too (no jit needed).
    with pytest.raises(errors.TracerBoolConversionError):
        kiln.vmap(_python_while)(np.ones(2, F))


def test_traced_range_suggests_fori_loop_or_static_argnums():
    with pytest.raises(TypeError) as e:
        kiln.jit(_python_range)(F(0), 3)
    msg = str(e.value)
    assert f"{__file__}:{_line_of(_python_range, 'traced trip count')}" in msg
    assert "fori_loop" in msg and "static_argnums" in msg
    assert float(kiln.jit(_python_range, static_argnums=1)(F(0), 3)) == 3.0
    assert float(kiln.jit(lambda x, n: lax.fori_loop(0, n, lambda i, c: c + 1, x))(F(0), 3)) \
        == 3.0


# ================================================================================================
# Parity with JAX on a table of programs
# ================================================================================================

def _programs(jax, jnp_, lax_):
    xs = np.linspace(-1, 1, 6).astype(F)
    mat = np.linspace(0, 1, 12).reshape(3, 4).astype(F)
    return {
        "cond": (lambda x: lax_.cond(x > 0, lambda a: a * 2, lambda a: -a, x), (F(1.5),)),
        "cond_grad": (jax.grad(lambda x: lax_.cond(x > 0, lambda a: a * a, lambda a: -a, x)),
                      (F(1.5),)),
        "cond_int_pred": (lambda x: lax_.cond(3, lambda: x, lambda: -x), (F(2),)),
        "switch": (lambda i, x: lax_.switch(i, [jnp_.sin, jnp_.cos, lambda v: v * v], x),
                   (np.int32(7), F(0.3))),
        "switch_vmap": (jax.vmap(lambda i, x: lax_.switch(i, [jnp_.sin, jnp_.cos], x)),
                        (np.array([-1, 0, 1, 5], np.int32), xs[:4])),
        "while": (lambda x: lax_.while_loop(lambda c: c[0] < 10,
                                            lambda c: (c[0] + 1, c[1] * 2), (0, x)), (F(1.5),)),
        "while_vmap": (jax.vmap(lambda x: lax_.while_loop(
            lambda c: c[1] < 10., lambda c: (c[0] + 1, c[1] * 2), (0, x))),
            (np.array([1., 2., 3., 20.], F),)),
        "while_jvp": (lambda x: jax.jvp(lambda x: lax_.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * c[1]), (0, x))[1], (x,), (F(1),)),
            (F(1.5),)),
        "fori": (lambda x: lax_.fori_loop(0, 5, lambda i, c: c * x + i, F(1)), (F(0.9),)),
        "fori_grad": (jax.grad(lambda x: lax_.fori_loop(0, 5, lambda i, c: c * x + i, F(1))),
                      (F(0.9),)),
        "fori_traced": (jax.jit(lambda x, n: lax_.fori_loop(0, n, lambda i, c: c * x, x)),
                        (F(1.5), np.int32(4))),
        "fori_weak": (lambda x: lax_.fori_loop(0, 4, lambda i, c: c + i, x), (np.int8(1),)),
        "scan": (lambda xs: lax_.scan(lambda c, x: (c + x, c * x), 0.0, xs), (xs,)),
        "scan_reverse": (lambda xs: lax_.scan(lambda c, x: (jnp_.sin(c) + x, c * x), 0.0, xs,
                                              reverse=True), (xs,)),
        "scan_no_xs": (lambda x: lax_.scan(lambda c, _: (c * 2, c), x, None, length=4),
                       (F(1.5),)),
        "cond_false_branch_weak": (lambda p: lax_.cond(p, lambda: F(2), lambda: 1.0), (True,)),
        "cond_forwarded_weak": (lambda p: lax_.cond(p, lambda a, b: a, lambda a, b: a, 1.0,
                                                    F(2)), (False,)),
        "switch_branch0_weak": (lambda i: lax_.switch(i, [lambda: 1.0, lambda: F(2)]),
                                (np.int32(1),)),
        "scan_weak_promotion": (lambda: lax_.scan(lambda c, x: (c + 1.5, c), 0, None,
                                                  length=3), ()),
        "scan_grad": (jax.grad(lambda xs: lax_.scan(lambda c, x: (jnp_.sin(c) * x, c * x),
                                                    1.0, xs)[1].sum()), (xs,)),
        "scan_of_scan_grad": (jax.grad(lambda a, xs: lax_.scan(
            lambda c, row: (lax_.scan(lambda ci, x: (ci * a + x, ci), c, row)[0], c),
            F(0.1), xs)[0], (0, 1)), (F(0.9), mat)),
        "scan_vmap": (jax.vmap(lambda x: lax_.scan(lambda c, y: (c * y + 1, c), F(1), x)),
                      (mat,)),
        "map": (lambda xs: lax_.map(lambda x: x * 2 + jnp_.sin(x), xs, batch_size=4), (xs,)),
        "cond_in_scan_grad_vmap": (jax.vmap(jax.grad(lambda w, xs: lax_.scan(
            lambda c, x: (lax_.cond(x > 0, lambda c: c * w + x, lambda c: c - w * x, c), c),
            F(0.5), xs)[0]), (0, None)), (np.array([0.3, 0.7], F), xs)),
        "assoc_scan": (lambda x: lax_.associative_scan(jnp_.add, x, reverse=True, axis=1),
                       (mat,)),
        "assoc_scan_grad": (jax.grad(lambda x: lax_.associative_scan(
            lambda a, b: a * b, x).sum()), (xs + 1.5,)),
        "newton_vmap": (jax.vmap(lambda a: lax_.while_loop(
            lambda c: (jnp_.abs(c[0] * c[0] - a) > 1e-5 * a) & (c[1] < 100),
            lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1), (a, 0))),
            (np.array([1., 2., 100., 1e4, 0.25], F),)),
    }


def _leaves_with_types(tree_util, tree):
    out = []
    for leaf in tree_util.tree_leaves(tree):
        a = np.asarray(leaf)
        out.append((a, a.dtype, bool(getattr(leaf, "weak_type", False))))
    return out


PARITY = sorted(_programs(kiln, jnp, lax))


@pytest.mark.parametrize("name", PARITY)
def test_parity_with_jax(name):
    jax = pytest.importorskip("jax")
    import jax.numpy as jjnp
    fun, args = _programs(kiln, jnp, lax)[name]
    jfun, jargs = _programs(jax, jjnp, jax.lax)[name]
    got = _leaves_with_types(kiln.tree_util, fun(*args))
    want = _leaves_with_types(jax.tree_util, jfun(*jargs))
    assert len(got) == len(want)
    for (g, gdt, gw), (w, wdt, ww) in zip(got, want):
        assert gdt == wdt, f"{name}: dtype {gdt} vs jax {wdt}"
        assert gw == ww, f"{name}: weak_type {gw} vs jax {ww}"
        _close(g, w, 1e-5)
