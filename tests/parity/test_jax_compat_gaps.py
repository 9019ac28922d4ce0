"""Issue 14: compatibility gaps against JAX (values and exception classes)."""
from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest
from _oracle import jax_result

import kiln
import kiln.numpy as knp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402


def _same(a, b, rtol=1e-5, atol=1e-6):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, equal_nan=True)


def _error(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _jax_error(key, fj):
    """JAX's exception from ``fj()`` (from the stored oracle) as ``[module, class name,
    message]``, or ``None`` when it returns."""
    def compute():
        e = _error(fj)
        return None if e is None else [type(e).__module__, type(e).__qualname__, str(e)]
    return jax_result(key, compute)


def _class(ej):
    return getattr(importlib.import_module(ej[0]), ej[1])


def _same_error(key, fj, fk):
    ej, ek = _jax_error(key, fj), _error(fk)
    assert ej is not None and ek is not None, (ej, ek)
    assert type(ek).__name__ == ej[1], (ej, ek)
    return ej, ek


@pytest.fixture
def x64():
    jax.config.update("jax_enable_x64", True)
    kiln.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)
    kiln.config.update("jax_enable_x64", False)


# 1. einsum's operand/sublist form ------------------------------------------------------------

_r = np.random.RandomState(0)
_y = _r.randn(2, 3).astype(np.float32)
_z = _r.randn(3, 4).astype(np.float32)
_w = _r.randn(4, 2).astype(np.float32)

EINSUM_SUBLISTS = [
    (_y, (1, 0)),
    (_y, [0, 1]),
    (_y, [1, 0], [0, 1]),
    (_y, [5, 2], _z, [2, 7]),
    (_y, [5, 2], _z, [2, 7], [7, 5]),
    (_y, [9, 2], _z, [2, 3], _w, [3, 1]),
    (_y, [Ellipsis, 1]),
    (_y, ["b", "a"]),
    (_y, [1, 0], []),
    (_y, [3, 3 - 2], _y, [3, 0]),
]


@pytest.mark.parametrize("args", EINSUM_SUBLISTS, ids=range(len(EINSUM_SUBLISTS)))
def test_einsum_sublist_forms(args):
    _same(jax_result("einsum", lambda: jnp.einsum(*args), args), knp.einsum(*args), rtol=1e-5,
          atol=1e-5)


# 2. nanmax/nanmin with initial= and where= --------------------------------------------------

@pytest.mark.parametrize("name", ["nanmax", "nanmin"])
@pytest.mark.parametrize("kw", [
    dict(axis=0, initial=0, where=np.array([[True, False], [False, False]])),
    dict(axis=1, initial=0, where=np.array([[True, False], [False, False]])),
    dict(axis=1, keepdims=True, initial=-1, where=np.array([[True, False], [True, True]])),
    dict(axis=0), dict(), dict(initial=5.0), dict(axis=1, initial=0.5),
])
def test_nan_extremes_initial_where(name, kw):
    for a in (np.array([[8., np.nan], [np.nan, 2.]], np.float32),
              np.array([[np.nan, np.nan], [1., 2.]], np.float32)):
        _same(jax_result(name, lambda a=a: getattr(jnp, name)(a, **kw), (a, kw)),
              getattr(knp, name)(a, **kw))


def test_nanmax_issue_example():
    a = knp.array([[8., knp.nan], [knp.nan, 2.]])
    out = knp.nanmax(a, axis=0, initial=0, where=knp.array([[True, False], [False, False]]))
    np.testing.assert_array_equal(out, [8., 0.])


# 3. sinc's derivatives of every order --------------------------------------------------------

def _nth_grad(grad, f, n):
    for _ in range(n):
        f = grad(f)
    return f


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("x", [0.0, 0.3, -1.7, 2.0])
def test_sinc_derivatives(order, x):
    want = jax_result(f"sinc_d{order}", lambda: _nth_grad(jax.grad, jnp.sinc, order)(x), x)
    got = _nth_grad(kiln.grad, knp.sinc, order)(x)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-4, atol=1e-5)


