"""Effects: ``kiln.debug.print`` / ``kiln.debug.callback``, ``kiln.callbacks.pure_callback``
and ``kiln.experimental.io_callback`` under jit, vmap, grad and control flow.

What is checked is what JAX does: prints come once per evaluation in program order, once
per batch element under vmap, with primal values (once, in the forward pass) under grad;
pure callbacks are dead-code eliminated, io callbacks never are; results are checked
against the declared shapes and dtypes.
"""
from __future__ import annotations

import io
import sys
from contextlib import redirect_stdout

import numpy as np
import pytest

import kiln
import kiln.debug
import kiln.numpy as jnp
from kiln import lax
from kiln.callbacks import pure_callback
from kiln.errors import JaxRuntimeError
from kiln.experimental import io_callback

F = np.float32
S = kiln.ShapeDtypeStruct


def lines(capsys):
    return capsys.readouterr().out.splitlines()


# ================================================================================================
# debug.print
# ================================================================================================

def test_print_eager_and_format_specs(capsys):
    kiln.debug.print("x = {x}", x=F(1.5))
    kiln.debug.print("{:.3f} {}", F(1), np.arange(3))
    kiln.debug.print("{0} {0}", 2)
    kiln.debug.print("hello")
    kiln.debug.print(ordered=True)("two-call {}", 7)
    assert lines(capsys) == ["x = 1.5", "1.000 [0 1 2]", "2 2", "hello", "two-call 7"]


def test_print_format_string_is_checked_when_traced():
    with pytest.raises(KeyError):
        kiln.debug.print("{x}", y=1)
    with pytest.raises(ValueError, match="Unused keyword arguments to `jax.debug.print`: "
                                         r"\['y'\]. You may be passing an f-string"):
        kiln.debug.print("{x}", x=1, y=2)
    with pytest.raises(ValueError, match=r"Unused positional arguments to `jax.debug.print`: "
                                         r"\[2\]"):
        kiln.debug.print("{}", 1, 2)
    with pytest.raises(TypeError, match="unexpected arguments in the two-call form"):
        kiln.debug.print(None, 1)


def test_print_under_jit_runs_at_every_call_not_at_trace(capsys):
    @kiln.jit
    def f(x):
        kiln.debug.print("x = {x}", x=x)
        return x * 2
    jaxpr = kiln.make_jaxpr(f)(F(1))
    assert lines(capsys) == []                       # tracing prints nothing
    assert "debug_print" in str(jaxpr)
    f(F(1))
    f(F(2))
    assert lines(capsys) == ["x = 1.0", "x = 2.0"]
    assert f._cache_size() == 1


def test_print_with_unused_result_is_not_removed(capsys):
    @kiln.jit
    def f(x):
        kiln.debug.print("a {}", x)
        y = x * 3                                    # dead code
        kiln.debug.print("b {}", y)
        return x
    f(F(2))
    assert lines(capsys) == ["a 2.0", "b 6.0"]


def test_print_and_callbacks_run_in_program_order(capsys):
    seen = []

    def g(x):
        kiln.debug.print("1: {}", x)
        y = x * 2
        kiln.debug.callback(lambda v: seen.append(float(v)), y)
        io_callback(lambda v: print(f"2: {float(v)}"), None, y + 1)
        kiln.debug.print("3: {}", y * 10)
        return y
    for fun in (g, kiln.jit(g)):
        fun(F(1))
        assert lines(capsys) == ["1: 1.0", "2: 3.0", "3: 20.0"]
    assert seen == [2.0, 2.0]


