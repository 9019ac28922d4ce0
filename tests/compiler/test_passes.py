"""The jaxpr optimisation passes of ``kiln.compiler.passes.passes``: structure of the result
(which equations remain) and values (the reference backend before vs after)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import kiln as jax
import kiln.lax as lax
import kiln.numpy as jnp
from kiln.backends.reference import run_jaxpr
from kiln.compiler.passes import passes as P
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr, Literal, check_jaxpr, pp_jaxpr

X23 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


@pytest.fixture(autouse=True)
def _reference_backend():
    """Calls left in a jaxpr (``jit`` equations of the unoptimised input) run on the NumPy
    reference backend: it is the oracle here, and these tests must not build C code."""
    old = getattr(jax.config, "kiln_backend", None)
    if old is None:           # no compiled backend in this tree
        yield
        return
    jax.config.update("kiln_backend", "reference")
    try:
        yield
    finally:
        jax.config.update("kiln_backend", old)


def names(closed):
    return [e.primitive.name for e in closed.eqns]


def run(closed, *args):
    return run_jaxpr(closed.jaxpr, closed.consts, [np.asarray(a) for a in args])


def apply(pass_fn, closed, *args):
    """Run a pass; check that it left its input alone, that the result type-checks, keeps
    the output avals and computes the same values (bitwise) as the input."""
    before = pp_jaxpr(closed.jaxpr)
    out = pass_fn(closed)
    assert isinstance(out, ClosedJaxpr) and out is not closed
    assert pp_jaxpr(closed.jaxpr) == before, "the pass modified its input"
    check_jaxpr(out.jaxpr)
    assert len(out.jaxpr.constvars) == len(out.consts)
    assert [(a.shape, a.dtype, a.weak_type) for a in out.out_avals] == \
        [(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
    assert out.in_avals == closed.in_avals
    for want, got in zip(run(closed, *args), run(out, *args)):
        got = np.asarray(got)
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(got, want)
    return out


# ----------------------------------------------------------------------------------------------
# inline_calls


def test_inline_nested_jit():
    inner = jax.jit(lambda a: jnp.sin(a) * 2.0)
    outer = jax.jit(lambda a: inner(a) + jnp.cos(a))
    closed = jax.make_jaxpr(lambda x: outer(x) * 3.0)(X23)
    assert names(closed) == ["jit", "mul"]
    out = apply(P.inline_calls, closed, X23)
    assert names(out) == ["sin", "mul", "cos", "add", "mul"]


def test_inline_same_body_twice_gets_fresh_vars():
    f = jax.jit(lambda a: jnp.exp(a) - 1.0)
    closed = jax.make_jaxpr(lambda x: f(f(x)))(X23)
    # Both calls share one cached body jaxpr: reusing its variables would define them twice.
    assert closed.eqns[0].params["jaxpr"] is closed.eqns[1].params["jaxpr"]
    out = apply(P.inline_calls, closed, X23)
    assert names(out) == ["exp", "sub", "exp", "sub"]
    assert out.eqns[0].outvars[0] is not out.eqns[2].outvars[0]


def test_inline_body_consts_become_outer_consts_once():
    c = np.array([1.0, 2.0, 3.0], np.float32)
    f = jax.jit(lambda a: a * c)
    closed = jax.make_jaxpr(lambda x: f(x) + f(x + 1.0))(X23)
    assert closed.consts == []
    out = apply(P.inline_calls, closed, X23)
    assert "jit" not in names(out)
    assert len(out.consts) == 1      # the same const object, added once
    np.testing.assert_array_equal(np.asarray(out.consts[0]), c)


def test_inline_custom_jvp_custom_vjp_and_checkpoint():
    @jax.custom_vjp
    def g(x):
        return jnp.tanh(x)

    g.defvjp(lambda x: (jnp.tanh(x), x), lambda r, ct: (ct,))

    def f(x):
        return jax.nn.relu(x) + g(x) + jax.checkpoint(lambda a: jnp.sin(a) * a)(x)

    closed = jax.make_jaxpr(f)(X23)
    assert {"custom_jvp_call", "custom_vjp_call", "checkpoint"} <= set(names(closed))
    out = apply(P.inline_calls, closed, X23)
    assert names(out) == ["max", "tanh", "add", "sin", "mul", "add"]


def test_inline_leaves_control_flow_bodies_alone():
    inner = jax.jit(lambda a: a * 2.0)

    def f(x):
        y = lax.cond(x.sum() > 0, inner, lambda a: -a, x)
        c, _ = lax.scan(lambda c, a: (inner(c) + a, None), jnp.zeros(3), x)
        return inner(y) + c

    closed = jax.make_jaxpr(f)(X23)
    out = apply(P.inline_calls, closed, X23)
    by_name = {e.primitive.name: e for e in out.eqns}
    src = {e.primitive.name: e for e in closed.eqns}
    assert "jit" not in by_name                    # the top-level call is inlined
    assert by_name["cond"].params["branches"] is src["cond"].params["branches"]
    assert by_name["scan"].params["jaxpr"] is src["scan"].params["jaxpr"]
    assert "jit" in names(by_name["scan"].params["jaxpr"])


# ----------------------------------------------------------------------------------------------
# dce


def with_outputs(closed, keep):
    """``closed`` returning only the outputs at positions ``keep`` (the rest is dead code:
    staging already removes dead code, so it is made by dropping outputs)."""
    j = closed.jaxpr
    return ClosedJaxpr(Jaxpr(j.constvars, j.invars, [j.outvars[i] for i in keep], j.eqns),
                       closed.consts)


def test_dce_removes_dead_code_and_unused_consts():
    c = np.arange(3, dtype=np.float32)
    closed = jax.make_jaxpr(lambda x: (jnp.exp(x), jnp.sin(x) * c, jnp.cos(x)))(X23)
    closed = with_outputs(closed, [0])
    assert len(closed.consts) == 1 and len(closed.eqns) == 5
    out = apply(P.dce, closed, X23)
    assert names(out) == ["exp"]
    assert out.consts == [] and out.jaxpr.constvars == []


def test_dce_keeps_effects_also_inside_control_flow():
    def f(x):
        jax.debug.print("top {}", x)
        y = lax.cond(x > 0, lambda a: (jax.debug.print("in cond {}", a), a)[1],
                     lambda a: a, x)
        z = lax.cond(x > 0, jnp.sin, jnp.cos, x)       # pure: removable
        return x + 1.0, y, z, jnp.sin(x)

    closed = with_outputs(jax.make_jaxpr(f)(np.float32(1.0)), [0])
    assert names(closed).count("cond") == 2
    out = apply(P.dce, closed, np.float32(1.0))
    assert names(out) == ["debug_print", "gt", "convert_element_type", "cond", "add"]


# ----------------------------------------------------------------------------------------------
# cse


def test_cse_merges_duplicates():
    def f(x):
        a = jnp.sin(x) * 2.0
        b = jnp.sin(x) * 2.0
        return a + b, jnp.sin(x)

    closed = jax.make_jaxpr(f)(X23)
    out = apply(P.cse, closed, X23)
    assert names(out) == ["sin", "mul", "add"]
    assert out.jaxpr.outvars[1] is out.eqns[0].outvars[0]


def test_cse_literals_compare_bitwise_and_params_matter():
    def f(x):
        return (lax.max(x, 0.0), lax.max(x, -0.0), lax.max(x, 0.0),
                jnp.sum(x, axis=0), jnp.sum(x, axis=1), jnp.sum(x, axis=0))

    closed = jax.make_jaxpr(f)(X23)
    out = apply(P.cse, closed, X23)
    assert names(out) == ["max", "max", "reduce_sum", "reduce_sum"]
    neg = [e for e in out.eqns if e.primitive.name == "max"][1].invars[1]
    assert isinstance(neg, Literal) and np.signbit(neg.val._value)


def test_cse_params_compare_with_their_types():
    from kiln.lax.arith import integer_pow_p
    # 2 == 2.0 == hash-equal, but they are different params (and True == 1).
    closed = jax.make_jaxpr(lambda x: (integer_pow_p.bind(x, y=2), integer_pow_p.bind(x, y=2.0),
                                       integer_pow_p.bind(x, y=2), integer_pow_p.bind(x, y=1),
                                       integer_pow_p.bind(x, y=True)))(X23)
    out = apply(P.cse, closed, X23)
    assert [e.params["y"] for e in out.eqns] == [2, 2.0, 1, True]
    assert [type(e.params["y"]) for e in out.eqns] == [int, float, int, bool]


def _effect_primitive():
    """An effectful primitive with hashable (no) params: ``debug_print``'s callback param
    is unhashable, which alone would keep two prints apart."""
    from kiln.core.trace import Primitive
    from kiln.interpreters import staging
    p = Primitive("test_passes_effect")
    p.impl = lambda x: x
    p.abstract_eval = lambda a: a
    staging.always_stage.add(p)
    return p


_effect_p = _effect_primitive()


def test_cse_and_dce_never_touch_effectful_equations():
    def f(x):
        _effect_p.bind(x)
        _effect_p.bind(x)
        _effect_p.bind(np.float32(2.0))       # foldable operands, yet must run
        return x + 1.0

    closed = jax.make_jaxpr(f)(X23)
    assert names(closed) == ["test_passes_effect"] * 3 + ["add"]
    for fn in (P.cse, P.dce, P.fold_constants, P.optimize):
        assert names(apply(fn, closed, X23)) == names(closed)


def test_cse_keeps_effects_merges_random():
    def f(k, x):
        jax.debug.print("{}", x)
        jax.debug.print("{}", x)
        return jax.random.bits(k, (3,)), jax.random.bits(k, (3,))

    key = jax.random.PRNGKey(0)
    closed = jax.make_jaxpr(f)(key, X23)
    out = apply(P.cse, closed, np.asarray(key._value), X23)
    assert names(out).count("debug_print") == 2
    assert names(out).count("random_bits") == 1


# ----------------------------------------------------------------------------------------------
# fold_constants


def test_fold_scalar_literals():
    def f(x):
        return lax.add(2.0, 3.0) * x, jnp.sin(jnp.float32(2.0))

    closed = jax.make_jaxpr(f)(X23)
    out = apply(P.fold_constants, closed, X23)
    assert names(out) == ["mul"]
    lit = out.eqns[0].invars[0]
    assert isinstance(lit, Literal) and lit.val._value == 5.0
    assert lit.val.weak_type == lit.aval.weak_type is False
    assert isinstance(out.jaxpr.outvars[1], Literal)
    assert type(out.jaxpr.outvars[1].val) is jax.array.ArrayImpl


def test_fold_small_consts_not_large_ones_nor_iota():
    small = np.arange(4, dtype=np.float32)
    large = np.arange(2000, dtype=np.float32)

    def f(x):
        return x + jnp.exp(small), jnp.exp(large), jnp.arange(4), jnp.broadcast_to(small, (300, 4))

    closed = jax.make_jaxpr(f)(np.ones(4, np.float32))
    out = apply(P.fold_constants, closed, np.ones(4, np.float32))
    # exp(large) reads more than 1024 elements, the broadcast would write more than that.
    assert names(out) == ["add", "exp", "iota", "broadcast_in_dim"]
    new_const = out.eqns[0].invars[1]
    assert new_const in out.jaxpr.constvars
    # folded with kiln's exp (XLA's formula, JAX's bits): within an ulp of NumPy's
    np.testing.assert_allclose(np.asarray(out.consts[out.jaxpr.constvars.index(new_const)]),
                               np.exp(small), rtol=3e-7)


def test_fold_splat_becomes_broadcast_of_literal():
    def f(x):
        return x + (jnp.zeros(3) + 1.0).reshape(1, 3)

    closed = jax.make_jaxpr(f)(np.ones((2, 3), np.float32))
    out = P.dce(apply(P.fold_constants, closed, np.ones((2, 3), np.float32)))
    assert names(out) == ["broadcast_in_dim", "add"]
    assert out.consts == []
    assert out.eqns[0].invars[0].val._value == 1.0


def test_fold_skips_effects_and_calls():
    def f(x):
        jax.debug.print("{}", 1.0)
        return x + jax.jit(lambda: jnp.float32(2.0) * 3.0)()

    closed = jax.make_jaxpr(f)(X23)
    out = apply(P.fold_constants, closed, X23)
    assert names(out)[:2] == ["debug_print", "jit"]


# ----------------------------------------------------------------------------------------------
# simplify


def test_simplify_movement_chains():
    def f(x):
        a = x.T.T                                         # identity
        b = x.reshape(6).reshape(3, 2).reshape(2, 3)      # back to x
        c = jnp.squeeze(x.reshape(1, 2, 3)).reshape(3, 2)
        # a transpose that only moves a unit axis is a reshape: x -> (2, 1, 3) in one step.
        d = jnp.transpose(x[None], (1, 0, 2))
        e = x.reshape(3, 2).T                             # a real transpose: kept
        return a, b, c, d, e

    closed = jax.make_jaxpr(f)(X23)
    out = P.dce(apply(P.simplify, closed, X23))
    assert out.jaxpr.outvars[0] is out.jaxpr.invars[0]
    assert out.jaxpr.outvars[1] is out.jaxpr.invars[0]
    assert names(out) == ["reshape", "reshape", "reshape", "transpose"]
    assert [e.params["new_sizes"] for e in out.eqns[:2]] == [(3, 2), (2, 1, 3)]
    assert all(e.invars[0] is out.jaxpr.invars[0] for e in out.eqns[:2])


def test_simplify_transpose_composition():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    closed = jax.make_jaxpr(
        lambda x: jnp.transpose(jnp.transpose(jnp.transpose(x, (1, 0, 2)), (2, 0, 1)),
                                (0, 2, 1)))(x)
    out = P.dce(apply(P.simplify, closed, x))
    assert names(out) == ["transpose"]
    assert out.eqns[0].params["permutation"] == (2, 0, 1)
    assert out.eqns[0].invars[0] is out.jaxpr.invars[0]


def test_simplify_broadcasts():
    x = np.arange(3, dtype=np.float32)

    def f(x):
        a = lax.broadcast_in_dim_p.bind(x, shape=(3,), broadcast_dimensions=(0,),
                                        sharding=None)    # lax.broadcast_in_dim elides it
        b = lax.broadcast_in_dim(lax.broadcast_in_dim(x, (2, 3), (1,)), (4, 2, 3), (1, 2))
        return a, b

    closed = jax.make_jaxpr(f)(x)
    out = P.dce(apply(P.simplify, closed, x))
    assert names(out) == ["broadcast_in_dim"]
    assert out.eqns[0].params["broadcast_dimensions"] == (2,)
    assert out.eqns[0].invars[0] is out.jaxpr.invars[0]


def test_simplify_convert_round_trips():
    with jax.enable_x64(True):
        x = np.array([1.5, -2.25, 3e-30], np.float32)
        closed = jax.make_jaxpr(lambda x: (x.astype(jnp.float64).astype(jnp.float32),
                                           x.astype(jnp.float16).astype(jnp.float32),
                                           x.astype(jnp.float32)))(x)
        out = P.dce(apply(P.simplify, closed, x))
    assert out.jaxpr.outvars[0] is out.jaxpr.invars[0]
    assert out.jaxpr.outvars[2] is out.jaxpr.invars[0]
    assert names(out) == ["convert_element_type", "convert_element_type"]


def test_exact_conversion_table():
    ok = [(np.float32, np.float64), (np.float16, np.float32), (np.int8, np.int32),
          (np.uint8, np.int16), (np.int16, np.float32), (np.int32, np.float64),
          (np.bool_, np.float32), (np.float32, np.complex64), (np.complex64, np.complex128)]
    bad = [(np.float32, np.float16), (np.int64, np.float64), (np.int32, np.float32),
           (np.int8, np.uint8), (np.float32, np.int32), (np.complex64, np.float64),
           (np.int32, np.bool_)]
    assert all(P.exact_conversion(a, b) for a, b in ok)
    assert not any(P.exact_conversion(a, b) for a, b in bad)


def test_simplify_arithmetic_identities():
    def f(x):
        return (x * 1.0, 1.0 * x, x + 0.0, 0.0 + x, x - 0.0, x / 1.0,
                x * jnp.ones((2, 3), jnp.float32), 0.0 - x, x * 2.0)

    closed = jax.make_jaxpr(f)(X23)
    out = P.dce(apply(P.simplify, closed, X23))
    assert all(v is out.jaxpr.invars[0] for v in out.jaxpr.outvars[:7])
    assert names(out) == ["sub", "mul"]


def test_simplify_respects_weak_types_and_rank0_broadcast():
    # x is weak (a Python float argument); x * float32(1) is not weak: must stay.
    closed = jax.make_jaxpr(lambda x: lax.mul(x, np.float32(1.0)))(1.0)
    assert closed.in_avals[0].weak_type and not closed.out_avals[0].weak_type
    out = apply(P.simplify, closed, np.float32(3.0))
    assert names(out) == ["mul"]
    # a rank-0 x times a broadcast 1: the result has the broadcast shape.
    ones = lambda x: lax.mul(x, lax.broadcast_in_dim(1.0, (3,), ()))  # noqa: E731
    closed = jax.make_jaxpr(ones)(np.float32(2.0))
    out = apply(P.simplify, closed, np.float32(2.0))
    assert "mul" in names(out)


def test_simplify_integer_pow():
    def f(x):
        return lax.integer_pow(x, 1), lax.integer_pow(x, 0), lax.integer_pow(x[0, 0], 0), x ** 2

    closed = jax.make_jaxpr(f)(X23)
    out = P.dce(apply(P.simplify, closed, X23))
    assert out.jaxpr.outvars[0] is out.jaxpr.invars[0]
    assert isinstance(out.jaxpr.outvars[2], Literal)
    assert names(out) == ["broadcast_in_dim", "integer_pow"]
    assert out.eqns[1].params["y"] == 2


def test_simplify_does_not_enter_control_flow():
    closed = jax.make_jaxpr(lambda x: lax.cond(True, lambda a: a * 1.0, lambda a: a, x))(X23)
    out = apply(P.simplify, closed, X23)
    cond = [e for e in out.eqns if e.primitive.name == "cond"][0]
    assert cond.params["branches"] is closed.eqns[-1].params["branches"]


# ----------------------------------------------------------------------------------------------
# optimize


def _program(x):
    y = jax.jit(lambda a: (a.T.T * 1.0 + 0.0))(x)
    z = jnp.sin(y) + jnp.sin(y)
    _ = jnp.cos(x)
    return jax.checkpoint(lambda a: a * lax.add(1.0, 1.0))(z) + jnp.sum(jnp.ones(3))


def test_optimize_end_to_end():
    closed = jax.make_jaxpr(_program)(X23)
    out = apply(P.optimize, closed, X23)
    assert names(out) == ["sin", "add", "fma"]     # z * 2 + 3, contracted as XLA does
    out = apply(functools.partial(P.optimize, contract=False), closed, X23)
    assert names(out) == ["sin", "add", "mul", "add"]
    assert out.consts == []


def test_optimize_dump(monkeypatch, capsys):
    closed = jax.make_jaxpr(_program)(X23)
    monkeypatch.delenv("KILN_DUMP", raising=False)
    P.optimize(closed)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("KILN_DUMP", "c,passes")
    out = P.optimize(closed)
    err = capsys.readouterr().err
    headers = [ln for ln in err.splitlines() if ln.startswith("# kiln passes:")]
    assert headers[0] == "# kiln passes: after inline_calls (round 0)"
    assert [h.split()[4] for h in headers[1:6]] == ["mask_selected_scatters", "simplify",
                                                  "fold_constants", "cse", "dce"]
    assert err.rstrip().endswith(pp_jaxpr(out.jaxpr))
    monkeypatch.setenv("KILN_DUMP", "passesx")
    P.optimize(closed)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("fn", [P.inline_calls, P.dce, P.cse, P.fold_constants, P.simplify,
                                P.optimize])
def test_outputs_may_become_inputs_or_literals(fn):
    closed = jax.make_jaxpr(lambda x: (x * 1.0, lax.add(2.0, 3.0), x, x))(X23)
    apply(fn, closed, X23)


def test_transposed_matmul_becomes_swapped_matmul():
    a = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)
    closed = jax.make_jaxpr(lambda a, b: (a.T @ b).T)(a, b)   # dW-style: (b^T a)
    out = apply(lambda c: P.dce(P.simplify(c)), closed, a, b)
    assert names(out) == ["transpose", "dot_general"]     # only a's (free) view is left
    # A product used elsewhere too is left alone (no duplicated matmul).
    closed = jax.make_jaxpr(lambda a, b: ((a.T @ b).T, (a.T @ b).sum()))(a, b)
    out = apply(lambda c: P.dce(P.simplify(P.cse(c))), closed, a, b)
    assert names(out).count("dot_general") == 1
    # Batched: batch dims stay first.
    x = np.ones((2, 3, 4), np.float32)
    y = np.ones((2, 4, 5), np.float32)
    closed = jax.make_jaxpr(lambda x, y: jnp.swapaxes(jnp.matmul(x, y), 1, 2))(x, y)
    out = apply(lambda c: P.dce(P.simplify(c)), closed, x, y)
    assert names(out) == ["dot_general"]
