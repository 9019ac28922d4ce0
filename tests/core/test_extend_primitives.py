"""Primitives defined through JAX's extension API (``jax.extend.core.Primitive`` and the
registries of ``jax.interpreters.ad``/``batching``/``mlir``) work under every
transformation, eagerly and compiled, and agree with JAX (the same definitions run on
JAX when it is installed)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import extend
from kiln.interpreters import ad, batching, mlir


def make_prims(core, ad, batching, mlir, jnp, lax, tag):
    """Three primitives defined the JAX way:

    - ``scaled_sin(x, *, k)``: ``k * sin(x)``: defjvp, a fancy batcher, lower_fun.
    - ``double(x)``: linear, ``deflinear2``; batched with ``primitive_batchers``; its impl
      uses ``.at[].set`` (it gets arrays, not NumPy values); lower_fun of the impl.
    - ``pair(x, y)``: multiple results ``(x + y, x * y)``: ``primitive_jvps`` rule, an
      ``axis_primitive_batchers`` rule, lower_fun.
    """
    scaled_sin_p = core.Primitive(f"scaled_sin_{tag}")
    scaled_sin_p.def_impl(lambda x, *, k: k * jnp.sin(x))
    scaled_sin_p.def_abstract_eval(lambda x, *, k: core_shaped(x))
    ad.defjvp(scaled_sin_p, lambda g, x, *, k: g * k * jnp.cos(x))
    batching.primitive_batchers[scaled_sin_p] = (
        lambda vals, dims, *, k: (scaled_sin_p.bind(vals[0], k=k), dims[0]))
    mlir.register_lowering(scaled_sin_p, mlir.lower_fun(lambda x, *, k: k * jnp.sin(x),
                                                        multiple_results=False))

    double_p = core.Primitive(f"double_{tag}")

    def double_impl(x):
        y = x * 2
        return y.at[()].set(y) if y.ndim == 0 else y.at[0].set(2 * x[0])
    double_p.def_impl(double_impl)
    double_p.def_abstract_eval(lambda x: core_shaped(x))

    def double_transpose(ct, x):
        assert ad.is_undefined_primal(x)
        return [double_p.bind(ct)]
    ad.deflinear2(double_p, double_transpose)
    batching.primitive_batchers[double_p] = lambda vals, dims: (double_p.bind(vals[0]),
                                                                dims[0])
    mlir.register_lowering(double_p, mlir.lower_fun(double_impl, multiple_results=False))

    pair_p = core.Primitive(f"pair_{tag}")
    pair_p.multiple_results = True
    pair_p.def_impl(lambda x, y: (x + y, x * y))
    pair_p.def_abstract_eval(lambda x, y: (core_shaped(x), core_shaped(x)))

    def pair_jvp(primals, tangents):
        x, y = primals
        tx, ty = (ad.instantiate_zeros(t) for t in tangents)
        return pair_p.bind(x, y), [tx + ty, tx * y + x * ty]
    ad.primitive_jvps[pair_p] = pair_jvp

    def pair_batch(axis_size, axis_name, trace_type, vals, dims):
        if dims[0] is None and dims[1] is None:     # JAX calls axis batchers regardless
            return pair_p.bind(*vals), [None, None]
        x, y = (batching.bdim_at_front(v, d, axis_size) for v, d in zip(vals, dims))
        return pair_p.bind(x, y), [0, 0]
    batching.axis_primitive_batchers[pair_p] = pair_batch
    mlir.register_lowering(pair_p, mlir.lower_fun(lambda x, y: (x + y, x * y)))
    return scaled_sin_p, double_p, pair_p


def core_shaped(x):
    return x.update(weak_type=False) if hasattr(x, "update") else x


def _kiln_prims(tag):
    return make_prims(extend.core, ad, batching, mlir, jnp, kiln.lax, tag)


SCALED, DOUBLE, PAIR = _kiln_prims("k")


def programs(jax, jnp, prims):
    scaled_sin_p, double_p, pair_p = prims

    def f(x):
        a = scaled_sin_p.bind(x, k=3.0)
        s, p = pair_p.bind(a, x)
        return jnp.sum(double_p.bind(s) * p)
    return f


X = np.linspace(-1.0, 2.0, 6, dtype=np.float32)


def _check_all(f, jax, jnp=jnp):
    x = jnp.asarray(X)
    out = {
        "eager": f(x),
        "jit": jax.jit(f)(x),
        "grad": jax.grad(f)(x),
        "jit_grad": jax.jit(jax.grad(f))(x),
        "vmap": jax.vmap(f)(jnp.stack([x, 2 * x])),
        "jacfwd": jax.jacfwd(f)(x),
        "vmap_grad": jax.vmap(jax.grad(f))(jnp.stack([x, 2 * x])),
    }
    return {k: np.asarray(v) for k, v in out.items()}


def _reference(x):
    a = 3.0 * np.sin(x)
    s, p = a + x, a * x
    return np.sum(2 * s * p)


def test_values_and_every_transformation():
    f = programs(kiln, jnp, (SCALED, DOUBLE, PAIR))
    res = _check_all(f, kiln)
    np.testing.assert_allclose(res["eager"], _reference(X), rtol=1e-5)
    np.testing.assert_allclose(res["jit"], res["eager"], rtol=1e-6)
    eps = 1e-3
    fd = np.array([(_reference(X + eps * e) - _reference(X - eps * e)) / (2 * eps)
                   for e in np.eye(6)])
    np.testing.assert_allclose(res["grad"], fd, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(res["jit_grad"], res["grad"], rtol=1e-5)
    np.testing.assert_allclose(res["jacfwd"], res["grad"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(res["vmap"], [_reference(X), _reference(2 * X)], rtol=1e-5)
    np.testing.assert_allclose(res["vmap_grad"][0], res["grad"], rtol=1e-5)


def test_parity_with_jax():
    jax = pytest.importorskip("jax")
    import jax.numpy as jjnp
    from jax.extend import core as jcore
    from jax.interpreters import ad as jad
    from jax.interpreters import batching as jbatching
    from jax.interpreters import mlir as jmlir
    prims = make_prims(jcore, jad, jbatching, jmlir, jjnp, jax.lax, "j")
    theirs = _check_all(programs(jax, jjnp, prims), jax, jjnp)
    ours = _check_all(programs(kiln, jnp, (SCALED, DOUBLE, PAIR)), kiln)
    for k in theirs:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=2e-6, atol=2e-5, err_msg=k)


def test_impl_gets_arrays_eagerly_and_in_host_islands():
    seen = []
    p = extend.core.Primitive("record_type")
    p.def_impl(lambda x: (seen.append(type(x)), x.at[0].set(7.0))[1])
    p.def_abstract_eval(lambda x: x)
    x = jnp.zeros(3)
    np.testing.assert_array_equal(p.bind(x), [7.0, 0, 0])
    np.testing.assert_array_equal(kiln.jit(lambda x: p.bind(x) + 1)(x), [8.0, 1, 1])
    assert seen and all(t is type(x) for t in seen)


def test_lower_fun_is_compiled_not_an_island():
    f = kiln.jit(lambda x: SCALED.bind(x, k=2.0) + 1)
    text = f.lower(jnp.ones(4)).compile().as_text()
    assert "scaled_sin" not in text          # inlined and fused, not a host call
    np.testing.assert_allclose(f(jnp.ones(4)), 2 * np.sin(1.0) + 1, rtol=1e-6)


def test_make_jaxpr_shows_the_primitive():
    text = str(kiln.make_jaxpr(lambda x: SCALED.bind(x, k=2.0))(jnp.ones(2)))
    assert "scaled_sin_k" in text and "k=2.0" in text


def test_missing_rules_raise_jax_errors():
    p = extend.core.Primitive("no_rules")
    p.def_abstract_eval(lambda x: x)
    with pytest.raises(NotImplementedError, match="Evaluation rule for 'no_rules'"):
        p.bind(jnp.ones(2))
    with pytest.raises(NotImplementedError, match="MLIR translation rule for primitive "
                                                  "'no_rules' not found"):
        kiln.jit(lambda x: p.bind(x) * 2, backend=None)(jnp.ones(2))
    q = extend.core.Primitive("impl_only")
    q.def_impl(lambda x: x)
    q.def_abstract_eval(lambda x: x)
    with pytest.raises(NotImplementedError, match="Differentiation rule for 'impl_only'"):
        kiln.grad(lambda x: q.bind(x).sum())(jnp.ones(2))
    with pytest.raises(NotImplementedError, match="Batching rule for 'impl_only'"):
        kiln.vmap(q.bind)(jnp.ones((2, 2)))


def test_effectful_abstract_eval_is_never_dead_code():
    calls = []
    p = extend.core.Primitive("effect_probe")
    p.def_impl(lambda x: (calls.append(1), x)[1])

    class _Effect(extend.core.Effect):
        pass
    p.def_effectful_abstract_eval(lambda x: (x, {_Effect()}))
    kiln.jit(lambda x: (p.bind(x), x + 1)[1])(jnp.ones(2))
    assert calls


def test_bind_with_trace_and_take_current_trace():
    with extend.core.take_current_trace() as t:
        assert t is kiln.core.trace.current_trace() or t is not None
    out = SCALED.bind_with_trace(kiln.core.trace.eval_trace, (jnp.ones(2),), {"k": 1.0})
    np.testing.assert_allclose(out, np.sin(1.0), rtol=1e-6)


def test_registries_are_kilns_tables():
    assert ad.primitive_jvps is ad.jvp_rules
    assert ad.primitive_transposes is ad.transpose_rules
    assert batching.fancy_primitive_batchers is batching.batch_rules
    assert SCALED in batching.primitive_batchers and PAIR in batching.fancy_primitive_batchers


def test_defbilinear_and_deflinear():
    mul_p = extend.core.Primitive("my_mul")
    mul_p.def_impl(lambda x, y: x * y)
    mul_p.def_abstract_eval(lambda x, y: x)
    ad.defbilinear(mul_p, lambda ct, x, y: ct * y, lambda ct, x, y: x * ct)
    batching.defvectorized(mul_p)
    f = lambda x, y: jnp.sum(mul_p.bind(x, y) ** 2)  # noqa: E731
    x, y = jnp.arange(1.0, 4.0), jnp.arange(2.0, 5.0)
    gx, gy = kiln.grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 2 * x * y * y)
    np.testing.assert_allclose(gy, 2 * x * y * x)
    neg_p = extend.core.Primitive("my_neg")
    neg_p.def_impl(lambda x: -x)
    neg_p.def_abstract_eval(lambda x: x)
    ad.deflinear(neg_p, lambda ct: [neg_p.bind(ct)])
    np.testing.assert_allclose(kiln.grad(lambda x: neg_p.bind(x).sum())(x), -np.ones(3))


def test_call_primitives():
    from kiln.extend.core import primitives
    f = lambda x: primitives.call_p.bind(lambda y: [jnp.sin(y) * 2], x)[0]  # noqa: E731
    x = jnp.arange(3.0)
    np.testing.assert_allclose(f(x), 2 * np.sin(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(kiln.jit(f)(x), 2 * np.sin(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(kiln.grad(lambda x: f(x).sum())(x), 2 * np.cos(np.arange(3.0)),
                               rtol=1e-6)
    np.testing.assert_allclose(kiln.vmap(f)(x[:, None])[:, 0], 2 * np.sin(np.arange(3.0)),
                               rtol=1e-6)
    assert "closed_call" in str(kiln.make_jaxpr(f)(x))
    with pytest.raises(ImportError):
        from kiln.extend.core.primitives import xla_pmap_p  # noqa: F401


# ----------------------------------------------------------------------------------------------
# Equations as JAX 0.10 exposes them: every primitive is a jax.extend.core.Primitive,
# eqn.effects, get_bind_params (a dict; custom_jvp_call re-binds from subfuns).

def test_every_primitive_is_an_extend_primitive():
    from kiln.extend.core import Primitive
    assert isinstance(kiln.lax.add_p, Primitive)
    assert isinstance(Primitive("mine"), Primitive)
    assert issubclass(type(kiln.lax.add_p), Primitive)
    assert not isinstance("add", Primitive) and not issubclass(int, Primitive)
    for eqn in kiln.make_jaxpr(lambda x: jnp.sin(x) + 1)(1.0).jaxpr.eqns:
        assert isinstance(eqn.primitive, Primitive)


def _effects(jax, jnp_):
    def f(x):
        jax.debug.callback(lambda v: None, x)
        return jnp_.sin(x)
    eqns = jax.make_jaxpr(f)(1.0).jaxpr.eqns
    return [(e.primitive.name, bool(e.effects)) for e in eqns]


def test_eqn_effects_mark_effectful_equations():
    got = _effects(kiln, jnp)
    assert ("sin", False) in got and any(eff for _, eff in got)
    assert all(isinstance(e, kiln.extend.core.Effect)
               for eqn in kiln.make_jaxpr(lambda x: kiln.debug.callback(print, x))(1.0).eqns
               for e in eqn.effects)
    jax = pytest.importorskip("jax")
    want = _effects(jax, jax.numpy)
    assert [e for _, e in want] == [e for _, e in got]


def _rebind_eval(jaxpr, consts, *args):
    """Evaluate a jaxpr by re-binding each equation from ``get_bind_params``, as
    Equinox's jaxpr finalisation does."""
    env = {}

    def read(v):
        return v.val if isinstance(v, kiln.extend.core.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        params = eqn.primitive.get_bind_params(eqn.params)
        assert isinstance(params, dict)
        out = eqn.primitive.bind(*map(read, eqn.invars), **params)
        outs = out if eqn.primitive.multiple_results else [out]
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


@kiln.custom_jvp
def _twice(x):
    return 2.0 * x


@_twice.defjvp
def _twice_jvp(primals, tangents):
    return _twice(primals[0]), 10.0 * tangents[0]


@pytest.mark.parametrize("how", ["eval", "jit", "jvp", "grad", "vmap"])
def test_custom_jvp_call_rebinds_from_subfuns(how):
    closed = kiln.make_jaxpr(lambda x: jnp.sin(_twice(x)))(1.0)
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["custom_jvp_call", "sin"]
    params = closed.jaxpr.eqns[0].primitive.get_bind_params(closed.jaxpr.eqns[0].params)
    assert set(params) == {"subfuns", "symbolic_zeros"}
    assert all(hasattr(f, "call_wrapped") for f in params["subfuns"])

    def f(x):
        return _rebind_eval(closed.jaxpr, closed.consts, x)[0]

    x = jnp.float32(0.3)
    if how == "eval":
        np.testing.assert_allclose(f(x), np.sin(0.6), rtol=1e-6)
    elif how == "jit":
        np.testing.assert_allclose(kiln.jit(f)(x), np.sin(0.6), rtol=1e-6)
    elif how == "jvp":
        _, t = kiln.jvp(f, (x,), (jnp.float32(1.0),))
        np.testing.assert_allclose(t, 10.0 * np.cos(0.6), rtol=1e-6)   # the custom rule
    elif how == "grad":
        np.testing.assert_allclose(kiln.grad(f)(x), 10.0 * np.cos(0.6), rtol=1e-6)
    else:
        out = kiln.vmap(f)(jnp.array([0.3, 0.4]))
        np.testing.assert_allclose(out, np.sin([0.6, 0.8]), rtol=1e-6)


def test_plain_get_bind_params_is_the_params_dict():
    eqn = kiln.make_jaxpr(lambda x: kiln.lax.reduce_sum(x, (0,)))(jnp.ones(3)).jaxpr.eqns[0]
    p = eqn.primitive.get_bind_params(eqn.params)
    assert p == dict(eqn.params) and p is not eqn.params


# ----------------------------------------------------------------------------------------------
# Lowering rules that emit a Python callback (Equinox's noinline): under jit the callback
# runs (called with NumPy arrays), the rule runs once per equation, eager calls use impl.

def _callback_prim(log):
    from kiln.extend.core import Primitive
    p = Primitive("doubled_by_callback")
    p.def_impl(lambda x: log.append("impl") or x * 2)
    p.def_abstract_eval(lambda x: x)

    def callback(x):
        log.append(("callback", type(x).__name__))
        return (np.asarray(x) * 2,)

    def rule(ctx, x):
        log.append("lowering")
        assert [a.shape for a in ctx.avals_in] == [a.shape for a in ctx.avals_out]
        out, _, keepalive = mlir.emit_python_callback(
            ctx, callback, None, [x], ctx.avals_in, ctx.avals_out, has_side_effect=False)
        ctx.module_context.add_keepalive(keepalive)
        return out

    mlir.register_lowering(p, rule)
    return p


@pytest.mark.parametrize("compile_mode", ["sync", "async"])
def test_callback_lowering_runs_under_jit(compile_mode):
    log = []
    p = _callback_prim(log)
    x = jnp.arange(3.0)
    np.testing.assert_allclose(p.bind(x), [0.0, 2.0, 4.0])
    assert log == ["impl"]
    log.clear()
    with _compile_mode(compile_mode):
        f = kiln.jit(lambda x: p.bind(x) + p.bind(x + 1.0))
        np.testing.assert_allclose(f(x), [2.0, 6.0, 10.0])
        np.testing.assert_allclose(f(x), [2.0, 6.0, 10.0])
    assert "impl" not in log
    assert log.count("lowering") == 2                    # once per equation
    assert log.count(("callback", "ndarray")) == 4       # NumPy operands, every call


def _compile_mode(mode):
    from kiln.config import config_context
    return config_context(kiln_compile=mode)


def test_emit_python_callback_outside_a_kiln_rule_says_so():
    with pytest.raises(NotImplementedError, match="emit_python_callback"):
        mlir.emit_python_callback(object(), print, None, [], [], [])


def test_lower_fun_rule_is_traced_once_per_equation():
    from kiln.extend.core import Primitive
    count = []
    p = Primitive("announced_identity")
    p.def_impl(lambda x: x)
    p.def_abstract_eval(lambda x: x)
    mlir.register_lowering(p, mlir.lower_fun(lambda x: count.append(1) or x,
                                             multiple_results=False))
    f = kiln.jit(lambda x: p.bind(x) * 2.0)
    for _ in range(3):
        np.testing.assert_allclose(f(jnp.ones(2)), [2.0, 2.0])
    kiln.block_until_ready(f(jnp.ones(2)))
    assert len(count) == 1