def test_print_under_vmap_prints_once_per_element(capsys):
    kiln.vmap(lambda x: kiln.debug.print("x={x}", x=x))(np.arange(3, dtype=F))
    assert lines(capsys) == ["x=0.0", "x=1.0", "x=2.0"]
    kiln.vmap(lambda x, y: kiln.debug.print("x={} y={}", x, y), (0, None))(
        np.arange(2, dtype=F), F(5))
    assert lines(capsys) == ["x=0.0 y=5.0", "x=1.0 y=5.0"]
    kiln.jit(kiln.vmap(lambda x: kiln.debug.print("{}", x)))(np.arange(2, dtype=F))
    assert lines(capsys) == ["0.0", "1.0"]
    # A row of a batched matrix is printed per element.
    kiln.vmap(lambda r: kiln.debug.print("{}", r))(np.arange(4, dtype=F).reshape(2, 2))
    assert lines(capsys) == ["[0. 1.]", "[2. 3.]"]


def _traced_fun(x):
    kiln.debug.print("x={x}", x=x)
    y = x * x
    kiln.debug.print("y={y}", y=y)
    return y * 2


def test_print_under_grad_shows_primals_once(capsys):
    assert float(kiln.grad(_traced_fun)(F(3))) == 12.0
    assert lines(capsys) == ["x=3.0", "y=9.0"]
    assert float(kiln.jit(kiln.grad(_traced_fun))(F(3))) == 12.0
    assert lines(capsys) == ["x=3.0", "y=9.0"]
    assert float(kiln.grad(kiln.jit(_traced_fun))(F(3))) == 12.0
    assert lines(capsys) == ["x=3.0", "y=9.0"]
    y, t = kiln.jvp(_traced_fun, (F(3),), (F(1),))
    assert (float(y), float(t)) == (18.0, 12.0)
    assert lines(capsys) == ["x=3.0", "y=9.0"]
    # vmap of grad: each print once per element, in program order.
    kiln.vmap(kiln.grad(_traced_fun))(np.array([1.0, 2.0], F))
    assert lines(capsys) == ["x=1.0", "x=2.0", "y=1.0", "y=4.0"]


def test_print_inside_control_flow(capsys):
    lax.scan(lambda c, x: (kiln.debug.print("c={c} x={x}", c=c, x=x), (c + x, None))[1],
             F(0), np.arange(3, dtype=F))
    assert lines(capsys) == ["c=0.0 x=0.0", "c=0.0 x=1.0", "c=1.0 x=2.0"]
    kiln.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: (kiln.debug.print("i={}", i),
                                                         c + i)[1], x))(0)
    assert lines(capsys) == ["i=0", "i=1", "i=2"]
    lax.while_loop(lambda c: c < 3, lambda c: (kiln.debug.print("w={}", c), c + 1)[1], 0)
    assert lines(capsys) == ["w=0", "w=1", "w=2"]
    for p in (True, False):
        kiln.jit(lambda p: lax.cond(p, lambda: (kiln.debug.print("T"), 1.0)[1],
                                    lambda: (kiln.debug.print("F"), 2.0)[1]))(p)
    assert lines(capsys) == ["T", "F"]
    # Under grad the body's print sees the primal carry of every iteration, once.
    g = kiln.grad(lambda xs: lax.scan(
        lambda c, x: (kiln.debug.print("c={}", c), (c * x, None))[1], F(1), xs)[0])
    assert g(np.array([1.0, 2.0, 3.0], F)).tolist() == [6.0, 3.0, 2.0]
    assert lines(capsys) == ["c=1.0", "c=1.0", "c=2.0"]


def test_print_in_vmapped_control_flow_follows_jax(capsys):
    # A batched predicate evaluates both branches for every lane (false branch first).
    kiln.vmap(lambda x: lax.cond(x > 1, lambda: kiln.debug.print("T {}", x),
                                 lambda: kiln.debug.print("F {}", x)))(np.array([1, 2]))
    assert lines(capsys) == ["F 1", "F 2", "T 1", "T 2"]
    # A batched while loop runs the body for all lanes while any lane is active.
    kiln.vmap(lambda x: lax.while_loop(lambda c: c < 3, lambda c: (
        kiln.debug.print("c={}", c), c + 1)[1], x))(np.array([1, 2]))
    assert lines(capsys) == ["c=1", "c=2", "c=2", "c=3"]


