"""Causes found running dm-haiku's, Distrax's and BlackJAX's own tests on kiln
(``docs/ecosystem.md``), each checked directly."""
import importlib
import importlib.util

import pytest


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is not None,
                    reason="TensorFlow installed")
def test_jax2tf_without_tensorflow_is_module_not_found():
    # JAX's jax2tf imports TensorFlow first; Haiku's tests that use it fail to import on
    # a JAX without TensorFlow, and optional imports catch exactly this error.
    with pytest.raises(ModuleNotFoundError) as e:
        importlib.import_module("kiln.experimental.jax2tf")
    assert e.value.name == "tensorflow"


def test_cond_switch_trace_a_repeated_branch_once():
    # dm-haiku stateful_test::test_{cond,switch}_traces_*_with_same_id_once
    import kiln
    calls = []

    def f(x):
        calls.append(None)
        return x ** 2

    def g(x):
        calls.append("g")
        return x + 1

    assert int(kiln.lax.cond(False, f, f, 3)) == 9 and len(calls) == 1
    del calls[:]
    assert int(kiln.lax.switch(1, [f, g] * 4, 2)) == 3
    assert calls.count(None) == 1 and calls.count("g") == 1
    del calls[:]
    assert int(kiln.jit(lambda i: kiln.lax.switch(i, [f, g, f], 5))(2)) == 25
    assert len(calls) == 2


def test_eval_shape_canonicalizes_numpy_and_spec_dtypes():
    # Distrax's BijectorFromTFP calls eval_shape on the user's float64 NumPy value; TFP then
    # rejects a float64 tracer where it asks for float32 (transformed_test, 16 cases).
    import numpy as np

    import kiln
    if kiln.config.jax_enable_x64:
        pytest.skip("x64 enabled")
    es = kiln.eval_shape
    assert es(lambda x: x, np.zeros(2)).dtype == np.float32
    assert es(lambda x: x, kiln.ShapeDtypeStruct((2,), np.float64)).dtype == np.float32
    assert es(lambda x: x, kiln.ShapeDtypeStruct((2,), np.int64)).dtype == np.int32
    assert es(lambda x: x, np.zeros(2, np.uint64)).dtype == np.uint32
    out = es(lambda x: x, 3.0)
    assert out.dtype == np.float32 and out.weak_type
    assert str(es(lambda k: k, kiln.random.key(0)).dtype) == "key<fry>"
