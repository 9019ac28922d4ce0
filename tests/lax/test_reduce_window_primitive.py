"""``lax.reduce_window`` as primitives (``reduce_window_sum/max/min``, the generic
``reduce_window``, ``select_and_gather_add``, ``select_and_scatter_add``) against JAX:
printed jaxprs, values over window shapes/strides/paddings/dilations/dtypes, NaNs and ties,
``grad``/``jvp``/second derivatives, ``vmap`` on several axes, ``jit``, errors, and
finite differences."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _sampling import sample_cover

import kiln
from kiln import lax
from kiln.config import config_context

jax = pytest.importorskip("jax")
jlax = jax.lax
jnp = jax.numpy
from jax._src.lax import lax as _jlax_impl  # noqa: E402
from jax._src.lax import windowed_reductions as _jwr  # noqa: E402

pytestmark = pytest.mark.parity
BF16 = ml_dtypes.bfloat16


def _close(actual, expected, rtol=1e-5, atol=1e-5, exact=False):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if exact or actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol)


def _distinct(rng, shape, dtype=np.float32):
    """Well-separated values (no ties): max/min are differentiable and FD-exact."""
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * 0.25 - n / 8).astype(dtype)


# (id, shape, window kwargs): window shapes, strides, SAME/VALID/explicit (negative)
# padding, base and window dilation.
CASES = [
    ("1d_valid", (7,), dict(window_dimensions=(3,))),
    ("1d_same_stride", (9,), dict(window_dimensions=(4,), window_strides=(2,),
                                  padding="SAME")),
    ("1d_same_lower", (8,), dict(window_dimensions=(3,), window_strides=(3,),
                                 padding="SAME_LOWER")),
    ("2d_pool", (6, 7), dict(window_dimensions=(2, 2), window_strides=(2, 2))),
    ("2d_overlap_same", (5, 6), dict(window_dimensions=(3, 3), window_strides=(1, 2),
                                     padding="SAME")),
    ("2d_explicit_neg", (6, 7), dict(window_dimensions=(2, 3), window_strides=(1, 2),
                                     padding=((1, -1), (2, 1)))),
    ("2d_base_dil", (4, 5), dict(window_dimensions=(3, 2), padding=((1, 0), (1, 1)),
                                 base_dilation=(2, 2))),
    ("2d_win_dil", (7, 6), dict(window_dimensions=(2, 2), window_strides=(2, 1),
                                padding="SAME", window_dilation=(2, 3))),
    ("2d_both_dil", (4, 6), dict(window_dimensions=(2, 3), window_strides=(1, 2),
                                 padding=((1, 2), (0, 1)), base_dilation=(2, 1),
                                 window_dilation=(1, 2))),
    ("nhwc_pool", (2, 6, 7, 3), dict(window_dimensions=(1, 3, 3, 1),
                                     window_strides=(1, 2, 2, 1), padding="SAME")),
    ("3d", (4, 5, 4), dict(window_dimensions=(2, 2, 2), window_strides=(2, 1, 2),
                           padding="SAME")),
    ("window_too_big", (3, 4), dict(window_dimensions=(4, 2))),
]
FAST = {"1d_same_stride", "2d_overlap_same", "2d_base_dil", "2d_win_dil", "nhwc_pool"}


def _cases(fast_only=False, unmarked=FAST):
    """The window cases as params: those outside ``unmarked`` are marked slow (with
    ``fast_only``, only the FAST cases are listed at all)."""
    return [pytest.param(c, id=c[0], marks=() if c[0] in unmarked else pytest.mark.slow)
            for c in CASES if not fast_only or c[0] in FAST]


def _fns(op, kw, dtype=np.float32):
    """(kiln, jax) functions of one operand for the monoid ``op`` with its identity."""
    if op == "add":
        init = np.zeros((), dtype)
    elif op == "max":
        init = _jlax_impl._get_max_identity(dtype)
    else:
        init = _jlax_impl._get_min_identity(dtype)

    def kf(a):
        return lax.reduce_window(a, init, getattr(lax, op), **kw)

    def jf(a):
        return jlax.reduce_window(a, init, getattr(jlax, op), **kw)
    return kf, jf


# ----------------------------------------------------------------------------------------------
# Printed jaxprs


def _text(m, f, *args):
    return str(m.make_jaxpr(f)(*args))


def test_jaxpr_max_pool_text():
    x = np.ones((2, 6, 7, 3), np.float32)
    kw = dict(window_dimensions=(1, 3, 3, 1), window_strides=(1, 2, 2, 1), padding="SAME")
    kf, jf = _fns("max", kw)
    assert _text(kiln, kf, x) == _text(jax, jf, x)
    kf, jf = _fns("min", kw)
    assert _text(kiln, kf, x) == _text(jax, jf, x)


def test_jaxpr_avg_pool_text():
    x = np.ones((2, 3, 6, 6), np.float32)

    def make(L):
        return lambda a: L.div(L.reduce_window(a, 0.0, L.add, (1, 1, 2, 2), (1, 1, 2, 2),
                                               "VALID"), np.float32(4))
    assert _text(kiln, make(lax), x) == _text(jax, make(jlax), x)


@pytest.mark.parametrize("which", ["mul", "add_init", "max_init", "lambda", "traced_init",
                                   "or", "base_dil", "long_reducer", "pytree"])
def test_jaxpr_generic_text(which):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    args = (x,)
    if which == "mul":
        def make(L):
            return lambda a: L.reduce_window(a, 1.0, L.mul, (2, 2))
    elif which == "add_init":
        def make(L):
            return lambda a: L.reduce_window(a, 1.5, L.add, (2, 1), (1, 1), ((1, 0), (0, 0)))
    elif which == "max_init":
        def make(L):
            return lambda a: L.reduce_window(a, np.float32(0), L.max, (2, 2), (1, 2), "SAME")
    elif which == "lambda":
        def make(L):
            return lambda a: L.reduce_window(a, np.float32(0), lambda u, v: 2 * u + v, (2, 2))
    elif which == "traced_init":
        args = (x, np.float32(-1))

        def make(L):
            return lambda a, i: L.reduce_window(a, i, L.max, (2, 2))
    elif which == "or":
        args = (x > 4,)

        def make(L):
            return lambda a: L.reduce_window(a, False, L.bitwise_or, (2, 1), (1, 1), "SAME")
    elif which == "long_reducer":
        def make(L):
            return lambda a: L.reduce_window(a, np.float32(0),
                                             lambda u, v: u + v * np.float32(3), (2, 2))
    elif which == "pytree":
        def make(L):
            return lambda a: L.reduce_window((a, a), (np.float32(0), np.float32(1)),
                                             lambda u, v: (u[0] + v[0], u[1] * v[1]), (2, 2))
    else:
        def make(L):
            return lambda a: L.reduce_window(a, -np.inf, L.max, (2, 2), (1, 1), "VALID",
                                             base_dilation=(2, 1))
    assert _text(kiln, make(lax), *args) == _text(jax, make(jlax), *args)


def test_jaxpr_jvp_text():
    x = np.ones((2, 6, 7, 3), np.float32)
    kw = dict(window_dimensions=(1, 3, 3, 1), window_strides=(1, 2, 2, 1), padding="SAME")
    kf, jf = _fns("max", kw)
    kt = str(kiln.make_jaxpr(lambda a, t: kiln.jvp(kf, (a,), (t,)))(x, x))
    jt = str(jax.make_jaxpr(lambda a, t: jax.jvp(jf, (a,), (t,)))(x, x))
    assert kt == jt
    assert "select_and_gather_add" in kt and "select_prim=ge" in kt


def _names(m, f, *args):
    return [e.primitive.name for e in m.make_jaxpr(f)(*args).jaxpr.eqns]


@pytest.mark.parametrize("op,kw,expected", [
    ("max", dict(window_dimensions=(1, 3, 3, 1), window_strides=(1, 2, 2, 1),
                 padding="SAME"), ["reduce_window_max", "select_and_scatter_add"]),
    ("min", dict(window_dimensions=(1, 2, 2, 1), window_strides=(1, 2, 2, 1)),
     ["reduce_window_min", "select_and_scatter_add"]),
    ("add", dict(window_dimensions=(1, 2, 2, 1), window_strides=(1, 2, 2, 1),
                 padding=((0, 0), (1, 0), (0, 1), (0, 0))),
     ["reduce_window_sum", "pad", "reduce_window_sum"]),
    ("max", dict(window_dimensions=(1, 2, 2, 1), base_dilation=(1, 2, 1, 1)),
     ["reduce_window_max", "pad", "select_and_scatter_add", "slice"]),
])
def test_grad_jaxpr_primitives(op, kw, expected):
    x = np.ones((2, 6, 7, 3), np.float32)
    kf, jf = _fns(op, kw)
    kn = _names(kiln, kiln.grad(lambda a: kf(a).sum()), x)
    jn = _names(jax, jax.grad(lambda a: jf(a).sum()), x)
    windowish = {"reduce_window_max", "reduce_window_min", "reduce_window_sum", "pad",
                 "select_and_scatter_add", "slice", "select_and_gather_add"}
    # JAX keeps the (unused) forward reduction in a grad jaxpr; kiln's DCE drops it.
    assert [n for n in jn if n in windowish] == expected
    assert [n for n in kn if n in windowish] == expected[1:]
    grad_eqn = [e for e in kiln.make_jaxpr(kiln.grad(lambda a: kf(a).sum()))(x).jaxpr.eqns
                if e.primitive.name == "select_and_scatter_add"]
    for e in grad_eqn:
        assert set(e.params) == {"select_prim", "window_dimensions", "window_strides",
                                 "padding"}
        assert e.params["select_prim"] is (lax.ge_p if op == "max" else lax.le_p)


def test_equation_params_are_plain_tuples():
    x = np.ones((4, 5), np.float32)
    eqn, = kiln.make_jaxpr(lambda a: lax.reduce_window(
        a, 0.0, lax.add, [2, 2], [1, 2], [(1, 0), (0, 1)], [1, 2], [2, 1]))(x).jaxpr.eqns
    assert eqn.primitive is lax.reduce_window_sum_p
    assert eqn.params == dict(window_dimensions=(2, 2), window_strides=(1, 2),
                              padding=((1, 0), (0, 1)), base_dilation=(1, 2),
                              window_dilation=(2, 1))
    for v in eqn.params.values():
        assert type(v) is tuple
        assert all(type(i) is int or (type(i) is tuple and all(type(j) is int for j in i))
                   for i in v)


# ----------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("case", _cases())
def test_values_f32(case, op, rng):
    _, shape, kw = case
    x = rng.standard_normal(shape).astype(np.float32)
    kf, jf = _fns(op, kw)
    expected = jf(x)
    # max/min are exact; sums follow XLA's CPU order (row-major over the window) except
    # where its emitter splits a padded window, so they agree to rounding.
    exact = op != "add"
    _close(kf(x), expected, 1e-6, 1e-6, exact=exact)
    _close(kiln.jit(kf)(x), expected, 1e-6, 1e-6, exact=exact)


DTYPES = [np.float16, BF16, np.float64, np.int32, np.int8, np.uint8, np.int64, np.bool_]


def _covered(salt, *axes):
    """The product of ``axes`` (lists of pytest.params or values) sampled by
    KILN_NUM_GENERATED_CASES so that every value of every axis keeps a case
    (tests/_sampling.py); ids joined with ``-`` as stacked parametrize would."""
    import itertools

    def as_param(v):
        return v if hasattr(v, "values") else pytest.param(v, id=str(v))
    cases = []
    for combo in itertools.product(*[[as_param(v) for v in ax] for ax in axes]):
        marks = [m for c in combo for m in c.marks]
        cases.append(pytest.param(*[x for c in combo for x in c.values], marks=marks,
                                  id="-".join(c.id for c in combo)))
    slow = {i for i, c in enumerate(cases) if any(m.name == "slow" for m in c.marks)}
    kept = sample_cover([c for i, c in enumerate(cases) if i not in slow],
                        lambda c: tuple(c.id.split("-")), salt=salt)
    return kept + [c for i, c in enumerate(cases) if i in slow]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("case", _cases(fast_only=True,
                                        unmarked={"2d_overlap_same", "2d_win_dil"}))
def test_values_dtypes(case, op, dtype, rng):
    _, shape, kw = case
    if dtype == np.bool_ and op == "add":
        pytest.skip("reduce_window_sum rejects bool (tested in test_errors)")
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    elif dtype == np.bool_:
        x = rng.random(shape) < 0.4
    else:
        x = rng.standard_normal(shape).astype(dtype)
    x64 = np.dtype(dtype).itemsize == 8
    with jax.enable_x64(x64), config_context(jax_enable_x64=x64):
            kf, jf = _fns(op, kw, dtype)
            expected = jf(x)
            got = kf(x)
    if op != "add" or np.dtype(dtype).kind in "biu":
        tol = 0
    else:
        tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float16): 1e-2}.get(np.dtype(dtype),
                                                                               2e-2)
    _close(got, expected, rtol=tol, atol=tol, exact=tol == 0)


@pytest.mark.parametrize("op", ["max", "min"])
def test_nan_propagates(op):
    x = np.array([[1.0, np.nan, 2.0, -1.0], [0.5, 3.0, np.inf, -np.inf]], np.float32)
    kw = dict(window_dimensions=(1, 2), window_strides=(1, 1), padding=((0, 0), (1, 1)))
    kf, jf = _fns(op, kw)
    _close(kf(x), jf(x), exact=True)
    _close(kiln.jit(kf)(x), jf(x), exact=True)


def test_non_identity_and_traced_init():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    kw = dict(window_dimensions=(2, 3), window_strides=(1, 2), padding="SAME",
              base_dilation=(2, 1))
    for op in ("add", "max", "min", "mul"):
        for init in (np.float32(0.5), np.float32(-2.0), np.float32(1.0)):
            k = lax.reduce_window(x, init, getattr(lax, op), **kw)
            j = jlax.reduce_window(x, init, getattr(jlax, op), **kw)
            _close(k, j, 1e-6, 1e-6)
            kj = kiln.jit(lambda a, i, op=op: lax.reduce_window(a, i, getattr(lax, op), **kw))
            _close(kj(x, init), j, 1e-6, 1e-6)


def _reducer(name, L):
    """(computation, init) of a general reducer written with the lax module ``L``.

    XLA leaves the order of a window's reduction unspecified (its CPU emitter splits some
    padded windows), so reducers compared over padded windows are order-insensitive; the
    order-dependent ones are compared on unpadded windows only."""
    if name == "logaddexp":
        def lae(a, b):
            return L.add(L.max(a, b), L.log1p(L.exp(L.neg(L.abs(L.sub(a, b))))))
        return lae, np.float32(-3.0)
    if name == "hypot":
        return (lambda a, b: L.sqrt(L.add(L.mul(a, a), L.mul(b, b)))), np.float32(0.5)
    if name == "affine":                              # order-dependent: acc first
        return (lambda a, b: 2 * a + b), np.float32(0.5)
    return (lambda a, b: a - b), np.float32(1.0)     # "sub_first", order-dependent


@pytest.mark.parametrize("name", ["logaddexp", "hypot"])
@pytest.mark.parametrize("case", _cases(fast_only=True))
def test_generic_reducers(case, name, rng):
    _, shape, kw = case
    kfn, init = _reducer(name, lax)
    jfn, _ = _reducer(name, jlax)
    x = rng.standard_normal(shape).astype(np.float32)
    j = jlax.reduce_window(x, init, jfn, **kw)
    _close(lax.reduce_window(x, init, kfn, **kw), j, 1e-5, 1e-5)
    _close(kiln.jit(lambda a: lax.reduce_window(a, init, kfn, **kw))(x), j, 1e-5, 1e-5)


@pytest.mark.parametrize("name", ["affine", "sub_first"])
@pytest.mark.parametrize("kw", [dict(window_dimensions=(3,)),
                                dict(window_dimensions=(2, 3), window_strides=(1, 2)),
                                dict(window_dimensions=(2, 2), window_dilation=(2, 1))])
def test_generic_reducer_order(kw, name, rng):
    """Each window folds ``acc = computation(acc, element)`` from ``init_value`` in
    row-major window order, as XLA on CPU does for unpadded windows."""
    shape = (9,) if len(kw["window_dimensions"]) == 1 else (5, 7)
    kfn, init = _reducer(name, lax)
    x = rng.standard_normal(shape).astype(np.float32)
    j = jlax.reduce_window(x, init, kfn, **kw)
    _close(lax.reduce_window(x, init, kfn, **kw), j, 1e-6, 1e-6)
    _close(kiln.jvp(lambda a: lax.reduce_window(a, init, kfn, **kw), (x,), (x,))[1],
           jax.jvp(lambda a: jlax.reduce_window(a, init, kfn, **kw), (x,), (x,))[1],
           1e-6, 1e-6)


@pytest.mark.parametrize("op,dtype,init", [
    ("bitwise_or", np.bool_, False), ("bitwise_and", np.bool_, True),
    ("bitwise_xor", np.int32, 0), ("mul", np.int32, 1), ("mul", np.float16, 1),
    ("max", np.int8, 5), ("add", BF16, 1)])
def test_generic_int_bool_values(op, dtype, init, rng):
    kw = dict(window_dimensions=(2, 3), window_strides=(1, 2), padding="SAME",
              base_dilation=(2, 1))
    if dtype == np.bool_:
        x = rng.random((4, 5)) < 0.5
    elif np.dtype(dtype).kind == "i":
        x = rng.integers(-3, 4, (4, 5)).astype(dtype)
    else:
        x = rng.uniform(0.5, 1.5, (4, 5)).astype(dtype)
    init = np.asarray(init, dtype)
    k = lax.reduce_window(x, init, getattr(lax, op), **kw)
    j = jlax.reduce_window(x, init, getattr(jlax, op), **kw)
    _close(k, j, 1e-2, 1e-2)
    _close(kiln.jit(lambda a: lax.reduce_window(a, init, getattr(lax, op), **kw))(x), j,
           1e-2, 1e-2)
    _close(kiln.vmap(lambda a: lax.reduce_window(a, init, getattr(lax, op), **kw))(
        np.stack([x, x[::-1]])), jax.vmap(lambda a: jlax.reduce_window(
            a, init, getattr(jlax, op), **kw))(np.stack([x, x[::-1]])), 1e-2, 1e-2)


def test_pytree_operands():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    i = rng.integers(0, 30, (5, 6)).astype(np.int32)
    kw = dict(window_dimensions=(2, 3), window_strides=(1, 2), padding="SAME")

    def argmax_reducer(L):
        def red(a, b):
            pick = L.ge(a[0], b[0])
            return (L.select(pick, a[0], b[0]), L.select(pick, a[1], b[1]))
        return red
    init = (np.float32(-np.inf), np.int32(-1))
    k = lax.reduce_window((x, i), init, argmax_reducer(lax), **kw)
    j = jlax.reduce_window((x, i), init, argmax_reducer(jlax), **kw)
    for a, b in zip(k, j):
        _close(a, b, exact=True)
    d = lax.reduce_window({"s": x, "p": x}, {"s": np.float32(0), "p": np.float32(1)},
                          lambda a, b: {"s": a["s"] + b["s"], "p": a["p"] * b["p"]}, **kw)
    dj = jlax.reduce_window({"s": x, "p": x}, {"s": np.float32(0), "p": np.float32(1)},
                            lambda a, b: {"s": a["s"] + b["s"], "p": a["p"] * b["p"]}, **kw)
    _close(d["s"], dj["s"])
    _close(d["p"], dj["p"])


def test_reducer_closing_over_constants():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = np.array([2.0, 3.0], np.float32)
    k = lax.reduce_window(x, np.float32(0), lambda a, b: a + b * kiln.numpy.asarray(c)[1],
                          (2, 2))
    # (JAX rejects array constants in the reducer: its params must be hashable.)
    j = jlax.reduce_window(x, np.float32(0), lambda a, b: a + b * np.float32(3), (2, 2))
    _close(k, j)


def test_scalar_operand_and_empty_output():
    _close(lax.reduce_window(np.float32(3), np.float32(0), lax.add, ()),
           jlax.reduce_window(np.float32(3), np.float32(0), jlax.add, ()))
    x = np.ones((3, 4), np.float32)
    for pad in ("VALID", ((-3, -2), (0, 0))):
        for op in ("add", "max"):
            kf, jf = _fns(op, dict(window_dimensions=(5, 2), padding=pad))
            _close(kf(x), jf(x))
            _close(kiln.grad(lambda a, kf=kf: kf(a).sum())(x), np.zeros_like(x))


def test_reduce_window_shape_tuple():
    args = ((5, 6), (2, 3), (2, 1), ((1, 0), (0, 2)), (2, 1), (1, 2))
    assert lax.reduce_window_shape_tuple(*args) == tuple(jlax.reduce_window_shape_tuple(*args))


# ----------------------------------------------------------------------------------------------
# Derivatives


def _vjp_oracle(jf, x, ct):
    """ct^T J from JAX's forward mode, one basis tangent at a time (works where JAX has no
    transpose rule, and where its vmap of a generic reduce_window's JVP fails)."""
    eye = np.eye(x.size, dtype=x.dtype)
    cols = [(np.asarray(jax.jvp(jf, (x,), (eye[i].reshape(x.shape),))[1]) * ct).sum()
            for i in range(x.size)]
    return np.array(cols, np.float32).reshape(x.shape)


