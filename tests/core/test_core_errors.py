"""Misuse of traced values and the errors users see; concrete Array behaviour (repr,
hashing, conversions); the jaxpr machinery (nested-jit printing, ``check_jaxpr``).
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import errors, lax
from kiln.core.avals import ShapedArray
from kiln.core.jaxpr import (
    ClosedJaxpr,
    DropVar,
    Jaxpr,
    JaxprEqn,
    JaxprTypeError,
    Literal,
    Var,
    check_jaxpr,
    eval_jaxpr,
)

X = np.array([1.0, -2.0, 3.0], np.float32)


def _line_of(fun, marker):
    """The line number of the first source line of ``fun`` containing ``marker``."""
    import inspect
    lines, start = inspect.getsourcelines(fun)
    for i, line in enumerate(lines):
        if marker in line:
            return start + i
    raise AssertionError(marker)


# ================================================================================================
# Concretization errors
# ================================================================================================

def _branchy(x):
    if lax.gt(x, 0.0):  # MARK-IF
        return x
    return lax.neg(x)


def test_if_on_tracer_under_jit():
    with pytest.raises(errors.TracerBoolConversionError) as e:
        kiln.jit(_branchy)(np.float32(1.0))
    err = e.value
    assert isinstance(err, errors.ConcretizationTypeError)
    assert isinstance(err, TypeError)
    msg = str(err)
    assert f"test_core_errors.py:{_line_of(_branchy, 'MARK-IF')}" in msg
    assert "lax.cond" in msg and "static_argnums" in msg


def test_if_on_tracer_with_operator_and_under_vmap():
    import kiln.numpy as jnp
    if not hasattr(jnp, "greater"):
        pytest.skip("needs kiln.numpy.greater for the `>` operator")

    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(errors.TracerBoolConversionError):
        kiln.jit(f)(np.float32(1.0))
    with pytest.raises(errors.TracerBoolConversionError):
        kiln.vmap(f)(X)
    # grad of a concrete input can branch (as in JAX)
    assert float(kiln.grad(f)(np.float32(2.0))) == 1.0


def test_while_and_not_on_tracer():
    def loop(x):
        while lax.gt(x, 0.0):
            x = lax.sub(x, 1.0)
        return x

    with pytest.raises(errors.TracerBoolConversionError):
        kiln.jit(loop)(np.float32(3.0))
    with pytest.raises(errors.TracerBoolConversionError):
        kiln.jit(lambda x: not lax.gt(x, 0.0))(np.float32(3.0))
    # static_argnums is the fix the message suggests (a Python comparison of a static value)
    def py_branch(x, n):
        return lax.mul(x, 2.0) if n > 0 else x

    assert float(kiln.jit(py_branch, static_argnums=1)(np.float32(3.0), 1)) == 6.0


@pytest.mark.parametrize("conv", [int, float, complex])
def test_scalar_conversion_under_jit(conv):
    with pytest.raises(errors.ConcretizationTypeError) as e:
        kiln.jit(lambda x: conv(x))(np.float32(1.0))
    assert not isinstance(e.value, errors.TracerIntegerConversionError)
    assert f"`{conv.__name__}`" in str(e.value)
    assert "test_core_errors.py" in str(e.value)


def test_item_and_tolist_of_tracer():
    with pytest.raises(errors.ConcretizationTypeError):
        kiln.jit(lambda x: x.item())(np.float32(1.0))
    with pytest.raises(errors.ConcretizationTypeError):
        kiln.jit(lambda x: x.tolist())(X)


def test_tracer_as_index():
    with pytest.raises(errors.TracerIntegerConversionError) as e:
        kiln.jit(lambda n: range(n))(np.int32(3))
    assert isinstance(e.value, TypeError)
    assert "static_argnums" in str(e.value)
    with pytest.raises(errors.TracerIntegerConversionError):
        kiln.jit(lambda i: [10, 20, 30][i])(np.int32(1))
    with pytest.raises(errors.TracerIntegerConversionError):
        kiln.vmap(lambda i: [10, 20, 30][i])(np.arange(3, dtype=np.int32))


def test_numpy_conversion_of_tracer():
    with pytest.raises(errors.TracerArrayConversionError) as e:
        kiln.jit(lambda x: np.asarray(x))(X)
    assert isinstance(e.value, TypeError)
    assert "kiln.numpy" in str(e.value) or "jnp" in str(e.value)
    with pytest.raises(errors.TracerArrayConversionError):
        kiln.grad(lambda x: np.sin(x))(np.float32(1.0))
    with pytest.raises(errors.TracerArrayConversionError):
        kiln.vmap(lambda x: np.array(x))(X)


def test_hashing_a_tracer():
    with pytest.raises(TypeError, match="unhashable"):
        kiln.jit(lambda x: hash(x))(X)
    with pytest.raises(TypeError):
        kiln.jit(lambda x: {x: 1})(np.float32(1.0))


def test_len_and_iteration_of_tracers():
    out = kiln.jit(lambda x: [lax.neg(r) for r in x])(np.ones((2, 3), np.float32))
    assert len(out) == 2 and out[0].shape == (3,)
    assert kiln.jit(lambda x: lax.mul(x, float(len(x))))(X).tolist() == (X * 3).tolist()
    with pytest.raises(TypeError):
        kiln.jit(lambda x: len(x))(np.float32(1.0))


# ================================================================================================
# Leaked tracers
# ================================================================================================

def test_leaked_tracer_from_jit():
    leak = []

    @kiln.jit
    def f(x):
        leak.append(lax.sin(x))
        return x

    f(X)
    with pytest.raises(errors.UnexpectedTracerError) as e:
        lax.cos(leak[0])
    assert "test_core_errors.py" in str(e.value)
    with pytest.raises(errors.UnexpectedTracerError):
        kiln.jit(lambda y: lax.add(y, leak[0]))(X)
    with pytest.raises(errors.UnexpectedTracerError):
        kiln.grad(lambda y: _sum(lax.mul(y, leak[0])))(X)


def test_leaked_tracer_from_grad_and_vmap():
    leak = []
    kiln.grad(lambda x: (leak.append(lax.sin(x)), x)[1])(np.float32(1.0))
    with pytest.raises(errors.UnexpectedTracerError):
        lax.cos(leak[0])
    with pytest.raises(errors.UnexpectedTracerError):
        kiln.jit(lambda y: lax.add(y, leak[0]))(np.float32(1.0))
    vleak = []
    kiln.vmap(lambda x: (vleak.append(lax.sin(x)), x)[1])(X)
    with pytest.raises(errors.UnexpectedTracerError):
        lax.cos(vleak[0])


def test_leaked_tracer_into_a_later_transformation():
    # A tracer of a finished jit used inside a *different* live transformation.
    leak = []
    kiln.jit(lambda x: (leak.append(lax.mul(x, 2.0)), x)[1])(np.float32(1.0))
    with pytest.raises(errors.UnexpectedTracerError):
        kiln.vmap(lambda y: lax.add(y, leak[0]))(X)


def test_leaked_tracer_from_a_finished_inner_transformation():
    # The inner transformation has finished while the outer one is still live.
    leak = []

    def f(x):
        kiln.jit(lambda y: (leak.append(lax.sin(y)), y)[1])(x)
        return lax.add(x, leak[0])

    with pytest.raises(errors.UnexpectedTracerError):
        kiln.jit(f)(X)
    leak.clear()

    def g(x):
        kiln.vmap(lambda y: (leak.append(lax.sin(y)), y)[1])(x)
        return _sum(lax.add(x, leak[0]))

    with pytest.raises(errors.UnexpectedTracerError):
        kiln.grad(g)(X)


def _sum(x):
    return lax.reduce_sum(x, tuple(range(np.ndim(x))))


# ================================================================================================
# Concrete Arrays
# ================================================================================================

def _arr(v, weak=False):
    from kiln.array import make_array
    return make_array(np.asarray(v), weak)


def test_array_repr():
    assert repr(kiln.device_put(np.array([1.0, 2.0], np.float32))) == \
        "Array([1., 2.], dtype=float32)"
    assert repr(kiln.jit(lambda x: x)(1.0)) == "Array(1., dtype=float32, weak_type=True)"
    assert repr(lax.add(1.0, 2.0)) == "Array(3., dtype=float32, weak_type=True)"
    assert repr(kiln.device_put(np.int32(3))) == "Array(3, dtype=int32)"
    assert str(kiln.device_put(np.array([1.0, 2.0], np.float32))) == "[1. 2.]"


_REPR_CASES = {
    "f32_vector": np.array([1.0, 2.0], np.float32),
    "i32_matrix": np.arange(12, dtype=np.int32).reshape(3, 4),
    "bool": np.array([True, False]),
    "c64": np.array([1 + 2j, -0.5j], np.complex64),
    "empty_2d": np.zeros((2, 0), np.float32),
    "empty_1d": np.zeros((0,), np.float32),
    "long_f32": np.arange(30, dtype=np.float32),
    "scalar_i32": np.int32(7),
}
_REPR_XFAIL: dict = {}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=_REPR_XFAIL[n]))
    if n in _REPR_XFAIL else n for n in _REPR_CASES])
def test_array_repr_matches_jax(name):
    jnp = pytest.importorskip("jax.numpy")
    v = _REPR_CASES[name]
    assert repr(kiln.device_put(v)) == repr(jnp.asarray(v))


def test_array_is_unhashable():
    a = kiln.device_put(X)
    with pytest.raises(TypeError, match="unhashable"):
        hash(a)
    with pytest.raises(TypeError):
        {a: 1}  # noqa: B018


def test_array_conversions():
    a = kiln.device_put(X)
    assert a.tolist() == [1.0, -2.0, 3.0]
    assert isinstance(a.tolist()[0], float)
    s = kiln.device_put(np.float32(2.5))
    assert s.item() == 2.5 and isinstance(s.item(), float)
    assert a.item(1) == -2.0
    n = np.asarray(a)
    assert isinstance(n, np.ndarray) and n.dtype == np.float32
    np.testing.assert_array_equal(n, X)
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    assert a.__array__().dtype == np.float32
    assert float(s) == 2.5 and int(kiln.device_put(np.int32(4))) == 4
    assert complex(s) == 2.5 + 0j
    assert [1, 2, 3][kiln.device_put(np.int32(2))] == 3  # __index__
    with pytest.raises(TypeError):
        [1, 2, 3][s]  # noqa: B018  (float arrays are no index)
    assert bool(kiln.device_put(np.float32(1.0))) is True
    with pytest.raises(ValueError, match="ambiguous"):
        bool(a)
    assert len(a) == 3 and [float(v) for v in a] == [1.0, -2.0, 3.0]
    with pytest.raises(TypeError):
        len(s)
    assert a.shape == (3,) and a.dtype == np.float32 and a.ndim == 1 and a.size == 3


def test_array_pickle_and_copy():
    import copy
    import pickle
    a = kiln.jit(lambda x: x)(1.0)
    b = pickle.loads(pickle.dumps(a))
    assert repr(b) == repr(a)
    c = copy.deepcopy(kiln.device_put(X))
    np.testing.assert_array_equal(c, X)


# ================================================================================================
# Jaxpr printing and checking
# ================================================================================================

def _inner(x):
    return lax.sin(x)


def test_nested_jit_equation_and_printing():
    closed = kiln.make_jaxpr(lambda x: kiln.jit(_inner)(lax.cos(x)))(X)
    names = [e.primitive.name for e in closed.eqns]
    assert names == ["cos", "jit"]
    eqn = closed.eqns[1]
    assert eqn.params["name"] == "_inner"
    inner = eqn.params["jaxpr"]
    assert isinstance(inner, ClosedJaxpr)
    assert [e.primitive.name for e in inner.eqns] == ["sin"]
    text = str(closed)
    assert "jit[" in text and "name=_inner" in text
    assert "jaxpr={ lambda ; " in text and "sin" in text
    check_jaxpr(closed.jaxpr)
    # doubly nested
    closed = kiln.make_jaxpr(kiln.jit(lambda x: kiln.jit(_inner)(x)))(X)
    assert str(closed).count("jit[") == 2
    check_jaxpr(closed.jaxpr)


def test_nested_jit_text_matches_jax():
    jax = pytest.importorskip("jax")
    k = kiln.make_jaxpr(kiln.jit(lambda x: lax.sin(x)))(X)
    j = jax.make_jaxpr(jax.jit(lambda x: jax.lax.sin(x)))(X)
    assert str(k) == str(j)


def _f32(*shape):
    return ShapedArray(shape, np.float32)


def _prims():
    from kiln.lax import arith
    return arith


def test_check_jaxpr_accepts_well_typed():
    a = _prims()
    x, y, z = Var(_f32(3)), Var(_f32(3)), Var(_f32(3))
    jaxpr = Jaxpr([], [x], [z], [JaxprEqn(a.sin_p, [x], [y], {}),
                                 JaxprEqn(a.mul_p, [y, Literal(np.float32(2.0), _f32())],
                                          [z], {})])
    check_jaxpr(jaxpr)
    out, = eval_jaxpr(jaxpr, [], X)
    np.testing.assert_allclose(out, np.sin(X) * 2, rtol=1e-6)
    assert "mul b 2.0:f32[]" in str(jaxpr)


def test_check_jaxpr_catches_wrong_shape():
    a = _prims()
    x, y = Var(_f32(3)), Var(_f32(4))
    with pytest.raises(JaxprTypeError, match="sin"):
        check_jaxpr(Jaxpr([], [x], [y], [JaxprEqn(a.sin_p, [x], [y], {})]))
    assert issubclass(JaxprTypeError, TypeError)


def test_check_jaxpr_catches_wrong_dtype_and_weak_type():
    a = _prims()
    x = Var(_f32(3))
    y = Var(ShapedArray((3,), np.int32))
    with pytest.raises(JaxprTypeError):
        check_jaxpr(Jaxpr([], [x], [y], [JaxprEqn(a.sin_p, [x], [y], {})]))
    w = Var(ShapedArray((3,), np.float32, weak_type=True))
    with pytest.raises(JaxprTypeError, match="weak"):
        check_jaxpr(Jaxpr([], [x], [w], [JaxprEqn(a.sin_p, [x], [w], {})]))


def test_check_jaxpr_catches_operand_type_errors():
    a = _prims()
    x, y, z = Var(_f32(3)), Var(_f32(2)), Var(_f32(3))
    with pytest.raises(TypeError):  # the primitive's own shape rule rejects the operands
        check_jaxpr(Jaxpr([], [x, y], [z], [JaxprEqn(a.add_p, [x, y], [z], {})]))


def test_check_jaxpr_catches_scoping_errors():
    a = _prims()
    x, y, z = Var(_f32(3)), Var(_f32(3)), Var(_f32(3))
    # use before definition
    with pytest.raises(JaxprTypeError, match="before definition"):
        check_jaxpr(Jaxpr([], [x], [z], [JaxprEqn(a.sin_p, [y], [z], {}),
                                         JaxprEqn(a.cos_p, [x], [y], {})]))
    # defined twice
    with pytest.raises(JaxprTypeError, match="twice"):
        check_jaxpr(Jaxpr([], [x], [y], [JaxprEqn(a.sin_p, [x], [y], {}),
                                         JaxprEqn(a.cos_p, [x], [y], {})]))
    # an output that is never defined
    with pytest.raises(JaxprTypeError):
        check_jaxpr(Jaxpr([], [x], [z], [JaxprEqn(a.sin_p, [x], [y], {})]))
    # wrong number of outputs
    with pytest.raises(JaxprTypeError, match="outputs"):
        check_jaxpr(Jaxpr([], [x], [y], [JaxprEqn(a.sin_p, [x], [y, z], {})]))
    # unused outputs may be dropped
    check_jaxpr(Jaxpr([], [x], [x], [JaxprEqn(a.sin_p, [x], [DropVar(_f32(3))], {})]))


def test_check_jaxpr_descends_into_sub_jaxprs():
    from kiln.interpreters.pjit import jit_p
    a = _prims()
    ix, iy = Var(_f32(3)), Var(_f32(4))
    bad_inner = ClosedJaxpr(Jaxpr([], [ix], [iy], [JaxprEqn(a.sin_p, [ix], [iy], {})]), [])
    x, y = Var(_f32(3)), Var(_f32(4))
    outer = Jaxpr([], [x], [y], [JaxprEqn(jit_p, [x], [y], {"jaxpr": bad_inner, "name": "f"})])
    with pytest.raises(JaxprTypeError):
        check_jaxpr(outer)


def test_staged_jaxprs_pass_check():
    for f, args in [
        (kiln.grad(lambda x: _sum(lax.mul(lax.sin(x), x))), (X,)),
        (kiln.vmap(lambda x: lax.mul(x, lax.broadcast_in_dim(lax.reduce_max(x, (0,)), (3,), ()))),
         (np.ones((2, 3), np.float32),)),
        (lambda x: kiln.jvp(lax.tanh, (x,), (x,)), (X,)),
        (kiln.jit(lambda x, y: (lax.add(x, y), lax.convert_element_type(x, np.int32))), (X, X)),
    ]:
        check_jaxpr(kiln.make_jaxpr(f)(*args).jaxpr)


def test_item_assignment_raises_with_at_hint():
    import kiln.numpy as jnp
    x = jnp.ones(3)
    with pytest.raises(TypeError, match=r"immutable.*\.at\[idx\]\.set"):
        x[0] = 1.0

    def f(x):
        x[0] = 1.0
        return x
    with pytest.raises(TypeError, match="immutable"):
        kiln.jit(f)(x)
