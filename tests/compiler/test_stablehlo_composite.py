"""``Lowered.as_text()`` is StableHLO text (JAX's default), with ``lax.composite`` kept as
``stablehlo.composite`` (attributes converted as JAX's ``mlir.ir_attribute``) and
``top_k`` along the last axis as ``chlo.top_k``."""
from functools import partial

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def test_as_text_default_is_stablehlo_and_jaxpr_on_request():
    lowered = kiln.jit(lambda x: lax.sin(x) * 2.0).lower(jnp.ones(3, jnp.float32))
    text = lowered.as_text()
    assert text.startswith("module @jit_")
    assert "stablehlo.sine %arg0 : tensor<3xf32>" in text
    assert lowered.as_text("jaxpr") == str(kiln.make_jaxpr(lambda x: lax.sin(x) * 2.0)(
        jnp.ones(3, jnp.float32)))
    assert "sine" in lowered.as_text("hlo")
    with pytest.raises(ValueError, match="dialect"):
        lowered.as_text("tosa")


def test_composite_without_attributes():
    my_square = lax.composite(lambda x: x ** 2, name="my.square")
    text = kiln.jit(my_square).lower(jnp.float32(2.0)).as_text()
    assert ('stablehlo.composite "my.square" %arg0 {decomposition = @my.square} : '
            "(tensor<f32>) -> tensor<f32>") in text
    assert "func.func private @my.square(%arg0: tensor<f32>) -> tensor<f32> {" in text
    assert "stablehlo.multiply %arg0, %arg0 : tensor<f32>" in text
    # the compiled program still runs the decomposition
    assert float(kiln.jit(my_square)(jnp.float32(3.0))) == 9.0


def test_composite_version_and_no_operands():
    sq = partial(lax.composite, name="my.square", version=3)(lambda x: x * x)
    text = kiln.jit(sq).lower(jnp.float32(2.0)).as_text()
    assert "{decomposition = @my.square, version = 3 : i32} : (tensor<f32>) -> tensor<f32>" in text
    one = partial(lax.composite, name="my.one")(lambda: jnp.array(1.0, jnp.float32))
    text = kiln.jit(one).lower().as_text()
    assert '%0 = stablehlo.composite "my.one" {decomposition = @my.one} : () -> tensor<f32>' in text


def test_composite_attribute_types():
    def f(x):
        return lax.composite(lambda x, **_: lax.sin(x), "my.attrs")(
            x, dtype=np.dtype(np.float32), i=1, f=0.5, b=True, omit=None, s="bar",
            seq=(1, 2), npi=np.int8(3), arr=np.arange(3, dtype=np.int32),
            splat=np.zeros((1, 2), np.float32))
    text = kiln.jit(f).lower(jnp.ones(2, jnp.float32)).as_text()
    assert ("{composite_attributes = {arr = dense<[0, 1, 2]> : tensor<3xi32>, b = true, "
            "dtype = f32, f = 5.000000e-01 : f64, i = 1 : i64, npi = 3 : i8, s = \"bar\", "
            "seq = [1 : i64, 2 : i64], splat = dense<0.000000e+00> : tensor<1x2xf32>}, "
            "decomposition = @my.attrs}") in text
    assert "omit" not in text


def test_composite_multiple_results_and_top_k():
    @kiln.jit
    @partial(lax.composite, name="my.top_k")
    def top(x):
        return lax.top_k(x, 2)
    x = jnp.array([1.0, 5.0, 3.0], jnp.float32)
    text = top.lower(x).as_text()
    assert ('%0:2 = stablehlo.composite "my.top_k" %arg0 {decomposition = @my.top_k} : '
            "(tensor<3xf32>) -> (tensor<2xf32>, tensor<2xi32>)") in text
    assert "chlo.top_k(%arg0, k = 2) : tensor<3xf32> -> (tensor<2xf32>, tensor<2xi32>)" in text
    vals, idx = top(x)
    np.testing.assert_array_equal(vals, [5.0, 3.0])
    np.testing.assert_array_equal(idx, [1, 2])
    # top_k along another axis stays a custom call
    text = kiln.jit(lambda y: lax.top_k(y, 1)).lower(jnp.ones((2, 3))).as_text()
    assert "chlo.top_k" in text
