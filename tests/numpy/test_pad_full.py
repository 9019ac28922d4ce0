"""``jnp.pad`` against ``jax.numpy.pad``: every mode and keyword over a table of widths and
dtypes (values, dtypes, weak types), under ``jit``/``grad``/``vmap``, callable modes, traced
``constant_values`` and the errors for bad input."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
jjnp = pytest.importorskip("jax.numpy")

rs = np.random.RandomState(0)
F2 = rs.permutation(12).reshape(3, 4).astype(np.float32) * 1.5 - 4.0
I2 = rs.randint(-20, 20, size=(3, 4)).astype(np.int32)
F1 = np.array([3.0, -1.0, 2.5, 7.0, 0.5], np.float32)
F3 = rs.randn(2, 3, 2).astype(np.float32)

MODES = [
    ("constant", {}),
    ("constant", {"constant_values": 2.5}),
    ("constant", {"constant_values": ((1, 2), (3, 4))}),
    ("constant", {"constant_values": (7, -8)}),
    ("empty", {}),
    ("edge", {}),
    ("wrap", {}),
    ("reflect", {}),
    ("reflect", {"reflect_type": "odd"}),
    ("symmetric", {}),
    ("symmetric", {"reflect_type": "odd"}),
    ("linear_ramp", {}),
    ("linear_ramp", {"end_values": ((1, 2), (3.5, -4))}),
    ("maximum", {"stat_length": 2}),
    ("minimum", {"stat_length": ((1, 3), (2, 1))}),
    ("mean", {}),
    ("mean", {"stat_length": ((3, 1), (2, 5))}),
    ("median", {}),
    ("median", {"stat_length": (2, 3)}),
]
# one configuration per mode, for the slower checks
BASIC_MODES = [MODES[i] for i in (0, 4, 5, 6, 7, 10, 12, 13, 14, 16, 17)]
WIDTHS = [2, ((2, 0), (1, 5)), 7]


def _check(k, j, *, int_atol=0, rtol=1e-6, atol=1e-6):
    k_arr, j_arr = np.asarray(k), np.asarray(j)
    assert k_arr.shape == j_arr.shape
    assert k_arr.dtype == j_arr.dtype
    assert bool(getattr(k, "weak_type", False)) == bool(getattr(j, "weak_type", False))
    if np.issubdtype(j_arr.dtype, np.integer):
        np.testing.assert_allclose(k_arr.astype(np.int64), j_arr.astype(np.int64), rtol=0,
                                   atol=int_atol)
    else:
        np.testing.assert_allclose(k_arr, j_arr, rtol=rtol, atol=atol)


def _id(mode_kw):
    mode, kw = mode_kw
    return mode + ("-" + "-".join(f"{k}={v}" for k, v in kw.items()) if kw else "")


_CACHE = {}


def _jax_batch(key, fns, *args):
    """JAX's results of ``fns(*args)``, all traced into one ``jax.jit`` (one compilation
    instead of one per static configuration; ``jnp.pad`` is itself jitted in JAX), cached
    (and from the stored oracle, tests/_oracle.py)."""
    if key not in _CACHE:
        _CACHE[key] = jax_result(f"batch.{key}",
                                 lambda: jax.jit(lambda *a: [f(*a) for f in fns])(*args), args)
    return _CACHE[key]


def _jpad(x, *args, **kw):
    """Eager ``jax.numpy.pad(x, *args, **kw)`` (from the stored oracle)."""
    return jax_result(f"pad.{args}", lambda: jjnp.pad(x, *args, **kw), (x, kw))


def _jax(key, compute, inputs=None):
    return jax_result(key, compute, inputs)


def _pad_fn(jnp_, w, mode, kw):
    return lambda x: jnp_.pad(x, w, mode, **kw)


TABLE = list(itertools.product(MODES, WIDTHS))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("mode_kw", MODES, ids=[_id(m) for m in MODES])
def test_table(mode_kw, dtype):
    mode, kw = mode_kw
    x = (F2 if dtype == np.float32 else I2).astype(dtype)
    ref = _jax_batch(("table", dtype), [_pad_fn(jjnp, w, m, k) for (m, k), w in TABLE], x)
    # XLA fuses linspace's ``a * (1 - t) + b * t`` into an FMA, so ramps may differ by one
    # float32 ulp, which the floor for integer dtypes can turn into 1.
    int_atol = 1 if mode == "linear_ramp" else 0
    for w in WIDTHS:
        j = ref[TABLE.index((mode_kw, w))]
        _check(knp.pad(x, w, mode, **kw), j, int_atol=int_atol)
    if mode not in ("linear_ramp",):   # (see above) eager JAX, not fused with the others
        _check(knp.pad(x, 0, mode, **kw), _jpad(x, 0, mode, **kw))


OTHER = [F1, F3, I2.astype(np.uint8), (I2 > 0)]


@pytest.mark.parametrize("i", range(len(OTHER)), ids=["f1", "f3", "u8", "bool"])
def test_other_ranks_and_dtypes(i):
    x = OTHER[i]
    cases = []
    for mode, kw in BASIC_MODES:
        if x.dtype == np.bool_ and mode in ("reflect", "symmetric") and kw:
            continue  # odd reflection of bools: a TypeError in both (see test_errors)
        if x.ndim != 2 and any(np.ndim(v) == 2 for v in kw.values()):
            continue  # per-axis values for two axes: an error in both (see test_errors)
        cases.append((mode, kw))
    ref = _jax_batch(("other", i), [_pad_fn(jjnp, (2, 3), m, k) for m, k in cases], x)
    for (mode, kw), j in zip(cases, ref):
        k = knp.pad(x, (2, 3), mode, **kw)
        _check(k, j, int_atol=1 if mode == "linear_ramp" else 0, rtol=1e-5)


def test_scalar_input_and_weak_types():
    for mode in ("constant", "edge", "mean", "median", "linear_ramp", "reflect"):
        _check(knp.pad(3.0, 2, mode), _jpad(3.0, 2, mode))
        _check(knp.pad(np.float32(3), -2, mode), _jpad(np.float32(3), -2, mode))
    # a weak-typed array keeps its weak type
    for mode in ("constant", "edge", "mean", "median", "linear_ramp", "wrap", "empty"):
        k = kiln.jit(lambda x, m=mode: knp.pad(knp.broadcast_to(x, (3,)), 1, m))(2.0)
        j = _jax(f"weak.{mode}", lambda m=mode: jax.jit(
            lambda x: jjnp.pad(jjnp.broadcast_to(x, (3,)), 1, m))(2.0))
        _check(k, j)


def test_integer_rounding():
    x = np.array([1, 2, 2, 3, 5, 6], np.int32)   # means/medians of x.5: half to even
    for mode in ("mean", "median"):
        for sl in (2, 3, None):
            kw = {} if sl is None else {"stat_length": sl}
            _check(knp.pad(x, 3, mode, **kw), _jpad(x, 3, mode, **kw))
    u = np.array([0, 3, 250, 255], np.uint8)
    for ev in (0, 255, (7, 100), 2.7):
        _check(knp.pad(u, 4, "linear_ramp", end_values=ev),
               _jpad(u, 4, "linear_ramp", end_values=ev), int_atol=1)
    # stat_length longer than the axis, and negative (sliced as Python's x[:n], x[-n:])
    for sl in (10, -1, ((1, -2),)):
        _check(knp.pad(F2, 2, "mean", stat_length=sl), _jpad(F2, 2, "mean", stat_length=sl))


def test_jit():
    for (mode, kw), dtype in itertools.product(MODES, (np.float32, np.int32)):
        x = (F2 if dtype == np.float32 else I2).astype(dtype)
        w = ((2, 1), (0, 3))
        k = kiln.jit(lambda x: knp.pad(x, w, mode, **kw))(x)
        _check(k, knp.pad(x, w, mode, **kw))


def test_traced_constant_values():
    c = np.array([[1., 2.], [3., 4.]], np.float32)
    k = kiln.jit(lambda x, c: knp.pad(x, 1, constant_values=c))(F2, c)
    j = _jax("traced_c", lambda: jax.jit(lambda x, c: jjnp.pad(x, 1, constant_values=c))(F2, c),
             (F2, c))
    _check(k, j)
    for cv in (np.float32(2.5), np.array([1.5], np.float32), np.array([7., 8.], np.float32),
               np.array([[5.], [6.]], np.float32)):
        for x in (F2, I2):
            k = kiln.jit(lambda x, c: knp.pad(x, (1, 2), constant_values=c))(x, cv)
            j = _jax("traced_cv", lambda x=x, cv=cv: jax.jit(
                lambda x, c: jjnp.pad(x, (1, 2), constant_values=c))(x, cv), (x, cv))
            _check(k, j)
    # vmap over the constant values
    cs = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    k = kiln.vmap(lambda c: knp.pad(F2, ((1, 0), (2, 1)), constant_values=c))(cs)
    j = _jax("vmap_c", lambda: jax.vmap(
        lambda c: jjnp.pad(F2, ((1, 0), (2, 1)), constant_values=c))(cs), (F2, cs))
    _check(k, j)
    k = kiln.vmap(lambda x, c: knp.pad(x, 1, constant_values=c))(np.stack([F2, -F2]), cs[:2])
    j = _jax("vmap_xc", lambda: jax.vmap(lambda x, c: jjnp.pad(x, 1, constant_values=c))(
        np.stack([F2, -F2]), cs[:2]), (F2, cs))
    _check(k, j)


W = np.random.RandomState(1).randn(512).astype(np.float32)


def _loss(jnp_, mode, kw, w):
    def f(x):
        y = jnp_.pad(x, w, mode, **kw)
        return (y.ravel() * W[:y.size]).sum()
    return f




GRAD_W = ((2, 1), (1, 5))


@pytest.mark.parametrize("mode_kw", MODES, ids=[_id(m) for m in MODES])
def test_grad(mode_kw):
    mode, kw = mode_kw
    ref = _jax_batch("grad", [jax.grad(_loss(jjnp, m, k, GRAD_W)) for m, k in MODES], F2)
    k = kiln.grad(_loss(knp, mode, kw, GRAD_W))(F2)
    _check(k, ref[MODES.index(mode_kw)], rtol=1e-5, atol=1e-5)
    _check(kiln.jit(kiln.grad(_loss(knp, mode, kw, GRAD_W)))(F2), k, rtol=1e-5, atol=1e-5)


def test_grad_constant_values():
    def loss(jnp_, x, c):
        y = jnp_.pad(x, ((1, 2), (3, 1)), constant_values=c)
        return (y.ravel() * W[:y.size]).sum()
    for c in (np.float32(2.0), np.array([[1., 2.], [3., 4.]], np.float32),
              np.array([1., 2.], np.float32)):
        k = kiln.grad(lambda x, c: loss(knp, x, c), argnums=(0, 1))(F2, c)
        j = _jax("grad_c", lambda c=c: jax.grad(lambda x, c: loss(jjnp, x, c), argnums=(0, 1))(
            F2, c), (F2, c, W))
        _check(k[0], j[0], rtol=1e-5, atol=1e-5)
        _check(k[1], j[1], rtol=1e-5, atol=1e-5)
        kj = kiln.jit(kiln.grad(lambda x, c: loss(knp, x, c), argnums=1))(F2, c)
        _check(kj, j[1], rtol=1e-5, atol=1e-5)


XS = np.stack([F2, F2[::-1] * 2, -F2])


@pytest.mark.parametrize("mode_kw", BASIC_MODES, ids=[_id(m) for m in BASIC_MODES])
def test_vmap(mode_kw):
    mode, kw = mode_kw
    fns = []
    for m, k in BASIC_MODES:
        fns.append(jax.vmap(_pad_fn(jjnp, ((1, 2), (3, 0)), m, k)))
        fns.append(jax.vmap(_pad_fn(jjnp, 2, m, k), in_axes=1, out_axes=1))
    ref = _jax_batch("vmap", fns, XS)
    i = BASIC_MODES.index(mode_kw)
    k = kiln.vmap(_pad_fn(knp, ((1, 2), (3, 0)), mode, kw))(XS)
    _check(k, ref[2 * i], rtol=1e-5, atol=1e-5)
    k = kiln.vmap(_pad_fn(knp, 2, mode, kw), in_axes=1, out_axes=1)(XS)
    _check(k, ref[2 * i + 1], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# callable modes


def _ends(jnp_):
    def f(row, pad_width, iaxis, kwargs):
        before, after = pad_width
        row = row.at[:before].set(kwargs.get("lo", -1) + iaxis)
        return row.at[row.shape[0] - after:].set(kwargs.get("hi", 9))
    return f


def _mirror(jnp_):
    def f(row, pad_width, iaxis, kwargs):
        return row * 2 + jnp_.flip(row) + pad_width[0] - pad_width[1]
    return f


def _types(jnp_):
    def f(row, pad_width, iaxis, kwargs):
        assert isinstance(pad_width, tuple) and len(pad_width) == 2
        assert all(isinstance(p, np.integer) for p in pad_width)
        assert type(iaxis) is int and isinstance(kwargs, dict)
        return row
    return f


CALLABLE_CASES = [
    (_ends, I2, ((1, 2), (2, 1)), {"lo": 5}),
    (_ends, F2, ((1, -1), (0, 0)), {}),            # negative widths crop, as in JAX
    (_mirror, F3, ((1, 0), (0, 2), (1, 1)), {}),
    (_mirror, F1, (2, 3), {"hi": 0.5}),
    (_types, F2, 1, {"a": 1}),
]


@pytest.mark.parametrize("case", range(len(CALLABLE_CASES)))
def test_callable(case):
    fn, x, w, kw = CALLABLE_CASES[case]
    k = knp.pad(x, w, fn(knp), **kw)
    # (JAX's eager callable pad runs op by op under vmap: slow; its jit gives the same)
    xs = np.stack([x, x * 2])
    j, jv = _jax(f"callable.{case}", lambda: (
        jax.jit(lambda x: jjnp.pad(x, w, fn(jjnp), **kw))(x),
        jax.jit(jax.vmap(lambda x: jjnp.pad(x, w, fn(jjnp), **kw)))(xs)), x)
    _check(k, j)
    _check(kiln.jit(lambda x: knp.pad(x, w, fn(knp), **kw))(x), k)
    _check(kiln.vmap(lambda x: knp.pad(x, w, fn(knp), **kw))(xs), jv)


def test_callable_grad():
    g = kiln.grad(lambda x: knp.pad(x, 2, _mirror(knp)).sum())(F2)
    _check(g, _jax("callable_grad",
                   lambda: jax.grad(lambda x: jjnp.pad(x, 2, _mirror(jjnp)).sum())(F2), F2))


# ----------------------------------------------------------------------------------------------
# errors


ERRORS = [
    ("jnp.pad(x, -1)", ValueError, "index can't contain negative values"),
    ("jnp.pad(x, ((1, -1), (0, 0)), 'edge')", ValueError, "index can't contain negative"),
    ("jnp.pad(x, 1, 'foo')", NotImplementedError, "Unimplemented padding mode 'foo' for np.pad."),
    ("jnp.pad(x, 1, None)", NotImplementedError, "Unimplemented padding mode 'None'"),
    ("jnp.pad(s, 1, 'foo')", NotImplementedError, "Unimplemented padding mode"),
    ("jnp.pad(x, 1, 'edge', constant_values=1)", ValueError,
     "unsupported keyword arguments for mode 'edge': {'constant_values'}"),
    ("jnp.pad(x, 1, 'wrap', reflect_type='odd')", ValueError,
     "unsupported keyword arguments for mode 'wrap'"),
    ("jnp.pad(x, 1, foo=1)", ValueError, "unsupported keyword arguments for mode 'constant'"),
    ("jnp.pad(x, 1, 'mean', stat_length=0)", ValueError,
     "stat_length of 0 yields no value for padding"),
    ("jnp.pad(x, 1, 'median', stat_length=((1, 1), (2, 0)))", ValueError,
     "stat_length of 0 yields no value"),
    ("jnp.pad(x, ((1, 1), (0, 0)), 'maximum', stat_length=((1, 1), (0, 2)))", ValueError,
     "stat_length of 0 yields no value"),
    ("jnp.pad(x, 1, 'mean', stat_length=1.5)", TypeError,
     "'numpy.float64' object cannot be interpreted as an integer"),
    ("jnp.pad(x, 1, 'maximum', stat_length=((1, 2, 3),))", ValueError,
     r"jnp.pad: stat_length with nd=2 has unsupported shape \(1, 3\). Valid shapes are "
     r"\(2, 2\), \(1, 2\), \(2,\), \(1,\), or \(\)."),
    ("jnp.pad(x, 1.5)", TypeError, "`pad_width` must be of integral type."),
    ("jnp.pad(x, 1.0)", TypeError, "`pad_width` must be of integral type."),
    ("jnp.pad(x, True)", TypeError, "`pad_width` must be of integral type."),
    ("jnp.pad(x, None)", TypeError, "`pad_width` must be of integral type."),
    ("jnp.pad(x, ((1, 2, 3),))", ValueError,
     r"jnp.pad: pad_width with nd=2 has unsupported shape \(1, 3\)"),
    ("jnp.pad(x, ())", ValueError, r"pad_width with nd=2 has unsupported shape \(0,\)"),
    ("jnp.pad(x, ((1, 2), (3,)))", TypeError, "`pad_width` entries must be the same shape"),
    ("jnp.pad(x, 1, constant_values=[1, 2, 3])", ValueError,
     r"jnp.pad: constant_values has unsupported shape \(3,\). If the shape is 1D or 2D, the "
     "last dimension must be of size 1 or 2."),
    ("jnp.pad(x, 1, constant_values=np.ones((3, 2)))", ValueError, None),
    ("jnp.pad(x, 1, constant_values=np.ones((1, 1, 2)))", ValueError, None),
    ("jnp.pad(x[0], 1, constant_values=((1, 2), (3, 4)))", ValueError, None),
    ("jit(lambda x, c: jnp.pad(x, 1, constant_values=c))(x, np.ones(3))", ValueError,
     r"constant_values has unsupported shape \(3,\)"),
    ("jnp.pad(x[0], 2, 'linear_ramp', end_values=((1, 2), (3, 4)))", ValueError,
     r"end_values with nd=1 has unsupported shape \(2, 2\)"),
    ("jnp.pad(x, 2, 'linear_ramp', end_values=(1, 2, 3))", ValueError,
     r"jnp.pad: end_values with nd=2 has unsupported shape \(3,\)"),
    ("jnp.pad(e, 1, 'edge')", ValueError, "Cannot apply 'edge' padding to empty axis"),
    ("jnp.pad(e, 1, 'wrap')", ValueError, "Cannot apply 'wrap' padding to empty axis"),
    ("jnp.pad(e, 1, 'reflect')", ValueError, "Cannot apply 'reflect' padding to empty axis"),
    ("jnp.pad(e, 1, 'symmetric')", ValueError, "Cannot apply 'symmetric' padding to empty"),
    ("jnp.pad(e, 1, 'maximum')", ValueError,
     "zero-size array to reduction operation max which has no identity"),
    ("jnp.pad(e, ((0, 0), (1, 1)), 'minimum')", ValueError,
     "zero-size array to reduction operation min which has no identity"),
    ("jnp.pad(e, 1, 'median')", TypeError, None),
    ("jnp.pad(e, 1, 'linear_ramp')", TypeError, None),
    ("jnp.pad(s, 1, lambda r, pw, i, kw: r)", ValueError,
     r"jnp.pad: pad_width with nd=0 has unsupported shape \(0,\)"),
    ("jnp.pad(b, 2, 'reflect', reflect_type='odd')", TypeError, None),
    ("jnp.pad([1, 2], 1)", TypeError, None),
    ("jit(lambda x, w: jnp.pad(x, w))(x, 1)", "ConcretizationTypeError", None),
]


def _raise_both(expr, exc, match):
    for jnp_, jit, cte in ((knp, kiln.jit, kiln.errors.ConcretizationTypeError),
                           (jjnp, jax.jit, jax.errors.ConcretizationTypeError)):
        env = dict(jnp=jnp_, jit=jit, np=np, x=F2, s=np.float32(1),
                   e=np.zeros((0, 2), np.float32), b=np.array([True, False, True]))
        want = cte if exc == "ConcretizationTypeError" else exc
        with pytest.raises(want, match=match):
            eval(expr, env)


@pytest.mark.parametrize("expr,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(expr, exc, match):
    _raise_both(expr, exc, match)


def test_deliberate_differences():
    # JAX asserts; kiln raises a ValueError naming the valid choices.
    with pytest.raises(ValueError, match="reflect_type"):
        knp.pad(F2, 1, "reflect", reflect_type="foo")
    # JAX needs hashable (static) stat_length/end_values; kiln also takes lists and arrays,
    # and traced end_values.
    _check(knp.pad(F2, 1, "maximum", stat_length=[1, 2]),
           _jpad(F2, 1, "maximum", stat_length=(1, 2)))
    _check(knp.pad(F2, 2, "linear_ramp", end_values=[[1, 2], [3, 4]]),
           _jpad(F2, 2, "linear_ramp", end_values=((1, 2), (3, 4))))
    k = kiln.jit(lambda x, e: knp.pad(x, 2, "linear_ramp", end_values=e))(
        F2, np.array([1., -2.], np.float32))
    _check(k, _jpad(F2, 2, "linear_ramp", end_values=(1., -2.)))
    with pytest.raises(kiln.errors.ConcretizationTypeError):
        kiln.jit(lambda x, s: knp.pad(x, 1, "mean", stat_length=s))(F2, 1)