def test_sinc_second_derivative_at_zero_under_jit_and_vmap():
    d2 = _nth_grad(kiln.grad, knp.sinc, 2)
    np.testing.assert_allclose(float(kiln.jit(d2)(0.0)), -np.pi ** 2 / 3, rtol=1e-6)
    xs = np.array([0.0, 1.0], np.float32)
    ref = jax_result("sinc_d2_vmap_complex", lambda: [
        jax.vmap(_nth_grad(jax.grad, jnp.sinc, 2))(xs),
        jnp.sinc(np.array([0.0, 0.5, 1 + 0j], np.complex64))], xs)
    _same(ref[0], kiln.vmap(d2)(xs), rtol=1e-5)
    _same(ref[1], knp.sinc(np.array([0.0, 0.5, 1 + 0j], np.complex64)), atol=1e-7)


# 4. integer floor_divide / remainder by zero -------------------------------------------------

INT_DTYPES = ["int8", "int16", "int32", "uint8", "uint16", "uint32"]


def _int_operands(dt):
    a = np.array([1, -1, 0, 5, -7, 7] if dt[0] == "i" else [1, 255, 0, 5, 7, 9], dt)
    b = np.array([0, 0, 0, 0, 2, 0], dt)
    return a, b


@pytest.mark.parametrize("dt", INT_DTYPES)
@pytest.mark.parametrize("name", ["floor_divide", "remainder", "divmod"])
def test_integer_division_by_zero(dt, name):
    a, b = _int_operands(dt)
    want = jax_result(name, lambda: getattr(jnp, name)(a, b), (a, b))
    fk = getattr(knp, name)
    for got in (fk(a, b), kiln.jit(fk)(a, b)):
        for w, g in zip(want if name == "divmod" else [want], got if name == "divmod" else [got]):
            _same(w, g, rtol=0, atol=0)


