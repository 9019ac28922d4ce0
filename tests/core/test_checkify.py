"""``kiln.experimental.checkify`` against ``jax.experimental.checkify`` (JAX 0.10): each
scenario runs in both libraries; error messages, outputs and raised errors must agree."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.experimental import checkify

jax = pytest.importorskip("jax")
from jax.experimental import checkify as jcheckify  # noqa: E402

KILN = (kiln, jnp, lax, checkify)
JAX = (jax, jax.numpy, jax.lax, jcheckify)


def _run(scenario, libs):
    """``('ok', message or None, output leaves)`` or ``('raise', class name, message)``."""
    lib, np_, lax_, ck = libs
    try:
        r = scenario(lib, np_, lax_, ck)
    except Exception as e:  # noqa: BLE001 - compared between the libraries
        return ("raise", type(e).__name__, str(e))
    if isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], ck.Error):
        err, out = r
        leaves = [np.asarray(x) for x in lib.tree_util.tree_leaves(out)]
        return ("ok", err.get(), leaves)
    return ("ok", None, [np.asarray(x) for x in lib.tree_util.tree_leaves(r)])


def _compare(scenario):
    got, want = _run(scenario, KILN), _run(scenario, JAX)
    assert got[:2] == want[:2]
    if got[0] == "raise":
        assert got[2] == want[2]
    else:
        assert len(got[2]) == len(want[2])
        for g, w in zip(got[2], want[2]):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6, equal_nan=True)
    return got


def f32(np_, *v):
    return np_.asarray(np.array(*v, dtype=np.float32))


def _positive(lib, np_, lax_, ck):
    def f(x):
        ck.check(x > 0, "{x} needs to be positive!", x=x)
        return 1 / x
    return f


# -- user checks ---------------------------------------------------------------------------

USER = {
    "eager fail": lambda L, N, X, C: C.checkify(_positive(L, N, X, C))(f32(N, -3.0)),
    "eager ok": lambda L, N, X, C: C.checkify(_positive(L, N, X, C))(f32(N, 3.0)),
    "jit": lambda L, N, X, C: L.jit(C.checkify(_positive(L, N, X, C)))(-3.0),
    "vmap": lambda L, N, X, C: L.vmap(C.checkify(_positive(L, N, X, C)))(
        f32(N, [1.0, -2.0, 3.0, -4.0])),
    "checkify of vmap": lambda L, N, X, C: C.checkify(L.vmap(_positive(L, N, X, C)))(
        f32(N, [1.0, -2.0, 3.0, -4.0])),
    "grad inside": lambda L, N, X, C: C.checkify(L.grad(_positive(L, N, X, C)))(f32(N, -3.0)),
    "jit grad inside": lambda L, N, X, C: L.jit(C.checkify(L.grad(_positive(L, N, X, C))))(
        f32(N, -3.0)),
    "grad outside": lambda L, N, X, C: L.grad(
        lambda x: C.checkify(_positive(L, N, X, C))(x)[1])(f32(N, 2.0)),
    "jvp outside": lambda L, N, X, C: L.jvp(
        lambda x: C.checkify(_positive(L, N, X, C))(x)[1], (f32(N, 2.0),), (f32(N, 1.0),)),
    "no checkify eager": lambda L, N, X, C: _positive(L, N, X, C)(f32(N, -3.0)),
    "no checkify eager ok": lambda L, N, X, C: _positive(L, N, X, C)(f32(N, 3.0)),
    "no checkify jit": lambda L, N, X, C: L.jit(_positive(L, N, X, C))(3.0),
    "no checkify vmap ok": lambda L, N, X, C: L.vmap(_positive(L, N, X, C))(f32(N, [1, 2])),
    "no checkify vmap fail": lambda L, N, X, C: L.vmap(_positive(L, N, X, C))(
        f32(N, [1, -2, -3])),
    "no checkify grad": lambda L, N, X, C: L.grad(_positive(L, N, X, C))(f32(N, -3.0)),
    "no checkify in cond": lambda L, N, X, C: X.cond(
        True, lambda x: (C.check(x > 0, "c"), x)[1], lambda x: x, f32(N, 1.0)),
    "python float fmt arg": lambda L, N, X, C: C.checkify(_positive(L, N, X, C))(-3.0),
    "non-scalar pred": lambda L, N, X, C: L.jit(C.checkify(
        lambda x: C.check(x > 0, "bad")))(f32(N, [1, -2])),
    "int fmt arg": lambda L, N, X, C: C.checkify(
        lambda x: C.check(x > 0, "bad {}", 3))(f32(N, 1.0)),
    "numpy bool pred": lambda L, N, X, C: C.checkify(
        lambda: C.check(np.bool_(False), "npbool"))(),
    "python bool pred": lambda L, N, X, C: C.checkify(lambda: C.check(False, "pybool"))(),
    "array fmt args": lambda L, N, X, C: C.checkify(lambda x: C.check(
        x[0] > 0, "bad {a} and {b}", a=x, b=x[0]))(f32(N, [-1.0, 2.0])),
    "dict fmt arg": lambda L, N, X, C: C.checkify(
        lambda x: C.check(x[0] > 0, "bad {}", {"k": x}))(f32(N, [-1.0, 2.0])),
    "int payload": lambda L, N, X, C: C.checkify(
        lambda x: C.check(x[0] > 0, "bad {}", N.int32(7)))(N.asarray(np.array([-1, 2]))),
    "first error wins": lambda L, N, X, C: C.checkify(lambda x: (
        C.check(x > 0, "first"), C.check(x > 1, "second"), x)[2])(f32(N, -1.0)),
    "second error": lambda L, N, X, C: C.checkify(lambda x: (
        C.check(x > 0, "first"), C.check(x > 1, "second"), x)[2])(f32(N, 0.5)),
    "mixed payloads jit": lambda L, N, X, C: L.jit(C.checkify(lambda x: (
        C.check(x > 5, "a {}", x), C.check(x > 2, "b {} {}", x, x), x)[2]))(f32(N, 1.0)),
    "debug_check eager": lambda L, N, X, C: C.debug_check(False, "dbg"),
    "debug_check jit": lambda L, N, X, C: L.jit(
        lambda x: (C.debug_check(x > 0, "dbg"), x)[1])(f32(N, -1.0)),
    "debug_check checkified": lambda L, N, X, C: C.checkify(
        lambda: C.debug_check(False, "dbg"))(),
    "nested checkify outer": lambda L, N, X, C: (lambda r: (r[0], r[1][1]))(C.checkify(
        C.checkify(_positive(L, N, X, C)))(f32(N, -3.0))),
    "nested checkify inner": lambda L, N, X, C: C.checkify(
        C.checkify(_positive(L, N, X, C)))(f32(N, -3.0))[1],
}


@pytest.mark.parametrize("name", list(USER))
def test_user_checks(name):
    _compare(USER[name])


# -- automatic checks ----------------------------------------------------------------------

def _g(L, N, X, C):
    def g(x):
        C.check(x > 0, "x must be positive, got {}", x)
        y = N.log(x - 2.0)
        return y / 0.0
    return g


AUTO = {
    "nan": lambda L, N, X, C: C.checkify(N.log, errors=C.nan_checks)(f32(N, -1.0)),
    "nan jit sin": lambda L, N, X, C: L.jit(C.checkify(N.sin, errors=C.float_checks))(
        f32(N, np.inf)),
    "div int": lambda L, N, X, C: L.jit(C.checkify(lambda x, y: x // y, errors=C.div_checks))(
        N.arange(3), N.asarray(np.array([1, 0, 2], np.int32))),
    "div float": lambda L, N, X, C: C.checkify(lambda x, y: x / y, errors=C.div_checks)(
        f32(N, 1.0), f32(N, 0.0)),
    "rem": lambda L, N, X, C: L.jit(C.checkify(lambda x, y: x % y, errors=C.all_checks))(
        N.arange(3.0), f32(N, [1.0, 0.0, 2.0])),
    "pow": lambda L, N, X, C: L.jit(C.checkify(lambda x: x ** 0.5, errors=C.all_checks))(
        f32(N, -1.0)),
    "all: user first": lambda L, N, X, C: C.checkify(_g(L, N, X, C), errors=C.all_checks)(
        f32(N, -1.0)),
    "all: nan": lambda L, N, X, C: C.checkify(_g(L, N, X, C), errors=C.all_checks)(
        f32(N, 1.0)),
    "all: div": lambda L, N, X, C: C.checkify(_g(L, N, X, C), errors=C.all_checks)(
        f32(N, 3.0)),
    "automatic skips user": lambda L, N, X, C: C.checkify(
        _g(L, N, X, C), errors=C.automatic_checks)(f32(N, -1.0)),
    "nan only skips user": lambda L, N, X, C: C.checkify(lambda x: (
        C.check(x > 0, "user"), N.log(x))[1], errors=C.nan_checks)(f32(N, -1.0)),
    "index traced": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i: x[i], errors=C.index_checks))(N.arange(3.0), 5),
    "index traced negative": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i: x[i], errors=C.index_checks))(N.arange(3.0), -5),
    "index ok": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i: x[i], errors=C.index_checks))(N.arange(3.0), 2),
    "index vmap": lambda L, N, X, C: L.vmap(C.checkify(
        lambda x, i: x[i], errors=C.index_checks), (None, 0))(
            N.arange(3.0), N.asarray(np.array([0, 5, 1, -7], np.int32))),
    "index 2d": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i, j: x[i, j], errors=C.index_checks))(N.ones((3, 4)), 1, 7),
    "gather array index": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i: x[i], errors=C.index_checks))(
            N.ones((3, 4)), N.asarray(np.array([0, 5, 1], np.int32))),
    "take": lambda L, N, X, C: L.jit(C.checkify(lambda x, i: N.take(x, i),
                                                errors=C.index_checks))(
        N.ones(4), N.asarray(np.array([0, 5, 1], np.int32))),
    "scatter add": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i: x.at[i].add(1.0), errors=C.index_checks))(
            N.ones(4), N.asarray(np.array([0, 5, 1], np.int32))),
    "dynamic_slice": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i: X.dynamic_slice(x, (i,), (2,)), errors=C.index_checks))(
            N.arange(3.0), 2),
    "dynamic_update_slice": lambda L, N, X, C: L.jit(C.checkify(
        lambda x, i: X.dynamic_update_slice(x, N.ones(2), (i,)), errors=C.index_checks))(
            N.arange(3.0), 2),
}


@pytest.mark.parametrize("name", list(AUTO))
def test_automatic_checks(name):
    _compare(AUTO[name])


# -- transformations and control flow --------------------------------------------------------

def _sum_log(L, N, X, C):
    def f(x):
        C.check(N.all(x > 0), "all positive: {}", x)
        return N.sum(N.log(x))
    return f


def _scan(L, N, X, C):
    def sc(xs):
        def body(c, x):
            c = c + N.log(x)
            C.check(c < 3.0, "carry too large: {}", c)
            return c, c * 2
        return X.scan(body, 0.0, xs)
    return sc


def _fori(L, N, X, C):
    def fl(x):
        def body(i, c):
            C.check(i < 3, "i={i} too big", i=i)
            return c / (c - 2.0)
        return X.fori_loop(0, 5, body, x)
    return fl


def _while(L, N, X, C):
    def wl(x):
        def b(c):
            C.check(c < 5, "c={c} too big", c=c)
            return c + 1.0
        return X.while_loop(lambda c: c < 10.0, b, x)
    return wl


def _switch(L, N, X, C):
    def sw(i, x):
        return X.switch(i, [lambda x: x / 0.0, lambda x: N.sqrt(x), lambda x: x * 2.0], x)
    return sw


def _cond(L, N, X, C):
    def cd(x):
        return X.cond(x > 0, lambda x: N.log(x),
                      lambda x: (C.check(x > -5, "neg {}", x), x)[1], x)
    return cd


M23 = [[1.0, 2.0], [-1.0, 2.0], [3.0, -4.0]]

TRANSFORMS = {
    "jit vmap": lambda L, N, X, C: L.jit(L.vmap(C.checkify(
        _sum_log(L, N, X, C), errors=C.all_checks)))(f32(N, M23)),
    "vmap jit": lambda L, N, X, C: L.vmap(L.jit(C.checkify(
        _sum_log(L, N, X, C), errors=C.all_checks)))(f32(N, M23)),
    "nested jit": lambda L, N, X, C: C.checkify(L.jit(
        lambda x: L.jit(_sum_log(L, N, X, C))(x) * 2), errors=C.all_checks)(
            f32(N, [1.0, -2.0])),
    "nested jit ok": lambda L, N, X, C: C.checkify(L.jit(
        lambda x: L.jit(_sum_log(L, N, X, C))(x) * 2), errors=C.all_checks)(
            f32(N, [1.0, 2.0])),
    "scan nan": lambda L, N, X, C: L.jit(C.checkify(_scan(L, N, X, C), errors=C.all_checks))(
        f32(N, [1.0, 2.0, -1.0, 5.0])),
    "scan check": lambda L, N, X, C: L.jit(C.checkify(_scan(L, N, X, C),
                                                      errors=C.all_checks))(
        f32(N, [1.0, 20.0, 30.0, 5.0])),
    "scan eager": lambda L, N, X, C: C.checkify(_scan(L, N, X, C))(
        f32(N, [1.0, 20.0, 30.0, 5.0])),
    "scan vmap": lambda L, N, X, C: L.vmap(C.checkify(_scan(L, N, X, C), errors=C.all_checks))(
        f32(N, [[1.0, 2.0], [20.0, 1.0], [1.0, -1.0]])),
    "scan grad": lambda L, N, X, C: L.grad(lambda xs: C.checkify(
        _scan(L, N, X, C), errors=C.all_checks)(xs)[1][0])(f32(N, [1.0, 2.0, 3.0])),
    "fori": lambda L, N, X, C: C.checkify(_fori(L, N, X, C), errors=C.all_checks)(
        f32(N, 4.0)),
    "fori jit float": lambda L, N, X, C: L.jit(C.checkify(_fori(L, N, X, C),
                                                          errors=C.float_checks))(
        f32(N, 4.0)),
    "while check": lambda L, N, X, C: C.checkify(_while(L, N, X, C))(f32(N, 0.0)),
    "while ok": lambda L, N, X, C: L.jit(C.checkify(_while(L, N, X, C)))(f32(N, 20.0)),
    "while nan in predicate": lambda L, N, X, C: C.checkify(lambda x: X.while_loop(
        lambda c: N.log(c) < 3.0, lambda c: c * 2.0 - 1.0, x), errors=C.nan_checks)(
            f32(N, -1.0)),
    "switch div": lambda L, N, X, C: L.jit(C.checkify(
        _switch(L, N, X, C), errors=C.all_checks))(0, f32(N, -1.0)),
    "switch nan": lambda L, N, X, C: L.jit(C.checkify(
        _switch(L, N, X, C), errors=C.all_checks))(1, f32(N, -1.0)),
    "switch ok": lambda L, N, X, C: L.jit(C.checkify(
        _switch(L, N, X, C), errors=C.all_checks))(2, f32(N, -1.0)),
    "switch vmap": lambda L, N, X, C: L.vmap(C.checkify(
        _switch(L, N, X, C), errors=C.all_checks))(
            N.asarray(np.array([0, 1, 2, 1], np.int32)), f32(N, [1.0, -1.0, 2.0, 4.0])),
    "cond": lambda L, N, X, C: C.checkify(_cond(L, N, X, C), errors=C.all_checks)(
        f32(N, -7.0)),
    "cond ok": lambda L, N, X, C: C.checkify(_cond(L, N, X, C), errors=C.all_checks)(
        f32(N, 1.0)),
    "cond vmap": lambda L, N, X, C: L.vmap(C.checkify(_cond(L, N, X, C),
                                                      errors=C.all_checks))(
        f32(N, [1.0, -7.0, -2.0])),
    "custom_jvp relu": lambda L, N, X, C: C.checkify(
        lambda x: L.nn.relu(N.log(x)), errors=C.nan_checks)(f32(N, -1.0)),
    "custom_jvp logsumexp": lambda L, N, X, C: C.checkify(
        L.nn.logsumexp, errors=C.nan_checks)(f32(N, [1.0, np.nan])),
    "checkpoint": lambda L, N, X, C: C.checkify(L.checkpoint(_sum_log(L, N, X, C)),
                                                errors=C.all_checks)(f32(N, [1.0, -2.0])),
    "grad checkpoint": lambda L, N, X, C: C.checkify(L.grad(L.checkpoint(
        _sum_log(L, N, X, C))), errors=C.all_checks)(f32(N, [1.0, -2.0])),
    "check_error functionalized": lambda L, N, X, C: L.jit(C.checkify(
        lambda x: C.check_error(C.checkify(_sum_log(L, N, X, C))(x)[0])))(
            f32(N, [1.0, -2.0])),
    "check_error under jit": lambda L, N, X, C: L.jit(C.check_error)(
        C.checkify(_positive(L, N, X, C))(f32(N, -3.0))[0]),
    "eval_shape": lambda L, N, X, C: L.eval_shape(C.checkify(_sum_log(L, N, X, C)),
                                                  f32(N, [1.0, -2.0]))[1].shape,
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transformations_and_control_flow(name):
    _compare(TRANSFORMS[name])


def test_custom_vjp():
    def run(L, N, X, C, grad):
        @L.custom_vjp
        def cv(x):
            C.check(x > 0, "cv needs positive, got {}", x)
            return N.sin(x)
        cv.defvjp(lambda x: (N.sin(x), x), lambda r, g: (g * N.cos(r),))
        if grad:
            return L.grad(lambda x: C.checkify(cv)(x)[1])(f32(N, 1.0))
        return C.checkify(cv)(f32(N, -1.0))
    _compare(lambda *libs: run(*libs, grad=False))
    _compare(lambda *libs: run(*libs, grad=True))


# -- Error API -------------------------------------------------------------------------------

def _error_api(L, N, X, C):
    err, _ = C.checkify(_positive(L, N, X, C))(f32(N, -3.0))
    ok, _ = C.checkify(_positive(L, N, X, C))(f32(N, 3.0))
    out = [str(err), str(ok), ok.get(), type(err.get_exception()).__name__,
           ok.get_exception()]
    for fn in (err.throw, lambda: C.check_error(err), lambda: C.check_error(3)):
        try:
            fn()
            out.append("no error")
        except Exception as e:  # noqa: BLE001
            out.append(f"{type(e).__name__}: {e}")
    ok.throw()
    verr, _ = L.vmap(C.checkify(_positive(L, N, X, C)))(f32(N, [1.0, -2.0, 3.0, -4.0]))
    out.append(verr.get())
    try:
        verr.throw()
    except Exception as e:  # noqa: BLE001
        out.append(f"{type(e).__name__}: {e}")
    return out


def test_error_api_matches_jax():
    assert _error_api(*KILN) == _error_api(*JAX)


def test_public_names_and_classes():
    for name in jcheckify.__all__ if hasattr(jcheckify, "__all__") else [
            n for n in dir(jcheckify) if not n.startswith("_")]:
        if name in ("ErrorEffect",):
            continue
        assert hasattr(checkify, name), name
    assert issubclass(checkify.JaxRuntimeError, ValueError)
    assert checkify.all_checks == (checkify.automatic_checks | checkify.user_checks)
    assert checkify.float_checks == checkify.nan_checks | checkify.div_checks
    assert str(checkify.init_error) == "Error(None)"
    assert len(checkify.all_checks) == 4


def test_error_is_a_pytree_with_static_metadata():
    err, _ = kiln.jit(checkify.checkify(_positive(*KILN)))(-3.0)
    leaves, tree = kiln.tree_util.tree_flatten(err)
    assert [np.asarray(x).dtype for x in leaves] == [np.bool_, np.int32, np.float32]
    again = kiln.tree_util.tree_unflatten(tree, leaves)
    assert again.get() == "-3.0 needs to be positive! (`check` failed)"
    assert hash(tree) == hash(kiln.tree_util.tree_structure(err))


def test_failed_check_names_the_users_line():
    def f(x):
        checkify.check(x > 0, "positive please")   # this line
        return x

    line = f.__code__.co_firstlineno + 1
    err, _ = kiln.jit(checkify.checkify(f))(-1.0)
    with pytest.raises(checkify.JaxRuntimeError) as info:
        err.throw()
    assert f"{__file__}:{line}" in "".join(info.value.__notes__)


def test_traces_inside_and_outside_checkify_are_not_shared():
    def f(x):
        checkify.check(x > 0, "positive please")
        return x * 2

    jf = kiln.jit(f)
    err, out = checkify.checkify(jf)(jnp.float32(-1.0))
    assert err.get() == "positive please (`check` failed)" and float(out) == -2.0
    with pytest.raises(ValueError, match="Cannot abstractly evaluate a checkify.check"):
        jf(jnp.float32(1.0))
    err, _ = checkify.checkify(jf)(jnp.float32(1.0))
    assert err.get() is None


def test_checkified_jit_is_compiled_once():
    from kiln.backends import cpu
    g = kiln.jit(lambda x: jnp.log(x) * 2.0)
    cf = checkify.checkify(g, errors=checkify.nan_checks)
    cf(jnp.ones(3))
    n = len(cpu._cache)
    for _ in range(3):
        err, _ = cf(jnp.ones(3))
    assert len(cpu._cache) == n and err.get() is None


def test_make_jaxpr_shows_the_check():
    def f(x):
        checkify.check(x > 0, "p")
        return x
    text = str(kiln.make_jaxpr(checkify.checkify(f))(1.0))
    assert "check" not in text.replace("checkify", "")  # functionalized: no check left
    assert "not" in text