def test_print_uses_numpy_printoptions_of_trace_time(capsys):
    with np.printoptions(precision=2):
        kiln.debug.print("{}", np.array([1 / 3, 2 / 3], F))
    assert lines(capsys) == ["[0.33 0.67]"]


def test_print_inside_control_flow_with_unused_result_under_jit(capsys):
    f = kiln.jit(lambda x: (lax.fori_loop(0, 2, lambda i, c: (kiln.debug.print("i={}", i),
                                                              c)[1], x), x)[1])
    f(F(1))
    kiln.jit(lambda p: lax.cond(p, lambda: kiln.debug.print("T"),
                                lambda: kiln.debug.print("F")))(True)
    assert lines(capsys) == ["i=0", "i=1", "T"]


def test_breakpoint_runs_the_debugger(monkeypatch, capsys):
    # Full coverage (jit/vmap/grad, against JAX) is in tests/core/test_breakpoint.py.
    monkeypatch.setattr(sys, "stdin", io.StringIO("c\n"))
    kiln.debug.breakpoint()
    assert capsys.readouterr().out.startswith("Entering jdb:")


# ================================================================================================
# debug.callback
# ================================================================================================

def test_debug_callback_arguments():
    got = []

    def cb(*args, **kwargs):
        got.append((args, kwargs))

    kiln.debug.callback(cb, F(1), np.ones(2, F), 3, s="str", y=F(4))
    (args, kwargs), = got
    assert all(isinstance(a, kiln.Array) for a in args)
    assert kwargs["s"] == "str" and isinstance(kwargs["y"], kiln.Array)
    assert [np.asarray(a).tolist() for a in args] == [1.0, [1.0, 1.0], 3]
    got.clear()
    kiln.jit(lambda x: kiln.debug.callback(cb, x, 2, s="static"))(F(5))
    (args, kwargs), = got
    assert float(args[0]) == 5.0 and int(args[1]) == 2 and kwargs == {"s": "static"}
    with pytest.raises(TypeError, match="first argument to jax.debug.callback must be callable"):
        kiln.debug.callback(1, 2)


def test_debug_callback_under_vmap_and_grad():
    got = []
    kiln.vmap(lambda x: kiln.debug.callback(lambda v: got.append(float(v)), x))(
        np.arange(3, dtype=F))
    assert got == [0.0, 1.0, 2.0]
    got.clear()

    def f(x):
        kiln.debug.callback(lambda v: got.append(float(v)), x)
        return x * x
    assert float(kiln.grad(f)(F(3))) == 6.0
    assert got == [3.0]


# ================================================================================================
# pure_callback
# ================================================================================================

def _double(x):
    return np.asarray(x) * 2


def test_pure_callback_eager_jit_and_pytrees():
    calls = []

    def cb(x, y, *, scale):
        calls.append(type(x))
        return {"s": np.asarray(x + y) * scale, "p": (np.asarray(x * y),)}
    spec = {"s": S((3,), F), "p": (S((3,), F),)}
    x, y = np.arange(3, dtype=F), np.ones(3, F)
    for fun in (lambda x, y: pure_callback(cb, spec, x, y, scale=F(2)),
                kiln.jit(lambda x, y: pure_callback(cb, spec, x, y, scale=F(2)))):
        out = fun(x, y)
        assert out["s"].tolist() == [2, 4, 6] and out["p"][0].tolist() == [0, 1, 2]
        assert out["s"].dtype == np.float32
    assert calls == [kiln.array.ArrayImpl, kiln.array.ArrayImpl]
    # Python scalars and float64 results are canonicalized to the declared type.
    out = pure_callback(lambda x: 2.0, S((), F), F(1))
    assert out.dtype == np.float32 and float(out) == 2.0 and not out.weak_type


