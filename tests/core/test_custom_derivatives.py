"""custom_jvp, custom_vjp and checkpoint/remat under every transformation.

The custom rules below are deliberately *not* the true derivatives (e.g. ``2 cos x`` for
``sin x``), so a test passes only if the custom rule, and not the primal function's own
derivative, was used.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import kiln
from kiln import lax
from kiln.tree_util import tree_flatten

X = np.float32(0.5)
XS = np.linspace(-1.0, 1.5, 4, dtype=np.float32)
Y = np.float32(2.0)
YS = np.linspace(0.5, 2.0, 4, dtype=np.float32)


def _sum(x):
    return lax.reduce_sum(x, tuple(range(np.ndim(x))))


def close(a, b, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# ================================================================================================
# custom_jvp
# ================================================================================================

@kiln.custom_jvp
def fsin(x):
    return lax.sin(x)


@fsin.defjvp
def _fsin_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return fsin(x), lax.mul(lax.mul(lax.cos(x), t), 2.0)


def dfsin(x):  # the custom derivative
    return 2 * np.cos(x)


def test_custom_jvp_primal():
    close(fsin(X), np.sin(X))
    close(kiln.jit(fsin)(X), np.sin(X))
    close(kiln.vmap(fsin)(XS), np.sin(XS))


@pytest.mark.parametrize("how", ["grad", "jit_grad", "grad_jit", "jit_grad_jit"])
def test_custom_jvp_grad(how):
    g = {"grad": kiln.grad(fsin), "jit_grad": kiln.jit(kiln.grad(fsin)),
         "grad_jit": kiln.grad(kiln.jit(fsin)),
         "jit_grad_jit": kiln.jit(kiln.grad(kiln.jit(fsin)))}[how]
    close(g(X), dfsin(X))


def test_custom_jvp_jvp_and_vjp():
    p, t = kiln.jvp(fsin, (X,), (np.float32(3.0),))
    close(p, np.sin(X))
    close(t, 3 * dfsin(X))
    p, t = kiln.jvp(kiln.jit(fsin), (XS,), (np.ones(4, np.float32),))
    close(t, dfsin(XS))
    _, pull = kiln.vjp(fsin, XS)
    close(pull(np.full(4, 2.0, np.float32))[0], 2 * dfsin(XS))


@pytest.mark.parametrize("how", ["vmap_grad", "grad_vmap", "jit_vmap_grad", "vmap_jit_grad"])
def test_custom_jvp_vmap(how):
    gsum = lambda x: _sum(kiln.vmap(fsin)(x))  # noqa: E731
    g = {"vmap_grad": kiln.vmap(kiln.grad(fsin)), "grad_vmap": kiln.grad(gsum),
         "jit_vmap_grad": kiln.jit(kiln.vmap(kiln.grad(fsin))),
         "vmap_jit_grad": kiln.vmap(kiln.jit(kiln.grad(fsin)))}[how]
    close(g(XS), dfsin(XS))


@pytest.mark.parametrize("jit", [False, True])
def test_custom_jvp_second_order(jit):
    # The JVP rule is itself differentiated: d/dx (2 cos x) = -2 sin x.
    gg = kiln.grad(kiln.grad(fsin))
    if jit:
        gg = kiln.jit(gg)
    close(gg(X), -2 * np.sin(X))
    close(kiln.vmap(kiln.grad(kiln.grad(fsin)))(XS), -2 * np.sin(XS))
    h = kiln.hessian(lambda x: _sum(fsin(x)))(XS)
    close(h, np.diag(-2 * np.sin(XS)), atol=1e-6)


def test_custom_jvp_closure_and_multiple_outputs():
    @kiln.custom_jvp
    def f(x, y):
        return lax.mul(x, y), lax.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        x, y = primals
        tx, ty = tangents
        out = f(x, y)
        return out, (lax.add(lax.mul(tx, 10.0), lax.mul(ty, 100.0)), lax.mul(tx, 1000.0))

    gx, gy = kiln.grad(lambda x, y: lax.add(f(x, y)[0], f(x, y)[1]), argnums=(0, 1))(X, Y)
    assert float(gx) == 1010.0 and float(gy) == 100.0
    # closing over a value traced by an outer grad
    g = kiln.grad(lambda y: kiln.grad(lambda x: f(x, y)[0])(X))(Y)
    assert float(g) == 0.0  # the custom tangent w.r.t. x does not depend on y


def test_custom_jvp_pytree_args():
    @kiln.custom_jvp
    def f(p):
        return {"out": lax.mul(p["a"], p["b"])}

    @f.defjvp
    def f_jvp(primals, tangents):
        (p,), (t,) = primals, tangents
        return f(p), {"out": lax.add(t["a"], lax.mul(t["b"], 3.0))}

    g = kiln.grad(lambda p: _sum(f(p)["out"]))({"a": XS, "b": YS})
    close(g["a"], np.ones(4))
    close(g["b"], np.full(4, 3.0))


def test_custom_jvp_defjvps():
    import kiln.numpy as jnp
    if not hasattr(jnp, "add"):
        pytest.skip("defjvps sums contributions with `+`, which needs kiln.numpy.add")

    @kiln.custom_jvp
    def f(x, y):
        return lax.mul(x, y)

    f.defjvps(lambda g, ans, x, y: lax.mul(g, 10.0), lambda g, ans, x, y: lax.mul(g, 100.0))
    gx, gy = kiln.grad(f, argnums=(0, 1))(X, Y)
    assert float(gx) == 10.0 and float(gy) == 100.0
    close(kiln.jit(kiln.grad(f))(X, Y), 10.0)
    close(kiln.vmap(kiln.grad(f, argnums=1))(XS, YS), np.full(4, 100.0))
    p, t = kiln.jvp(f, (X, Y), (np.float32(1.0), np.float32(1.0)))
    close(t, 110.0)


def test_custom_jvp_defjvps_with_none():
    @kiln.custom_jvp
    def f(x, y):
        return lax.mul(x, y)

    f.defjvps(lambda g, ans, x, y: lax.mul(g, 10.0), None)
    assert float(kiln.grad(f)(X, Y)) == 10.0
    assert float(kiln.grad(f, argnums=1)(X, Y)) == 0.0


def test_custom_jvp_nondiff_argnums():
    @partial(kiln.custom_jvp, nondiff_argnums=(0,))
    def app(fn, x):
        return fn(x)

    @app.defjvp
    def app_jvp(fn, primals, tangents):
        (x,), (t,) = primals, tangents
        return app(fn, x), lax.mul(t, 7.0)

    close(app(lax.sin, X), np.sin(X))
    assert float(kiln.grad(app, argnums=1)(lax.sin, X)) == 7.0
    close(kiln.vmap(kiln.grad(app, argnums=1), in_axes=(None, 0))(lax.sin, XS), np.full(4, 7.0))
    close(kiln.jit(kiln.grad(app, argnums=1), static_argnums=0)(lax.cos, X), 7.0)

    @partial(kiln.custom_jvp, nondiff_argnums=(1,))
    def scale(x, n):
        return lax.mul(x, float(n))

    @scale.defjvp
    def scale_jvp(n, primals, tangents):
        return scale(primals[0], n), lax.mul(tangents[0], float(n) * 10)

    assert float(kiln.grad(scale)(X, 3)) == 30.0
    assert float(kiln.jit(kiln.grad(scale), static_argnums=1)(X, 3)) == 30.0


def test_custom_jvp_symbolic_zeros_off_instantiates_zeros():
    seen = []

    @kiln.custom_jvp
    def f(x, y):
        return lax.mul(x, y)

    @f.defjvp
    def f_jvp(primals, tangents):
        x, y = primals
        tx, ty = tangents
        seen.append(ty)
        return f(x, y), lax.add(lax.mul(tx, y), lax.mul(x, ty))

    # differentiate w.r.t. x only: y's tangent must arrive as concrete zeros
    assert float(kiln.grad(f)(X, Y)) == float(Y)
    ty = seen[-1]
    assert type(ty).__name__ != "SymbolicZero"
    np.testing.assert_array_equal(np.asarray(ty), 0.0)
    assert np.asarray(ty).dtype == np.float32 and np.shape(ty) == ()
    # the same under jit
    assert float(kiln.jit(kiln.grad(f))(X, Y)) == float(Y)


def test_custom_jvp_rule_errors():
    @kiln.custom_jvp
    def f(x):
        return lax.sin(x)

    with pytest.raises(AttributeError):
        f(X)  # no rule defined

    f.defjvp(lambda p, t: (f(p[0]), (t[0], t[0])))
    with pytest.raises(TypeError):
        kiln.jvp(f, (X,), (X,))  # tangent structure differs from primal output


# ================================================================================================
# custom_vjp
# ================================================================================================

@kiln.custom_vjp
def gmul(x, y):
    return lax.mul(lax.sin(x), y)


def _gmul_fwd(x, y):
    # residuals: a pytree (tuple with a dict inside)
    return gmul(x, y), (lax.cos(x), {"y": y, "s": lax.sin(x)})


def _gmul_bwd(res, ct):
    c, d = res
    return lax.mul(lax.mul(c, d["y"]), lax.mul(ct, 3.0)), None  # None: zero for y


gmul.defvjp(_gmul_fwd, _gmul_bwd)


def dgmul(x, y):  # the custom derivative w.r.t. x (w.r.t. y it is zero)
    return 3 * np.cos(x) * y


def test_custom_vjp_primal():
    close(gmul(X, Y), np.sin(X) * Y)
    close(kiln.jit(gmul)(X, Y), np.sin(X) * Y)
    close(kiln.vmap(gmul)(XS, YS), np.sin(XS) * YS)


@pytest.mark.parametrize("how", ["grad", "jit_grad", "grad_jit"])
def test_custom_vjp_grad(how):
    wrap = {"grad": lambda f: f, "jit_grad": kiln.jit, "grad_jit": lambda f: f}[how]
    inner = kiln.jit(gmul) if how == "grad_jit" else gmul
    gx, gy = wrap(kiln.grad(inner, argnums=(0, 1)))(X, Y)
    close(gx, dgmul(X, Y))
    assert float(gy) == 0.0 and np.asarray(gy).dtype == np.float32


def test_custom_vjp_vjp():
    out, pull = kiln.vjp(gmul, XS, YS)
    close(out, np.sin(XS) * YS)
    cx, cy = pull(np.full(4, 2.0, np.float32))
    close(cx, 2 * dgmul(XS, YS))
    close(cy, np.zeros(4))


@pytest.mark.parametrize("how", ["vmap_grad", "grad_vmap", "jit_vmap_grad", "vmap_grad_unmapped"])
def test_custom_vjp_vmap(how):
    if how == "vmap_grad":
        got = kiln.vmap(kiln.grad(gmul))(XS, YS)
        close(got, dgmul(XS, YS), rtol=1e-5)
    elif how == "grad_vmap":
        got = kiln.grad(lambda x: _sum(kiln.vmap(gmul, in_axes=(0, None))(x, Y)))(XS)
        close(got, dgmul(XS, Y), rtol=1e-5)
    elif how == "jit_vmap_grad":
        got = kiln.jit(kiln.vmap(kiln.grad(gmul)))(XS, YS)
        close(got, dgmul(XS, YS), rtol=1e-5)
    else:
        got = kiln.vmap(kiln.grad(gmul), in_axes=(0, None))(XS, Y)
        close(got, dgmul(XS, Y), rtol=1e-5)


def test_custom_vjp_grad_wrt_unmapped_input_of_vmap():
    @kiln.custom_vjp
    def g(x, y):
        return lax.mul(x, y)

    g.defvjp(lambda x, y: (g(x, y), (x, y)),
             lambda r, ct: (lax.mul(ct, r[1]), lax.mul(ct, r[0])))
    gy = kiln.grad(lambda y: _sum(kiln.vmap(g, in_axes=(0, None))(XS, y)))(Y)
    assert np.shape(gy) == ()
    close(gy, XS.sum())


def test_custom_jvp_grad_wrt_unmapped_input_of_vmap():
    @kiln.custom_jvp
    def f(x, y):
        return lax.mul(x, y)

    f.defjvps(None, lambda g, ans, x, y: lax.mul(g, lax.mul(x, 3.0)))
    gy = kiln.grad(lambda y: _sum(kiln.vmap(f, in_axes=(0, None))(XS, y)))(Y)
    assert np.shape(gy) == ()
    close(gy, 3 * XS.sum(), rtol=1e-5)


def test_checkpoint_grad_wrt_unmapped_input_of_vmap():
    f = kiln.checkpoint(lambda x, y: lax.mul(x, y))
    gy = kiln.grad(lambda y: _sum(kiln.vmap(f, in_axes=(0, None))(XS, y)))(Y)
    assert np.shape(gy) == ()
    close(gy, XS.sum(), rtol=1e-5)


def test_custom_vjp_grad_of_composition():
    # custom_vjp inside a larger function, used twice (cotangents accumulate)
    f = lambda x: lax.add(gmul(lax.mul(x, 2.0), Y), gmul(x, x))  # noqa: E731
    g = kiln.grad(f)(X)
    # d/dx gmul(2x, Y) = 2 * 3 cos(2x) Y ; d/dx gmul(x, x) through x only (y-part is None)
    close(g, 2 * dgmul(2 * X, Y) + dgmul(X, X), rtol=1e-5)
    close(kiln.jit(kiln.grad(f))(X), g, rtol=1e-6)


@pytest.mark.parametrize("how", ["jvp", "jvp_jit", "jit_jvp", "jacfwd", "linearize"])
def test_custom_vjp_forward_mode_raises(how):
    msg = "can't apply forward-mode autodiff \\(jvp\\) to a custom_vjp function."
    with pytest.raises(TypeError, match=msg):
        if how == "jvp":
            kiln.jvp(gmul, (X, Y), (X, Y))
        elif how == "jvp_jit":
            kiln.jvp(kiln.jit(gmul), (X, Y), (X, Y))
        elif how == "jit_jvp":
            kiln.jit(lambda x, y: kiln.jvp(gmul, (x, y), (x, y)))(X, Y)
        elif how == "jacfwd":
            kiln.jacfwd(gmul)(XS, YS)
        else:
            kiln.linearize(gmul, X, Y)[1](X, Y)


def test_custom_vjp_nondiff_argnums():
    @partial(kiln.custom_vjp, nondiff_argnums=(0,))
    def h(n, x):
        return lax.mul(x, float(n))

    h.defvjp(lambda n, x: (h(n, x), None), lambda n, res, ct: (lax.mul(ct, float(n) * 10),))
    assert float(h(3, X)) == float(3 * X)
    assert float(kiln.grad(h, argnums=1)(3, X)) == 30.0
    assert float(kiln.jit(kiln.grad(h, argnums=1), static_argnums=0)(3, X)) == 30.0
    close(kiln.vmap(kiln.grad(h, argnums=1), in_axes=(None, 0))(3, XS), np.full(4, 30.0))


def test_custom_vjp_pytree_args_and_outputs():
    @kiln.custom_vjp
    def f(p):
        return {"prod": lax.mul(p["a"], p["b"]), "a": p["a"]}

    def fwd(p):
        return f(p), p

    def bwd(p, ct):
        return ({"a": lax.add(ct["prod"], ct["a"]), "b": lax.mul(ct["prod"], 5.0)},)

    f.defvjp(fwd, bwd)
    p = {"a": XS, "b": YS}
    g = kiln.grad(lambda p: lax.add(_sum(f(p)["prod"]), _sum(f(p)["a"])))(p)
    close(g["a"], np.full(4, 2.0))
    close(g["b"], np.full(4, 5.0))
    g = kiln.jit(kiln.grad(lambda p: _sum(f(p)["prod"])))(p)
    close(g["b"], np.full(4, 5.0))


def test_custom_vjp_bwd_errors():
    @kiln.custom_vjp
    def f(x, y):
        return lax.mul(x, y)

    f.defvjp(lambda x, y: (f(x, y), None), lambda res, ct: (ct,))  # one cotangent, two args
    with pytest.raises((ValueError, TypeError)):
        kiln.grad(f)(X, Y)

    @kiln.custom_vjp
    def g(x):
        return x

    with pytest.raises(AttributeError):
        g(X)  # no rule defined


# ================================================================================================
# checkpoint / remat
# ================================================================================================

def _cf(x):
    return lax.sin(lax.mul(lax.sin(x), lax.cos(x)))


def _cf_sum(x):
    return _sum(_cf(x))


def test_checkpoint_primal():
    close(kiln.checkpoint(_cf)(XS), _cf(XS))
    close(kiln.jit(kiln.checkpoint(_cf))(XS), _cf(XS))
    assert kiln.remat is kiln.checkpoint


@pytest.mark.parametrize("how", ["plain", "nested", "jit", "jit_inside", "policy",
                                 "decorator"])
def test_checkpoint_grad_matches(how):
    expected = kiln.grad(_cf_sum)(XS)
    if how == "plain":
        f = kiln.checkpoint(_cf_sum)
    elif how == "nested":
        f = kiln.checkpoint(lambda x: _sum(kiln.checkpoint(_cf)(lax.mul(x, 1.0))))
    elif how == "jit":
        f = kiln.checkpoint(_cf_sum)
    elif how == "jit_inside":
        f = kiln.checkpoint(kiln.jit(_cf_sum))
    elif how == "policy":
        f = kiln.checkpoint(_cf_sum, policy=None, prevent_cse=False)
    else:
        f = kiln.checkpoint(prevent_cse=True)(_cf_sum)
    g = kiln.grad(f)
    if how == "jit":
        g = kiln.jit(g)
    close(g(XS), expected, rtol=1e-6)


def test_checkpoint_vmap_and_higher_order():
    expected = kiln.vmap(kiln.grad(_cf))(XS)
    close(kiln.vmap(kiln.grad(kiln.checkpoint(_cf)))(XS), expected, rtol=1e-6)
    close(kiln.grad(lambda x: _sum(kiln.vmap(kiln.checkpoint(_cf))(x)))(XS), expected, rtol=1e-6)
    close(kiln.jit(kiln.vmap(kiln.grad(kiln.checkpoint(_cf))))(XS), expected, rtol=1e-6)
    close(kiln.grad(kiln.grad(kiln.checkpoint(_cf)))(X), kiln.grad(kiln.grad(_cf))(X), rtol=1e-5)
    p, t = kiln.jvp(kiln.checkpoint(_cf), (XS,), (np.ones(4, np.float32),))
    close(t, expected, rtol=1e-6)


def test_checkpoint_pytrees_and_static_argnums():
    def f(p, n):
        return {"y": lax.mul(lax.sin(p["a"]), float(n)), "z": p["b"]}

    g = kiln.grad(lambda p: _sum(kiln.checkpoint(f, static_argnums=1)(p, 3)["y"]))(
        {"a": XS, "b": YS})
    close(g["a"], 3 * np.cos(XS), rtol=1e-6)
    close(g["b"], np.zeros(4))


def _eqn_names(jaxpr, acc=None):
    from kiln.core.jaxpr import ClosedJaxpr, Jaxpr
    acc = [] if acc is None else acc
    for e in jaxpr.eqns:
        acc.append(e.primitive.name)
        for p in e.params.values():
            for s in (p if isinstance(p, (tuple, list)) else [p]):
                if isinstance(s, ClosedJaxpr):
                    _eqn_names(s.jaxpr, acc)
                elif isinstance(s, Jaxpr):
                    _eqn_names(s, acc)
    return acc


def test_make_jaxpr_of_checkpoint_shows_equation():
    closed = kiln.make_jaxpr(kiln.checkpoint(_cf))(X)
    assert "checkpoint" in _eqn_names(closed.jaxpr)
    assert "checkpoint[" in str(closed)


def test_make_jaxpr_of_grad_of_checkpoint_shows_checkpoint_equation():
    closed = kiln.make_jaxpr(kiln.grad(kiln.checkpoint(_cf_sum)))(XS)
    assert "checkpoint" in _eqn_names(closed.jaxpr), str(closed)


def test_linearize_of_checkpoint_stages_checkpoint():
    # The linear (tangent) program of a checkpointed function keeps the checkpoint.
    closed = kiln.make_jaxpr(lambda x: kiln.linearize(kiln.checkpoint(_cf), x)[1](x))(XS)
    assert "checkpoint" in _eqn_names(closed.jaxpr)


def test_checkpoint_leaves_tree_structure():
    out = kiln.checkpoint(lambda x: (x, {"s": lax.sin(x)}))(XS)
    leaves, tree = tree_flatten(out)
    assert len(leaves) == 2 and isinstance(out[1], dict)


def _scalar_rule_types(jax):
    seen = []

    @jax.custom_jvp
    def f(x, y):
        return x * y

    @f.defjvp
    def f_jvp(p, t):
        seen.append(tuple(isinstance(a, float) for a in p) +
                    tuple(hasattr(a, "dtype") for a in p))
        return f(*p), t[0] * p[1] + t[1] * p[0]

    out = jax.jvp(f, (2.0, 1.5), (3.0, 4.0))
    g = jax.grad(f)(2.0, 1.5)
    return seen, [type(o) is float for o in out], float(g)


def test_custom_jvp_rule_sees_python_scalars_under_jvp():
    """``jvp`` passes Python-scalar primals on unchanged (the rule and the primal output
    keep them as Python floats, as Equinox's filtered custom rules rely on); ``grad``
    gives the rule values with a dtype."""
    seen, out_is_float, g = _scalar_rule_types(kiln)
    assert seen[0] == (True, True, False, False)
    assert out_is_float == [True, True] and g == 1.5
    assert seen[1][2]          # grad: the differentiated input has a dtype
    jax = pytest.importorskip("jax")
    j_seen, j_out, j_g = _scalar_rule_types(jax)
    assert j_seen[0] == seen[0] and j_out == out_is_float and j_g == g