@pytest.mark.parametrize("dt", INT_DTYPES)
def test_integer_division_by_zero_operators(dt):
    a, _ = _int_operands(dt)
    jdiv, jmod = jax_result("div_mod_by_0", lambda: (jnp.array(a) // 0, jnp.array(a) % 0), a)
    ka = knp.array(a)
    _same(jdiv, ka // 0, rtol=0, atol=0)
    _same(jmod, ka % 0, rtol=0, atol=0)
    _same(jdiv, kiln.jit(lambda v: v // 0)(ka), rtol=0, atol=0)
    _same(jmod, kiln.jit(lambda v: v % 0)(ka), rtol=0, atol=0)


@pytest.mark.parametrize("dt", ["int64", "uint64"])
def test_integer_division_by_zero_x64(x64, dt):
    a, b = _int_operands(dt)
    for name in ("floor_divide", "remainder"):
        want = jax_result(f"x64.{name}", lambda name=name: getattr(jnp, name)(a, b), (a, b))
        _same(want, getattr(knp, name)(a, b), rtol=0, atol=0)
        _same(want, kiln.jit(getattr(knp, name))(a, b), rtol=0, atol=0)


# 5. creation functions: default dtypes (with and without x64), huge diagonal offsets ---------

CREATION = {
    "eye": lambda m: m.eye(3), "eye_rect": lambda m: m.eye(3, 2, k=1),
    "eye_k_2**31": lambda m: m.eye(3, k=2**31), "eye_k_-2**31-5": lambda m: m.eye(3, k=-2**31 - 5),
    "identity": lambda m: m.identity(3), "tri": lambda m: m.tri(3), "tri0": lambda m: m.tri(0),
    "tri_int": lambda m: m.tri(2, dtype=int), "ones": lambda m: m.ones(3),
    "zeros": lambda m: m.zeros((2,)), "empty": lambda m: m.empty(2),
    "full_i": lambda m: m.full(2, 3), "full_f": lambda m: m.full(2, 3.0),
    "full_b": lambda m: m.full(2, True), "full_c": lambda m: m.full(2, 1j),
    "full_np32": lambda m: m.full(2, np.float32(1)), "ones_int": lambda m: m.ones(2, dtype=int),
    "zeros_float": lambda m: m.zeros(2, dtype=float), "eye_float": lambda m: m.eye(2, dtype=float),
    "arange_i": lambda m: m.arange(3), "arange_f": lambda m: m.arange(3.0),
    "arange_step": lambda m: m.arange(0, 3, 0.5), "arange_np": lambda m: m.arange(np.int16(3)),
    "linspace": lambda m: m.linspace(0, 1, 5), "linspace_int": lambda m: m.linspace(0, 10, 5, dtype=int),
    "logspace": lambda m: m.logspace(0, 1, 3), "geomspace": lambda m: m.geomspace(1, 8, 4),
    "zeros_like_i": lambda m: m.zeros_like(3), "ones_like_f": lambda m: m.ones_like(3.0),
    "full_like": lambda m: m.full_like(np.int8(3), 2.5),
    "empty_like": lambda m: m.empty_like(np.array([1, 2])),
    "ones_like_np": lambda m: m.ones_like(np.array([1., 2.])),
    "zeros_like_b": lambda m: m.zeros_like(True),
    "array_i": lambda m: m.array(3), "array_f": lambda m: m.array([1.0]),
    "tril_indices": lambda m: m.tril_indices(3)[0], "indices": lambda m: m.indices((2,)),
    "mgrid": lambda m: m.mgrid[0:3], "mgrid_f": lambda m: m.mgrid[0:1:3j],
    "hamming": lambda m: m.hamming(3), "kaiser": lambda m: m.kaiser(3, 1.0),
}


@pytest.mark.parametrize("with_x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("name", list(CREATION))
def test_creation_default_dtypes(name, with_x64, request):
    if with_x64:
        request.getfixturevalue("x64")
    f = CREATION[name]
    a, b = jax_result(f"creation.{name}.x64={with_x64}", lambda: f(jnp)), f(knp)
    _same(a, b)
    assert getattr(a, "weak_type", None) == getattr(b, "weak_type", None)


def test_tri_default_dtype_is_float32_even_with_x64(x64):
    # JAX's own choice (``dtype or float32``); NumPy would give float64.
    assert jax_result("tri_x64", lambda: jnp.tri(3)).dtype == knp.tri(3).dtype == np.float32


@pytest.mark.parametrize("with_x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("k", [2**31, -2**31, 2**31 - 1, -2**31 - 1, 2**40, -2**40, 0, 1, -1, 5])
@pytest.mark.parametrize("name", ["tri", "eye", "tril", "triu"])
def test_huge_diagonal_offsets(name, k, with_x64, request):
    if with_x64:
        request.getfixturevalue("x64")
    x = np.arange(12.).reshape(3, 4)
    if name in ("tril", "triu"):
        fj, fk = (lambda: getattr(jnp, name)(x, k=k)), (lambda: getattr(knp, name)(x, k=k))
    else:
        fj, fk = (lambda: getattr(jnp, name)(3, 4, k=k)), (lambda: getattr(knp, name)(3, 4, k=k))
    key = f"diagonal.{name}.{k}.x64={with_x64}"
    if _jax_error(f"{key}.error", fj) is not None:
        _same_error(f"{key}.error", fj, fk)
    else:
        _same(jax_result(key, fj), fk())


# 6. bad shapes: JAX's exception classes, eager (fast paths) and traced alike ------------------

BAD_SHAPES = {
    "add": lambda m: m.ones(3) + m.ones(4),
    "radd_numpy": lambda m: np.ones(3, np.float32) + m.ones(4),
    "int_add": lambda m: m.arange(3) + m.arange(4),
    "lt": lambda m: m.ones(3) < m.ones(4),
    "sub_fn": lambda m: m.subtract(m.ones(3), m.ones(4)),
    "reshape_method": lambda m: m.ones(6).reshape(4, 2),
    "reshape_fn": lambda m: m.reshape(m.ones(6), (4, 2)),
    "reshape_-1": lambda m: m.ones(6).reshape(-1, 4),
    "reshape_two_-1": lambda m: m.ones(6).reshape(-1, -1),
    "reshape_negative": lambda m: m.ones(6).reshape(-2, -3),
    "reshape_numpy_input": lambda m: m.reshape(np.ones(6), (4, 2)),
    "concatenate_ndim": lambda m: m.concatenate([m.ones((2, 3)), m.ones(3)]),
    "concatenate_shape": lambda m: m.concatenate([m.ones((2, 3)), m.ones((2, 4))]),
    "multiply_numpy_rank": lambda m: m.multiply(np.ones(100), m.ones((100, 10))),
    "mul_numpy_rank_op": lambda m: np.ones(100) * m.ones((100, 10)),
    "mul_rank": lambda m: m.ones(100) * m.ones((100, 10)),
    "rsub_rank": lambda m: m.ones((100, 10)).__rsub__(m.ones(100)),
    "lt_rank": lambda m: m.ones(3) < m.ones((3, 4)),
    "truediv_rank": lambda m: m.ones(3) / m.ones((3, 4)),
    "where_shapes": lambda m: m.where(m.ones(3) > 0, m.ones(4), 0.),
    "where_rank": lambda m: m.where(m.ones((3, 2)) > 0, m.ones(4), m.ones(4)),
}


@pytest.mark.parametrize("name", list(BAD_SHAPES))
def test_bad_shapes_raise_jax_class(name):
    f = BAD_SHAPES[name]
    ej, ek = _same_error(f"bad_shapes.{name}", lambda: f(jnp), lambda: f(knp))
    ekj = _error(lambda: kiln.jit(lambda: f(knp))())
    assert type(ekj).__name__ == ej[1], (ej, ekj)


def test_bad_shapes_messages():
    with pytest.raises(TypeError, match=r"add got incompatible shapes for broadcasting: "
                                        r"\(3,\), \(4,\)"):
        knp.ones(3) + knp.ones(4)
    with pytest.raises(TypeError, match=r"cannot reshape array of shape \(6,\) \(size 6\) "
                                        r"into shape \(4, 2\) \(size 8\)"):
        knp.ones(6).reshape(4, 2)
    with pytest.raises(TypeError, match=r"different numbers of dimensions: got \(2, 3\), \(3,\)"):
        knp.concatenate([knp.ones((2, 3)), knp.ones(3)])
    with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting: "
                                         r"shapes=\[\(100,\), \(100, 10\)\]"):
        knp.multiply(np.ones(100), knp.ones((100, 10)))


def test_good_shapes_still_take_fast_paths():
    x, y = knp.ones(3), knp.ones((2, 3))
    ref = jax_result("good_shapes", lambda: (jnp.ones(3) + jnp.ones((2, 3)),
                                             jnp.ones((2, 3)) - jnp.ones(3)))
    _same(ref[0], x + y)
    _same(ref[1], y - x)
    assert (x + y).shape == (2, 3)


# 7. static_argnums/static_argnames out of the signature --------------------------------------

def _varargs(*a):
    return 1.0


def _posonly(x, /, y):
    return x


def _kwargs(x, **kw):
    return x


JIT_SPECS = [
    (lambda x: x, dict(static_argnums=3)),
    (lambda x: x, dict(static_argnums=1)),
    (lambda x: x, dict(static_argnums=(0, -2))),
    (lambda x: x, dict(static_argnums=-1)),
    (_varargs, dict(static_argnums=5)),
    (lambda x: x, dict(static_argnames="y")),
    (_posonly, dict(static_argnames="x")),
    (_kwargs, dict(static_argnames="y")),
    (lambda x: x, dict(donate_argnums=2)),
    (lambda x: x, dict(donate_argnames="z")),
]


@pytest.mark.parametrize("spec", JIT_SPECS, ids=range(len(JIT_SPECS)))
def test_jit_argnums_validated_when_wrapping(spec):
    fun, kw = spec
    ej, ek = _error(lambda: jax.jit(fun, **kw)), _error(lambda: kiln.jit(fun, **kw))
    if ej is None:
        assert ek is None, ek
    else:
        assert type(ek) is type(ej) is ValueError
        assert str(ek) == str(ej)


def test_jit_static_argnums_beyond_arguments_issue_example():
    with pytest.raises(ValueError, match=r"static_argnums=\(3,\), but only accepts 1 positional"):
        kiln.jit(lambda x: x, static_argnums=3)(1.0)
    with pytest.raises(ValueError, match="static_argnums"):
        kiln.jit(static_argnums=3)(lambda x: x)


# 8. where with one of x/y missing -------------------------------------------------------------

WHERE_CALLS = {
    "x_only": lambda m: m.where(m.ones(2) > 0, 1.0),
    "y_only": lambda m: m.where(m.ones(2) > 0, None, 1.0),
    "x_only_size": lambda m: m.where(m.ones(2) > 0, 1.0, size=3),
    "list_with_size": lambda m: m.where(m.ones(2) > 0, [1.0], 2.0, size=3),
    "size_three_term": lambda m: m.where(m.ones(2) > 0, 1.0, 2.0, size=3),
}


@pytest.mark.parametrize("name", list(WHERE_CALLS))
def test_where_missing_operand(name):
    f = WHERE_CALLS[name]
    ej, ek = _same_error(f"where.{name}", lambda: f(jnp), lambda: f(knp))
    assert str(ek) == ej[2]
    ekj = _error(lambda: kiln.jit(lambda: f(knp))())
    assert type(ekj) is _class(ej)


# 9. the error hierarchy ----------------------------------------------------------------------

def _public_classes(mod):
    return {n: c for n, c in vars(mod).items() if inspect.isclass(c) and not n.startswith("_")
            and issubclass(c, BaseException)}


def test_error_classes_mirror_jax_errors():
    import jax.errors as je

    import kiln.errors as ke
    for name, cj in _public_classes(je).items():
        ck = getattr(ke, name, None)
        assert ck is not None, f"kiln.errors lacks {name}"
        mro_j = [c.__name__ for c in cj.__mro__ if not c.__name__.startswith("_")]
        mro_k = [c.__name__ for c in ck.__mro__ if not c.__name__.startswith("_")]
        assert mro_k == mro_j, (name, mro_k, mro_j)


def test_error_hierarchy_specifics():
    from kiln import errors
    assert issubclass(errors.NonConcreteBooleanIndexError, IndexError)
    assert issubclass(errors.UnexpectedTracerError, TypeError)
    assert issubclass(errors.KeyReuseError, errors.JAXTypeError)
    from kiln.core.jaxpr import JaxprTypeError
    assert JaxprTypeError is errors.JaxprTypeError


def test_nonconcrete_boolean_index_is_index_error():
    with pytest.raises(IndexError):
        kiln.jit(lambda x: x[x > 0])(knp.arange(3.0))


# ---- missing pieces: copy, round, array(range / buffer), broadcast_like, named_scope ----

def test_copy_and_round_match_jax():
    jax = pytest.importorskip("jax")
    import kiln
    import kiln.numpy as knp
    x = knp.arange(3.0)
    c = x.copy()
    assert c is not x and np.array_equal(np.asarray(c), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda v: v.copy() * 1)(x)),
                                  np.asarray(x))
    cases = [(2.456, 2), (2.5, None), (-1.5, None), (3.14159, 0)]
    ref = jax_result("round", lambda: [
        [round(jax.numpy.array(v), nd) if nd is not None else round(jax.numpy.array(v))
         for v, nd in cases],
        jax.jit(lambda v: round(v, 1))(jax.numpy.arange(3.0) + 0.26)], cases)
    for (v, nd), j in zip(cases, ref[0]):
        k = round(knp.array(v), nd) if nd is not None else round(knp.array(v))
        assert np.asarray(k).dtype == np.asarray(j).dtype
        np.testing.assert_allclose(np.asarray(k), np.asarray(j))
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda v: round(v, 1))(x + 0.26)),
                               np.asarray(ref[1]))


def test_array_from_range_and_buffers():
    jax = pytest.importorskip("jax")
    import array as pyarray

    import kiln.numpy as knp
    for i, obj in enumerate((range(5), range(2, 11, 3), pyarray.array("d", [1, 2]),
                             pyarray.array("i", [1, 2]),
                             memoryview(np.arange(4, dtype=np.int16)))):
        # (the key: the case's index; a memoryview's repr names its address)
        k, j = knp.array(obj), jax_result(f"array_from.{i}", lambda obj=obj: jax.numpy.array(obj))
        assert k.dtype == j.dtype and np.array_equal(np.asarray(k), np.asarray(j))


def test_broadcast_like_and_named_scope_decorator():
    jax = pytest.importorskip("jax")
    import kiln
    import kiln.numpy as knp
    x, y = knp.arange(3.0), knp.ones((2, 3))
    np.testing.assert_array_equal(np.asarray(kiln.lax.broadcast_like(x, y)), np.asarray(
        jax_result("broadcast_like", lambda: jax.lax.broadcast_like(jax.numpy.arange(3.0),
                                                                    jax.numpy.ones((2, 3))))))

    @kiln.named_scope("double")
    def f(v):
        return v * 2
    assert f(1.5) == 3.0
    assert float(kiln.jit(f)(1.5)) == 3.0