def test_pure_callback_checks_results():
    with pytest.raises(JaxRuntimeError, match=r"Incorrect output shape for return value #0: "
                                              r"Expected: \(2,\), Actual: \(3,\)"):
        pure_callback(lambda x: np.ones(3, F), S((2,), F), F(1))
    with pytest.raises(JaxRuntimeError, match="Incorrect output dtype for return value #0: "
                                              "Expected: float32, Actual: int32"):
        kiln.jit(lambda x: pure_callback(lambda x: np.ones(2, np.int32), S((2,), F), x))(F(1))
    with pytest.raises(JaxRuntimeError, match="Mismatched number of outputs from callback. "
                                              "Expected: 1, Actual: 2"):
        pure_callback(lambda x: [np.ones(2, F), 1], [S((2,), F)], F(1))
    with pytest.raises(ValueError, match="result_shape_dtypes cannot specify 64-bit types"):
        pure_callback(lambda x: x, np.zeros((), np.float64), F(1))
    with pytest.raises(ValueError, match="vmap_method must be on of the allowed methods"):
        pure_callback(lambda x: x, S((), F), F(1), vmap_method="foo")


def test_pure_callback_is_removed_when_unused():
    calls = []

    def cb(x):
        calls.append(1)
        return np.asarray(x)
    f = kiln.jit(lambda x: (pure_callback(cb, S((), F), x), x * 2)[1])
    assert float(f(F(1))) == 2.0
    assert calls == []
    assert "pure_callback" not in str(kiln.make_jaxpr(f)(F(1)))
    g = kiln.jit(lambda x: pure_callback(cb, S((), F), x) + 1)
    assert float(g(F(1))) == 2.0 and calls == [1]


def test_pure_callback_is_not_differentiable_unless_wrapped():
    f = lambda x: pure_callback(_double, S((), F), x)  # noqa: E731
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP. Please use "
                                         "`jax.custom_jvp`"):
        kiln.grad(f)(F(1))
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
        kiln.jvp(f, (F(1),), (F(1),))

    @kiln.custom_jvp
    def host_sin(x):
        return pure_callback(lambda v: np.sin(np.asarray(v)), S(np.shape(x), F), x,
                             vmap_method="sequential")

    @host_sin.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        cos = pure_callback(lambda v: np.cos(np.asarray(v)), S(np.shape(x), F), x,
                            vmap_method="sequential")
        return host_sin(x), cos * t

    np.testing.assert_allclose(kiln.grad(host_sin)(F(1)), np.cos(F(1)), rtol=1e-6)
    xs = np.linspace(0, 1, 4).astype(F)
    np.testing.assert_allclose(kiln.vmap(kiln.grad(host_sin))(xs), np.cos(xs), rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(kiln.grad(host_sin))(F(1)), np.cos(F(1)), rtol=1e-6)


def _vmap_shapes(method, x, y, in_axes):
    shapes = []

    def cb(x, y):
        shapes.append((np.shape(x), np.shape(y)))
        return np.asarray(x + y)

    def fun(x, y):
        shape = np.broadcast_shapes(np.shape(x), np.shape(y))
        return pure_callback(cb, S(shape, F), x, y, vmap_method=method)
    out = kiln.vmap(fun, in_axes)(x, y)
    return out, shapes


@pytest.mark.parametrize("method,expected", [
    ("sequential", [((), ())] * 4),
    ("sequential_unrolled", [((), ())] * 4),
    ("expand_dims", [((4,), (1,))]),
    ("broadcast_all", [((4,), (4,))]),
    ("legacy_vectorized", [((4,), ())]),
])
def test_pure_callback_vmap_methods(method, expected):
    out, shapes = _vmap_shapes(method, np.arange(4, dtype=F), F(1), (0, None))
    assert out.tolist() == [1, 2, 3, 4]
    assert shapes == expected


