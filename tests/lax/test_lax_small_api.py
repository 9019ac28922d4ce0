"""Small ``lax`` behaviours from JAX's lax_test: ``shape_as_value``,
``jax._src.lax.lax.asarray``, ``reshape``'s shape checks, ``top_k``'s int32 overflow
error, ``reduce``'s tree-structure and scalar-init errors."""
import numpy as np
import pytest

import kiln
from kiln import lax
from kiln._src.lax import lax as lax_internal


def test_shape_as_value():
    e = lax.shape_as_value(())
    assert e.shape == (0,) and e.dtype == np.int32
    v = lax.shape_as_value((2, 3))
    np.testing.assert_array_equal(v, np.array([2, 3], np.int32))
    assert v.dtype == np.int32
    assert lax.shape_as_value((2 ** 31,)).dtype == np.int64


@pytest.mark.parametrize("x,weak", [(1.0, True), (np.array(1.0, np.float32), False),
                                    (np.float32(1), False), (True, False)])
def test_asarray_binds_nothing(x, weak):
    a = lax_internal.asarray(x)
    assert isinstance(a, kiln.Array) and a.weak_type == weak
    np.testing.assert_array_equal(a, x)
    assert len(kiln.make_jaxpr(lax_internal.asarray)(x).eqns) == 0
    assert len(kiln.make_jaxpr(lambda: lax_internal.asarray(x))().eqns) == 0
    with pytest.raises(TypeError, match="asarray: expected ArrayLike"):
        lax_internal.asarray([1])


def test_reshape_shape_checks():
    out = lax.reshape(np.ones((3,), np.float32), (lax.add(1, 2), 1))
    assert out.shape == (3, 1)
    for bad in [(np.array([3, 1]),), (1.5, 2.0)]:
        with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values"):
            lax.reshape(np.ones(3), bad)


def test_top_k_index_overflow():
    x = kiln.ShapeDtypeStruct((2 ** 31 + 1,), np.dtype("bfloat16"))
    with pytest.raises(ValueError, match="top_k returns int32 indices, which will overflow"):
        kiln.eval_shape(lambda x: lax.top_k(x, 100), x)
    y = kiln.ShapeDtypeStruct((2 ** 31,), np.dtype("bfloat16"))
    assert kiln.eval_shape(lambda x: lax.top_k(x, 3), y)[1].dtype == np.int32


def test_reduce_argument_errors():
    f = lambda x, y: dict(x=x["x"] + y["x"])  # noqa: E731
    with pytest.raises(ValueError, match="same tree structure as init_values"):
        lax.reduce({"x": np.ones(5)}, {"y": 0.0}, f, [0])
    with pytest.raises(ValueError, match=r"reduce found non-scalar initial value: \[\(5,\)\]"):
        lax.reduce({"x": np.ones(5)}, {"x": np.ones(5)}, f, [0])


@pytest.mark.parametrize("inshape,outshape,dims,msg", [
    ((2,), (2, 2), (0, 1), "must have length equal to operand ndim"),
    ((2, 2), (2,), (0, 1), "target broadcast shape must have equal or higher rank"),
    ((2,), (2, 3), (2,), "broadcast_dimensions must be a subset of output dimensions"),
    ((2,), (3,), (0,), "operand dimension sizes must either be 1"),
    ((2, 2), (2, 2), (0, 0), "broadcast_dimensions must not contain duplicates"),
])
def test_broadcast_in_dim_errors_in_jax_order(inshape, outshape, dims, msg):
    with pytest.raises(TypeError, match=msg):
        lax.broadcast_in_dim(np.ones(inshape, np.float32), outshape, dims)


def test_squeeze_and_reduce_axis_errors():
    x = np.ones((1, 2, 3), np.float32)
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        lax.squeeze(x, (None,))
    with pytest.raises(ValueError, match="dimensions are not unique"):
        lax.squeeze(x, (0, 0))
    with pytest.raises(ValueError, match=r"duplicate value in 'axes' of reduction: \(0, 0\)"):
        lax.reduce(np.arange(3), 0, lax.add, (0, 0))


def test_convert_element_type_of_python_int_wraps_as_numpy():
    assert int(lax.convert_element_type(2 ** 32, "int32")) == 0
    assert float(lax.convert_element_type(2 ** 100, np.float32)) == np.float32(2.0 ** 100)
    out = lax.convert_element_type(3, np.float32)
    assert out.dtype == np.float32 and not out.weak_type


def test_linalg_jvp_dots_are_highest_precision():
    """As JAX's linalg rules (JAX's testCholeskyGradPrecision/testTriangularSolveGradPrecision)."""
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], np.float32)
    jaxprs = [kiln.make_jaxpr(lambda a, t: kiln.jvp(lax.linalg.cholesky, (a,), (t,)))(a, a),
              kiln.make_jaxpr(lambda a, b: kiln.jvp(lax.linalg.triangular_solve, (a, b),
                                                    (a, b)))(np.tril(a), a[:1])]
    for j in jaxprs:
        precs = [e.params["precision"] for e in j.eqns if e.primitive.name == "dot_general"]
        hi = lax.Precision.HIGHEST
        assert precs and all(p in (hi, (hi, hi)) for p in precs), precs