@pytest.mark.parametrize("case,op", _covered("rw.grad_and_jvp", _cases(), ["add", "max", "min"]))
def test_grad_and_jvp(case, op, rng):
    _, shape, kw = case
    x = _distinct(rng, shape)
    kf, jf = _fns(op, kw)
    out_shape = jf(x).shape
    ct = rng.standard_normal(out_shape).astype(np.float32)
    t = rng.standard_normal(shape).astype(np.float32)
    kg = kiln.grad(lambda a: (kf(a) * ct).sum())(x)
    neg_pad = not isinstance(kw.get("padding", ""), str) and \
        any(lo < 0 or hi < 0 for lo, hi in kw["padding"])
    if op != "add" and ("window_dilation" in kw or neg_pad):
        # JAX has no VJP for max/min pooling with window dilation, and its CPU lowering of
        # select_and_scatter_add fails on negative padding: use its forward mode.
        expected = _vjp_oracle(jf, x, ct)
    else:
        expected = jax.grad(lambda a: (jf(a) * ct).sum())(x)
    _close(kg, expected, 1e-5, 1e-5)
    _close(kiln.jit(kiln.grad(lambda a: (kf(a) * ct).sum()))(x), expected, 1e-5, 1e-5)
    kp, kt = kiln.jvp(kf, (x,), (t,))
    jp, jt = jax.jvp(jf, (x,), (t,))
    _close(kp, jp, exact=True)
    _close(kt, jt, 1e-5, 1e-5)
    # <ct, J t> == <J^T ct, t>
    np.testing.assert_allclose((np.asarray(kt) * ct).sum(), (np.asarray(kg) * t).sum(),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("case", _cases(fast_only=True))
def test_finite_differences(case, op, rng):
    _, shape, kw = case
    x = _distinct(rng, shape, np.float64)
    kf, _ = _fns(op, kw, np.float64)
    with config_context(jax_enable_x64=True):
        ct = rng.standard_normal(kf(x).shape)
        t = rng.standard_normal(shape)
        eps = 1e-4
        fd = ((np.asarray(kf(x + eps * t)) - np.asarray(kf(x - eps * t))) * ct).sum() / (2 * eps)
        g = np.asarray(kiln.grad(lambda a: (kf(a) * ct).sum())(x))
    np.testing.assert_allclose((g * t).sum(), fd, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("case,op", _covered("rw.second_order", _cases(fast_only=True),
                                             ["add", "max", "min"]))
def test_second_order(case, op, rng):
    _, shape, kw = case
    x = _distinct(rng, shape)
    kf, jf = _fns(op, kw)

    def kloss(a):
        return (lax.sin(kf(a)) * kf(a)).sum()

    def jloss(a):
        return (jnp.sin(jf(a)) * jf(a)).sum()
    t = rng.standard_normal(shape).astype(np.float32)
    # JAX has no VJP for max/min pooling with window dilation: use its forward mode there.
    no_vjp = op != "add" and "window_dilation" in kw
    jgrad = jax.jacfwd if no_vjp else jax.grad
    j_hvp = jax.jvp(jgrad(jloss), (x,), (t,))[1]
    _close(kiln.jvp(kiln.grad(kloss), (x,), (t,))[1], j_hvp, 1e-4, 1e-4)
    # reverse-over-reverse: grad of <grad f, t> (= H t: the Hessian is symmetric)
    kgg = kiln.grad(lambda a: (kiln.grad(kloss)(a) * t).sum())(x)
    jgg = j_hvp if no_vjp else jax.grad(lambda a: (jax.grad(jloss)(a) * t).sum())(x)
    _close(kgg, jgg, 1e-4, 1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("op", ["max", "min"])
def test_jacfwd_of_grad_and_hessian(op, rng):
    kw = dict(window_dimensions=(2, 2), window_strides=(1, 2), padding="SAME")
    x = _distinct(rng, (4, 5))
    kf, jf = _fns(op, kw)
    kh = kiln.jacfwd(kiln.grad(lambda a: (kf(a) ** 2).sum()))(x)
    jh = jax.jacfwd(jax.grad(lambda a: (jf(a) ** 2).sum()))(x)
    _close(kh, jh, 1e-5, 1e-5)
    _close(kiln.hessian(lambda a: (kf(a) ** 2).sum())(x), jh, 1e-5, 1e-5)


def _tie_inputs():
    x = np.array([[1.0, 3.0, 3.0, 2.0, 3.0],
                  [3.0, 0.0, 3.0, -1.0, 1.0],
                  [2.0, 2.0, 2.0, 2.0, 2.0],
                  [np.nan, 1.0, 2.0, 0.0, -np.inf],
                  [-np.inf, -np.inf, 1.0, np.nan, np.nan]], np.float32)
    return x


# (window kwargs, whether XLA visits the windows in row-major order): XLA's CPU emitter
# visits some padded windows in another order (e.g. a 3x3 window as columns 0-1, then
# column 2), which changes which of tied elements JAX's JVP picks; kiln keeps the row-major
# rule everywhere (checked against an explicit loop), and its gradient (select_and_scatter_
# add) agrees with JAX's in all of them.
TIE_KWS = [
    (dict(window_dimensions=(2, 3), window_strides=(1, 1)), True),
    (dict(window_dimensions=(2, 2), window_strides=(1, 2), padding="SAME"), False),
    (dict(window_dimensions=(3, 3), window_strides=(2, 2), padding=((1, 1), (2, 0))), True),
    (dict(window_dimensions=(2, 2), window_strides=(1, 1), padding=((1, -1), (0, 1))), False),
    (dict(window_dimensions=(2, 2), window_strides=(1, 1), base_dilation=(2, 1)), True),
    (dict(window_dimensions=(1, 5), window_strides=(1, 1), padding=((0, 0), (2, 2))), True),
    (dict(window_dimensions=(2, 2), window_strides=(1, 1), padding=((1, 1), (1, 1))), False),
]


def _gather_oracle(x, t, op, kw):
    """select_and_gather_add by explicit loops: per window, from the identity, keep the
    current choice while ``current >= candidate`` (``<=`` for min), visiting the window's
    operand elements in row-major order (padding and holes skipped)."""
    wd = kw["window_dimensions"]
    nd = len(wd)
    ws = kw.get("window_strides", (1,) * nd)
    bd = kw.get("base_dilation", (1,) * nd)
    wdl = kw.get("window_dilation", (1,) * nd)
    pads = kw.get("padding", ((0, 0),) * nd)
    if isinstance(pads, str):
        pads = lax.padtype_to_pads(x.shape, [(w - 1) * r + 1 for w, r in zip(wd, wdl)], ws,
                                   pads)
    out_shape = lax.reduce_window_shape_tuple(x.shape, wd, ws, pads, bd, wdl)
    out = np.zeros(out_shape, t.dtype)
    for o in np.ndindex(*out_shape):
        best, tan = np.float32(-np.inf if op == "max" else np.inf), np.float32(0)
        for k in np.ndindex(*wd):
            pos = [oi * s + ki * r - lo for oi, s, ki, r, (lo, _) in zip(o, ws, k, wdl, pads)]
            if any(p < 0 or p % b or p // b >= n for p, b, n in zip(pos, bd, x.shape)):
                continue
            idx = tuple(p // b for p, b in zip(pos, bd))
            keep = best >= x[idx] if op == "max" else best <= x[idx]
            if not keep:
                best, tan = x[idx], t[idx]
        out[o] = tan
    return out


@pytest.mark.parametrize("kw,row_major,op", _covered(
    "rw.ties", [pytest.param(*t, id=str(i)) for i, t in enumerate(TIE_KWS)], ["max", "min"]))
def test_ties_nans_infs_match_jax(kw, row_major, op):
    """The element whose gradient/tangent is taken on ties, NaNs and -inf/inf (incl. against
    padding) is JAX's: select_and_scatter_add for grad, select_and_gather_add for jvp."""
    x = _tie_inputs()
    if op == "min":
        x = -x
    kf, jf = _fns(op, kw)
    _close(kf(x), jf(x), exact=True)
    t = np.arange(x.size, dtype=np.float32).reshape(x.shape) + 1
    k_t = kiln.jvp(kf, (x,), (t,))[1]
    _close(k_t, _gather_oracle(x, t, op, kw), exact=True)
    if row_major:
        _close(k_t, jax.jvp(jf, (x,), (t,))[1], exact=True)
    jvp_jit = kiln.jit(lambda a, b: kiln.jvp(kf, (a,), (b,))[1])
    _close(jvp_jit(x, t), k_t, exact=True)
    ct = np.arange(np.prod(jf(x).shape), dtype=np.float32).reshape(jf(x).shape) + 1
    kg = kiln.grad(lambda a: (kf(a) * ct).sum())(x)
    _close(kiln.jit(kiln.grad(lambda a: (kf(a) * ct).sum()))(x), kg, exact=True)
    pads = kw.get("padding", ())
    if not isinstance(pads, str) and any(lo < 0 or hi < 0 for lo, hi in pads):
        # JAX's CPU lowering of select_and_scatter_add fails on negative padding; there
        # the gradient is the transpose of the JVP (no -inf/NaN is chosen here).
        eye = np.eye(x.size, dtype=np.float32)
        rows = [_gather_oracle(x, eye[i].reshape(x.shape), op, kw) for i in range(x.size)]
        expected = np.array([(r * ct).sum() for r in rows], np.float32).reshape(x.shape)
        _close(kg, expected, exact=True)
    else:
        _close(kg, jax.grad(lambda a: (jf(a) * ct).sum())(x), exact=True)


@pytest.mark.parametrize("select", ["ge", "le"])
@pytest.mark.parametrize("padding", [((0, 0),), ((1, 1),), ((2, 0),), ((0, 3),)])
@pytest.mark.parametrize("values", [
    [1.0, 3.0, 3.0, 2.0], [np.nan, 1.0, 2.0, 0.0], [1.0, np.nan, 2.0, 0.0],
    [1.0, 2.0, 0.0, np.nan], [-np.inf] * 4, [np.inf] * 4, [np.nan] * 4,
    [np.nan, np.nan, 1.0, 0.0]])
def test_select_primitives_direct(values, padding, select):
    """The pooling-gradient primitives on hand-made windows, against JAX's own."""
    x = np.array(values, np.float32)
    kp, jp = (lax.ge_p, _jlax_impl.ge_p) if select == "ge" else (lax.le_p, _jlax_impl.le_p)
    wd, ws = (2,), (1,)
    out_n = lax.reduce_window_shape_tuple(x.shape, wd, ws, padding)[0]
    t = np.arange(4, dtype=np.float32) + 10
    kg = lax.select_and_gather_add_p.bind(t, x, select_prim=kp, window_dimensions=wd,
                                          window_strides=ws, padding=padding,
                                          base_dilation=(1,), window_dilation=(1,))
    jg = _jwr._select_and_gather_add(t, x, jp, wd, ws, padding, (1,), (1,))
    _close(kg, jg, exact=True)
    src = np.arange(out_n, dtype=np.float32) + 1
    ks = lax.select_and_scatter_add_p.bind(src, x, select_prim=kp, window_dimensions=wd,
                                           window_strides=ws, padding=padding)
    js = _jwr._select_and_scatter_add(src, x, jp, wd, ws, padding)
    _close(ks, js, exact=True)


def test_select_and_scatter_add_rules():
    """jvp, transpose (select_and_gather_add) and vmap of the gradient primitive itself."""
    rng = np.random.default_rng(4)
    x = _distinct(rng, (5, 6))
    kw = dict(window_dimensions=(2, 3), window_strides=(2, 1), padding=((1, 0), (1, 1)))
    src = rng.standard_normal(lax.reduce_window_shape_tuple(x.shape, **kw)).astype(np.float32)

    def kf(s, a):
        return lax.select_and_scatter_add_p.bind(s, a, select_prim=lax.ge_p, **kw)

    def jf(s, a):
        return _jwr._select_and_scatter_add(s, a, _jlax_impl.ge_p, kw["window_dimensions"],
                                            kw["window_strides"], kw["padding"])
    _close(kf(src, x), jf(src, x))
    _close(kiln.jvp(kf, (src, x), (src * 2, x))[1], jax.jvp(jf, (src, x), (src * 2, x))[1])
    ct = rng.standard_normal(x.shape).astype(np.float32)
    _close(kiln.grad(lambda s: (kf(s, x) * ct).sum())(src),
           jax.grad(lambda s: (jf(s, x) * ct).sum())(src))
    sb, xb = np.stack([src, -src]), np.stack([x, x[::-1]])
    _close(kiln.vmap(kf)(sb, xb), jax.vmap(jf)(sb, xb))
    _close(kiln.vmap(kf, (None, 0))(src, xb), jax.vmap(jf, (None, 0))(src, xb))


@pytest.mark.parametrize("name", ["logaddexp", "hypot"])
def test_generic_derivatives(name, rng):
    kw = dict(window_dimensions=(2, 3), window_strides=(1, 2), padding="SAME",
              base_dilation=(1, 2))
    kfn, init = _reducer(name, lax)
    jfn, _ = _reducer(name, jlax)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t = rng.standard_normal(x.shape).astype(np.float32)

    def kf(a):
        return lax.reduce_window(a, init, kfn, **kw)

    def jf(a):
        return jlax.reduce_window(a, init, jfn, **kw)
    _close(kiln.jvp(kf, (x,), (t,))[1], jax.jvp(jf, (x,), (t,))[1], 1e-5, 1e-5)
    ct = rng.standard_normal(jf(x).shape).astype(np.float32)
    # JAX's generic reduce_window has no transpose rule: compare with its forward mode.
    _close(kiln.grad(lambda a: (kf(a) * ct).sum())(x), _vjp_oracle(jf, x, ct), 1e-5, 1e-5)


@pytest.mark.parametrize("op,init", [("mul", 1.0), ("add", 0.5), ("max", 0.13),
                                     ("min", -0.37)])
def test_generic_monoids_derivatives(op, init, rng):
    kw = dict(window_dimensions=(3, 2), window_strides=(1, 2), padding=((1, 1), (0, 1)))
    x = _distinct(rng, (4, 5)) * 0.2
    init = np.float32(init)

    def kf(a):
        return lax.reduce_window(a, init, getattr(lax, op), **kw)

    def jf(a):
        return jlax.reduce_window(a, init, getattr(jlax, op), **kw)
    t = rng.standard_normal(x.shape).astype(np.float32)
    _close(kiln.jvp(kf, (x,), (t,))[1], jax.jvp(jf, (x,), (t,))[1], 1e-5, 1e-5)
    ct = rng.standard_normal(jf(x).shape).astype(np.float32)
    _close(kiln.grad(lambda a: (kf(a) * ct).sum())(x), _vjp_oracle(jf, x, ct), 1e-5, 1e-5)
    # second order (finite differences of the gradient)
    g = kiln.grad(lambda a: (kf(a) * ct).sum())
    hv = kiln.jvp(g, (x,), (t,))[1]
    eps = np.float32(1e-2)
    fd = (np.asarray(g(x + eps * t)) - np.asarray(g(x - eps * t))) / (2 * eps)
    _close(hv, fd.astype(np.float32), 2e-2, 2e-2)


def test_grad_wrt_init_value(rng):
    """A traced init value has a derivative (JAX raises for a nonzero init tangent)."""
    x = rng.standard_normal((4, 5)).astype(np.float32)
    kw = dict(window_dimensions=(2, 2), padding="SAME")
    g = kiln.grad(lambda i: lax.reduce_window(x, i, lax.add, **kw).sum())(np.float32(0.5))
    np.testing.assert_allclose(g, np.prod(lax.reduce_window_shape_tuple(
        x.shape, (2, 2), (1, 1), ((0, 1), (0, 1)))))


# ----------------------------------------------------------------------------------------------
# vmap


@pytest.mark.parametrize("op", ["add", "max", "min", "mul"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("case", _cases(fast_only=True))
def test_vmap_axes(case, axis, op, rng):
    _, shape, kw = case
    if axis > len(shape):
        pytest.skip("rank")
    bshape = shape[:axis] + (3,) + shape[axis:]
    x = rng.standard_normal(bshape).astype(np.float32)
    if op == "mul":
        def kf(a):
            return lax.reduce_window(a, np.float32(1), lax.mul, **kw)

        def jf(a):
            return jlax.reduce_window(a, np.float32(1), jlax.mul, **kw)
    else:
        kf, jf = _fns(op, kw)
    for out_axes in (0, -1):
        expected = jax.vmap(jf, axis, out_axes)(x)
        _close(kiln.vmap(kf, axis, out_axes)(x), expected, 1e-6, 1e-6)
    _close(kiln.jit(kiln.vmap(kf, axis))(x), jax.vmap(jf, axis)(x), 1e-6, 1e-6)


@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("case", _cases(fast_only=True))
def test_vmap_of_grad_and_jvp(case, op, rng):
    _, shape, kw = case
    x = np.stack([_distinct(rng, shape), -_distinct(rng, shape)], axis=-1)
    kf, jf = _fns(op, kw)

    def kloss(a):
        return (kf(a) ** 2).sum()

    def jloss(a):
        return (jf(a) ** 2).sum()
    ax = x.ndim - 1
    if op != "add" and "window_dilation" in kw:
        expected = jax.vmap(lambda a: jax.jacfwd(jloss)(a), ax)(x)
    else:
        expected = jax.vmap(jax.grad(jloss), ax)(x)
    _close(kiln.vmap(kiln.grad(kloss), ax)(x), expected, 1e-4, 1e-4)
    t = np.ones_like(x)
    _close(kiln.vmap(lambda a, b: kiln.jvp(kf, (a,), (b,))[1], (ax, ax))(x, t),
           jax.vmap(lambda a, b: jax.jvp(jf, (a,), (b,))[1], (ax, ax))(x, t), 1e-5, 1e-5)
    # jacfwd(grad) batches select_and_scatter_add's jvp; grad(grad) its transpose.
    _close(kiln.vmap(kiln.grad(lambda a: (kiln.grad(kloss)(a) * a).sum()), ax)(x),
           jax.vmap(jax.jacfwd(lambda a: (jax.jacfwd(jloss)(a) * a).sum()), ax)(x),
           1e-4, 1e-4)


def test_vmap_batched_init(rng):
    """Per-example init values (JAX raises NotImplementedError) fall back to a fold."""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    inits = np.array([0.5, -1.0, 2.0], np.float32)
    kw = dict(window_dimensions=(2, 2), window_strides=(1, 2), padding="SAME")
    got = kiln.vmap(lambda a, i: lax.reduce_window(a, i, lax.add, **kw))(x, inits)
    for b in range(3):
        _close(got[b], jlax.reduce_window(x[b], inits[b], jlax.add, **kw), 1e-6, 1e-6)


def test_vmap_pytree_generic(rng):
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    kw = dict(window_dimensions=(2, 2), window_strides=(1, 1), padding="VALID")

    def make(L):
        return lambda a: L.reduce_window((a, a), (np.float32(0), np.float32(1)),
                                         lambda u, v: (u[0] + v[0], u[1] * v[1]), **kw)
    for k, j in zip(kiln.vmap(make(lax), 1)(x), jax.vmap(make(jlax), 1)(x)):
        _close(k, j, 1e-6, 1e-6)


# ----------------------------------------------------------------------------------------------
# Errors


def _err(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None, None


ERROR_CASES = {
    "wrong_ndim": lambda L, x: L.reduce_window(x, -np.inf, L.max, (2,), (1,), "VALID"),
    "zero_window": lambda L, x: L.reduce_window(x, -np.inf, L.max, (0, 2), (1, 1), "VALID"),
    "zero_window_mul": lambda L, x: L.reduce_window(x, 1.0, L.mul, (0, 2), (1, 1), "VALID"),
    "zero_stride": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (0, 1), "VALID"),
    "strides_len": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (1,), "VALID"),
    "base_dil_len": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (1, 1), "VALID",
                                                 (1,)),
    "base_dil_zero": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (1, 1), "VALID",
                                                  (0, 1)),
    "win_dil_zero": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (1, 1), "VALID",
                                                 None, (0, 1)),
    "win_dil_len": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (1, 1), "VALID", None,
                                                (1,)),
    "float_window": lambda L, x: L.reduce_window(x, 0.0, L.add, (1.5, 2), (1, 1), "VALID"),
    "padding_len": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (1, 1), ((0, 0),)),
    "padding_str": lambda L, x: L.reduce_window(x, 0.0, L.add, (1, 2), (1, 1), "FOO"),
    "init_dtype": lambda L, x: L.reduce_window(x, 1, L.add, (1, 2), (1, 1), "VALID"),
    "init_vector": lambda L, x: L.reduce_window(x, np.ones(2, np.float32), L.add, (1, 2)),
    "tree_mismatch": lambda L, x: L.reduce_window((x, x), (0.0, 0.0, 0.0), L.add, (1, 2)),
    "tree_kind": lambda L, x: L.reduce_window((x, x), [0.0, 0.0], L.add, (1, 2)),
    "no_operand": lambda L, x: L.reduce_window((), (), L.add, (1, 2)),
    "out_tree": lambda L, x: L.reduce_window((x, x), (np.float32(0), np.float32(0)),
                                             lambda a, b: a[0] + b[0], (1, 2)),
    "bad_return": lambda L, x: L.reduce_window(x, np.float32(0), lambda a, b: "s", (1, 2)),
    "sum_bool": lambda L, x: L.reduce_window(x > 0, False, L.add, (1, 2)),
    "f16_python_init": lambda L, x: L.reduce_window(x.astype(np.float16), 1.5, L.add, (1, 2)),
    "operand_shapes": lambda L, x: L.reduce_window(
        (x, x[:2]), (np.float32(0), np.float32(0)),
        lambda a, b: (a[0] + b[0], a[1] * b[1]), (1, 2)),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_errors(name):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    kt, km = _err(lambda: ERROR_CASES[name](lax, x))
    jt, jm = _err(lambda: ERROR_CASES[name](jlax, x))
    assert jt is not None and kt is not None, (kt, km, jt, jm)
    assert issubclass(kt, jt) or kt.__name__ == jt.__name__, (kt, km, jt, jm)
    if name not in ("padding_len", "operand_shapes", "bad_return"):
        assert km.split(":")[0] == jm.split(":")[0] or km == jm, (km, jm)


def test_closing_over_tracer_raises():
    x = np.ones((3, 4), np.float32)

    def f(c):
        return lax.reduce_window(x, np.float32(0), lambda a, b: a + b * c, (2, 2))
    with pytest.raises(NotImplementedError, match="close over Tracers"):
        kiln.jit(f)(np.float32(2))