def test_pure_callback_vmap_method_none_and_nesting():
    with pytest.raises(NotImplementedError, match="vmap is only supported for the "
                                                  "pure_callback primitive when vmap_method is "
                                                  "one of"):
        kiln.vmap(lambda x: pure_callback(_double, S((), F), x))(np.ones(2, F))
    shapes = []

    def cb(x, y):
        shapes.append((np.shape(x), np.shape(y)))
        return np.asarray(x + y)

    inner = kiln.vmap(lambda x, y: pure_callback(cb, S((), F), x, y, vmap_method="expand_dims"),
                      (0, None))
    out = kiln.vmap(inner, (None, 0))(np.arange(4, dtype=F), np.arange(3, dtype=F))
    assert shapes == [((1, 4), (3, 1))]
    np.testing.assert_array_equal(out, np.arange(3)[:, None] + np.arange(4)[None, :])
    # A callback returning the wrong batched shape is caught at run time.
    with pytest.raises(JaxRuntimeError, match="Incorrect output shape"):
        kiln.vmap(lambda x: pure_callback(lambda v: np.asarray(v)[0], S((), F), x,
                                          vmap_method="expand_dims"))(np.arange(4, dtype=F))


# ================================================================================================
# io_callback
# ================================================================================================

def test_io_callback_runs_even_when_unused():
    log = []

    def record(x):
        log.append(float(x))
        return np.asarray(x) * 2

    f = kiln.jit(lambda x: (io_callback(record, S((), F), x), x)[1])
    assert float(f(F(1))) == 1.0 and log == [1.0]
    assert "io_callback" in str(kiln.make_jaxpr(f)(F(1)))
    assert float(kiln.jit(lambda x: io_callback(record, S((), F), x))(F(3))) == 6.0
    assert io_callback(lambda x: None, None, F(1)) is None
    assert float(io_callback(lambda x, y=1: np.asarray(x + y), S((), F), F(1), y=F(3))) == 4.0


def test_io_callback_in_scan_and_vmap():
    log = []

    def record(x):
        log.append(float(x))
        return np.asarray(x) * 2
    _, ys = lax.scan(lambda c, x: (c, io_callback(record, S((), F), x)), F(0),
                     np.arange(3, dtype=F))
    assert ys.tolist() == [0, 2, 4] and log == [0.0, 1.0, 2.0]
    log.clear()
    out = kiln.vmap(lambda x: io_callback(record, S((), F), x))(np.arange(3, dtype=F))
    assert out.tolist() == [0, 2, 4] and log == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="Cannot `vmap` ordered IO callback."):
        kiln.vmap(lambda x: io_callback(record, S((), F), x, ordered=True))(np.ones(2, F))
    # ordered io_callbacks are fine inside loops.
    log.clear()
    kiln.jit(lambda xs: lax.scan(lambda c, x: (c, io_callback(record, S((), F), x,
                                                              ordered=True)), F(0), xs))(
        np.arange(2, dtype=F))
    assert log == [0.0, 1.0]


def test_io_callback_is_not_differentiable():
    with pytest.raises(ValueError, match="IO callbacks do not support JVP."):
        kiln.grad(lambda x: io_callback(_double, S((), F), x))(F(1))
    # A callback on values that do not depend on the differentiated input is fine.
    log = []
    g = kiln.grad(lambda x, y: x * io_callback(lambda v: (log.append(1), np.asarray(v))[1],
                                              S((), F), y))
    assert float(g(F(2), F(5))) == 5.0 and log == [1]


def test_io_callback_in_loop_with_unused_result_under_jit():
    log = []
    f = kiln.jit(lambda x: (lax.scan(lambda c, _: (c, io_callback(
        lambda v: (log.append(1), np.asarray(v))[1], S((), F), c)), x, None, length=2), x)[1])
    f(F(1))
    assert log == [1, 1]


# ================================================================================================
# Parity with JAX: the same programs print the same lines.
# ================================================================================================

def _print_programs(jax, lax_, dbg):
    xs = np.arange(3, dtype=F)

    def fwd(x):
        dbg.print("x={x}", x=x)
        y = x * x + 1
        dbg.print("y={}", y)
        return y * 2
    return {
        "grad": lambda: jax.grad(fwd)(F(3)),
        "jit_grad": lambda: jax.jit(jax.grad(fwd))(F(3)),
        "grad_jit": lambda: jax.grad(jax.jit(fwd))(F(3)),
        "vmap_grad": lambda: jax.vmap(jax.grad(fwd))(xs),
        "jvp": lambda: jax.jvp(fwd, (F(2),), (F(1),)),
        "jacfwd": lambda: jax.jacfwd(fwd)(F(2)),
        "scan": lambda: lax_.scan(lambda c, x: (dbg.print("{} {}", c, x), (c + x, c))[1],
                                  F(0), xs),
        "vmap_scan": lambda: jax.vmap(lambda x: lax_.scan(
            lambda c, y: (dbg.print("{}", c), (c * y, c))[1], x, xs))(xs + 1),
        "vmap_while": lambda: jax.vmap(lambda x: lax_.while_loop(
            lambda c: c < 4, lambda c: (dbg.print("c={}", c), c + 1)[1], x))(np.array([1, 3])),
        "vmap_cond": lambda: jax.vmap(lambda x: lax_.cond(
            x > 1, lambda: dbg.print("T {}", x), lambda: dbg.print("F {}", x)))(np.arange(3)),
        "fori_grad": lambda: jax.grad(lambda a: lax_.fori_loop(
            0, 3, lambda i, c: (dbg.print("{} {}", i, c), c * a)[1], F(1)))(F(2)),
        "format": lambda: dbg.print("{a:.2f}|{b}|{0}", F(7), a=F(1 / 3), b=np.arange(2)),
    }


@pytest.mark.parametrize("name", sorted(_print_programs(kiln, lax, kiln.debug)))
def test_print_parity_with_jax(name):
    jax = pytest.importorskip("jax")
    out_k, out_j = io.StringIO(), io.StringIO()
    with redirect_stdout(out_k):
        _print_programs(kiln, lax, kiln.debug)[name]()
    with redirect_stdout(out_j):
        _print_programs(jax, jax.lax, jax.debug)[name]()
    assert out_k.getvalue() == out_j.getvalue()


def test_callbacks_accept_jnp_values():
    # Values computed by kiln.numpy flow into callbacks as kiln Arrays.
    seen = []
    kiln.debug.callback(lambda v: seen.append(v.tolist()), jnp.arange(3) * 2)
    assert seen == [[0, 2, 4]]


def test_cond_whose_outputs_all_pass_through_still_runs_its_effects(capsys):
    # Every output of this cond is forwarded from its operand; the print must still run.
    def f(x):
        return kiln.lax.cond(x > 0, lambda a: (kiln.debug.print("in cond {}", a), a)[1],
                             lambda a: a, x)
    assert "cond" in str(kiln.make_jaxpr(f)(1.0))
    f(1.0)
    kiln.jit(f)(2.0)
    out = capsys.readouterr().out
    assert "in cond 1.0" in out and "in cond 2.0" in out


@pytest.mark.parametrize("how", ["eager", "jit", "vmap", "grad"])
def test_effects_barrier_finds_every_effect_done(how):
    """``kiln.effects_barrier()`` (JAX's name) returns once every effect issued before it
    has run; kiln's effects run synchronously, so they are all done by then."""
    seen = []

    def f(x):
        kiln.debug.callback(lambda v: seen.append(np.asarray(v).shape), x)
        return (x * 2.0).sum()

    x = jnp.ones(3)
    if how == "jit":
        kiln.jit(f)(x)
    elif how == "vmap":
        kiln.vmap(f)(jnp.ones((2, 3)))
    elif how == "grad":
        kiln.grad(f)(x)
    else:
        f(x)
    assert kiln.effects_barrier() is None
    assert seen and all(s in ((3,), (2, 3)) for s in seen)
